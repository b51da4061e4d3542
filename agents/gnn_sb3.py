"""stable-baselines3 adapter for the GNN scheduler (PPO's actor-critic policy).

The features extractor runs :class:`~agents.gnn.GNNScheduler` and returns
``[scores (D) | graph embedding]``; the policy's "MLP extractor" only splits that vector,
the action mean *is* the GNN's score vector (no extra linear layer, so a pretrained GNN
acts exactly as trained), and the value head reads the graph embedding.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from agents.gnn import GNNScheduler, observation_dims
from mabp_gym.pyg import to_pyg


class GNNExtractor(BaseFeaturesExtractor):
    """Shapes: Dict observation with batch ``B`` -> ``(B, D + 2 * hidden)``."""

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64,
                 layers: int = 3) -> None:
        dims = observation_dims(observation_space)
        super().__init__(observation_space, features_dim=dims["scores"] + 2 * hidden)
        self.gnn = GNNScheduler(dims, hidden=hidden, layers=layers)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        scores, pooled = self.gnn(to_pyg(observations))
        return torch.cat([scores, pooled], dim=-1)


class _Split(nn.Module):
    def __init__(self, actions: int, value: int) -> None:
        super().__init__()
        self.latent_dim_pi = actions
        self.latent_dim_vf = value

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return features[:, : self.latent_dim_pi]

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return features[:, self.latent_dim_pi:]


class GNNActorCriticPolicy(ActorCriticPolicy):
    """PPO policy whose Gaussian mean is the GNN's score vector."""

    def __init__(self, observation_space: spaces.Dict, action_space: spaces.Box,
                 lr_schedule: Any, hidden: int = 64, layers: int = 3, **kwargs: Any) -> None:
        kwargs.setdefault("ortho_init", False)  # keep pretrained weights as they are
        kwargs.setdefault("log_std_init", -1.5)
        super().__init__(observation_space, action_space, lr_schedule,
                         features_extractor_class=GNNExtractor,
                         features_extractor_kwargs={"hidden": hidden, "layers": layers},
                         share_features_extractor=True, **kwargs)

    def _build_mlp_extractor(self) -> None:
        actions = int(self.action_space.shape[0])
        self.mlp_extractor = _Split(actions, self.features_dim - actions)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1),
                                              **self.optimizer_kwargs)

    @property
    def gnn(self):
        return self.features_extractor.gnn
