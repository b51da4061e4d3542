"""A fleet replay's CPU time, this tree against a baseline commit, taking turns.

Each repeat replays the whole 12,031-request conversation trace (its own timestamps) over
``--workers`` workers once per router in each tree, one fresh process a replay, the trees
in alternating order (baseline first in odd repeats), so that the machine's drift hits
both. The figure is the CPU time (``time.process_time``) of the replay alone (simulator
built, every request routed, metrics); each replay also prints a digest of its records
(every request's TTFT, E2E and TPOT, by request id), which must be the same in both trees.

    python benchmarks/bench_fleet_ab.py --baseline fa4df9a --engine step --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _report import emit
from _trees import trees

PROBE = r"""
import hashlib, json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from _trees import import_tree
import_tree(Path(sys.argv[4]))
import numpy as np
from mabp_gym.fleet import FleetConfig, FleetSimulator, make_router, shipped_trace
router, workers, engine = sys.argv[1], int(sys.argv[2]), sys.argv[3]
trace = shipped_trace("conversation")
started, began = time.process_time(), time.perf_counter()
sim = FleetSimulator(trace, FleetConfig(num_workers=workers), 0, engine=engine)
chooser = make_router(router)
chooser.reset(workers, np.random.default_rng([0, 1]))
while (request := sim.next_request()) is not None:
    sim.dispatch(chooser.choose(request, sim.telemetry))
sim.metrics()
cpu, wall = time.process_time() - started, time.perf_counter() - began
records = repr(sorted(sim.records, key=lambda r: r[4])).encode()
print(json.dumps({"cpu": cpu, "wall": wall, "digest": hashlib.sha256(records).hexdigest()}))
"""


def probe(tree: Path, router: str, workers: int, engine: str) -> dict[str, float | str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    here = str(Path(__file__).parent)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, router, str(workers), engine, str(tree), here],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="fa4df9a", help="commit to compare with")
    parser.add_argument("--engine", choices=("simple", "step"), default="step")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--routers", nargs="+", default=["jsq", "mabp-route", "llm-d"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    runs: dict[str, dict[str, list[dict[str, float | str]]]] = {}
    with tempfile.TemporaryDirectory() as where, trees(args.baseline, Path(where)) as found:
        for repeat in range(args.repeats):
            order = ["baseline", "current"] if repeat % 2 == 0 else ["current", "baseline"]
            for router in args.routers:
                for name in order:
                    run = probe(found[name], router, args.workers, args.engine)
                    runs.setdefault(router, {}).setdefault(name, []).append(run)
    print(f"{'router':<14} {'baseline CPU s':>15} {'current CPU s':>14} {'ratio':>7}  records")
    ratios = {}
    for router, trees_runs in runs.items():
        base, current = (
            statistics.median(float(r["cpu"]) for r in trees_runs[n])
            for n in ("baseline", "current")
        )
        ratios[router] = current / base
        same = len({r["digest"] for rows in trees_runs.values() for r in rows}) == 1
        print(
            f"{router:<14} {base:>15.2f} {current:>14.2f} {current / base:>6.2f}x  "
            f"{'identical' if same else 'DIFFER'}"
        )
    emit(
        {
            "benchmark": "bench_fleet_ab",
            "baseline": args.baseline,
            "engine": args.engine,
            "workers": args.workers,
            "repeats": args.repeats,
            "runs": runs,
            "ratios": ratios,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
