"""The ``mabp-gym`` command line.

``mabp-gym capacity`` prints a workload's no-memory and all-hit fluid capacities;
``mabp-gym simulate`` runs the core under the fixed queue-length score rule and prints
the SPEC 5 metrics per seed. Bad arguments exit with status 2 and a one-line reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from mabp_gym.capacity import capacity
from mabp_gym.metrics import summarize
from mabp_gym.rollout import rollout
from mabp_gym.scores import queue_length_scores
from mabp_gym.workloads import WORKLOADS, make_workload


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _parse_overrides(pairs: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects NAME=VALUE, got {pair!r}")
        try:
            value: Any = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = None if raw.lower() == "none" else raw
        overrides[key] = value
    return overrides


def _add_workload_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="mixed", choices=WORKLOADS,
                        help="built-in workload (default: mixed)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="NAME=VALUE", help="workload parameter override (repeatable)")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mabp-gym", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    cap = commands.add_parser("capacity", help="no-memory and all-hit fluid capacities")
    _add_workload_args(cap)
    cap.add_argument("--json", metavar="PATH", help="also write the result as JSON")

    sim = commands.add_parser("simulate", help="run the queue-length score rule on a workload")
    _add_workload_args(sim)
    sim.add_argument("--load", type=float, default=None, help="normalized load rho")
    sim.add_argument("--horizon", type=int, default=None, help="slots per run")
    sim.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default: 0)")
    sim.add_argument("--warmup", type=float, default=0.2, help="discarded fraction of slots")
    sim.add_argument("--no-memory", action="store_true", help="the no-memory system")
    sim.add_argument("--json", metavar="PATH", help="also write the records as JSON")
    return parser


def _workload(args: argparse.Namespace) -> Any:
    overrides = _parse_overrides(args.overrides)
    if getattr(args, "load", None) is not None:
        overrides["load"] = args.load
    if getattr(args, "horizon", None) is not None:
        overrides["horizon"] = args.horizon
    return make_workload(args.workload, **overrides)


def _capacity(args: argparse.Namespace) -> dict[str, Any]:
    wl = _workload(args)
    nomem, full = capacity(wl, "nomem"), capacity(wl, "full")
    result = {"workload": wl.name, "nomem": nomem, "full": full, "ratio": nomem / full}
    print(f"{wl.name}: no-memory capacity {nomem:.4f}, all-hit capacity (lambda_ref) "
          f"{full:.4f} requests/slot; ratio {nomem / full:.3f}")
    return result


def _simulate(args: argparse.Namespace) -> list[dict[str, Any]]:
    if not 0.0 <= args.warmup < 1.0:
        raise ValueError(f"--warmup must be in [0, 1), got {args.warmup}")
    wl = _workload(args)
    records = []
    header = (f"{'seed':>4} {'stable':>6} {'slope':>8} {'backlog':>8} {'p95':>7} {'hit':>5} "
              f"{'churn':>6} {'compl':>6} {'penalty':>8} {'slots/s':>8}")
    print(f"{wl.name} at load {wl.load:g} ({wl.total_rate:.3f} requests/slot), "
          f"{wl.horizon} slots, queue-length scores, memory={'off' if args.no_memory else 'on'}")
    print(header)
    for seed in args.seeds:
        started = time.perf_counter()
        trace = rollout(wl, queue_length_scores, seed, memory=not args.no_memory)
        elapsed = time.perf_counter() - started
        record = {"policy": "queue-length", "workload": wl.name, "load": wl.load, "seed": seed,
                  "memory": not args.no_memory, **summarize(trace, args.warmup),
                  "slots_per_s": wl.horizon / elapsed}
        records.append(record)
        print(f"{seed:>4} {str(record['stable']):>6} {record['slope']:>8.3f} "
              f"{record['mean_backlog']:>8.1f} {record['p95_delay']:>7.1f} "
              f"{record['hit_ratio']:>5.2f} {record['churn']:>6.3f} "
              f"{record['completion_ratio']:>6.3f} {record['penalty']:>8.4f} "
              f"{record['slots_per_s']:>8.0f}")
    return records


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mabp-gym`` console script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        result: Any = _capacity(args) if args.command == "capacity" else _simulate(args)
    except ValueError as error:
        parser.error(str(error))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
