"""Training speed of the GNN scheduler on the CPU and, when there is one, on CUDA.

Times the two phases of ``mabp-gym train gnn`` on the same data: imitation gradient steps
(batch of 64 graphs) and PPO environment steps (4 vector envs, rollout 256), on every
device available, and reports the CUDA speed-up over the CPU. This is the one prepared
script to run on a GPU machine; on a CPU-only machine it reports the CPU figures only.

    python benchmarks/bench_train.py --json results/bench_train.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _report import emit

from mabp_gym.agents import make_policy
from mabp_gym.agents.gnn import GNNScheduler, observation_dims, resolve_device
from mabp_gym.encoding import ObservationEncoder
from mabp_gym.training.common import rollout
from mabp_gym.training.gnn import imitation_loss, stack
from mabp_gym.workloads import make_workload


def imitation_steps_per_s(device: str, data, targets, steps: int) -> float:
    wl = make_workload("mixed")
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


def ppo_steps_per_s(device: str, steps: int) -> float:
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    import mabp_gym  # noqa: F401
    from mabp_gym.sb3 import GraphActorCriticPolicy

    # The documented per-candidate policy; its rollout scores the 4 envs in one batched
    # graph forward, on ``device``.
    envs = DummyVecEnv([lambda: gym.make("mabp_gym/Mixed-v0", load=0.6) for _ in range(4)])
    agent = PPO(
        GraphActorCriticPolicy,
        envs,
        n_steps=256,
        batch_size=256,
        n_epochs=4,
        device=device,
        seed=0,
        verbose=0,
    )
    started = time.perf_counter()
    agent.learn(steps)
    return agent.num_timesteps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imitation-steps", type=int, default=50)
    parser.add_argument("--ppo-steps", type=int, default=2048)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    torch.set_num_threads(1)
    wl = make_workload("mixed", load=0.6)
    teacher = make_policy("mabp", wl)
    pairs = [(obs, target) for obs, target, _ in rollout(wl, teacher.scores, 0, 600)]
    data, targets = stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])
    # device="auto" everywhere else (training, GNNPolicy inference) resolves to cuda when
    # there is one; here both devices are timed in the same run for the speed-up.
    devices = ["cpu"] + (["cuda"] if resolve_device("auto") == "cuda" else [])
    rows = []
    for device in devices:
        rows.append(
            {
                "device": device,
                "imitation_steps_per_s": imitation_steps_per_s(
                    device, data, targets, args.imitation_steps
                ),
                "ppo_env_steps_per_s": ppo_steps_per_s(device, args.ppo_steps),
            }
        )
    print(f"{'device':<6} {'imitation steps/s':>18} {'PPO env steps/s':>16}")
    for row in rows:
        print(
            f"{row['device']:<6} {row['imitation_steps_per_s']:>18.1f} "
            f"{row['ppo_env_steps_per_s']:>16.1f}"
        )
    result = {
        "benchmark": "bench_train",
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
