"""MABP's decision per slot: the compiled kernel (``mabp_gym.agents.mabp_core``) against
the numpy path it replaces, in one process, the two taking turns.

Both policies score the same recorded observations of one MABP episode (``mixed`` at load
0.85 by default, and a generated multihop network of ``--nodes`` nodes), each round timing
every slot's ``scores(obs)``; the figure is the median over rounds of the mean time a slot.
The scores are checked equal to the bit on every slot. Target: the compiled decision at
least 3x faster on ``mixed``.

    python benchmarks/bench_mabp.py --slots 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
from _report import emit

import mabp_gym  # noqa: F401  (registers the ids)
from mabp_gym.agents.mabp import MABP


def _episode(env: gym.Env, slots: int) -> list[dict]:
    policy = MABP(env.unwrapped.workload)
    obs, _ = env.reset(seed=0)
    seen = []
    for _ in range(slots):
        seen.append(obs)
        obs, *_ = env.step(policy.scores(obs))
    return seen


def per_slot_us(env: gym.Env, slots: int, rounds: int) -> dict[str, float]:
    """Median (over rounds) mean decision time of the numpy and the compiled path."""
    MABP.compile_after = 0
    wl = env.unwrapped.workload
    seen = _episode(env, slots)
    compiled, numpy_path = MABP(wl), MABP(wl)
    numpy_path._statics = None
    assert compiled._compiled_statics() is not None, "the kernels are not compiled here"
    for policy in (compiled, numpy_path):  # warm: compilation, caches
        policy.scores(seen[0])
    times: dict[str, list[float]] = {"numpy": [], "compiled": []}
    for r in range(rounds):
        order = [("compiled", compiled), ("numpy", numpy_path)]
        for name, policy in order if r % 2 == 0 else order[::-1]:
            policy.reset(0)
            started = time.perf_counter()
            for obs in seen:
                policy.scores(obs)
            times[name].append((time.perf_counter() - started) / len(seen) * 1e6)
    compiled.reset(0)
    numpy_path.reset(0)
    for obs in seen:
        assert compiled.scores(obs).tobytes() == numpy_path.scores(obs).tobytes()
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, nargs="*", default=[1000, 5000])
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    cases = [("mixed", gym.make("mabp_gym/SFMSN-v0", workload="mixed", load=0.85))]
    for nodes in args.nodes:
        env = gym.make("mabp_gym/SFMSN-v0", workload="multihop", nodes=nodes, load=0.85)
        cases.append((f"multihop {nodes}", env))
    rows = []
    print(f"{'workload':<16} {'numpy us':>9} {'compiled us':>12} {'speed-up':>9}")
    for name, env in cases:
        slots = args.slots if name == "mixed" else max(50, args.slots // 10)
        got = per_slot_us(env, slots, args.rounds)
        row = {"workload": name, **got, "speedup": got["numpy"] / got["compiled"]}
        rows.append(row)
        print(f"{name:<16} {got['numpy']:>9.1f} {got['compiled']:>12.1f} {row['speedup']:>8.2f}x")
    emit({"benchmark": "bench_mabp", "slots": args.slots, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
