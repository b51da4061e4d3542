"""The ``mabp-gym`` command line.

Subcommands: ``train gnn`` / ``train learn-mabp`` / ``train residual-mabp`` (the learned
schedulers; ``--help`` after the learner lists their options), ``eval`` (policies over a
grid of loads and seeds), ``table`` (the paper's Table I layout, Markdown and CSV),
``sweep`` (load, beta, K, nu or skew sweeps of paper VI-A), ``plot`` (PNG figures from saved
results), ``capacity`` (a workload's no-memory and all-hit capacities), ``simulate`` (the
core under the fixed queue-length score rule), ``verdicts`` (stable load per seed set and
horizon from saved runs) and ``fleet`` (serving-fleet mode: routers over a replayed trace,
SPEC 11). ``--help`` on each. Bad arguments (checked, output paths included, before any work
starts) exit with status 2 and a one-line reason; an internal error keeps its traceback
(status 1); a sweep whose runs fail keeps the finished ones and exits with status 1 and a
summary. Results go to the JSON-lines / CSV / Markdown files named on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.core.capacity import REFERENCES, capacity
from mabp_gym.core.workloads import WORKLOADS, make_workload
from mabp_gym.extras import MissingExtraError, require
from mabp_gym.training.arguments import OneLineParser

TABLE_POLICIES = (
    "sp",
    "jsq",
    "bp",
    "cost-bp",
    "greedycache-bp",
    "mabp",
    "oracle-sur",
    "mabp-no-transition",
    "mabp-no-reuse",
    "mabp-no-retention",
)
DEFAULT_GRID = tuple(round(0.1 * k, 1) for k in range(1, 11))
SWEEPS = ("load", "beta", "K", "nu", "skew")


class UsageError(Exception):
    """A bad command line: reported on one line with exit status 2."""


@contextlib.contextmanager
def user_input() -> Iterator[None]:
    """Within this block a ``ValueError`` or ``TypeError`` is the user's (a bad argument),
    reported as a :class:`UsageError`; outside it, it is a bug and keeps its traceback."""
    try:
        yield
    except (ValueError, TypeError) as error:
        text = str(error).strip().splitlines()
        raise UsageError(text[0] if text else type(error).__name__) from error


def _no_repeats(values: list[Any], option: str) -> None:
    """A repeated name or load would count as another independent run."""
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ValueError(f"{option}: {seen[0]!r} is given twice; each must appear once")


def _writable(path: str | None, option: str) -> None:
    """Check an output file option before any work starts."""
    if path is not None:
        from mabp_gym.harness.results_file import check_output_path

        check_output_path(path, option)


def _no_grid_overrides(overrides: dict[str, Any], command: str, settings: dict[str, str]) -> None:
    """Refuse a ``--set`` the command would ignore or that another option sets."""
    for key, option in settings.items():
        if key in overrides:
            raise ValueError(f"--set {key}={overrides[key]!r}: {command} {option}")


def _number(raw: str) -> Any:
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return None if raw.lower() == "none" else raw


def _parse_overrides(pairs: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects NAME=VALUE, got {pair!r}")
        overrides[key] = _number(raw)
    return overrides


def _workload_name(value: str) -> str:
    from mabp_gym.core.workloads import is_workload_file

    if value in WORKLOADS:
        return value
    if is_workload_file(value):
        if not Path(value).is_file():
            raise argparse.ArgumentTypeError(f"no workload file {value!r}")
        return value
    raise argparse.ArgumentTypeError(
        f"{value!r} is neither a built-in workload ({', '.join(WORKLOADS)}) nor a .json / "
        ".yaml workload file"
    )


def _parse_grid(tokens: list[str], name: str) -> list[float]:
    """Numbers, or ``start:stop:step`` ranges (stop included)."""
    values: list[float] = []
    for token in tokens:
        for part in token.split(","):
            if not part:
                continue
            if ":" in part:
                pieces = part.split(":")
                if len(pieces) != 3:
                    raise ValueError(f"{name}: a range is start:stop:step, got {part!r}")
                start, stop, step = (float(x) for x in pieces)
                if step <= 0 or stop < start:
                    raise ValueError(f"{name}: bad range {part!r}")
                count = int(round((stop - start) / step)) + 1
                values.extend(round(start + k * step, 10) for k in range(count))
            else:
                try:
                    values.append(float(part))
                except ValueError:
                    raise ValueError(f"{name}: not a number: {part!r}") from None
    if not values:
        raise ValueError(f"{name}: give at least one value")
    return values


def _policies(tokens: list[str]) -> list[str]:
    from mabp_gym.agents import POLICIES

    names = [p for token in tokens for p in token.split(",") if p]
    for name in names:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    if not names:
        raise ValueError("give at least one policy")
    return names


def _workload_args(parser: argparse.ArgumentParser) -> None:
    """``--workload`` and its ``--set NAME=VALUE`` overrides (every workload command)."""
    parser.add_argument(
        "--workload",
        default="mixed",
        type=_workload_name,
        help="built-in workload or a workload file (default: mixed)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="workload parameter override (repeatable)",
    )


def _common(parser: argparse.ArgumentParser, *, loads: bool = True) -> None:
    _workload_args(parser)
    if loads:
        parser.add_argument(
            "--loads",
            nargs="+",
            default=None,
            metavar="RHO",
            help="normalized loads: numbers or start:stop:step",
        )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--horizon", type=int, default=600, help="slots per run (600)")
    parser.add_argument("--warmup", type=float, default=0.2, help="discarded fraction (0.2)")
    parser.add_argument("--nu", type=float, default=5.0, help="penalty weight (5)")
    parser.add_argument("--no-memory", action="store_true", help="the no-memory system")
    parser.add_argument("--workers", type=int, default=None, help="processes (all cores)")
    parser.add_argument("--backend", default="process", choices=("process", "serial", "ray"))
    parser.add_argument("--address", default=None, help="Ray cluster address (--backend ray)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="mabp-gym", description=__doc__.splitlines()[0])
    from mabp_gym.version import __version__

    parser.add_argument("--version", action="version", version=f"mabp-gym {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for add in (
        _add_eval,
        _add_table,
        _add_verdicts,
        _add_sweep,
        _add_plot,
        _add_capacity,
        _add_bench,
        _add_train,
        _add_simulate,
        _add_fleet,
    ):
        add(commands)
    return parser


def _add_eval(commands: Any) -> None:
    ev = commands.add_parser("eval", help="evaluate policies over loads and seeds")
    ev.add_argument(
        "--policies",
        "--policy",
        dest="policy",
        nargs="+",
        default=["mabp"],
        help="policy name(s) (--policy is the older spelling)",
    )
    _common(ev)
    ev.add_argument("--out", metavar="PATH", help="JSON-lines results (resumable)")
    ev.add_argument(
        "--until-decided",
        type=int,
        default=None,
        metavar="MAX_SLOTS",
        help="rerun every (policy, load) whose verdict the runs cannot decide (the pooled "
        "growth's 95%% interval contains the limit) at twice the horizon, up to MAX_SLOTS",
    )


def _add_table(commands: Any) -> None:
    table = commands.add_parser("table", help="the paper's Table I for any policies")
    table.add_argument(
        "--policies",
        "--policy",
        dest="policies",
        nargs="+",
        default=list(TABLE_POLICIES),
        help="policies, one row each (default: Table I's)",
    )
    _common(table)
    table.add_argument(
        "--at",
        type=float,
        default=0.85,
        help="load at which the fixed-load metrics are reported (0.85)",
    )
    table.add_argument(
        "--out",
        metavar="PATH",
        default="results/table1.jsonl",
        help="JSON-lines results, reused and extended (resumable)",
    )
    table.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    table.add_argument("--csv", metavar="PATH", help="write the table as CSV")
    table.add_argument(
        "--search",
        action="store_true",
        help="walk the loads upward and stop each policy at its first load "
        "that grows (the stable load needs nothing above it)",
    )
    table.add_argument(
        "--from-results",
        action="store_true",
        help="tabulate the records already in --out; run nothing",
    )
    table.add_argument(
        "--long",
        nargs="+",
        metavar="PATH",
        help="JSON-lines files of longer runs (e.g. at the loads around each boundary): "
        "adds the column 'Stable load (H slots)' in which they decide the loads they cover",
    )
    table.add_argument(
        "--long-horizon",
        metavar="H",
        help="cut the --long runs at H slots (default: the shortest of them); 'longest': "
        "each load's runs of its own longest horizon (what eval --until-decided leaves)",
    )


def _add_verdicts(commands: Any) -> None:
    verdicts = commands.add_parser(
        "verdicts", help="stable load per seed set and horizon, from saved long runs"
    )
    verdicts.add_argument("--results", nargs="+", required=True, help="JSON-lines result files")
    verdicts.add_argument(
        "--horizons",
        type=int,
        nargs="+",
        required=True,
        help="horizons to cut the saved runs at (each <= the runs' own)",
    )
    verdicts.add_argument(
        "--seed-sets",
        nargs="+",
        required=True,
        metavar="SEEDS",
        help="disjoint seed sets, each as comma-separated seeds or a:b "
        "(b excluded), e.g. 100:105 105:110 110:115",
    )
    verdicts.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")


def _add_sweep(commands: Any) -> None:
    sweep = commands.add_parser("sweep", help="load, beta, K, nu or skew sweep (paper VI-A)")
    sweep.add_argument("--param", required=True, choices=SWEEPS)
    sweep.add_argument("--values", nargs="+", required=True, help="values of the parameter")
    sweep.add_argument(
        "--policies", "--policy", dest="policies", nargs="+", default=["cost-bp", "mabp"]
    )
    _common(sweep, loads=False)
    sweep.add_argument(
        "--at", type=float, default=0.85, help="load for the beta, K, nu and skew sweeps (0.85)"
    )
    sweep.add_argument("--out", metavar="PATH", required=True, help="JSON-lines results")


def _add_plot(commands: Any) -> None:
    plot = commands.add_parser("plot", help="figures (PNG) from saved results")
    plot.add_argument("--results", nargs="+", required=True, help="JSON-lines result files")
    plot.add_argument("--out-dir", required=True, help="directory for the PNG files")
    plot.add_argument("--policy", default="mabp", help="policy of the trace and heat map")


def _add_capacity(commands: Any) -> None:
    cap = commands.add_parser("capacity", help="no-memory, all-hit and occupation capacities")
    _workload_args(cap)
    cap.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    cap.add_argument(
        "--reference",
        nargs="+",
        choices=REFERENCES,
        default=["nomem", "full"],
        help="capacities to report: nomem, full, occ (the occupation-measure "
        "relaxation of paper Thm. 1); default nomem full",
    )
    cap.add_argument(
        "--exact",
        action="store_true",
        help="with occ: also the exact occupation LP (tiny workloads only)",
    )
    cap.add_argument(
        "--figure",
        metavar="PNG",
        help="also draw Fig. 2b (occ / full against beta and skew) for the "
        "workload's family (mixed, rag, moe, agentic)",
    )


def _add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="benchmark v3's task suite and its leaderboard (docs/benchmark.md)",
        description="Run the tasks with headroom on the evaluation seeds (skipping runs "
        "already in --out) and print the leaderboard; --from-results only prints it.",
    )
    bench.add_argument("--tasks", nargs="+", default=None, help="task names (default: all)")
    bench.add_argument(
        "--policies", nargs="+", default=None, help="policies (default: the suite's seven)"
    )
    bench.add_argument(
        "--seeds",
        default="9000:9010",
        help="evaluation seeds, a:b or comma-separated, within 9000-9999 (default 9000:9010)",
    )
    bench.add_argument("--horizon", type=int, default=4000, help="slots per run (4000)")
    bench.add_argument("--out", metavar="PATH", help="JSON-lines results (resumable)")
    bench.add_argument(
        "--from-results", action="store_true", help="print the board from --out, run nothing"
    )
    bench.add_argument("--markdown", metavar="PATH", help="also write the board as Markdown")
    bench.add_argument("--json", metavar="PATH", help="also write the board's rows as JSON")
    bench.add_argument("--list", action="store_true", help="list the tasks and exit")
    bench.add_argument("--workers", type=int, default=None, help="processes (all cores)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_train(commands: Any) -> None:
    train = commands.add_parser(
        "train",
        help="train a learned scheduler (gnn, learn-mabp, residual-mabp)",
        description="Train a learned scheduler. `mabp-gym train gnn --help` and "
        "`mabp-gym train learn-mabp --help` list each learner's options.",
    )
    train.add_argument(
        "learner", choices=("gnn", "learn-mabp", "residual-mabp"), help="the learner to train"
    )
    train.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="...",
        help="the learner's options (see `mabp-gym train LEARNER --help`)",
    )


def _add_simulate(commands: Any) -> None:
    sim = commands.add_parser("simulate", help="run the queue-length score rule on a workload")
    _workload_args(sim)
    sim.add_argument("--load", type=float, default=None, help="normalized load rho")
    sim.add_argument("--horizon", type=int, default=None, help="slots per run")
    sim.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default: 0)")
    sim.add_argument("--warmup", type=float, default=0.2, help="discarded fraction of slots")
    sim.add_argument("--no-memory", action="store_true", help="the no-memory system")
    sim.add_argument("--json", metavar="PATH", help="also write the records as JSON")


def _add_fleet(commands: Any) -> None:
    fleet = commands.add_parser("fleet", help="routers over a replayed trace (SPEC 11, Table II)")
    fleet.add_argument(
        "--trace",
        default="synthetic",
        help="shipped trace (conversation, synthetic) or a Mooncake JSONL file",
    )
    fleet.add_argument(
        "--fleet-size",
        "--workers",
        dest="workers",
        type=int,
        default=4,
        help="LLM workers (GPUs) in the fleet (4); --workers is the older spelling, which "
        "elsewhere means processes",
    )
    fleet.add_argument(
        "--routers", nargs="+", default=None, help="router names (default: all); see docs/fleet.md"
    )
    fleet.add_argument(
        "--loads",
        type=float,
        nargs="+",
        default=[0.6, 0.9],
        help="nominal loads to scale the trace to (0.6 0.9)",
    )
    fleet.add_argument("--runs", type=int, default=10, help="independent runs (10)")
    fleet.add_argument(
        "--engine",
        choices=("simple", "step"),
        default="simple",
        help="worker model: simple (FIFO prefill, decode fixed at admission) or step "
        "(continuous batching, chunked prefill, shared KV, preemption; docs/fleet.md)",
    )
    fleet.add_argument("--requests", type=int, default=None, help="use the first N requests")
    fleet.add_argument(
        "--spread-bursts",
        action="store_true",
        help="spread each run of equal timestamps evenly up to the next one (the conversation "
        "trace's clock ticks every 3 s: about ten requests share each tick)",
    )
    fleet.add_argument("--seed", type=int, default=0, help="seed of the first run (0)")
    fleet.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="FleetConfig override (repeatable)",
    )
    fleet.add_argument(
        "--layout",
        choices=("metrics", "routers"),
        default="metrics",
        help="rows are metrics (the paper's Table II) or routers",
    )
    fleet.add_argument(
        "--out",
        metavar="PATH",
        help="JSON-lines records, appended as each run ends; rerunning skips the runs there",
    )
    fleet.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown")
    fleet.add_argument("--json", metavar="PATH", help="also write the per-run records as JSON")


# -- printing ----------------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}f}"


SUMMARY_LEGEND = (
    "stable: the backlog's growth (slope / arrival rate, after the 20% warm-up), pooled over "
    "the seeds, is under 1.5% of the arrivals with 95% confidence and, where significantly "
    "above zero, halves when the run doubles (verdict v3; few seeds give wide intervals); slope: "
    "backlog units per slot; backlog: mean units; "
    "penalty: per completed request (compute + transmission + memory costs); "
    "p95: P95 delay in slots of the requests that completed; p95 all: of every request born "
    "after the warm-up, those still queued at their age so far; hit: hit ratio of served "
    "units; churn: insertions + evictions per served unit; compl: fraction of the requests "
    "born after the warm-up that completed; dec us: mean decision time per slot, the first "
    "slot left out (compilation)"
)


def _print_summary(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'policy':<20} {'load':>5} {'stable':>6} {'slope':>7} {'backlog':>8} "
        f"{'penalty':>8} {'p95':>7} {'p95 all':>7} {'hit':>5} {'churn':>6} {'compl':>6} "
        f"{'dec us':>7}"
    )
    for row in rows:
        print(
            f"{row['policy']:<20} {row['load']:>5.2f} {_fmt(row['stable']):>6} "
            f"{_fmt(row['slope']):>7} {_fmt(row['mean_backlog'], 1):>8} "
            f"{_fmt(row['penalty'], 4):>8} {_fmt(row['p95_delay'], 1):>7} "
            f"{_fmt(row.get('p95_delay_all'), 1):>7} "
            f"{_fmt(row['hit_ratio'], 2):>5} {_fmt(row['churn']):>6} "
            f"{_fmt(row['completion_ratio']):>6} {_fmt(row['decision_us_mean'], 0):>7}"
        )


def _grid_args(args: argparse.Namespace) -> dict[str, Any]:
    return dict(horizon=args.horizon, warmup=args.warmup, memory=not args.no_memory, nu=args.nu)


def _run_args(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        workers=args.workers,
        backend=args.backend,
        address=args.address,
        progress=not args.no_progress,
    )


# -- subcommands -------------------------------------------------------------------------------
SCREEN_HORIZON = 4000
"""Below this many slots the growth verdict is a screen (benchmark v2's grid horizon)."""


def _stable_load_line(stable: dict[str, float], loads: list[float]) -> str:
    """``stable load: bp 0.5, sp none of the tested loads (lowest 0.1)``."""
    lowest = min(loads)
    parts = [
        f"{policy} {value:g}"
        if value > 0 or lowest == 0
        else f"{policy} none of the tested loads (lowest {lowest:g})"
        for policy, value in stable.items()
    ]
    return "stable load: " + ", ".join(parts)


def _eval(args: argparse.Namespace) -> None:
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import (
        occupation_load,
        stable_load,
        summarize_records,
        undecided,
    )

    with user_input():
        loads = _parse_grid(args.loads, "--loads") if args.loads else list(DEFAULT_GRID)
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "eval",
            {"load": "sets the loads with --loads", "horizon": "sets it with --horizon"},
        )
        _writable(args.out, "--out")
        _check_run_args(args)
        if args.until_decided is not None and args.until_decided < 2 * args.horizon:
            # Undecided cells rerun at twice the horizon: below that nothing would rerun.
            raise ValueError(
                f"--until-decided must be at least twice --horizon ({2 * args.horizon}: the "
                f"first rerun doubles it), got {args.until_decided}"
            )
        specs = plan(
            _policies(args.policy),
            args.workload,
            loads,
            args.seeds,
            **_grid_args(args),
            **overrides,
        )
    if args.until_decided is None:
        records = execute(specs, output=args.out, **_run_args(args))
    else:
        from mabp_gym.harness.summaries import decide_horizons

        records, used = decide_horizons(
            specs,
            args.until_decided,
            lambda batch: execute(batch, output=args.out, **_run_args(args)),
        )
        longer = {cell: h for cell, h in used.items() if h > args.horizon}
        for (policy, load), horizon in sorted(longer.items()):
            print(f"{policy} at load {load:g}: decided at {horizon:,} slots")
        for policy, load in undecided(records):
            print(
                f"{policy} at load {load:g}: still undecided at {used[(policy, load)]:,} "
                "slots (the interval contains the limit): not credited"
            )
    _print_summary(summarize_records(records))
    print(SUMMARY_LEGEND)
    print(_stable_load_line(stable_load(records), loads))
    if args.horizon < SCREEN_HORIZON and args.until_decided is None:
        print(
            f"({args.horizon} slots: read 'stable' as a screen; near a boundary queues settle "
            f"slowly, and the benchmark decides at {SCREEN_HORIZON:,} slots or more: "
            "--horizon 4000, docs/results.md)"
        )
    bound = occupation_load(records)
    if bound is not None and max(loads) >= bound - 1e-6:
        print(
            f"(the occupation bound is load {bound:.3g}: no load at or above it is credited, "
            "whatever the backlog's slope; paper Thm. 1)"
        )


