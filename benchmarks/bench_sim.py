"""Simulated slots per second of the core: projection + feasibility check + transition.

Runs the fixed queue-length score rule (``mabp_gym.scores.queue_length_scores``) on a
workload in one process, ``--repeats`` times, and reports the median. Prints a table and a
JSON line (``--json PATH`` also writes it). Target (issue 2): at least 3,000 slots/s on
``mixed`` at load 0.85 on a 2-core machine.

    python benchmarks/bench_sim.py                 # mixed at 0.85 and the small workloads
    python benchmarks/bench_sim.py --slots 5000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from _report import emit

from mabp_gym import Simulator, make_workload
from mabp_gym.scores import queue_length_scores

CASES = (("mixed", 0.85), ("mixed", 0.5), ("rag", 0.85), ("agentic", 0.85),
         ("work_reuse", 0.9), ("successor", 0.9), ("boundary", 0.85))


def slots_per_second(name: str, load: float, slots: int, check_invariants: bool,
                     seed: int) -> tuple[float, float]:
    wl = make_workload(name, load=load)
    sim = Simulator(wl, check_invariants=check_invariants)
    sim.reset(seed)
    started = time.perf_counter()
    for _ in range(slots):
        sim.step_scores(queue_length_scores(wl, sim.state))
    elapsed = time.perf_counter() - started
    return slots / elapsed, float(sim.state.units)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    rows = []
    for name, load in CASES:
        for check in (False, True):
            runs = [slots_per_second(name, load, args.slots, check, seed)
                    for seed in range(args.repeats)]
            rows.append({"workload": name, "load": load, "invariants": check,
                         "slots_per_s": statistics.median(r[0] for r in runs),
                         "final_backlog": statistics.median(r[1] for r in runs)})
    print(f"{'workload':<11} {'load':>5} {'invariants':>10} {'slots/s':>9} {'backlog':>8}")
    for row in rows:
        print(f"{row['workload']:<11} {row['load']:>5.2f} {str(row['invariants']):>10} "
              f"{row['slots_per_s']:>9.0f} {row['final_backlog']:>8.0f}")
    result = {"benchmark": "bench_sim", "slots": args.slots, "repeats": args.repeats,
              "rows": rows}
    emit(result, args.json)


if __name__ == "__main__":
    main()
