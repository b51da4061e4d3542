"""Train Residual-MABP: the cross-entropy method over the correction's weights.

Reads top to bottom: arguments, the objective (simulated runs of the candidate policy on
the training seeds near the bound), the search (a Gaussian over the weights, starting at
0 = MABP, refitted to its best candidates each round), the checkpoint, and a report that
states the budget in env steps (simulated slots) and compares with MABP on the training
seeds. The evaluation seeds of the benchmark (``docs/benchmark.md``) are never used here.

    mabp-gym train residual-mabp --workload mixed --out runs/residual_mabp

With ``--family`` the objective runs every network of a family instead (each
``WORKLOAD@LOAD`` with ``,key=value`` overrides) and the checkpoint records no workload:
one set of weights for every network (``residual-mabp-any``). The benchmark's held-out
networks (``mabp-gym bench --list``) are refused.
"""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.agents.residual_mabp import ANY, BASES, FEATURES, holds_memory, save
from mabp_gym.agents.residual_mabp import load as load_weights
from mabp_gym.core.metrics import (
    GROWTH_LIMIT,
    Trace,
    check_window,
    geometric_mean,
    summarize,
)
from mabp_gym.core.simulator import Simulator
from mabp_gym.core.workloads import make_workload
from mabp_gym.rollout import episode
from mabp_gym.training.arguments import (
    check_loads,
    check_out_dir,
    command_line,
    parse_into,
    require_at_least,
)
from mabp_gym.training.common import check_network

EVALUATION_SEEDS = range(9000, 10000)
"""The benchmark's published evaluation seeds: training and tuning must not use them."""

PENALTY_MARGIN = 0.99
"""The objective's penalty ceiling, as a fraction of MABP's on the training runs."""

INFEASIBLE = 1e9
"""With ``--penalty-filter``, the cost of a candidate over the penalty ceiling, times one
plus how far over: above the cost of any candidate within it short of delay ratios in
the hundreds (with every run growing and a ceiling's term on top)."""


@dataclass
class ResidualArgs:
    """Arguments of ``mabp-gym train residual-mabp``."""

    workload: str = "mixed"
    """Workload to train on (its shape fixes the checkpoint's)."""
    seed: int = 0
    """Seeds the search's sampling."""
    loads: list[float] = field(default_factory=lambda: [0.9])
    """Loads of the objective's runs (near the bound)."""
    train_seeds: list[int] = field(default_factory=lambda: [20, 21, 22])
    """Simulator seeds of the objective's runs (not the benchmark's 9000-9999)."""
    slots: int = 3000
    """Slots per run."""
    rounds: int = 12
    """Rounds of the cross-entropy method."""
    population: int = 16
    """Candidate weight vectors per round."""
    elite: int = 4
    """Best candidates the next round's Gaussian is fitted to."""
    init_std: float = 3.0
    """Initial std of every weight (in score units)."""
    out: str = "runs/residual_mabp"
    """Directory for the checkpoint and the report."""
    progress: bool = True
    """Print one line per round."""
    family: list[str] = field(default_factory=list)
    """Train one checkpoint for every network on these (``WORKLOAD@LOAD[,key=value...]``,
    e.g. ``multihop@0.3,nodes=20``) instead of --workload at --loads (then unused)."""
    workers: int = 1
    """Processes running the objective's simulations (the result does not depend on it)."""
    penalty_each: bool = False
    """Cap the penalty ratio on every network of the family, not on their mean (a policy
    that must not pay more penalty anywhere)."""
    delay_floor: float = 0.0
    """A network's delay ratio counts at least this much in the geometric mean (0.8: a cut
    beyond 20% on one network does not pay for a loss on another)."""
    delay_ceiling: float = 0.0
    """Raise the cost steeply where any network's delay ratio is above this (1: a correction
    that must be no slower than its base on every network of the family, not on their mean;
    0.9: one that must cut every network's delay by a tenth); 0: no ceiling."""
    penalty_filter: bool = False
    """Hold the penalty ceiling as a constraint: a candidate over it ranks after every
    candidate within it (by how far over), instead of paying a cost term that a large
    enough delay cut (or --delay-ceiling's term) can outweigh."""
    base: str = "mabp"
    """The policy the correction is learned over: mabp, or frame-mabp (the weights reorder
    within frame-MABP's plan; the objective is then relative to frame-MABP)."""
    init: str = ""
    """Start the search at a checkpoint's weights (learned over the same --base), or at
    the shipped family checkpoint with ``any``, instead of at 0 (the base policy)."""


Member = tuple[str, tuple[tuple[str, Any], ...], float]
"""A network of the objective: workload name, overrides, load."""


