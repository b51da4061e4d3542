"""The env's step at RL scale, this tree against a baseline: one env, and the batched env.

Cases, on ``mabp_gym/Mixed-v0`` at load 0.85 with random score actions drawn up front:

- ``single``: ``env.step`` of one env (``gym.make``, its wrappers included), microseconds
  a step;
- ``batched xN``: ``gym.make_vec(..., num_envs=N)`` (the batched env), microseconds a
  env-slot, for N = 16 and 256 (``--envs``), over the same ``--steps // 16`` rounds (slots
  of the episode) at every N;
- ``batched no-copy xN`` and ``kernel no-copy xN`` (``--no-copy``): the batched env
  returning its own buffers (``copy=False``: no copy of the observation), and its compiled
  call alone. Where ``copy=True`` the compiled call of a tree after 69d66d0 also writes the
  arrays it returns (the static columns included), which 69d66d0 copied in numpy outside
  its kernel; with ``copy=False`` both write the env's own buffers, the same work;
- ``kernel xN``: the same steps, counting only the CPU time inside the compiled call that
  steps every env (the vector env module's ``step_all``, ``_step_all`` in older trees;
  its entry point, :func:`mabp_gym.core.kernels.jit.entry_point`, where the env calls that),
  the dispatch and the unboxing of its arguments included.

Each measurement runs in a fresh process that imports one tree, after a warm-up (the
numba cache is filled by the warm-up of the first run), and reports the process's CPU
time, which another job on the machine disturbs less than the wall clock. The trees take
turns (which goes first alternates) and every ratio is taken within a repeat. Targets:
``single`` at most 0.6x the baseline's time, the batched env's env-slot at N = 16 at most
a third of it (``kernel x16``), and N = 256 no slower per env-slot than N = 16.

    python benchmarks/bench_step.py --baseline 69d66d0 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import emit
from _trees import trees


def measure(tree: Path, case: str, steps: int) -> float:
    """Microseconds of CPU a step (``single``) or an env-slot (``batched xN``)."""
    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(tree / "benchmarks"))
    from _trees import import_tree

    import_tree(tree)
    import gymnasium as gym
    import numpy as np

    import mabp_gym  # noqa: F401  (registers the ids)

    rng = np.random.default_rng(0)
    if case == "single":
        env = gym.make("mabp_gym/Mixed-v0", load=0.85)
        env.reset(seed=0)
        actions = rng.uniform(-1, 1, (steps, *env.action_space.shape)).astype(np.float32)
        for action in actions[: steps // 5]:  # warm-up
            if env.step(action)[3]:
                env.reset()
        started = time.process_time()
        for action in actions:
            if env.step(action)[3]:
                env.reset()
        return 1e6 * (time.process_time() - started) / steps
    num_envs = int(case.split("x")[1])
    inside = [0.0]
    if case.startswith("kernel"):
        from mabp_gym.core.kernels import jit
        from mabp_gym.envs import vector_env

        name = "step_all" if hasattr(vector_env, "step_all") else "_step_all"
        compiled = getattr(vector_env, name)

        def timed(kernel: Any) -> Any:
            def call(*args: object) -> object:
                started = time.process_time()
                try:
                    return kernel(*args)
                finally:
                    inside[0] += time.process_time() - started

            return call

        setattr(vector_env, name, timed(compiled))
        if hasattr(jit, "entry_point"):  # the env calls the kernel's entry point once typed
            resolve = jit.entry_point
            jit.entry_point = lambda _, args: timed(resolve(compiled, args))
    envs = gym.make_vec("mabp_gym/Mixed-v0", num_envs=num_envs, load=0.85)
    if "no-copy" in case:  # the env's own buffers returned (an attribute in every tree)
        envs.unwrapped.copy = False
    envs.reset(seed=0)
    # The same slots of the episode at every N (``steps // 16`` rounds after a fifth of
    # that): a slot late in an episode holds more units than an early one, so N envs
    # timed over ``steps // N`` rounds compared early slots at 256 envs with later ones
    # at 16.
    rounds = max(20, steps // 16)
    actions = rng.uniform(-1, 1, (rounds, *envs.action_space.shape)).astype(np.float32)
    for action in actions[: rounds // 5]:
        envs.step(action)
    started, inside[0] = time.process_time(), 0.0
    for action in actions:
        envs.step(action)
    spent = inside[0] if case.startswith("kernel") else time.process_time() - started
    return 1e6 * spent / (rounds * num_envs)


def _run(tree: Path, case: str, steps: int) -> float:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--serve", str(tree), case, str(steps)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000, help="steps (or env-slots) a run")
    parser.add_argument("--envs", type=int, nargs="*", default=[16, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", metavar="REF", help="git ref to compare against")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--no-copy", action="store_true", help="also the batched env and its kernel with copy=False"
    )
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        tree, case, steps = args.serve
        print(measure(Path(tree), case, int(steps)))
        return
    no_copy = ("batched no-copy", "kernel no-copy") if args.no_copy else ()
    kinds = ("batched", "kernel", *no_copy)
    cases = ["single", *(f"{kind} x{n}" for kind in kinds for n in args.envs)]
    runs: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as where, trees(args.baseline, Path(where)) as found:
        names = list(found)
        for name in names:  # fill each tree's numba cache before anything is timed
            _run(found[name], "batched x2", 200)
            _run(found[name], "single", 200)
        for repeat in range(args.repeats):
            for case in cases:
                for name in names if repeat % 2 == 0 else names[::-1]:
                    runs.setdefault((name, case), []).append(_run(found[name], case, args.steps))
    print(f"{'case':<22} " + " ".join(f"{name:>12}" for name in names) + "   ratio (range)")
    rows = []
    for case in cases:
        medians = {name: statistics.median(runs[(name, case)]) for name in names}
        line = f"{case:<22} " + " ".join(f"{medians[name]:>10.1f}us" for name in names)
        row = {"case": case, **{f"us_{name}": medians[name] for name in names}}
        if len(names) == 2:
            ratios = [
                a / b
                for a, b in zip(runs[("current", case)], runs[("baseline", case)], strict=True)
            ]
            row["ratio"] = statistics.median(ratios)
            line += f"   {row['ratio']:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        print(line)
        rows.append(row)
    emit(
        {
            "benchmark": "bench_step",
            "workload": "mixed",
            "load": 0.85,
            "steps": args.steps,
            "repeats": args.repeats,
            "baseline": args.baseline,
            "rows": rows,
            "runs": {f"{name} {case}": values for (name, case), values in runs.items()},
        },
        args.json,
    )


if __name__ == "__main__":
    main()
