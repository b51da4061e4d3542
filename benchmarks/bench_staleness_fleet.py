"""SLO goodput against the age of the telemetry a router sees.

The conversation trace over 4 workers: the simple engine at nominal load 0.9 (5 runs) and
the step engine at 0.7 (3 runs). One delay sets both the age of the KV events
(``kv_event_delay_s``) and the interval of the metrics scraper (``scrape_interval_s``): 0,
50, 100 and 500 ms, for the routers that read KV events (Dynamo, production-stack's
loadaware, MABP-Route), the one that reads scraped queue and KV-utilization metrics (llm-d)
and the exact-state reference. Prints a table and a JSON line (``--json PATH`` also writes
it).

    python benchmarks/bench_staleness_fleet.py
"""

from __future__ import annotations

import argparse

import numpy as np
from _report import emit

from mabp_gym.fleet import make_config, make_router, replay, scale_to_load, shipped_trace
from mabp_gym.fleet.evaluate import half_width
from mabp_gym.fleet.routers import ROUTERS as ROUTERS_ALL

ROUTERS = ("dynamo-t0", "vllm-loadaware", "llm-d", "mabp-route", "oracle-ttft")
DELAYS_S = (0.0, 0.05, 0.1, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--routers", nargs="+", default=list(ROUTERS), choices=sorted(ROUTERS_ALL), metavar="NAME"
    )
    parser.add_argument(
        "--spread-bursts", action="store_true", help="spread the trace's equal timestamps"
    )
    args = parser.parse_args()
    base = shipped_trace("conversation")
    if args.spread_bursts:
        base = base.spread_bursts()
    rows = []
    print(f"{'engine':<7} {'delay ms':>8} {'router':<15} {'goodput':>15} {'KV hit':>7}")
    for engine, load, runs in (("simple", 0.9, 5), ("step", 0.7, 3)):
        for delay in DELAYS_S:
            config = make_config(num_workers=4, kv_event_delay_s=delay, scrape_interval_s=delay)
            trace = scale_to_load(base, load, config)
            for name in args.routers:
                results = [
                    replay(trace, make_router(name), config, seed=s, engine=engine)
                    for s in range(runs)
                ]
                goodput = [r["slo_goodput"] for r in results]
                row = {
                    "engine": engine,
                    "load": load,
                    "delay_ms": round(delay * 1000),
                    "router": name,
                    "runs": runs,
                    "goodput": float(np.mean(goodput)),
                    "goodput_half_width": half_width(goodput),
                    "kv_hit_ratio": float(np.mean([r["kv_hit_ratio"] for r in results])),
                }
                rows.append(row)
                print(
                    f"{engine:<7} {row['delay_ms']:>8} {name:<15} "
                    f"{row['goodput']:>8.3f}±{row['goodput_half_width']:.3f} "
                    f"{row['kv_hit_ratio']:>7.3f}"
                )
    emit({"benchmark": "bench_staleness_fleet", "rows": rows}, args.json)


if __name__ == "__main__":
    main()