def parse_member(
    text: str, option: str = "--family member", instead: str = "train on another network"
) -> Member:
    """``WORKLOAD@LOAD[,key=value...]`` as a :data:`Member`, the workload built once to
    check it (values are numbers). ``option`` names the text in an error, ``instead``
    says what to do about a held-out network.

    Raises:
        ValueError: the text is not of that form, or the workload refuses it.
    """
    named = f"{option} {text!r}"
    head, _, rest = text.partition(",")
    name, at, load = head.partition("@")
    form = "WORKLOAD@LOAD[,key=value...], e.g. multihop@0.3,nodes=20"
    if not at or not name:
        raise ValueError(f"{named} must read {form}")
    overrides: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"{named}: {item!r} is not key=value ({form})")
        if key in ("load", "horizon"):
            raise ValueError(
                f"{named}: {key} is not a network's key=value (the load is the number after "
                "@, the horizon the run's own)"
            )
        overrides[key] = _number(value, named)
    member = (name, tuple(sorted(overrides.items())), _number(load, named))
    try:
        check_network(name, f"{named}:", instead=instead, **overrides, load=member[2])
    except ValueError as error:
        message = str(error)
        if not message.startswith(named):  # the workload's own error
            message = f"{named}: {message}"
        raise ValueError(message) from None
    return member


