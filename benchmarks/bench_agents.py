"""Decision time per slot of every agent on ``mixed`` at load 0.85.

Each agent drives its own simulation for ``--slots`` slots; the time of ``scores(obs)``
(or ``control(...)`` for exact-control agents) is taken per slot, the observation
encoding and the transition excluded. Prints a table (mean and P95, microseconds) and a
JSON line. Targets: MABP P95 <= 500 us, Oracle-Sur P95 <= 20 ms,
memory-oblivious baselines <= 200 us.

    python benchmarks/bench_agents.py --slots 600
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _report import emit

from mabp_gym import Simulator, make_workload
from mabp_gym.agents import POLICIES, make_policy
from mabp_gym.core.encoding import ObservationEncoder


def decision_times(name: str, slots: int, seed: int) -> np.ndarray:
    wl = make_workload("mixed", load=0.85)
    sim = Simulator(wl)
    sim.reset(seed)
    encoder = ObservationEncoder(wl)
    policy = make_policy(name, wl)
    policy.reset(seed)
    exact = hasattr(policy, "control")
    times = np.empty(slots)
    for t in range(slots):
        obs = encoder.encode(sim.state)
        started = time.perf_counter()
        if exact:
            control = policy.control(sim.state, obs)
        else:
            scores = policy.scores(obs)
        times[t] = time.perf_counter() - started
        if exact:
            sim.step(control)
        else:
            sim.step_scores(scores)
    return times * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    rows = []
    torch.set_num_threads(1)  # one small graph per slot: one thread is fastest
    for name in POLICIES:
        us = decision_times(name, args.slots, args.seed)
        rows.append(
            {"policy": name, "mean_us": float(us.mean()), "p95_us": float(np.percentile(us, 95))}
        )
    print(f"{'policy':<20} {'mean us':>9} {'p95 us':>9}")
    for row in rows:
        print(f"{row['policy']:<20} {row['mean_us']:>9.0f} {row['p95_us']:>9.0f}")
    result = {
        "benchmark": "bench_agents",
        "workload": "mixed",
        "load": 0.85,
        "slots": args.slots,
        "rows": rows,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