def _check_run_args(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be a positive integer, got {args.workers}")
    if args.address is not None and args.backend != "ray":
        raise ValueError("--address is for --backend ray")


TABLE_COLUMNS = (
    "Policy",
    "Stable load",
    "Paper load",
    "Penalty",
    "P95 delay",
    "P95 delay (all)",
    "Hit ratio",
    "Churn",
    "Completion",
)
UNSTABLE_MARK = " (grows)"
"""Appended to the delay cells of a policy whose backlog grows at the table's load: its
completed requests' P95 is then set by the run length (``P95 delay (all)`` counts the
requests left in the network at their age)."""


TABLE_LEGEND = (
    "Stable load: the largest grid load at which it and every smaller grid load pass verdict "
    "v3 (growth pooled over the seeds under 1.5% of the arrivals with 95% confidence and, "
    "where significantly above zero, halving when the run doubles), below the occupation "
    "bound; '<x': not even the lowest load run, x; '(partial: y not run)': capped before a "
    "load missing from the grid. "
    "Paper load: the paper's rule (slots 120-600: slope < 0.035 and mean backlog < 120). The "
    "other columns at the --at load, mean +- std over seeds: penalty per completed request; "
    "P95 delay (slots) of completed requests and, '(all)', of every request born after the "
    "warm-up, still-queued ones at their age; '(grows)': the policy is not stable at that "
    "load, so its delays are set by the run length; hit ratio of served units; churn: "
    "insertions + evictions per served unit; completion: fraction of the window's requests "
    "completed."
)


def table_rows(
    records: list[dict[str, Any]],
    policies: list[str],
    grid: list[float],
    at: float,
    long: tuple[list[dict[str, Any]], int | None] | None = None,
) -> list[list[str]]:
    """Paper Table I rows: both verdicts over ``grid`` (SPEC 9.2), the other metrics as
    mean +- std over seeds at load ``at``. ``long``: longer runs and the horizon to cut
    them at; they decide the loads they cover in an extra first verdict column
    (:func:`mabp_gym.harness.verdicts.long_run_stable_load`)."""
    from mabp_gym.core.metrics import growth_verdict
    from mabp_gym.harness.summaries import occupation_load, paper_load, stable_load
    from mabp_gym.harness.verdicts import long_run_stable_load

    on_grid = [r for r in records if any(abs(r["load"] - x) < 1e-9 for x in grid)]
    bound = occupation_load(on_grid)
    stable = stable_load(on_grid, bound=bound)
    paper = paper_load(on_grid)
    longer = None if long is None else long_run_stable_load(on_grid, long[0], long[1], bound)
    rows = []
    for policy in policies:
        fixed = [r for r in records if r["policy"] == policy and abs(r["load"] - at) < 1e-9]
        ran = [r["load"] for r in on_grid if r["policy"] == policy]
        lowest = min(ran) if ran else float("nan")
        cells = [policy]
        verdicts = [stable, paper] if longer is None else [longer, stable, paper]
        covered = set(ran)
        if long is not None:
            covered |= {r["load"] for r in long[0] if r["policy"] == policy}
        for verdict in verdicts:
            # A load never run caps every column (the long runs' too): no credit unseen.
            value, gap = _capped_at_gap(verdict.get(policy, 0.0), covered, grid)
            cell = _verdict_cell(value, lowest, min(grid))
            cells.append(cell if gap is None else f"{cell} (partial: {gap:g} not run)")
        grows = bool(fixed) and not growth_verdict(fixed)["stable"]
        for key, digits in (
            ("penalty", 4),
            ("p95_delay", 1),
            ("p95_delay_all", 1),
            ("hit_ratio", 2),
            ("churn", 3),
            ("completion_ratio", 3),
        ):
            values = np.array([r[key] for r in fixed if r.get(key) is not None], dtype=float)
            cell = f"{values.mean():.{digits}f} ± {values.std():.{digits}f}" if values.size else "-"
            if grows and key.startswith("p95") and values.size:
                cell += UNSTABLE_MARK
            cells.append(cell)
        rows.append(cells)
    return rows


def _capped_at_gap(value: float, ran: set[float], grid: list[float]) -> tuple[float, float | None]:
    """A stable load credited over an incomplete grid: the first grid load at or below it
    that has no runs caps it at the grid load before (a partial results file must not
    credit loads it never tested); ``(value, the missing load or None)``."""
    done = {round(load, 9) for load in ran}
    below = [x for x in sorted(grid) if x <= value + 1e-9]
    for k, load in enumerate(below):
        if round(load, 9) not in done:
            return (below[k - 1] if k else 0.0), load
    return value, None


def _table(args: argparse.Namespace) -> None:
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan

    with user_input():
        loads = _parse_grid(args.loads, "--loads") if args.loads else list(DEFAULT_GRID)
        policies = _policies(args.policies)
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "table",
            {"load": "sets the loads with --loads and --at", "horizon": "sets it with --horizon"},
        )
        _writable(args.markdown, "--markdown")
        _writable(args.csv, "--csv")
        long = _long_runs(args, policies)
        if args.from_results:
            from mabp_gym.harness.results_file import read_records

            if not Path(args.out).is_file():
                raise ValueError(f"--from-results: no results file {args.out!r}")
        else:
            _check_run_args(args)
            grid = dict(**_grid_args(args), **overrides)
            specs = plan(
                policies, args.workload, sorted(set(loads) | {args.at}), args.seeds, **grid
            )
            out = Path(args.out)
            if not out.parent.exists():  # the default, results/, is made on first use
                out.parent.mkdir(parents=True, exist_ok=True)
            _writable(args.out, "--out")
    if args.from_results:
        records = [r for r in read_records(args.out) if r["policy"] in policies]
    elif args.search:
        records = _search_loads(policies, args, sorted(loads), grid)
        records += execute(
            plan(policies, args.workload, [args.at], args.seeds, **grid),
            output=args.out,
            **_run_args(args),
        )
    else:
        records = execute(specs, output=args.out, **_run_args(args))
    rows = table_rows(records, policies, loads, args.at, long)
    columns = list(TABLE_COLUMNS)
    if long is not None:
        top = max(r["horizon"] for r in long[0])
        label = f"{long[1]:,} slots" if long[1] is not None else f"decided, up to {top:,} slots"
        columns.insert(1, f"Stable load (--long runs, {label})")
        short = min((r["horizon"] for r in records), default=args.horizon)
        columns[2] = f"Stable load ({short:,} slots)"
    markdown = [
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
    ]
    markdown += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(markdown)
    print(text)
    print(TABLE_LEGEND)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n", encoding="utf-8")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(columns)
            writer.writerows(rows)


