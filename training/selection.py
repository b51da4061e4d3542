"""Choose among checkpoints of one recipe (one per training seed) on validation seeds.

``mabp-gym train select --checkpoints A B C`` runs ``--policy`` with each checkpoint, and
its reference, on validation networks at ``--seeds`` (100-109 unless given; the published
evaluation seeds 9000-9999 are refused), compares each checkpoint with the reference paired
by seed, and picks one by the rule of what the policy is for:

* ``residual-frame-mabp`` (a scheduler that beats frame-MABP): frame-MABP on the
  benchmark's main-track tasks, the most Pareto wins (:mod:`mabp_gym.harness.pareto`),
  ties broken by the lower geometric mean of the delay ratios;
* ``residual-mabp-any`` (one checkpoint for every network, within 1.1x MABP's P95 on
  networks it never saw): MABP on the networks ``--networks`` names (none held out; there
  is no default set, see below), the lowest **worst** delay ratio over them, a network
  where the checkpoint's backlog grows and MABP's does not counting as infinite; ties
  broken by the geometric mean.

``--networks`` replaces the main-track tasks for ``residual-frame-mabp`` too. No default
set is offered for ``residual-mabp-any``: the one tried (the recipe's family, a 40-node
generated network and four generated packet networks without memory) chose, among fresh
training seeds, the one run that missed on the held-out workload file
(``docs/learning.md``). ``--copy-to PATH`` writes the pick there. ``--soup PATH``
writes the mean of the checkpoints' weights there and chooses among it too.
The training objective alone is a noisy choice: it is the geometric mean of six networks'
delay ratios on two training seeds of 3,000 slots each.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from mabp_gym.core.metrics import geometric_mean, growth_verdict
from mabp_gym.harness import bench
from mabp_gym.harness.pareto import compare
from mabp_gym.training.arguments import parse_into

VALIDATION_SEEDS = list(range(100, 110))
REFERENCES = {"residual-frame-mabp": "frame-mabp", "residual-mabp-any": "mabp"}
"""Each policy's reference: the policy its checkpoints are compared with."""


@dataclasses.dataclass
class SelectArgs:
    checkpoints: list[str] = dataclasses.field(default_factory=list)
    """the checkpoint files to choose among (one per training seed)"""
    policy: str = "residual-frame-mabp"
    """the learned policy the checkpoints are for (one whose checkpoint runs on any network)"""
    networks: list[str] = dataclasses.field(default_factory=list)
    """validation networks as WORKLOAD@LOAD[,key=value...], none held out (default: the
    main-track tasks for residual-frame-mabp; residual-mabp-any needs them named)"""
    seeds: list[int] = dataclasses.field(default_factory=lambda: list(VALIDATION_SEEDS))
    """validation seeds (never the benchmark's evaluation seeds, 9000-9999)"""
    horizon: int = bench.HORIZON
    """slots per run"""
    workers: int = 1
    """worker processes for the runs"""
    copy_to: str | None = None
    """write the chosen checkpoint to this path"""
    soup: str | None = None
    """also write the mean of the checkpoints' weights (their soup) to this path and
    choose among it too (at least two checkpoints)"""
    out: str | None = None
    """a JSON-lines results file: a run already in it is reused (its key holds the policy,
    the network, the seed and the checkpoint file's content, so a retrained checkpoint runs
    again), every new run is added"""


def validate(args: SelectArgs) -> None:
    """Raise ``ValueError`` naming the first bad argument, before any run starts."""
    if len(args.checkpoints) < 1:
        raise ValueError("--checkpoints needs at least one checkpoint file")
    for path in args.checkpoints:
        if not Path(path).is_file():
            raise ValueError(f"--checkpoints {path}: no such checkpoint file")
    if len({Path(path).resolve() for path in args.checkpoints}) < len(args.checkpoints):
        raise ValueError("--checkpoints repeats a file: give each once")
    if args.policy not in bench.ANY_NETWORK:
        raise ValueError(
            f"--policy must be one of {', '.join(bench.ANY_NETWORK)}, got {args.policy!r}"
        )
    _check_checkpoints(args)
    tasks(args)  # each --networks member parsed, a held-out one refused
    if not args.seeds or len(set(args.seeds)) < len(args.seeds):
        raise ValueError("--seeds needs at least one seed, each given once")
    published = [s for s in args.seeds if s in bench.EVALUATION_SEEDS]
    if published:
        raise ValueError(
            f"--seeds {published[:5]} are the benchmark's evaluation seeds "
            f"({bench.EVALUATION_SEEDS.start}-{bench.EVALUATION_SEEDS.stop - 1}): a choice "
            "made on them would not be held out; use others (default 100-109)"
        )
    if args.horizon < 200 or args.workers < 1:
        raise ValueError(
            f"--horizon must be at least 200 and --workers at least 1, got "
            f"{args.horizon} and {args.workers}"
        )
    _check_outputs(args)
    from mabp_gym.harness.runs import plan

    plan(["mabp"], "mixed", [0.5], args.seeds, horizon=args.horizon)  # their checks


