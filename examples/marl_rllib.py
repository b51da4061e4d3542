"""RLlib (new API stack) on the decentralized view: PPO with one shared module per role.

Every node is an agent; the policy mapping sends all nodes of one role (both retrievers,
both generators, ...) to one RLModule, so parameters are shared across the nodes of a
role. ``FlattenObservations`` turns each agent's Dict observation into one vector.

The ``rllib`` extra installs RLlib; ``ray[rllib]`` pins gymnasium 1.2.2 (the package keeps
working on it; CI checks), so install it in an environment of its own:

    pip install -e ".[rllib,marl]"
    python examples/marl_rllib.py --iterations 1 --horizon 50
"""

from __future__ import annotations

import argparse
from typing import Any

from mabp_gym.extras import exit_without

try:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env
except ImportError as error:  # no ray, or ray without RLlib's own dependencies
    exit_without("rllib", error, "pip install -e '.[rllib,marl]'")

import mabp_gym


def make_env(config: dict[str, Any]) -> ParallelPettingZooEnv:
    return ParallelPettingZooEnv(
        mabp_gym.parallel_env(
            "mixed",
            staleness=config.get("staleness", 0),
            horizon=config.get("horizon", 100),
            load=config.get("load", 0.5),
        )
    )


def roles() -> dict[str, str]:
    """Agent name -> role of its node (the parameter-sharing groups)."""
    env = mabp_gym.parallel_env("mixed")
    return {agent: env.workload.nodes[env.layout(agent).node].role for agent in env.possible_agents}


def build_config(horizon: int, staleness: int) -> PPOConfig:
    role_of = roles()
    modules = sorted(set(role_of.values()))
    register_env("mabp_parallel", make_env)
    return (
        PPOConfig()
        .environment("mabp_parallel", env_config={"horizon": horizon, "staleness": staleness})
        .env_runners(
            num_env_runners=0,
            env_to_module_connector=lambda *args, **kw: FlattenObservations(multi_agent=True),
        )
        .multi_agent(
            policies=set(modules),
            policy_mapping_fn=lambda agent_id, episode, **kw: role_of[agent_id],
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={role: RLModuleSpec() for role in modules}
            )
        )
        .training(
            train_batch_size_per_learner=2 * horizon, minibatch_size=horizon, num_epochs=1, lr=1e-4
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--staleness", type=int, default=0)
    args = parser.parse_args()
    algo = build_config(args.horizon, args.staleness).build_algo()
    try:
        for iteration in range(args.iterations):
            result = algo.train()
            runners = result.get("env_runners", {})
            print(
                f"iteration {iteration}: episode return mean "
                f"{runners.get('episode_return_mean')}, modules "
                f"{sorted(result.get('learners', {}))}"
            )
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