def _long_runs(
    args: argparse.Namespace, policies: list[str]
) -> tuple[list[dict[str, Any]], int | None] | None:
    """The ``--long`` records of ``policies`` and the horizon to cut them at, checked."""
    if not args.long:
        if args.long_horizon is not None:
            raise ValueError("--long-horizon needs --long")
        return None
    records = [r for r in _read_results(args.long) if r["policy"] in policies]
    if not records:
        raise ValueError(f"--long: no runs of the policies {policies}")
    workloads = {r["workload"] for r in records}
    if workloads != {args.workload}:
        raise ValueError(
            f"--long: the runs are of {sorted(workloads)}, the table of {args.workload!r}"
        )
    from mabp_gym.harness.verdicts import check_record_trace

    for record in records:
        check_record_trace(record)
    shortest = min(r["horizon"] for r in records)
    if args.long_horizon == "longest":
        return records, None
    horizon = shortest if args.long_horizon is None else _long_horizon(args.long_horizon)
    if not 0 < horizon <= shortest:
        raise ValueError(
            f"--long-horizon: must be in 1..{shortest} (the shortest --long run), got {horizon}"
        )
    _check_cut_horizons([horizon], "--long-horizon")
    return records, horizon


def _long_horizon(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"--long-horizon: must be a whole number of slots or 'longest', got {text!r}"
        ) from None


