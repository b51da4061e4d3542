"""TorchRL: ``GymEnv("mabp_gym/SFMSN-v0")`` builds from the registered id and rolls out.

TorchRL wraps the Gymnasium env as it is (the Dict observation becomes a nested
TensorDict, the action spec a bounded continuous spec of the ``D`` candidate scores);
``obs_mode="flat"`` gives one ``observation`` tensor for TorchRL's MLP modules instead.

    python examples/torchrl_gymenv.py --steps 100 --load 0.5
    python examples/torchrl_gymenv.py --flat
"""

from __future__ import annotations

import argparse

import torch
from torchrl.envs import GymEnv

import mabp_gym  # noqa: F401  (registers the env ids)


def build(
    workload: str = "mixed", load: float = 0.5, horizon: int = 600, flat: bool = False
) -> GymEnv:
    """The env as TorchRL sees it (extra keywords go to the env's constructor)."""
    kwargs = {"obs_mode": "flat"} if flat else {}
    return GymEnv(
        "mabp_gym/SFMSN-v0",
        workload=workload,
        load=load,
        horizon=horizon,
        max_episode_steps=horizon,
        **kwargs,
    )


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--horizon", type=int, default=600)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--flat", action="store_true", help="obs_mode='flat'")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    env = build(args.workload, args.load, args.horizon, args.flat)
    env.set_seed(args.seed)
    torch.manual_seed(args.seed)
    rollout = env.rollout(args.steps)  # random actions from the action spec
    reward = rollout["next", "reward"]
    flags = ("action", "next", "done", "terminated", "truncated")
    keys = sorted(k for k in rollout.keys() if k not in flags)  # noqa: SIM118 (a TensorDict iterates its batch)
    print(
        f"rolled out {rollout.batch_size[0]} steps; observation keys {keys}; "
        f"return {reward.sum().item():.2f}"
    )
    return rollout


if __name__ == "__main__":
    main()
