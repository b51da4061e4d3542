"""Cold start and the MABP step, this tree against a baseline commit, taking turns.

Cold start: a fresh interpreter with an empty numba cache (``NUMBA_CACHE_DIR`` a new
directory) imports ``mabp_gym``, makes ``mabp_gym/Mixed-v0`` at load 0.85 and MABP, and
steps to the fifth slot; the figure is the process's CPU seconds and wall seconds to that
point. Warm step: the same with the cache filled, then 2,000 MABP slots timed (policy and
``env.step``). Each repeat runs the trees one after the other, so that the machine's drift
hits both; ratios are taken within a repeat. Targets: cold start at most half of
70230ac's, the warm step no slower.

    python benchmarks/bench_cold.py --baseline 70230ac --repeats 3
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
import json, resource, sys, time
from pathlib import Path
started = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from _trees import import_tree
import_tree(Path(sys.argv[2]))  # mabp_gym and its agents from this tree alone
import gymnasium as gym
import mabp_gym
from mabp_gym.agents import make_policy
env = gym.make("mabp_gym/Mixed-v0", load=0.85)
policy = make_policy("mabp", env)
obs, _ = env.reset(seed=0)
for _ in range(5):
    obs, *_ = env.step(policy.scores(obs))
cold_wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
cold_cpu = usage.ru_utime + usage.ru_stime
steps = int(sys.argv[1])
began = time.perf_counter()
for _ in range(steps):
    obs, _, _, truncated, _ = env.step(policy.scores(obs))
    if truncated:
        obs, _ = env.reset()
step_us = (time.perf_counter() - began) / max(steps, 1) * 1e6
print(json.dumps({"cold_wall": cold_wall, "cold_cpu": cold_cpu, "step_us": step_us}))
"""


def probe(tree: Path, cache: Path, steps: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(cache)}
    env.pop("MABP_GYM_PURE", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(steps), str(tree), str(Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="70230ac", help="commit to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000, help="warm MABP slots timed")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"current": [], "baseline": []}
    with tempfile.TemporaryDirectory() as where, trees(args.baseline, Path(where)) as found:
        for repeat in range(args.repeats):
            for name, tree in found.items():
                cache = Path(where) / f"cache-{name}-{repeat}"
                cold = probe(tree, cache, 0)  # an empty cache: compiles everything
                warm = probe(tree, cache, args.steps)  # the cache it filled
                runs[name].append({**cold, "step_us": warm["step_us"]})
    ratios = {
        key: [c[key] / b[key] for c, b in zip(runs["current"], runs["baseline"], strict=True)]
        for key in ("cold_cpu", "cold_wall", "step_us")
    }
    print(f"{'tree':<12} {'cold CPU s':>11} {'cold wall s':>12} {'MABP step us':>13}")
    for name, values in runs.items():
        row = [statistics.median(v[k] for v in values) for k in ("cold_cpu", "cold_wall")]
        step = statistics.median(v["step_us"] for v in values)
        label = name if name == "current" else args.baseline
        print(f"{label:<12} {row[0]:>11.2f} {row[1]:>12.2f} {step:>13.1f}")
    for key, values in ratios.items():
        middle, low, high = statistics.median(values), min(values), max(values)
        print(f"ratio {key:<10} {middle:.2f}x ({low:.2f}-{high:.2f})")
    emit(
        {
            "benchmark": "bench_cold",
            "baseline": args.baseline,
            "repeats": args.repeats,
            "runs": runs,
            "ratios": {key: statistics.median(v) for key, v in ratios.items()},
        },
        args.json,
    )


if __name__ == "__main__":
    main()
