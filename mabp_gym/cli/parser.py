"""The ``mabp-gym`` argument parser: :func:`_build_parser`, one ``_add_*`` per subcommand
and the option groups they share."""

from __future__ import annotations

import argparse
from typing import Any

from mabp_gym.cli.common import SWEEPS, TABLE_POLICIES, _workload_name
from mabp_gym.core.capacity import REFERENCES
from mabp_gym.training.arguments import OneLineParser

DESCRIPTION = "The ``mabp-gym`` command line."
"""The top-level ``--help`` description (the first line of :mod:`mabp_gym.cli.commands`)."""


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
    parser.add_argument("--nu", type=float, default=None, help="penalty weight (5)")
    parser.add_argument("--no-memory", action="store_true", help="the no-memory system")
    parser.add_argument("--workers", type=int, default=None, help="processes (all cores)")
    parser.add_argument("--backend", default="process", choices=("process", "serial", "ray"))
    parser.add_argument("--address", default=None, help="Ray cluster address (--backend ray)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="mabp-gym", description=DESCRIPTION)
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
        "--checkpoint",
        action="append",
        default=[],
        metavar="POLICY=PATH",
        help="run a learned policy of --policies with this checkpoint file instead of its "
        "shipped one (yours from mabp-gym train; repeat for several policies); runs are "
        "keyed by the file's content",
    )
    ev.add_argument(
        "--until-decided",
        type=int,
        default=None,
        metavar="MAX_SLOTS",
        help="rerun at twice the horizon, up to MAX_SLOTS, every (policy, load) below the "
        "occupation bound and not shown stable, unless the runs show it grows: the trend "
        "test fails (the growth does not halve as the run doubles), the growth is no longer "
        "falling, and the failure is confirmed (the pooled growth's 95%% interval wholly "
        "above the limit, or the trend failing at half the horizon too). With two seeds the "
        "trend test seldom fails, so such cells run on to MAX_SLOTS "
        "(harness.summaries.undecided)",
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
        help="tabulate the records already in --out, run nothing; --workload, --seeds, "
        "--horizon, --warmup, --nu, --no-memory and --set, where given, pick its runs",
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
    # What --from-results selects the file's runs by: the options given, at any value (one
    # given at its default value selected nothing when presence was read off the value).
    record_given(table, {dest for _, dest in FROM_RESULTS_SELECTS})


def record_given(parser: argparse.ArgumentParser, dests: set[str]) -> None:
    """Make each option of ``parser`` whose dest is in ``dests`` add its dest to the
    namespace's ``given`` tuple when it appears on the command line."""
    parser.set_defaults(given=())
    for action in parser._actions:
        if action.dest in dests:
            base = type(action)

            def call(self, parser, namespace, values, option_string=None, _base=base):
                _base.__call__(self, parser, namespace, values, option_string)
                namespace.given = (*namespace.given, self.dest)

            action.__class__ = type(f"Given{base.__name__}", (base,), {"__call__": call})


FROM_RESULTS_SELECTS = (
    ("--workload", "workload"),
    ("--seeds", "seeds"),
    ("--horizon", "horizon"),
    ("--warmup", "warmup"),
    ("--nu", "nu"),
    ("--no-memory", "no_memory"),
)
"""The options by which ``table --from-results`` picks the runs of ``--out`` it tabulates
(with ``--set``), each where the user gave it: the same command with ``--from-results``
tabulates what it ran."""


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
        "--at",
        type=float,
        default=None,
        help="load for the beta, K, nu and skew sweeps (0.85); --param load sweeps it instead",
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
        help="capacities to report beside nomem and full, which are always reported with "
        "their ratio (every bound is a fraction of full): occ, the occupation-measure "
        "relaxation of paper Thm. 1",
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
        "--policies", nargs="+", default=None, help="policies (default: every policy of the suite)"
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
        help="train a learned scheduler (gnn, learn-mabp, residual-mabp), or choose among "
        "training seeds' checkpoints (select)",
        description="Train a learned scheduler, or choose among checkpoints of one recipe on "
        "validation seeds (select). `mabp-gym train LEARNER --help` lists its options.",
    )
    train.add_argument(
        "learner",
        choices=("gnn", "learn-mabp", "residual-mabp", "select"),
        help="the learner to train, or select",
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
    fleet.add_argument(
        "--profile",
        default=None,
        help="the step engine's step-time profile (default qwen2.5-7b-a100; "
        "llama-3-8b-a100); docs/fleet.md, section Fidelity",
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