def _search_loads(
    policies: list[str], args: argparse.Namespace, loads: list[float], grid: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run the loads in ascending order; a policy stops at its first load that grows."""
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import summarize_records

    records: list[dict[str, Any]] = []
    active = list(policies)
    for load in loads:
        batch = execute(
            plan(active, args.workload, [load], args.seeds, **grid),
            output=args.out,
            **_run_args(args),
        )
        records += batch
        verdict = {row["policy"]: row["stable"] for row in summarize_records(batch)}
        active = [p for p in active if verdict.get(p)]
        if not active:
            break
    return records


VERDICTS_LEGEND = (
    "Each cell: the stable load (verdict v3) on each seed set, separated by '/', of the runs "
    "cut at H slots; bold where the sets disagree; '<x': not even the lowest load run on that "
    "set, x."
)


def _verdicts(args: argparse.Namespace) -> None:
    from mabp_gym.harness.verdicts import check_record_trace, horizon_sensitivity

    with user_input():
        _writable(args.markdown, "--markdown")
        records = _read_results(args.results)
        seed_sets = [_parse_seeds(token) for token in args.seed_sets]
        _check_seed_sets(seed_sets, records)
        shortest = min(r["horizon"] for r in records)
        if max(args.horizons) > shortest:
            raise ValueError(f"--horizons: the shortest saved run has {shortest} slots")
        _check_cut_horizons(args.horizons, "--horizons")
        for record in records:
            check_record_trace(record)
    from mabp_gym.harness.summaries import occupation_load

    bound = occupation_load(records)
    if bound is not None:
        print(f"loads at or above the occupation bound ({bound:.3f}) are not credited")
    rows = horizon_sensitivity(records, args.horizons, seed_sets, bound)
    header = ["policy", *(f"H={h}" for h in args.horizons)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for policy in sorted({row["policy"] for row in rows}):
        cells = [policy]
        for horizon in args.horizons:
            (row,) = [r for r in rows if r["policy"] == policy and r["horizon"] == horizon]
            text = " / ".join(
                _verdict_cell(load, low)
                for load, low in zip(row["stable_loads"], row["lowest"], strict=True)
            )
            cells.append(text if row["agree"] else f"**{text}**")
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    print(VERDICTS_LEGEND)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n", encoding="utf-8")


def _verdict_cell(load: float, lowest: float, start: float = 0.05) -> str:
    """A stable load; ``<x`` when even the lowest load run, ``x``, fails and lies above the
    grid's ``start``; ``-`` when the policy has no run."""
    if np.isnan(lowest):
        return "-"
    return f"<{lowest:.2f}" if load == 0.0 and lowest > start + 1e-9 else f"{load:.2f}"


def _read_results(paths: list[str]) -> list[dict[str, Any]]:
    """The records of ``--results`` files; a missing file or no record at all is an error."""
    from mabp_gym.harness.results_file import read_records

    records: list[dict[str, Any]] = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"--results: no such file {path!r}")
        records += read_records(path)
    if not records:
        raise ValueError("--results: the files hold no records")
    return records


