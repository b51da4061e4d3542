"""Simulated slots per second of the core: projection + feasibility check + transition.

Runs the fixed queue-length score rule (``mabp_gym.core.scores.queue_length_scores``) on a
workload in one process, ``--repeats`` times, and reports the median. Prints a table and a
JSON line (``--json PATH`` also writes it). Target: at least 3,000 slots/s on
``mixed`` at load 0.85 on a 2-core machine.

    python benchmarks/bench_sim.py                 # mixed at 0.85 and the small workloads
    python benchmarks/bench_sim.py --slots 5000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _report import emit

import mabp_gym
from mabp_gym import Simulator, make_workload
from mabp_gym.agents import make_policy
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.scores import queue_length_scores

MULTIHOP = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")
# (workload, load, score rule): "queue-length" runs the core alone; "bp" adds the
# observation encoding and the backpressure agent (the generated multihop network).
CASES = (
    ("mixed", 0.85, "queue-length"),
    ("mixed", 0.5, "queue-length"),
    ("rag", 0.85, "queue-length"),
    ("agentic", 0.85, "queue-length"),
    ("work_reuse", 0.9, "queue-length"),
    ("successor", 0.9, "queue-length"),
    ("boundary", 0.85, "queue-length"),
    (MULTIHOP, 0.7, "bp"),
)


def slots_per_second(
    name: str, load: float, rule: str, slots: int, check_invariants: bool, seed: int
) -> tuple[float, float]:
    wl = make_workload(name, load=load)
    sim = Simulator(wl, check_invariants=check_invariants)
    sim.reset(seed)
    if rule == "bp":
        encoder = ObservationEncoder(wl)
        agent = make_policy("bp", wl)

        def scores():
            return agent.scores(encoder.encode(sim.state))
    else:

        def scores():
            return queue_length_scores(wl, sim.state)

    started = time.perf_counter()
    for _ in range(slots):
        sim.step_scores(scores())
    elapsed = time.perf_counter() - started
    return slots / elapsed, float(sim.state.units)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    rows = []
    for name, load, rule in CASES:
        for check in (False, True):
            runs = [
                slots_per_second(name, load, rule, args.slots, check, seed)
                for seed in range(args.repeats)
            ]
            rows.append(
                {
                    "workload": Path(name).stem,
                    "load": load,
                    "rule": rule,
                    "invariants": check,
                    "slots_per_s": statistics.median(r[0] for r in runs),
                    "final_backlog": statistics.median(r[1] for r in runs),
                }
            )
    print(
        f"{'workload':<11} {'load':>5} {'rule':<12} {'invariants':>10} {'slots/s':>9} "
        f"{'backlog':>8}"
    )
    for row in rows:
        print(
            f"{row['workload']:<11} {row['load']:>5.2f} {row['rule']:<12} "
            f"{str(row['invariants']):>10} "
            f"{row['slots_per_s']:>9.0f} {row['final_backlog']:>8.0f}"
        )
    result = {"benchmark": "bench_sim", "slots": args.slots, "repeats": args.repeats, "rows": rows}
    emit(result, args.json)


if __name__ == "__main__":
    main()
