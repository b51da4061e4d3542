"""The other commands: ``plot`` (figures from saved results), ``capacity`` (a workload's
capacities), ``simulate`` (the queue-length score rule), ``train`` (the learned schedulers)
and ``bench`` (benchmark v3's task suite and its leaderboard)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mabp_gym.cli.common import (
    SCREEN_HORIZON,
    _distinct_files,
    _finite,
    _fmt,
    _no_grid_overrides,
    _parse_overrides,
    _parse_seeds,
    _policies,
    _read_results,
    _writable,
    user_input,
)
from mabp_gym.core.capacity import capacity
from mabp_gym.core.workloads import make_workload
from mabp_gym.extras import require


def _plot(args: argparse.Namespace) -> None:
    require("plot", "mabp-gym plot")
    from mabp_gym.harness.plots import make_figures

    with user_input():
        out_dir = Path(args.out_dir)
        if out_dir.exists() and not out_dir.is_dir():
            raise ValueError(f"--out-dir {args.out_dir!r} exists and is not a directory")
        records = _read_results(args.results)
    made, skipped = make_figures(records, Path(args.out_dir), policy=args.policy)
    for path in made:
        print(f"wrote {path}")
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}")
    if not made:
        sys.stderr.write(
            "mabp-gym plot: error: no figure can be drawn from these results (each needs "
            "the runs named above)\n"
        )
        raise SystemExit(2)


def _capacity(args: argparse.Namespace) -> dict[str, Any]:
    with user_input():
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "capacity",
            {"load": "does not depend on the load", "horizon": "does not depend on the horizon"},
        )
        _distinct_files(args, ("json", "figure"), ("workload",))
        _writable(args.json, "--json")
        wl = make_workload(args.workload, **overrides)
    nomem, full = capacity(wl, "nomem"), capacity(wl, "full")
    result: dict[str, Any] = {
        "workload": wl.name,
        "nomem": nomem,
        "full": full,
        "ratio": nomem / full,
    }
    print(
        f"{wl.name}: no-memory capacity {nomem:.4f}, all-hit capacity (lambda_ref) "
        f"{full:.4f} requests/slot; ratio {nomem / full:.3f}"
    )
    if "occ" in args.reference or args.exact:
        from mabp_gym.core.occupation import occupation_bound

        result["occ"] = capacity(wl, "occ")
        print(
            f"{wl.name}: occupation bound (relaxation, SPEC 9.1) {result['occ']:.4f} "
            f"requests/slot; occ / full {result['occ'] / full:.3f}"
        )
        if args.exact:
            # Too large for the enumeration: the user's choice of workload.
            with user_input({"Use exact=False": "Drop --exact", "use exact=False": "drop --exact"}):
                result["occ_exact"] = occupation_bound(wl, exact=True)
            print(
                f"{wl.name}: occupation bound (exact LP, paper (6)-(9)) "
                f"{result['occ_exact']:.4f} requests/slot"
            )
    if args.figure:
        require("plot", "mabp-gym capacity --figure")
        from mabp_gym.harness.plots_occupation import plot_occupation

        with user_input():
            _writable(args.figure, "--figure")
            if wl.name not in ("mixed", "rag", "moe", "agentic"):
                raise ValueError(
                    f"--figure sweeps beta and skew of mixed, rag, moe or agentic, got {wl.name!r}"
                )
        plot_occupation(args.figure, wl.name)
        print(f"wrote {args.figure}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def _simulate(args: argparse.Namespace) -> None:
    from mabp_gym.core.metrics import check_window, summarize
    from mabp_gym.core.scores import queue_length_scores
    from mabp_gym.rollout import rollout

    with user_input():
        if not 0.0 <= args.warmup < 1.0:
            raise ValueError(f"--warmup must be in [0, 1), got {args.warmup}")
        overrides = _parse_overrides(args.overrides)
        for key in ("load", "horizon"):
            if getattr(args, key) is not None:
                if key in overrides:
                    raise ValueError(f"give --{key} or --set {key}=..., not both")
                overrides[key] = getattr(args, key)
        if any(seed < 0 for seed in args.seeds):
            raise ValueError(f"--seeds must be integers >= 0, got {args.seeds}")
        _distinct_files(args, ("json",), ("workload",))
        _writable(args.json, "--json")
        wl = make_workload(args.workload, **overrides)
        check_window(wl.horizon, args.warmup)  # as eval: a 1-slot run read stable
    records = []
    print(
        f"{wl.name} at load {wl.load:g} ({wl.total_rate:.3f} requests/slot), "
        f"{wl.horizon} slots, queue-length scores, memory={'off' if args.no_memory else 'on'}"
    )
    for seed in args.seeds:
        started = time.perf_counter()
        trace = rollout(wl, queue_length_scores, seed, memory=not args.no_memory)
        elapsed = time.perf_counter() - started
        records.append(
            {
                "policy": "queue-length",
                "workload": wl.name,
                "load": wl.load,
                "seed": seed,
                "memory": not args.no_memory,
                **summarize(trace, args.warmup),
                "slots_per_s": wl.horizon / elapsed,
            }
        )
    for record in records:
        print(
            f"seed {record['seed']}: stable {_fmt(record['stable'])}, backlog "
            f"{record['mean_backlog']:.1f}, hit ratio {_fmt(record['hit_ratio'], 2)}, "
            f"completion {_fmt(record['completion_ratio'])}, "
            f"{record['slots_per_s']:.0f} slots/s"
        )
    if args.json:
        text = json.dumps(_finite(records), indent=2, default=str, allow_nan=False)
        Path(args.json).write_text(text, encoding="utf-8")  # NaN is no JSON: null


def _train(args: argparse.Namespace) -> None:
    require("learn", "mabp-gym train")
    if args.learner == "gnn":
        from mabp_gym.training import gnn as learner
    elif args.learner == "residual-mabp":
        from mabp_gym.training import residual_mabp as learner
    elif args.learner == "select":
        from mabp_gym.training import selection as learner
    else:
        from mabp_gym.training import learn_mabp as learner
    with user_input():
        options = learner.parse(args.rest)
    learner.report(learner.train(options))


def _no_board(args: argparse.Namespace, tasks: list, policies: list[str], seeds: list[int]) -> str:
    """Why a board came out empty, and what the results file holds instead."""
    from mabp_gym.harness.results_file import read_records

    where = args.out if args.out is not None else "this run"
    text = (
        f"mabp-gym bench: no runs of these tasks and policies in {where} at seeds "
        f"{seeds[0]}-{seeds[-1]} and horizon {args.horizon}"
    )
    if args.out is None or not Path(args.out).is_file():
        return text
    held = [r for r in read_records(args.out) if any(t.matches(r) for t in tasks)]
    held = [r for r in held if r["policy"] in policies]
    if held:
        from mabp_gym.harness.bench import EVALUATION_SEEDS

        found_seeds = sorted({int(r["seed"]) for r in held})
        horizons = sorted({int(r["horizon"]) for r in held})
        text += (
            f"; it holds them at seeds {found_seeds[0]}-{found_seeds[-1]}, horizon "
            f"{', '.join(map(str, horizons))}"
        )
        board = [s for s in found_seeds if s in EVALUATION_SEEDS]
        text += (
            ": give those with --seeds and --horizon"
            if board
            else ": not the benchmark's evaluation seeds (9000-9999), so no board; "
            "`mabp-gym table --from-results` reads other runs"
        )
    return text


def _other_policies(records: list, tasks: list, wanted: set[str]) -> list[str]:
    """Policies with runs of these tasks in a results file that the board leaves out."""
    return sorted({r["policy"] for r in records if any(t.matches(r) for t in tasks)} - wanted)


def _bench(args: argparse.Namespace) -> None:
    from mabp_gym.harness import bench

    if args.list:
        print(bench.list_text(), end="")
        return
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.results_file import read_records

    with user_input():
        tasks = bench.tasks_named(args.tasks)
        policies = list(bench.POLICIES) if args.policies is None else _policies(args.policies)
        seeds = bench.check_seeds(_parse_seeds(args.seeds, "--seeds"))
        if args.horizon < SCREEN_HORIZON:
            raise ValueError(
                f"--horizon must be at least {SCREEN_HORIZON} for the benchmark, got {args.horizon}"
            )
        _distinct_files(args, ("out", "markdown", "json"))
        _writable(args.markdown, "--markdown")
        _writable(args.json, "--json")
        if args.from_results:
            if args.out is None or not Path(args.out).is_file():
                raise ValueError("--from-results needs --out naming an existing results file")
            from mabp_gym.harness.results_file import results_kind

            if results_kind(args.out) != "eval":
                raise ValueError(
                    f"--out {args.out!r} holds no policy runs (mabp-gym bench, eval or table "
                    "records): --from-results reads the file a bench run wrote"
                )
        else:
            _writable(args.out, "--out", results="eval")
            if args.workers is not None and args.workers < 1:
                raise ValueError(f"--workers must be a positive integer, got {args.workers}")
        specs, skipped = bench.plan_bench(tasks, policies, seeds, args.horizon)
        if args.from_results:
            saved = read_records(args.out)
            records = bench.current_runs(saved, specs, tasks)
    if not args.from_results:
        records = execute(
            specs, output=args.out, workers=args.workers, progress=not args.no_progress
        )
    wanted = set(policies)
    records = [
        r
        for r in records
        if r["policy"] in wanted and r["seed"] in seeds and r["horizon"] == args.horizon
    ]
    rows = bench.leaderboard(records, tasks)
    if not rows and not specs:
        reasons = "; ".join(f"{policy} on {task}: {why}" for task, policy, why in skipped)
        raise SystemExit(f"mabp-gym bench: every requested pair was left out ({reasons})")
    if not rows:
        print(_no_board(args, tasks, policies, seeds), file=sys.stderr)
        raise SystemExit(2)  # the request was not for runs the file holds: a usage error
    if args.from_results and args.policies is None:
        others = _other_policies(saved, tasks, wanted)
        if others:
            print(f"(the file also holds runs of {', '.join(others)}: name them in --policies)")
    text = bench.markdown(rows, skipped, tasks)
    print(text, end="")
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                _finite({"rows": rows, "standings": bench.track_standings(rows, tasks)}), indent=2
            )
        )
