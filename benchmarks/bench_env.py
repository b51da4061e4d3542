"""``env.step`` per second on ``mixed`` (load 0.85) with observation encoding.

One env, Gymnasium's sync vector env (``vectorization_mode="sync"``) and the batched
vector env that ``gymnasium.make_vec`` builds by default (``mabp_gym.envs.vector_env``), at 8
and 16 envs, random score actions drawn up front (so the policy costs nothing). The cases
take turns within each repeat, so that the machine's drift hits them alike; the table
gives the median over repeats and the ratios within each repeat. Prints a table and a
JSON line (``--json PATH`` also writes it). Targets: single env >= 2,000 steps/s;
default ``make_vec`` x8 at least 0.9x one env; batched x16 at least 3x sync x16; the
batched env over 2 processes (``make_vec(..., workers=2)``) at least 1.6x one process's
env steps/s on a 2-core machine (16, 64, 256 and 1,024 envs, 4x the steps of the other cases,
at least 40 steps of the vector env after 40 untimed ones).

    python benchmarks/bench_env.py --steps 4800 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
from _report import emit

import mabp_gym  # noqa: F401  (registers the ids)

ENV_ID = "mabp_gym/Mixed-v0"


def single(steps: int, seed: int) -> float:
    env = gym.make(ENV_ID, load=0.85)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps, env.action_space.shape[0])).astype(np.float32)
    started = time.perf_counter()
    for action in actions:
        _, _, _, truncated, _ = env.step(action)
        if truncated:
            env.reset()
    return steps / (time.perf_counter() - started)


WARM_ROUNDS = 40
"""Untimed steps before the process cases' timed ones, and the fewest timed ones: past the
first steps after a reset (new memory touched, workers' pages copied after the fork) and
the FIFO pool's first growth (about step 28 here), which one-step warm-ups timed at 1,024
envs (18 steps)."""


def vector(
    steps: int, seed: int, num_envs: int, mode: str, workers: int = 1, warm: int = 1
) -> float:
    extra = {"workers": workers} if workers > 1 else {}
    envs = gym.make_vec(ENV_ID, num_envs=num_envs, vectorization_mode=mode, load=0.85, **extra)
    envs.reset(seed=seed)
    rounds = max(1 if warm == 1 else warm, steps // num_envs)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (warm + rounds, *envs.action_space.shape)).astype(np.float32)
    for action in actions[:warm]:  # the first compiles the batched kernel on a cold cache
        envs.step(action)
    started = time.perf_counter()
    for action in actions[warm:]:
        envs.step(action)
    elapsed = time.perf_counter() - started
    envs.close()
    return rounds * num_envs / elapsed


CASES = {
    "single env": lambda steps, seed: single(steps, seed),
    "sync x8": lambda steps, seed: vector(steps, seed, 8, "sync"),
    "make_vec x8 (batched)": lambda steps, seed: vector(steps, seed, 8, "vector_entry_point"),
    "sync x16": lambda steps, seed: vector(steps, seed, 16, "sync"),
    "make_vec x16 (batched)": lambda steps, seed: vector(steps, seed, 16, "vector_entry_point"),
    **{
        f"make_vec x{n}, {p} process{'es' if p > 1 else ''}": (
            lambda steps, seed, n=n, p=p: vector(
                4 * steps, seed, n, "vector_entry_point", p, WARM_ROUNDS
            )
        )
        for n in (16, 64, 256, 1024)
        for p in (1, 2)
    },
}
RATIOS = {
    "sync x8 / single": ("sync x8", "single env"),
    "batched x8 / single": ("make_vec x8 (batched)", "single env"),
    "batched x16 / sync x16": ("make_vec x16 (batched)", "sync x16"),
    **{
        f"x{n}: 2 processes / 1": (f"make_vec x{n}, 2 processes", f"make_vec x{n}, 1 process")
        for n in (16, 64, 256, 1024)
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4800, help="env steps per case and repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--only", metavar="TEXT", help="run only the cases whose name contains TEXT"
    )
    args = parser.parse_args()
    cases = {case: run for case, run in CASES.items() if not args.only or args.only in case}
    if not cases:
        parser.error(f"--only {args.only!r} matches no case; the cases: {list(CASES)}")
    runs: dict[str, list[float]] = {case: [] for case in cases}
    for seed in range(args.repeats):
        for case, run in cases.items():
            runs[case].append(run(args.steps, seed))
    rows = [{"case": case, "steps_per_s": statistics.median(v)} for case, v in runs.items()]
    ratios = {
        name: [a / b for a, b in zip(runs[top], runs[bottom], strict=True)]
        for name, (top, bottom) in RATIOS.items()
        if top in runs and bottom in runs
    }
    print(f"{'case':<32} {'env steps/s':>12}")
    for row in rows:
        print(f"{row['case']:<32} {row['steps_per_s']:>12.0f}")
    for name, values in ratios.items():
        low, high = min(values), max(values)
        print(f"{name:<32} {statistics.median(values):>11.2f}x  ({low:.2f}-{high:.2f})")
    result = {
        "benchmark": "bench_env",
        "workload": "mixed",
        "load": 0.85,
        "steps": args.steps,
        "repeats": args.repeats,
        "rows": rows,
        "ratios": {name: statistics.median(values) for name, values in ratios.items()},
        "ratio_runs": ratios,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
