"""Wall time of the full scripted Table I on this machine.

7 policies + 3 ablations, loads 0.1-1.0 plus the fixed load 0.85, 5 seeds, 600 slots, all
cores (process pool), through the same ``evaluate`` as ``mabp-gym table``. Prints the
table, the wall time and a JSON line. Target: at most 10 minutes on 2 cores.

    python benchmarks/bench_table.py --out results/table1.jsonl
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _report import emit

from mabp_gym.cli.common import DEFAULT_GRID, TABLE_POLICIES
from mabp_gym.cli.evaluate import TABLE_COLUMNS, table_rows
from mabp_gym.harness.evaluation import execute
from mabp_gym.harness.runs import plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default="results/table1.jsonl",
        help="JSON-lines file (must not exist, so that every run is timed)",
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--horizon", type=int, default=600)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"{out} exists: remove it so that every run is timed")
    out.parent.mkdir(parents=True, exist_ok=True)
    loads = list(DEFAULT_GRID)
    specs = plan(
        list(TABLE_POLICIES),
        "mixed",
        sorted(set(loads) | {0.85}),
        range(args.seeds),
        horizon=args.horizon,
    )
    started = time.perf_counter()
    records = execute(specs, output=out, progress=True)
    wall = time.perf_counter() - started
    rows = table_rows(records, list(TABLE_POLICIES), loads, 0.85)
    print("| " + " | ".join(TABLE_COLUMNS) + " |")
    print("| " + " | ".join("---" for _ in TABLE_COLUMNS) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"{len(specs)} runs in {wall:.0f} s on {os.cpu_count()} cores")
    result = {
        "benchmark": "bench_table",
        "runs": len(specs),
        "wall_s": wall,
        "cores": os.cpu_count(),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
