"""stable-baselines3 adapter for the GNN scheduler (PPO's actor-critic policy).

The features extractor runs :class:`~mabp_gym.agents.gnn.GNNScheduler` and returns
``[scores (D) | graph embedding]``; the policy's "MLP extractor" only splits that vector,
the action mean *is* the GNN's score vector (one read-out per candidate, no extra linear
layer, so a pretrained GNN acts exactly as trained), and the value head reads the graph
embedding.

Two configurations:

- :class:`GNNActorCriticPolicy` (``shape_free=False``): the node input holds the node's
  per-commodity queues and per-signature memory, as the imitation checkpoints of
  ``mabp-gym train gnn`` do; its weights fit one workload shape.
- :class:`GraphActorCriticPolicy` (``shape_free=True``, the documented path, exported by
  :mod:`mabp_gym.sb3`): the node input is the fixed-width node table only (the per-
  commodity queues reach the model through the candidates' own features: input queue,
  route differential, successor pressure, retained demand) and the Gaussian has one
  shared log-std, so *every* parameter has a shape independent of the workload: one
  ``state_dict`` runs on ``mixed``, ``rag``, ``agentic`` and file workloads alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.utils import obs_as_tensor
from torch import nn

from mabp_gym.agents.gnn import GNNScheduler, observation_dims
from mabp_gym.pyg import to_pyg


def _check_dict_space(observation_space: Any) -> None:
    if (
        not isinstance(observation_space, spaces.Dict)
        or "node_features" not in observation_space.spaces
    ):
        raise TypeError(
            "the graph policy needs the env's Dict observation (obs_mode='dict', "
            f"the default), got observation space {observation_space}"
        )


class GNNExtractor(BaseFeaturesExtractor):
    """Shapes: Dict observation with batch ``B`` -> ``(B, D + 2 * hidden)``.

    Args:
        observation_space: the env's Dict observation space.
        hidden: embedding width. layers: message-passing rounds.
        shape_free: feed the node table only (``node_features``), not the node's
            ``queues`` and ``memory`` rows, whose widths depend on the workload.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        hidden: int = 64,
        layers: int = 3,
        shape_free: bool = False,
    ) -> None:
        _check_dict_space(observation_space)
        dims = observation_dims(observation_space)
        super().__init__(observation_space, features_dim=dims["scores"] + 2 * hidden)
        node_shape = observation_space["node_features"].shape
        self.node_width = int(node_shape[-1]) if shape_free and node_shape else None
        if shape_free:
            dims["node"] = self.node_width
        self.gnn = GNNScheduler(dims, hidden=hidden, layers=layers)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        # One batched graph for the whole batch (vector envs, minibatches): one forward.
        graph = to_pyg(observations)
        if self.node_width is not None:
            graph.x = graph.x[:, : self.node_width]
        scores, pooled = self.gnn(graph)
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
        return features[:, self.latent_dim_pi :]