def _check_cut_horizons(horizons: list[int], option: str) -> None:
    """Each horizon must leave enough stored trace points after the warm-up to fit a
    slope, and none may repeat."""
    from mabp_gym.harness.verdicts import MIN_TRACE_POINTS, min_horizon

    shortest = min_horizon()
    for horizon in horizons:
        if horizon < shortest:
            raise ValueError(
                f"{option}: {horizon} slots keep fewer than {MIN_TRACE_POINTS} stored backlog "
                f"points after the 20% warm-up (one every 5 slots); use {shortest} or more"
            )
    _no_repeats(list(horizons), option)


def _check_seed_sets(seed_sets: list[list[int]], records: list[dict[str, Any]]) -> None:
    """Seed sets must be disjoint, and each must hold records."""
    seen: dict[int, int] = {}
    for k, seeds in enumerate(seed_sets):
        for seed in seeds:
            if seed in seen and seen[seed] != k:
                raise ValueError(
                    f"--seed-sets: seed {seed} is in set {seen[seed] + 1} and set {k + 1}; the "
                    "sets must be disjoint"
                )
            seen[seed] = k
    have = {r["seed"] for r in records}
    for k, seeds in enumerate(seed_sets):
        if not have & set(seeds):
            raise ValueError(
                f"--seed-sets: set {k + 1} ({seeds[0]}..{seeds[-1]}) has no record in the "
                "results files"
            )