def _number(text: str, named: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{named}: {text!r} is not a number") from None


def members(args: ResidualArgs) -> list[Member]:
    """The networks of the objective: the family, else --workload at each of --loads."""
    if args.family:
        return [parse_member(text) for text in args.family]
    return [(args.workload, (), load) for load in args.loads]


def run_metrics(
    member: Member, weights: np.ndarray, seed: int, slots: int, base: str = "mabp"
) -> dict[str, Any]:
    """The SPEC 5 metrics of one training run of the weights over ``base`` (controls from
    the shared projection, so the training path skips the feasibility check)."""
    name, overrides, load = member
    workload = make_workload(name, **dict(overrides), load=load, horizon=slots)
    sim = Simulator(workload)
    sim.reset(seed)
    policy = BASES[base](workload, weights=weights)
    policy.reset(seed)
    trace = Trace()
    for slot in episode(sim, policy, slots, check=False):
        trace.record(slot.outcome)
    return summarize(trace)


def _run(job: tuple[Member, np.ndarray, int, int, str]) -> dict[str, Any]:
    return run_metrics(*job)


def simulate(args: ResidualArgs, candidates: list[np.ndarray], pool: Any) -> list[list[dict]]:
    """Per candidate, the metrics of its runs: every member on every training seed."""
    jobs = [
        (member, w, seed, args.slots, args.base)
        for w in candidates
        for member in members(args)
        for seed in args.train_seeds
    ]
    runs = list(pool.map(_run, jobs)) if pool is not None else [_run(job) for job in jobs]
    per = len(runs) // len(candidates)
    return [runs[k * per : (k + 1) * per] for k in range(len(candidates))]


def objective(args: ResidualArgs, runs: list[dict], reference: list[dict] | None) -> dict:
    """The geometric mean over the networks of P95 delay (all requests, SPEC 9 v3) relative
    to the base policy's (MABP's, or frame-MABP's with ``--base frame-mabp``) on the same
    runs, doubled for every run that grows and raised steeply where the penalty per
    arrival relative to the base's (the mean over the networks, or with ``penalty_each``
    the largest) is above ``PENALTY_MARGIN`` (the target asks for a delay cut at no
    stability and no penalty cost; the margin leaves room for the evaluation seeds'
    noise). A ratio below ``delay_floor`` counts as ``delay_floor``; with ``delay_ceiling``
    the cost is raised as steeply where the largest ratio is above it. With
    ``penalty_filter`` the penalty ceiling is a constraint instead: a candidate over it
    costs :data:`INFEASIBLE` times one plus how far over. With one network and
    no floor this ranks as the base-relative mean P95 delay does."""
    seeds = len(args.train_seeds)
    groups = [runs[k : k + seeds] for k in range(0, len(runs), seeds)]
    ref_groups = (
        groups
        if reference is None
        else [reference[k : k + seeds] for k in range(0, len(reference), seeds)]
    )

    def mean(group: list[dict], key: str) -> float:
        return float(np.mean([r[key] for r in group]))

    ratio = [
        mean(g, "p95_delay_all") / mean(r, "p95_delay_all")
        for g, r in zip(groups, ref_groups, strict=True)
    ]
    penalty = [
        mean(g, "penalty_per_arrival") / max(mean(r, "penalty_per_arrival"), 1e-12)
        for g, r in zip(groups, ref_groups, strict=True)
    ]
    grows = sum(r["growth"] >= GROWTH_LIMIT for r in runs)
    # The base itself (no reference) starts the search: its penalty is the ceiling's base.
    worst = float(np.max(penalty) if args.penalty_each else np.mean(penalty))
    over_penalty = 0.0 if reference is None else max(0.0, worst / PENALTY_MARGIN - 1.0)
    # The base too (its ratios are 1): under a ceiling below 1 it pays as a candidate
    # at 1 would, else no candidate short of the ceiling everywhere could beat it.
    over_delay = max(0.0, max(ratio) / args.delay_ceiling - 1.0) if args.delay_ceiling else 0.0
    counted = np.maximum(ratio, args.delay_floor)
    if args.penalty_filter and over_penalty > 0.0:
        cost = INFEASIBLE * (1.0 + over_penalty)  # after every candidate within the ceiling
    else:
        over = over_delay + (0.0 if args.penalty_filter else over_penalty)
        cost = geometric_mean(counted) * (1.0 + grows) * (1.0 + 100.0 * over)
    return {
        "cost": cost,
        "p95_delay_all": mean(runs, "p95_delay_all"),
        "penalty_per_arrival": mean(runs, "penalty_per_arrival"),
        "grows": grows,
    }


def train(args: ResidualArgs) -> dict[str, Any]:
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    try:
        best, reference, history = search(args, pool)
    finally:
        if pool is not None:
            pool.shutdown()
    runs_per_objective = len(members(args)) * len(args.train_seeds)
    env_steps = (1 + args.rounds * args.population) * runs_per_objective * args.slots
    command = command_line("residual-mabp", args, ("workload", "loads") if args.family else ())
    workload = None if args.family else make_workload(args.workload)
    path = out / checkpoint_name(args)
    save(
        path,
        best["weights"],
        workload,
        command=command,
        args=dataclasses.asdict(args),
        env_steps=env_steps,
        train_p95_delay_all=best["p95_delay_all"],
        base_train_p95_delay_all=reference["p95_delay_all"],  # the base's: MABP or frame-MABP
        base=args.base,
        **({"family": list(args.family)} if args.family else {}),
    )
    report = {
        "checkpoint": str(path),
        "weights": dict(zip(FEATURES, np.asarray(best["weights"]).round(4).tolist(), strict=True)),
        "train": {k: best[k] for k in ("p95_delay_all", "penalty_per_arrival", "grows", "cost")},
        "base_train": {k: reference[k] for k in ("p95_delay_all", "penalty_per_arrival", "grows")},
        "env_steps": env_steps,
        "history": history,
        "wall_s": time.perf_counter() - started,
        "command": command,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def checkpoint_name(args: ResidualArgs) -> str:
    """The checkpoint's file name: the base policy's and the workload's, ``any`` for a
    family of several workloads. A family of one workload's variants (``mixed`` at two
    loads and a tighter budget) is named by it: the registry's per-workload file, which
    still loads on every network."""
    stem = BASES[args.base].name.replace("-", "_")
    names = sorted({make_workload(name).name for name, _, _ in members(args)})  # a file's own
    return f"{stem}_{names[0] if len(names) == 1 else ANY}.pt"


def search(args: ResidualArgs, pool: Any) -> tuple[dict, dict, list[dict]]:
    """The cross-entropy method from 0 (the base policy itself): the best weights with
    their objective, the base's objective, and one history entry per round."""
    rng = np.random.default_rng(args.seed)
    zero = np.zeros(len(FEATURES))
    mabp_runs = simulate(args, [zero], pool)[0]
    reference = objective(args, mabp_runs, None)
    mean, std = initial_weights(args), np.full(len(FEATURES), args.init_std)
    best = {"weights": zero, **reference}
    history = []
    for round_ in range(args.rounds):
        candidates = mean + std * rng.standard_normal((args.population, len(FEATURES)))
        candidates[0] = mean  # the current mean is always scored (elitism of the centre)
        runs = simulate(args, list(candidates), pool)
        scored = [(objective(args, r, mabp_runs), w) for r, w in zip(runs, candidates, strict=True)]
        scored.sort(key=lambda item: item[0]["cost"])
        elite = np.array([w for _, w in scored[: args.elite]])
        mean, std = elite.mean(axis=0), elite.std(axis=0) + 0.05
        top, weights = scored[0]
        if top["cost"] < best["cost"]:
            best = {"weights": weights, **top}
        history.append({"round": round_, **top, "weights": weights.round(4).tolist()})
        if args.progress:
            print(
                f"round {round_ + 1}/{args.rounds}: objective {top['cost']:.3f} ({args.base} "
                f"{reference['cost']:.3f}), P95 (all) {top['p95_delay_all']:.1f} ({args.base} "
                f"{reference['p95_delay_all']:.1f}), penalty/arrival "
                f"{top['penalty_per_arrival']:.4f}, growing runs {top['grows']}",
                flush=True,
            )
    return best, reference, history


def initial_weights(args: ResidualArgs) -> np.ndarray:
    """The search's first mean: 0, or the weights of the ``--init`` checkpoint.

    Raises:
        ValueError: the checkpoint is missing, of another kind, or learned over another base.
    """
    if not args.init:
        return np.zeros(len(FEATURES))
    policy = BASES[args.base]
    if args.init == ANY:  # the shipped family checkpoint of the base's policy
        from mabp_gym.agents import checkpoint_file

        family = "residual-mabp-any" if args.base == "mabp" else policy.name
        path = checkpoint_file.default_checkpoint(family, ANY)
    else:
        path = Path(args.init)
    try:
        weights, _ = load_weights(path, None, base=args.base)
    except ValueError as error:
        raise ValueError(f"--init {args.init}: {error}") from None
    return weights


def validate(args: ResidualArgs) -> None:
    """Raise ``ValueError`` naming the first bad argument, before any work starts."""
    check_network(args.workload)
    require_at_least(args, 1, "slots", "rounds", "population", "elite", "workers")
    check_memory(args)  # each --family member parsed and checked on the way
    if not 0.0 <= args.delay_floor < 1.0:
        raise ValueError(f"--delay-floor must be in [0, 1), got {args.delay_floor}")
    if not (np.isfinite(args.delay_ceiling) and args.delay_ceiling >= 0.0):
        raise ValueError(
            f"--delay-ceiling must be a number >= 0 (0: none), got {args.delay_ceiling}"
        )
    if args.base not in BASES:
        raise ValueError(f"--base must be one of {', '.join(BASES)}, got {args.base!r}")
    initial_weights(args)  # an --init checkpoint that cannot start this search
    if args.elite > args.population:
        raise ValueError(f"--elite ({args.elite}) must be at most --population ({args.population})")
    if not (np.isfinite(args.init_std) and args.init_std > 0):
        raise ValueError(f"--init-std must be a number > 0, got {args.init_std}")
    if not args.train_seeds:
        raise ValueError("--train-seeds needs at least one seed")
    repeated = sorted({s for s in args.train_seeds if args.train_seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--train-seeds repeats {repeated}: give each seed once")
    try:
        check_window(args.slots, 0.2)
    except ValueError as error:
        raise ValueError(f"--slots {args.slots}: {error}") from None
    zero = [load for load in args.loads if not load > 0]
    if zero:
        raise ValueError(f"--loads must be > 0 (a load of 0 has no arrivals to judge), got {zero}")
    used = sorted(set(args.train_seeds) & set(EVALUATION_SEEDS))
    if used:
        raise ValueError(
            f"--train-seeds {used} are benchmark evaluation seeds (9000-9999); train on others"
        )
    check_loads(args, "loads")
    check_out_dir(args.out)


def check_memory(args: ResidualArgs) -> None:
    """Refuse a network of the objective that cannot hold memory (:func:`refuse_memoryless`):
    it would only cost runs."""
    if args.family:
        named = [(f"--family member {text!r}", parse_member(text)) for text in args.family]
    else:
        named = [(f"--workload {args.workload}", (args.workload, (), 0.0))]
    for where, (name, overrides, _) in named:
        refuse_memoryless(where, name, overrides, "there is nothing to train there")


def refuse_memoryless(where: str, name: str, overrides: Any, why: str) -> None:
    """Raise ``ValueError`` (``where``: what gave the network, ``why``: what that means for
    the command) if the network cannot hold memory: the correction does not act there
    (:func:`mabp_gym.agents.residual_mabp.holds_memory`)."""
    if not holds_memory(make_workload(name, **dict(overrides))):
        raise ValueError(
            f"{where}: the network cannot hold memory (no node has room for an object it "
            "uses); the correction acts only where it can (elsewhere the policy is its "
            f"base), so {why}"
        )


def parse(argv: list[str] | None = None) -> ResidualArgs:
    """The arguments of ``mabp-gym train residual-mabp``, validated."""
    return parse_into(ResidualArgs, "mabp-gym train residual-mabp", __doc__, validate, argv)


def report(result: dict[str, Any]) -> None:
    shown = {k: v for k, v in result.items() if k != "history"}
    print(json.dumps(shown, indent=2))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    result = train(parse(argv))
    report(result)
    return result


if __name__ == "__main__":
    main()
