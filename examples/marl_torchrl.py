"""TorchRL on the decentralized view: agents grouped by role, one shared network per role.

``PettingZooWrapper`` stacks the agents of a group into one tensordict, so a network
applied to a group shares its parameters across the group's nodes (both retrievers, both
generators, ...). This example builds an untrained scorer per role and collects a rollout,
the first step of any TorchRL multi-agent training loop (MAPPO / IPPO as in TorchRL's
multi-agent tutorials).

    python examples/marl_torchrl.py --steps 50 --staleness 1
"""

from __future__ import annotations

import argparse

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.envs.libs.pettingzoo import PettingZooWrapper

import mabp_gym

FIELDS = ("queues", "neighbour_queues", "service", "route")


class RoleScorer(nn.Module):
    """Scores one agent's candidates from its own queues, its neighbours' queues and its
    service and route telemetry; applied to every agent of a role (shared parameters).

    Shapes: input ``k`` is ``(..., *shapes[k])``; output ``(..., actions)`` in ``[-1, 1]``.
    """

    def __init__(self, shapes: list[tuple[int, ...]], actions: int, hidden: int = 64) -> None:
        super().__init__()
        width = sum(int(torch.tensor(shape).prod()) for shape in shapes)
        self.dims = [len(shape) for shape in shapes]
        self.net = nn.Sequential(
            nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, actions), nn.Tanh()
        )

    def forward(self, *fields: torch.Tensor) -> torch.Tensor:
        flat = torch.cat(
            [f.flatten(start_dim=-d) for f, d in zip(fields, self.dims, strict=True)], dim=-1
        )
        # Queues are counts in the tens to hundreds: a signed log keeps inputs small.
        return self.net(torch.sign(flat) * torch.log1p(flat.abs()))


def build(staleness: int, horizon: int, seed: int) -> tuple[PettingZooWrapper, nn.Module]:
    env = mabp_gym.parallel_env("mixed", staleness=staleness, horizon=horizon, load=0.5)
    groups: dict[str, list[str]] = {}
    for agent in env.possible_agents:
        role = env.workload.nodes[env.layout(agent).node].role
        groups.setdefault(role, []).append(agent)
    torchrl_env = PettingZooWrapper(env=env, group_map=groups, categorical_actions=False, seed=seed)
    space = env.observation_space(env.possible_agents[0])
    shapes = [space[f].shape for f in FIELDS]
    actions = env.action_space(env.possible_agents[0]).shape[0]
    modules = [
        TensorDictModule(
            RoleScorer(shapes, actions),
            in_keys=[(group, "observation", f) for f in FIELDS],
            out_keys=[(group, "action")],
        )
        for group in groups
    ]
    return torchrl_env, TensorDictSequential(*modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    env, policy = build(args.staleness, args.steps, args.seed)
    with torch.no_grad():
        rollout = env.rollout(args.steps, policy=policy)
    print(f"collected {rollout.batch_size[0]} steps; groups {list(env.group_map)}")
    for group, agents in env.group_map.items():
        reward = rollout["next", group, "reward"].sum(dim=0).flatten()
        print(
            f"  {group:<10} "
            + ", ".join(f"{a} {r:.2f}" for a, r in zip(agents, reward.tolist(), strict=True))
        )


if __name__ == "__main__":
    main()