def _parse_seeds(token: str, option: str = "--seed-sets") -> list[int]:
    try:
        if ":" in token:
            start, stop = (int(x) for x in token.split(":"))
            seeds = list(range(start, stop))
        else:
            seeds = [int(x) for x in token.split(",") if x]
    except ValueError:
        raise ValueError(f"{option}: {token!r} is not 'a:b' or comma-separated seeds") from None
    if not seeds:
        raise ValueError(f"{option}: {token!r} holds no seed")
    return seeds


def _sweep(args: argparse.Namespace) -> None:
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import summarize_records

    with user_input():
        values = _parse_grid(args.values, "--values")
        policies = _policies(args.policies)
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "sweep",
            {
                "load": "sets the load with --values (--param load) or --at",
                "horizon": "sets it with --horizon",
                args.param: "sweeps it with --param and --values",
            },
        )
        _writable(args.out, "--out")
        _check_run_args(args)
        base = _grid_args(args)
        specs = []
        if args.param == "load":
            specs = plan(policies, args.workload, values, args.seeds, **base, **overrides)
        else:
            for value in values:
                if args.param == "nu":
                    specs += plan(
                        policies,
                        args.workload,
                        [args.at],
                        args.seeds,
                        **{**base, "nu": value},
                        **overrides,
                    )
                else:
                    specs += plan(
                        policies,
                        args.workload,
                        [args.at],
                        args.seeds,
                        **base,
                        **{**overrides, args.param: _number(str(value))},
                    )
    records = execute(specs, output=args.out, **_run_args(args))
    print(
        f"{args.param:>8} {'policy':<20} {'stable':>6} {'backlog':>8} {'penalty':>8} "
        f"{'p95':>7} {'hit':>5}"
    )
    for value in values:
        chosen = [r for r in records if _sweep_value(r, args.param) == value]
        for row in summarize_records(chosen):
            print(
                f"{value:>8g} {row['policy']:<20} {_fmt(row['stable']):>6} "
                f"{_fmt(row['mean_backlog'], 1):>8} {_fmt(row['penalty'], 4):>8} "
                f"{_fmt(row['p95_delay'], 1):>7} {_fmt(row['hit_ratio'], 2):>5}"
            )


