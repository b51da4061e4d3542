"""RLlib (new API stack) PPO on the flat observation, the env made from its id.

The env id is given as ``"mabp_gym:mabp_gym/SFMSN-v0"``: Gymnasium imports the module
before the ``:`` (which registers the ids) in whichever process makes the env, so RLlib's
remote env runners need no ``import mabp_gym`` and no ``register_env``. Gymnasium 1.x
has no plugin entry points, so this is the way. ``obs_mode="flat"`` gives one Box vector,
which RLlib's default encoders take (they have none for the Dict of graph arrays).

The ``rllib`` extra installs RLlib; ``ray[rllib]`` pins gymnasium 1.2.2 (the package keeps
working on it; CI checks), so install it in an environment of its own:

    pip install -e ".[rllib]"
    python examples/rllib_ppo.py --iterations 1 --horizon 50
"""

from __future__ import annotations

import argparse
from typing import Any

from mabp_gym.extras import exit_without

try:
    from ray.rllib.algorithms.ppo import PPOConfig
except ImportError as error:  # no ray, or ray without RLlib's own dependencies
    exit_without("rllib", error, "pip install -e '.[rllib]'")

ENV = "mabp_gym:mabp_gym/SFMSN-v0"


def build_config(
    horizon: int = 600, load: Any = 0.3, workload: str = "mixed", env_runners: int = 0
) -> PPOConfig:
    """PPO on the flat observation; ``load`` may be an interval ``(low, high)``."""
    return (
        PPOConfig()
        .environment(
            ENV,
            env_config={
                "workload": workload,
                "load": load,
                "horizon": horizon,
                "max_episode_steps": horizon,
                "obs_mode": "flat",
            },
        )
        .env_runners(num_env_runners=env_runners, num_envs_per_env_runner=1)
        .training(
            train_batch_size_per_learner=2 * horizon, minibatch_size=horizon, num_epochs=1, lr=1e-4
        )
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--horizon", type=int, default=600)
    parser.add_argument("--load", type=float, nargs="+", default=[0.3])
    parser.add_argument(
        "--env-runners", type=int, default=0, help="remote env runners (0: sample in the driver)"
    )
    args = parser.parse_args(argv)
    load = args.load[0] if len(args.load) == 1 else tuple(args.load)
    algo = build_config(args.horizon, load, env_runners=args.env_runners).build_algo()
    try:
        for iteration in range(args.iterations):
            result = algo.train()
            runners = result.get("env_runners", {})
            print(
                f"iteration {iteration}: env steps "
                f"{runners.get('num_env_steps_sampled_lifetime')}, episode return mean "
                f"{runners.get('episode_return_mean')}",
                flush=True,
            )
    finally:
        algo.stop()
    return result


if __name__ == "__main__":
    main()