class GNNActorCriticPolicy(ActorCriticPolicy):
    """PPO policy whose Gaussian mean is the GNN's score vector.

    Args:
        observation_space, action_space, lr_schedule: as for SB3's ``ActorCriticPolicy``.
        hidden: embedding width. layers: message-passing rounds.
        shape_free: see :class:`GNNExtractor`; also makes the log-std one shared scalar.
        score_bias: with ``shape_free``, the initial mean of every candidate's score before
            the softsign (default 0.5, so a fresh policy serves, routes and retains: the
            projection acts only on scores > 0). A mean of 0 switches each candidate off
            half the time when sampled and idles when deterministic, and PPO then rarely
            moves the means across 0 (measured in ``docs/learning.md``).
        **kwargs: passed to ``ActorCriticPolicy`` (``log_std_init`` defaults to -1.5 and
            ``ortho_init`` to False, so that pretrained weights stay as they are).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        lr_schedule: Any,
        hidden: int = 64,
        layers: int = 3,
        shape_free: bool = False,
        score_bias: float = 0.5,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("ortho_init", False)  # keep pretrained weights as they are
        kwargs.setdefault("log_std_init", -1.5)
        if not np.isfinite(score_bias):
            raise ValueError(f"score_bias must be a finite number, got {score_bias!r}")
        self.shape_free = bool(shape_free)
        self.score_bias = float(score_bias)
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            features_extractor_class=GNNExtractor,
            features_extractor_kwargs={
                "hidden": hidden,
                "layers": layers,
                "shape_free": self.shape_free,
            },
            share_features_extractor=True,
            **kwargs,
        )

    def _build_mlp_extractor(self) -> None:
        actions = int(self.action_space.shape[0])  # type: ignore[index]
        self.mlp_extractor = _Split(
            actions,  # type: ignore[assignment]
            self.features_dim - actions,
        )

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        if self.shape_free:
            # One log-std shared by all candidates (broadcast by SB3's Gaussian), so that
            # no parameter has the workload's candidate count as its shape.
            self.log_std = nn.Parameter(torch.full((1,), float(self.log_std_init)))
            # A fresh policy starts with every mean at score_bias and small weights (SB3's
            # gain 0.01 for action nets): it acts on every candidate in a nearly random
            # order, which beats random scores by far (-97 against -591 at load 0.3), and
            # learns the order from there; means at 0 would idle (docs/learning.md).
            with torch.no_grad():
                for head in (
                    self.gnn.service_head,
                    self.gnn.route_head,
                    self.gnn.transfer_head,
                    self.gnn.retain_head,
                ):
                    head[-1].weight.mul_(0.01)
                    head[-1].bias.fill_(self.score_bias)
        self.optimizer = self.optimizer_class(
            self.parameters(),  # type: ignore[call-arg]
            lr=lr_schedule(1),
            **self.optimizer_kwargs,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        # The extractor is fixed by the class; hidden / layers / shape_free rebuild it.
        for key in (
            "features_extractor_class",
            "features_extractor_kwargs",
            "share_features_extractor",
        ):
            data.pop(key, None)
        kw = self.features_extractor_kwargs
        data.update(
            hidden=kw["hidden"],
            layers=kw["layers"],
            shape_free=self.shape_free,
            score_bias=self.score_bias,
        )
        return data

    def obs_to_tensor(self, observation: Any) -> tuple[Any, bool]:
        """SB3's conversion, but with the batch size read from ``node_features``: SB3
        reshapes every array with ``-1``, which numpy refuses for a zero-size array (a
        workload without signatures has ``memory`` of shape ``(N, 0)``)."""
        if not isinstance(observation, dict):
            return super().obs_to_tensor(observation)
        space: Any = self.observation_space  # a spaces.Dict (_check_dict_space)
        nodes = np.asarray(observation["node_features"])
        vectorized = nodes.shape != space["node_features"].shape
        batch = nodes.size // max(1, int(np.prod(space["node_features"].shape)))
        try:
            arrays = {
                key: np.asarray(value).reshape((batch, *space[key].shape))
                for key, value in observation.items()
            }
        except ValueError as error:
            raise ValueError(f"observation does not match the observation space: {error}") from None
        return obs_as_tensor(arrays, self.device), vectorized

    @property
    def gnn(self) -> GNNScheduler:
        return self.features_extractor.gnn


class GraphActorCriticPolicy(GNNActorCriticPolicy):
    """The documented per-candidate PPO policy: a :class:`GNNActorCriticPolicy` with
    ``shape_free=True``, whose parameters fit every workload shape.

    Example::

        from stable_baselines3 import PPO
        from mabp_gym.sb3 import GraphActorCriticPolicy

        model = PPO(GraphActorCriticPolicy, "mabp_gym/SFMSN-v0", n_steps=256)
        model.learn(10_000)
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        lr_schedule: Any,
        hidden: int = 64,
        layers: int = 3,
        shape_free: bool = True,
        score_bias: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            hidden=hidden,
            layers=layers,
            shape_free=shape_free,
            score_bias=score_bias,
            **kwargs,
        )