def _sweep_value(record: dict[str, Any], param: str) -> float | None:
    if param == "load":
        return record["load"]
    if param == "nu":
        return record["nu"]
    value = record.get("overrides", {}).get(param)
    return None if value is None else float(value)


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
            with user_input():  # too large for the enumeration: the user's choice of workload
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
    from mabp_gym.core.metrics import summarize
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
        _writable(args.json, "--json")
        wl = make_workload(args.workload, **overrides)
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
        Path(args.json).write_text(json.dumps(records, indent=2, default=str), encoding="utf-8")


FLEET_LEGEND = (
    "Thr.: completed trace requests per second; Goodput: those within both SLOs (TTFT and "
    "TPOT, FleetConfig.slo_ttft_s / slo_tpot_s) per second; P95 TTFT: time to first token; "
    "P95 TPOT: time per output token after the first; P95 E2E: arrival to last token; GPU "
    "s/req: GPU busy seconds per completed request; KV hit: prompt tokens found in the prefix "
    "cache; Jobs/req: downstream tool jobs per completed request; Drops: share of arrivals "
    "dropped (queue full or timeout); P95 sched.: the router's decision time (Python). "
    "Mean +- 95% Student-t half-width over the runs."
)


def _fleet_records(path: str | None) -> dict[str, dict[str, Any]]:
    """The fleet records already in ``--out`` by key (a truncated last line is dropped, and
    the file is ended with a newline so that the next record starts a line of its own)."""
    if path is None or not Path(path).is_file():
        return {}
    with open(path, "rb+") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell():
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
    done = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # an interrupted write: that run is made again
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                # JSON has no NaN: an undefined figure was written as null.
                done[record["key"]] = {k: math.nan if v is None else v for k, v in record.items()}
    return done


