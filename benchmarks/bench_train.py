"""Training speed of the learned schedulers: PPO env steps/s, imitation steps/s, CPU and CUDA.

Two measurements:

- **PPO env steps/s** of the documented path: SB3 PPO with
  :class:`mabp_gym.envs.sb3.GraphActorCriticPolicy` at its defaults on ``--n-envs`` envs
  (8; ``mabp_gym/Mixed-v0`` at load 0.6) stepped by the batched env through
  :func:`mabp_gym.envs.sb3.make_sb3_vec_env` (``DummyVecEnv`` in a tree without it, or with
  ``--vec dummy``), ``n_steps=256``, ``batch_size=256``, one torch thread, and the epochs
  of each tree's documented recipe (``--n-epochs``, ``--baseline-n-epochs``: 4 in 69d66d0).
  After an untimed warm-up of one rollout and update (numba's compilation, the allocator),
  ``--ppo-steps`` env steps are timed: rollouts and updates together.
  With ``--baseline REF`` the same measurement runs on a ``git worktree`` of ``REF`` too,
  each measurement in a fresh process whose imports resolve to one tree, the trees taking
  turns (``--repeats`` each, order alternating), and the median ratio is printed: a
  speed-up stated against the previous code measured in the same run.
- **Imitation steps/s** of ``mabp-gym train gnn`` (batches of 64 graphs of MABP's scores).

Both run on the CPU and, where there is one, on CUDA, and the CUDA speed-up is printed.
This is the one prepared script to run on a GPU machine.

    python benchmarks/bench_train.py --baseline 70230ac --repeats 3 --json results/bench_train.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import emit
from _trees import import_tree, last_json, trees


def _documented_epochs() -> int:
    """PPO's epochs per update in the documented recipe: the default of
    ``examples/ppo_from_scratch.py`` in this tree, read from the script itself."""
    path = Path(__file__).resolve().parents[1] / "examples" / "ppo_from_scratch.py"
    spec = importlib.util.spec_from_file_location("ppo_from_scratch", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return int(module.Args().n_epochs)


DOCUMENTED_EPOCHS = _documented_epochs()


def ppo_steps_per_s(
    device: str,
    steps: int,
    n_envs: int,
    vec: str,
    update_threads: int = 0,
    n_epochs: int = DOCUMENTED_EPOCHS,
) -> tuple[float, str]:
    """The documented PPO path's env steps per second (rollouts and updates), and which
    vector env stepped it (and with how many threads its updates ran)."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    import mabp_gym  # noqa: F401  (registers the ids)
    from mabp_gym.envs.sb3 import GraphActorCriticPolicy

    torch.set_num_threads(1)
    try:
        from mabp_gym.envs.sb3 import make_sb3_vec_env
    except ImportError:  # a tree from before the adapter: its documented path
        make_sb3_vec_env = None
    if vec == "batched" and make_sb3_vec_env is not None:
        envs = make_sb3_vec_env("mabp_gym/Mixed-v0", n_envs, load=0.6)
    else:
        vec = "dummy"
        envs = DummyVecEnv([lambda: gym.make("mabp_gym/Mixed-v0", load=0.6) for _ in range(n_envs)])
    agent = PPO(
        GraphActorCriticPolicy,
        envs,
        n_steps=256,
        batch_size=256,
        n_epochs=n_epochs,
        device=device,
        seed=0,
        verbose=0,
    )
    try:
        from mabp_gym.envs.sb3 import UpdateThreads

        callback = UpdateThreads(update_threads) if update_threads else None
    except ImportError:  # a tree from before the callback: one thread throughout
        callback = None
    vec += f", {n_epochs} epochs, updates on {update_threads if callback else 1} thread(s)"
    agent.learn(256 * n_envs, callback=callback)  # untimed: compilation, caches
    before = agent.num_timesteps
    started = time.perf_counter()
    agent.learn(steps, reset_num_timesteps=False, callback=callback)
    return (agent.num_timesteps - before) / (time.perf_counter() - started), vec


