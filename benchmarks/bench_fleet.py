"""Seconds to replay the 12,031-request Mooncake conversation trace over 8 workers, per router.

One process, one core: each router replays the whole trace (its own timestamps, nominal
load 0.41 over 8 workers, plus the downstream jobs it spawns) ``--repeats`` times; the
median wall time is reported, with the router's P95 decision time. Target: at
most 10 s per router on one core. Prints a table and a JSON line (``--json PATH`` writes it).

    python benchmarks/bench_fleet.py
    python benchmarks/bench_fleet.py --load 0.9 --repeats 1
    python benchmarks/bench_fleet.py --engine step     # the step-level engine
"""

from __future__ import annotations

import argparse
import statistics
import time

from _report import emit

from mabp_gym.fleet import ROUTERS, FleetConfig, make_router, replay, scale_to_load, shipped_trace

TARGET_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--load",
        type=float,
        default=None,
        help="scale the trace to this nominal load (default: its own times)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", choices=("simple", "step"), default="simple")
    parser.add_argument("--profile", default=None, help="the step engine's profile")
    parser.add_argument("--routers", nargs="+", default=list(ROUTERS))
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    config = FleetConfig(num_workers=args.workers)
    started = time.perf_counter()
    trace = shipped_trace("conversation")
    load_s = time.perf_counter() - started
    if args.load is not None:
        trace = scale_to_load(trace, args.load, config)
    rows = []
    for name in args.routers:
        times, metrics = [], {}
        for seed in range(args.repeats):
            started = time.perf_counter()
            metrics = replay(
                trace,
                make_router(name),
                config,
                seed=seed,
                engine=args.engine,
                profile=args.profile,
            )
            times.append(time.perf_counter() - started)
        rows.append(
            {
                "router": name,
                "seconds": statistics.median(times),
                "p95_scheduler_us": metrics["p95_scheduler_us"],
                "kv_hit_ratio": metrics["kv_hit_ratio"],
                "within_target": statistics.median(times) <= TARGET_S,
            }
        )
    print(
        f"trace conversation: {len(trace)} requests, {args.workers} workers, {args.engine} "
        f"engine, read in {load_s:.2f} s"
    )
    print(f"{'router':<18} {'seconds':>8} {'p95 choose (us)':>16} {'KV hit':>7}")
    for row in rows:
        print(
            f"{row['router']:<18} {row['seconds']:>8.2f} {row['p95_scheduler_us']:>16.1f} "
            f"{row['kv_hit_ratio']:>7.3f}"
        )
    emit(
        {
            "benchmark": "bench_fleet",
            "requests": len(trace),
            "workers": args.workers,
            "engine": args.engine,
            "load": args.load,
            "repeats": args.repeats,
            "target_s": TARGET_S,
            "trace_read_s": load_s,
            "rows": rows,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