def _append_record(path: str, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(_finite(record)) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _fleet(args: argparse.Namespace) -> None:
    from mabp_gym.fleet import ROUTERS, load_trace, make_config
    from mabp_gym.fleet.evaluate import evaluate_fleet, format_table

    with user_input():
        config = make_config(num_workers=args.workers, **_parse_overrides(args.overrides))
        routers = [r for token in (args.routers or list(ROUTERS)) for r in token.split(",") if r]
        if not routers:
            raise ValueError(f"--routers: name at least one router of {sorted(ROUTERS)}")
        for router in routers:
            if router not in ROUTERS:
                raise ValueError(
                    f"--routers: unknown router {router!r}; choose from {sorted(ROUTERS)}"
                )
        _no_repeats(routers, "--routers")
        for load in args.loads:
            if not (math.isfinite(load) and load > 0):
                raise ValueError(f"--loads: each load must be a finite number > 0, got {load}")
        _no_repeats(args.loads, "--loads")
        if args.runs < 1:
            raise ValueError(f"--runs must be a positive integer, got {args.runs}")
        if args.seed < 0:
            raise ValueError(f"--seed must be an integer >= 0, got {args.seed}")
        _writable(args.markdown, "--markdown")
        _writable(args.json, "--json")
        _writable(args.out, "--out")
        done = _fleet_records(args.out)
        if args.requests is not None and args.requests < 2:
            raise ValueError(f"--requests must be >= 2, got {args.requests}")
        # A bad line is named in the error; with --requests the rest is never read.
        trace = load_trace(args.trace, args.requests)
        if args.spread_bursts:
            trace = trace.spread_bursts()
    records = evaluate_fleet(
        trace,
        routers,
        args.loads,
        args.runs,
        config,
        seed=args.seed,
        progress=lambda line: print(line, file=sys.stderr),
        engine=args.engine,
        done=done,
        on_record=None if args.out is None else lambda record: _append_record(args.out, record),
    )
    table = format_table(records, routers, args.layout)
    print(
        f"trace {trace.name}: {len(trace)} requests, {config.num_workers} workers, "
        f"{args.engine} engine"
    )
    print(table)
    print(FLEET_LEGEND)
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    if args.json:
        # NaN is not JSON: an undefined figure (no request of a kind) is written as null.
        Path(args.json).write_text(json.dumps(_finite(records), indent=2), encoding="utf-8")


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON's null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _train(args: argparse.Namespace) -> None:
    require("learn", "mabp-gym train")
    if args.learner == "gnn":
        from mabp_gym.training import gnn as learner
    elif args.learner == "residual-mabp":
        from mabp_gym.training import residual_mabp as learner
    else:
        from mabp_gym.training import learn_mabp as learner
    with user_input():
        options = learner.parse(args.rest)
    learner.report(learner.train(options))


def _bench(args: argparse.Namespace) -> None:
    from mabp_gym.harness import bench

    if args.list:
        for task in bench.TASKS:
            extra = ", ".join(f"{k}={v}" for k, v in task.overrides)
            print(
                f"{task.name}: {task.workload}{f' ({extra})' if extra else ''} at load "
                f"{task.load:g}; {task.why}"
            )
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
        _writable(args.markdown, "--markdown")
        _writable(args.json, "--json")
        if args.from_results:
            if args.out is None or not Path(args.out).is_file():
                raise ValueError("--from-results needs --out naming an existing results file")
            records = read_records(args.out)
            skipped: list[tuple[str, str, str]] = []
        else:
            _writable(args.out, "--out")
            if args.workers is not None and args.workers < 1:
                raise ValueError(f"--workers must be a positive integer, got {args.workers}")
            specs, skipped = bench.plan_bench(tasks, policies, seeds, args.horizon)
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
    if not rows:
        raise SystemExit(f"mabp-gym bench: no runs of these tasks and policies in {args.out}")
    text = bench.markdown(rows, skipped, tasks)
    print(text, end="")
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(_finite({"rows": rows, "standings": bench.standings(rows)}), indent=2)
        )


COMMANDS = {
    "train": _train,
    "bench": _bench,
    "eval": _eval,
    "table": _table,
    "verdicts": _verdicts,
    "sweep": _sweep,
    "plot": _plot,
    "capacity": _capacity,
    "simulate": _simulate,
    "fleet": _fleet,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mabp-gym`` console script."""
    from mabp_gym.harness.evaluation import RunsFailedError
    from mabp_gym.harness.results_file import ResultsFileBusyError

    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (UsageError, MissingExtraError) as error:
        parser.error(str(error))
    except ResultsFileBusyError as error:
        parser.error(str(error))
    except RunsFailedError as error:
        # The failing run's traceback (an internal error keeps it), then the summary.
        sys.stderr.write(error.details[0].rstrip() + "\n")
        sys.stderr.write(f"{parser.prog}: {error}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{parser.prog}: {_interrupted(args)}\n")
        return 130
    return 0


def _interrupted(args: argparse.Namespace) -> str:
    """One line for Ctrl-C: what was kept and how to go on."""
    out = getattr(args, "out", None)
    if out:
        return (
            f"interrupted; every run that finished is kept in {out}: the same command "
            "resumes from there"
        )
    return "interrupted; no results file was given (--out PATH keeps runs as they finish)"
