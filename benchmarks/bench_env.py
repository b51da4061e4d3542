"""``env.step`` per second on ``mixed`` (load 0.85) with observation encoding.

Single env and ``gymnasium.make_vec`` with 8 sync envs, random score actions drawn up
front (so the policy costs nothing) and a queue-length-like action. Prints a table and a
JSON line (``--json PATH`` also writes it). Target (issue 3): single env >= 2,000 steps/s.

    python benchmarks/bench_env.py --steps 3000
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
from _report import emit

import mabp_gym  # noqa: F401  (registers the ids)


def single(steps: int, seed: int) -> float:
    env = gym.make("mabp_gym/Mixed-v0", load=0.85)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps, env.action_space.shape[0])).astype(np.float32)
    started = time.perf_counter()
    for action in actions:
        _, _, _, truncated, _ = env.step(action)
        if truncated:
            env.reset()
    return steps / (time.perf_counter() - started)


def vector(steps: int, seed: int, num_envs: int = 8) -> float:
    envs = gym.make_vec(
        "mabp_gym/Mixed-v0", num_envs=num_envs, vectorization_mode="sync", load=0.85
    )
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    rounds = max(1, steps // num_envs)
    actions = [envs.action_space.sample() for _ in range(rounds)]
    started = time.perf_counter()
    for action in actions:
        envs.step(action)
    elapsed = time.perf_counter() - started
    envs.close()
    return rounds * num_envs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    rows = [
        {
            "case": "single env",
            "steps_per_s": statistics.median(
                single(args.steps, seed) for seed in range(args.repeats)
            ),
        },
        {
            "case": "make_vec sync x8 (env steps)",
            "steps_per_s": statistics.median(
                vector(args.steps, seed) for seed in range(args.repeats)
            ),
        },
    ]
    print(f"{'case':<30} {'steps/s':>9}")
    for row in rows:
        print(f"{row['case']:<30} {row['steps_per_s']:>9.0f}")
    result = {
        "benchmark": "bench_env",
        "workload": "mixed",
        "load": 0.85,
        "steps": args.steps,
        "repeats": args.repeats,
        "rows": rows,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