def tasks(args: SelectArgs) -> tuple[bench.Task, ...]:
    """The validation networks: ``--networks``, else (for ``residual-frame-mabp`` only) the
    benchmark's main-track tasks."""
    from mabp_gym.training.residual_mabp import parse_member, refuse_memoryless

    if not args.networks and args.policy == "residual-frame-mabp":
        return bench.MAIN_TASKS
    chosen = args.networks
    if not chosen:
        raise ValueError(
            f"--networks: {args.policy} has no default validation networks; name them as "
            "WORKLOAD@LOAD[,key=value...], e.g. --networks rag@0.9 multihop@0.3,nodes=40"
        )
    found: list[bench.Task] = []
    seen: dict[tuple[Any, ...], str] = {}
    for text in chosen:
        name, overrides, load = parse_member(text, "--networks", "validate on another network")
        if not load > 0:
            raise ValueError(
                f"--networks {text!r}: the load must be above 0 (no arrivals, no delay)"
            )
        same = (name, tuple((key, float(value)) for key, value in overrides), float(load))
        if same in seen:  # rag@0.9 and rag@0.90, keys in another order, 20 and 20.0
            raise ValueError(f"--networks {text!r} repeats {seen[same]!r}: give each network once")
        seen[same] = text
        refuse_memoryless(
            f"--networks {text!r}", name, overrides, "every checkpoint is its base there"
        )
        found.append(bench.Task(text, name, load, overrides))
    return tuple(found)


def _check_outputs(args: SelectArgs) -> None:
    """``--out`` a results file of policy runs, ``--copy-to`` a new or checkpoint file;
    neither a file the other or a checkpoint is, by any name (a link, ``./x``): the copy
    wrote a checkpoint over results files, its own ``--out`` included."""
    from mabp_gym.harness.results_file import check_output_path, check_results_kind, results_kind

    if args.soup is not None and len(args.checkpoints) < 2:
        raise ValueError("--soup averages the checkpoints' weights: give at least two")
    written = (("--copy-to", args.copy_to), ("--soup", args.soup))  # checkpoints it writes
    for flag, target in (*written, ("--out", args.out)):
        if target is not None and (Path(target).is_dir() or not Path(target).parent.is_dir()):
            raise ValueError(f"{flag} {target}: give a file's path in an existing folder")
        if target is not None:
            check_output_path(target, flag)
    inputs = {Path(path).resolve(): "a checkpoint file" for path in args.checkpoints}
    if args.out is not None and Path(args.out).resolve() in inputs:
        raise ValueError(f"--out {args.out} is also a checkpoint file: give another path")
    if args.out is not None:
        check_results_kind(args.out, "eval", "--out")
    if args.out is not None:
        inputs[Path(args.out).resolve()] = "the --out results file"
    for flag, target in written:
        if target is None:
            continue
        if Path(target).resolve() in inputs:
            raise ValueError(
                f"{flag} {target} is {inputs[Path(target).resolve()]}: give another path"
            )
        kind = results_kind(target)
        checkpoint = Path(target).is_file() and _head(target) == b"PK"
        if kind is not None and not checkpoint:  # a torch checkpoint is a zip file
            what = "a results file" if kind in ("eval", "fleet") else "not a checkpoint"
            raise ValueError(
                f"{flag} {target} is {what}: the {'copy' if flag == '--copy-to' else 'soup'} "
                "would write a checkpoint over it; give a new path or a checkpoint's"
            )
    if args.soup and args.copy_to and Path(args.soup).resolve() == Path(args.copy_to).resolve():
        raise ValueError(f"--soup {args.soup} is also --copy-to: give two paths")
    if args.soup is not None and Path(args.soup).is_file() and not _is_soup(args.soup):
        raise ValueError(
            f"--soup {args.soup} is a file but not an earlier soup: give a new path or a "
            "soup's (a checkpoint is replaced only with --copy-to)"
        )