def imitation_steps_per_s(device: str, steps: int) -> float:
    import numpy as np
    import torch

    from mabp_gym.agents import make_policy
    from mabp_gym.agents.gnn import GNNScheduler, observation_dims
    from mabp_gym.core.encoding import ObservationEncoder
    from mabp_gym.core.workloads import make_workload
    from mabp_gym.training.common import rollout
    from mabp_gym.training.gnn import imitation_loss, stack

    torch.set_num_threads(1)
    wl = make_workload("mixed", load=0.6)
    teacher = make_policy("mabp", wl)
    pairs = [(obs, target) for obs, target, _ in rollout(wl, teacher.scores, 0, 600)]
    data, targets = stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    model = GNNScheduler(observation_dims(ObservationEncoder(wl).layout)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    tensors = {k: torch.as_tensor(v, device=device) for k, v in data.items()}
    target = torch.as_tensor(targets, dtype=torch.float32, device=device)
    rng = np.random.default_rng(0)
    for step in range(steps + 3):
        if step == 3:  # warm-up steps excluded (CUDA context, allocator)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            started = time.perf_counter()
        index = torch.as_tensor(rng.integers(0, len(target), 64), device=device)
        loss = imitation_loss(model, {k: v[index] for k, v in tensors.items()}, target[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - started)


def _measure_in(
    tree: Path, device: str, steps: int, n_envs: int, vec: str, update_threads: int, n_epochs: int
) -> tuple[float, str]:
    """One PPO measurement in a fresh process whose imports resolve to ``tree``."""
    argv = [str(Path(__file__).resolve()), "--worker", device]
    argv += [str(steps), str(n_envs), vec, str(update_threads), str(n_epochs)]
    one = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = last_json(tree, argv, **one)
    return float(out["ppo_env_steps_per_s"]), str(out["vec"])


def _worker(
    device: str, steps: int, n_envs: int, vec: str, update_threads: int, n_epochs: int
) -> None:
    tree = Path(os.environ["PYTHONPATH"]).resolve()
    import_tree(tree)
    from mabp_gym.envs import sb3

    source = Path(sb3.__file__).resolve()
    if not source.is_relative_to(tree):
        raise SystemExit(f"mabp_gym.envs.sb3 came from {source}, not {tree}")
    rate, used = ppo_steps_per_s(device, steps, n_envs, vec, update_threads, n_epochs)
    print(json.dumps({"ppo_env_steps_per_s": rate, "vec": used}), flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imitation-steps", type=int, default=50)
    parser.add_argument("--ppo-steps", type=int, default=4096)
    parser.add_argument("--baseline", metavar="REF", help="git ref to compare PPO against")
    parser.add_argument("--repeats", type=int, default=1, help="PPO measurements per tree")
    parser.add_argument("--n-envs", type=int, default=8, help="PPO's vector envs")
    parser.add_argument(
        "--vec",
        choices=["batched", "dummy"],
        default="batched",
        help="the vector env: batched (make_sb3_vec_env, where the tree has it) or DummyVecEnv",
    )
    parser.add_argument(
        "--update-threads",
        type=int,
        default=0,
        metavar="K",
        help="torch threads during PPO's updates (the UpdateThreads callback; 0: one "
        "thread throughout, as the documented command)",
    )
    parser.add_argument(
        "--n-epochs",
        type=int,
        default=DOCUMENTED_EPOCHS,
        help=f"PPO's epochs per update in this tree (default {DOCUMENTED_EPOCHS}: the "
        "documented recipe's)",
    )
    parser.add_argument(
        "--baseline-n-epochs",
        type=int,
        default=4,
        help="PPO's epochs per update in the baseline tree (default 4: the recipe 69d66d0 "
        "documented)",
    )
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    if args.worker:
        device, steps, n_envs, vec, update_threads, n_epochs = args.worker
        _worker(device, int(steps), int(n_envs), vec, int(update_threads), int(n_epochs))
        return
    if args.n_envs < 1:
        parser.error(f"--n-envs must be at least 1, got {args.n_envs}")
    if args.update_threads < 0:
        parser.error(f"--update-threads must be 0 or more, got {args.update_threads}")
    for flag, value in (
        ("--n-epochs", args.n_epochs),
        ("--baseline-n-epochs", args.baseline_n_epochs),
    ):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    epochs = {"current": args.n_epochs, "baseline": args.baseline_n_epochs}
    import torch

    from mabp_gym.agents.gnn import resolve_device

    devices = ["cpu"] + (["cuda"] if resolve_device("auto") == "cuda" else [])
    with tempfile.TemporaryDirectory() as tmp, trees(args.baseline, Path(tmp)) as checkouts:
        ppo: dict[str, dict[str, list[float]]] = {d: {t: [] for t in checkouts} for d in devices}
        stepped: dict[str, str] = {}
        for device in devices:
            for repeat in range(args.repeats):
                order = list(checkouts) if repeat % 2 == 0 else list(reversed(checkouts))
                for name in order:
                    rate, stepped[name] = _measure_in(
                        checkouts[name],
                        device,
                        args.ppo_steps,
                        args.n_envs,
                        args.vec,
                        args.update_threads,
                        epochs[name],
                    )
                    ppo[device][name].append(rate)
                    print(
                        f"  {device} {name:<8} {rate:8.1f} PPO env steps/s ({stepped[name]})",
                        flush=True,
                    )
    rows = []
    for device in devices:
        row = {
            "device": device,
            "imitation_steps_per_s": imitation_steps_per_s(device, args.imitation_steps),
            "ppo_env_steps_per_s": statistics.median(ppo[device]["current"]),
        }
        if args.baseline:
            row["baseline_ppo_env_steps_per_s"] = statistics.median(ppo[device]["baseline"])
            row["ppo_speedup_vs_baseline"] = (
                row["ppo_env_steps_per_s"] / row["baseline_ppo_env_steps_per_s"]
            )
        rows.append(row)
    header = f"{'device':<6} {'imitation steps/s':>18} {'PPO env steps/s':>16}"
    if args.baseline:
        header += f" {'baseline':>9} {'speed-up':>9}"
    print(header)
    for row in rows:
        line = (
            f"{row['device']:<6} {row['imitation_steps_per_s']:>18.1f} "
            f"{row['ppo_env_steps_per_s']:>16.1f}"
        )
        if args.baseline:
            line += (
                f" {row['baseline_ppo_env_steps_per_s']:>9.1f}"
                f" {row['ppo_speedup_vs_baseline']:>8.2f}x"
            )
        print(line)
    result = {
        "benchmark": "bench_train",
        "n_envs": args.n_envs,
        "vec": stepped,
        "update_threads": args.update_threads,
        "n_epochs": epochs,
        "ppo_steps": args.ppo_steps,
        "repeats": args.repeats,
        "baseline": args.baseline,
        "rows": rows,
        "cuda": torch.cuda.is_available(),
        "torch": torch.__version__,
    }
    if len(rows) == 2:
        result["cuda_speedup_imitation"] = (
            rows[1]["imitation_steps_per_s"] / rows[0]["imitation_steps_per_s"]
        )
        result["cuda_speedup_ppo"] = rows[1]["ppo_env_steps_per_s"] / rows[0]["ppo_env_steps_per_s"]
        print(
            f"CUDA speed-up over the CPU: imitation {result['cuda_speedup_imitation']:.2f}x, "
            f"PPO {result['cuda_speedup_ppo']:.2f}x"
        )
    else:
        print("no CUDA device here: CPU figures only")
    emit(result, args.json)


if __name__ == "__main__":
    main()