def _is_soup(path: str) -> bool:
    from mabp_gym.agents import checkpoint_file
    from mabp_gym.agents.residual_mabp import KIND

    try:
        return "soup_of" in checkpoint_file.load(path, KIND)[1]
    except (ValueError, OSError, RuntimeError):  # not a checkpoint of this kind
        return False


def _head(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(2)


def _check_checkpoints(args: SelectArgs) -> None:
    """Each checkpoint loads for ``--policy`` (its kind, base and family), before any run:
    a wrong one failed in the first run with a traceback."""
    from mabp_gym.agents import checkpoint_file, make_policy
    from mabp_gym.agents.residual_mabp import ANY, KIND
    from mabp_gym.core.workloads import make_workload

    for path in args.checkpoints:
        try:
            make_policy(args.policy, make_workload("mixed"), checkpoint=path)
        except ValueError as error:
            raise ValueError(
                f"--checkpoints {path}: not a {args.policy} checkpoint: {error}"
            ) from None
        if checkpoint_file.load(path, KIND)[1].get("networks") != ANY:  # runs on mixed alone
            raise ValueError(
                f"--checkpoints {path}: trained for one workload; the choice runs several "
                "networks, so it takes checkpoints trained on a family of networks "
                "(`mabp-gym train residual-mabp --family ...`)"
            )


def parse(argv: list[str] | None = None) -> SelectArgs:
    """The arguments of ``mabp-gym train select``, validated."""
    return parse_into(SelectArgs, "mabp-gym train select", __doc__, validate, argv)


def train(args: SelectArgs) -> dict[str, Any]:
    """Run the comparison and return every checkpoint's rows, the pick and its reason."""
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan

    reference, networks = REFERENCES[args.policy], tasks(args)
    candidates = list(args.checkpoints)
    if args.soup is not None:
        write_soup(args.checkpoints, args.soup, args.policy)
        candidates.append(args.soup)
    runs: dict[tuple[str, str], list[Any]] = {}
    for task in networks:
        common: dict[str, Any] = dict(horizon=args.horizon, workload_overrides=dict(task.overrides))
        runs[(task.name, "")] = plan([reference], task.workload, [task.load], args.seeds, **common)
        for path in candidates:
            runs[(task.name, path)] = plan(
                [args.policy],
                task.workload,
                [task.load],
                args.seeds,
                policy_kw={"checkpoint": path},
                **common,
            )
    specs = [spec for group in runs.values() for spec in group]
    records = execute(specs, workers=args.workers, output=args.out, progress=False)
    done = {r["key"]: r for r in records}
    rows = []
    for path in candidates:
        tasks_rows = []
        for task in networks:
            ours = [done[spec.key] for spec in runs[(task.name, path)]]
            theirs = [done[spec.key] for spec in runs[(task.name, "")]]
            tasks_rows.append({"task": task.name, **_compared(ours, theirs)})
        delays = [r["delay_ratio"] for r in tasks_rows]
        rows.append(
            {
                "checkpoint": path,
                "wins": sum(r["pareto_win"] for r in tasks_rows),
                "worst_delay": max(r["cost"] for r in tasks_rows),
                "delay_geomean": geometric_mean(delays),
                "tasks": tasks_rows,
            }
        )
    rule = "worst" if args.policy == "residual-mabp-any" else "pareto"
    chosen = pick(rows, rule)
    if args.copy_to is not None:
        shutil.copyfile(chosen["checkpoint"], args.copy_to)
    return {
        "policy": args.policy,
        "reference": reference,
        "rule": rule,
        "seeds": args.seeds,
        "horizon": args.horizon,
        "env_steps": sum(spec.horizon for spec in specs),
        "checkpoints": rows,
        "chosen": chosen["checkpoint"],
        "copied_to": args.copy_to,
        "soup": args.soup,
    }


def write_soup(paths: list[str], out: str, policy: str) -> None:
    """Write the mean of the checkpoints' weights (all learned over the base of
    ``policy`` for every network) to ``out``: a checkpoint of the same kind, whose
    meta names the files averaged (by name and content digest) and adds up their env
    steps. Each source's entry holds its ``command``, so the soup can be made again: train
    each, then average (the soup's own bytes never depend on how its paths were typed)."""
    import numpy as np

    from mabp_gym.agents.residual_mabp import load, save

    base = REFERENCES[policy]  # each policy's reference is the base it corrects
    # By content, not by how the paths were typed: the same files make the same soup,
    # so a results file's runs of it are reused.
    digests = {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in paths}
    paths = sorted(paths, key=digests.__getitem__)
    loaded = [load(path, None, base=base, policy=policy) for path in paths]
    families = {json.dumps(meta.get("family")) for _, meta in loaded}
    save(
        out,
        np.mean([weights for weights, _ in loaded], axis=0),
        None,
        base=base,
        soup_of=[
            {"file": Path(path).name, "sha256": digests[path], "command": meta.get("command")}
            for path, (_, meta) in zip(paths, loaded, strict=True)
        ],
        env_steps=sum(int(meta.get("env_steps", 0)) for _, meta in loaded),
        **({"family": loaded[0][1].get("family")} if len(families) == 1 else {}),
    )


def _compared(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`~mabp_gym.harness.pareto.compare`'s row, with ``cost``: the delay ratio, or
    infinity where the checkpoint's backlog grows and the reference's does not."""
    for record in theirs:
        if not record["p95_delay_all"] or not record["penalty_per_arrival"]:
            raise ValueError(
                f"{record.get('policy')}'s run of {record.get('workload')} at load "
                f"{record.get('load')} (seed {record['seed']}) has no P95 delay or no penalty "
                "to compare with: choose networks with arrivals and a penalty"
            )
    row = compare(ours, theirs)
    grows = not growth_verdict(ours)["stable"] and growth_verdict(theirs)["stable"]
    return {**row, "cost": float("inf") if grows else row["delay_ratio"]}


def pick(rows: list[dict[str, Any]], rule: str = "pareto") -> dict[str, Any]:
    """The row with the most Pareto wins (``rule="pareto"``) or the lowest worst cost over
    the networks (``"worst"``); among equals the lower geometric mean of the delay
    ratios, then the first given."""
    if rule == "worst":
        return min(rows, key=lambda row: (row["worst_delay"], row["delay_geomean"]))
    return min(rows, key=lambda row: (-row["wins"], row["delay_geomean"]))


def report(result: dict[str, Any]) -> None:
    reference, worst = result["reference"], result["rule"] == "worst"
    print(f"{result['policy']} against {reference} on seeds {result['seeds']}:\n")
    names = [row["task"] for row in result["checkpoints"][0]["tasks"]]
    rule = "Worst delay" if worst else "Pareto wins"
    print("| Checkpoint | " + " | ".join(names) + f" | {rule} | Delay (geo-mean) |")
    print("| --- " * (len(names) + 3) + "|")
    for row in result["checkpoints"]:
        cells = [_cell(t, worst) for t in row["tasks"]]
        score = f"{row['worst_delay']:.2f}" if worst else str(row["wins"])
        print(
            f"| {row['checkpoint']} | "
            + " | ".join(cells)
            + f" | {score} | {row['delay_geomean']:.3f} |"
        )
    print(f"\nCells: P95 delay ratio / penalty ratio to {reference}, paired by seed.")
    print(
        f"Chosen: {result['chosen']}"
        + (f" (copied to {result['copied_to']})" if result["copied_to"] else "")
    )
    print(json.dumps({k: v for k, v in result.items() if k != "checkpoints"}))


def _cell(task: dict[str, Any], worst: bool) -> str:
    """One network's cell of the report: the two ratios and, by the rule, a win or growth."""
    mark = " win" if task["pareto_win"] and not worst else ""
    if worst and task["cost"] == float("inf"):
        mark = " grows"
    return f"{task['delay_ratio']:.2f} / {task['penalty_ratio']:.3f}{mark}"
