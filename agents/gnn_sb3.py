"""stable-baselines3 actor-critic policies over the observation graph (PPO, A2C).

Both policies put one Gaussian over the ``D`` candidate scores whose log-probability and
entropy count the *active* candidates only (:class:`MaskedDiagGaussian`; the mask is the
observation's ``action_mask``), with a learned log-std per kind of candidate. Their
features extractor returns ``[scores (D) | critic latent]``; the "MLP extractor" only
splits that vector, the action mean *is* the score vector, and the value head reads the
latent.

- :class:`GraphActorCriticPolicy` (the documented path, exported by :mod:`mabp_gym.envs.sb3`):
  :class:`~mabp_gym.agents.candidate_net.CandidateNet`, message passing and one linear
  read-out per candidate whose coefficients come from its node or link, so a candidate
  costs a gather and a small product. Every parameter's shape is independent of the
  workload: one ``state_dict`` runs on ``mixed``, ``rag``, ``agentic`` and file workloads.
- :class:`GNNActorCriticPolicy`: :class:`~mabp_gym.agents.gnn.GNNScheduler`, the network
  of ``mabp-gym train gnn`` (MLP read-outs, the node's per-commodity queues and memory in
  its input with ``shape_free=False``): it fine-tunes the imitation checkpoints, whose
  weights fit one workload shape.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.utils import obs_as_tensor
from torch import nn
from torch.distributions import Normal

from mabp_gym.agents.candidate_net import CandidateNet, candidate_widths
from mabp_gym.agents.gnn import GNNScheduler, observation_dims
from mabp_gym.core.validate import is_real
from mabp_gym.envs.pyg import to_pyg

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
"""The Gaussian log-density's constant, as ``torch.distributions.Normal`` computes it."""


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
        readout: int | None = None,
    ) -> None:
        _check_dict_space(observation_space)
        dims = observation_dims(observation_space)
        super().__init__(observation_space, features_dim=dims["scores"] + 2 * hidden)
        node_shape = observation_space["node_features"].shape
        self.node_width = int(node_shape[-1]) if shape_free and node_shape else None
        if shape_free:
            dims["node"] = self.node_width
        self.gnn = GNNScheduler(dims, hidden=hidden, layers=layers, readout=readout)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        # One batched graph for the whole batch (vector envs, minibatches): one forward.
        graph = to_pyg(observations)
        if self.node_width is not None:
            graph.x = graph.x[:, : self.node_width]
        scores, pooled = self.gnn.forward_graph(graph)
        return torch.cat([scores, pooled], dim=-1)


class MaskedDiagGaussian(DiagGaussianDistribution):
    """A diagonal Gaussian over the scores whose log-probability and entropy count the
    active candidates only (``action_mask`` of the observation, 1 where a candidate can act).

    A masked candidate's score changes nothing in the projection, so its sampled value is
    noise that PPO would otherwise credit: summed over all ``D`` scores, one
    log-probability moved from -1,425 to -25,508 when only masked candidates' actions
    changed. Here those dimensions count for nothing and are sampled at their mean.

    The policies' rollouts write this arithmetic out (``_MaskedGraphPolicy._act``): a
    change here must be made there too.
    """

    def __init__(self, action_dim: int) -> None:
        super().__init__(action_dim)
        self.mask: torch.Tensor | None = None

    def proba_masked(
        self, mean: torch.Tensor, log_std: torch.Tensor, mask: torch.Tensor
    ) -> MaskedDiagGaussian:
        # Arguments are not validated (a mean and a positive scale by construction): the
        # checks cost a few ops per call, which a small batch of rollouts feels.
        self.distribution = Normal(mean, log_std.exp().expand_as(mean), validate_args=False)
        self.mask = mask.to(mean.dtype)
        return self

    def active(self) -> torch.Tensor:
        """1 where a score dimension is a real candidate, 0 where it is padding."""
        if self.mask is None:
            raise RuntimeError("MaskedDiagGaussian needs proba_masked(mean, log_std, mask) first")
        return self.mask

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return (self.distribution.log_prob(actions) * self.active()).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return (self.distribution.entropy() * self.active()).sum(dim=-1)

    def sample(self) -> torch.Tensor:
        active = self.active() > 0
        return torch.where(active, self.distribution.rsample(), self.distribution.mean)


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


class CandidateExtractor(BaseFeaturesExtractor):
    """Shapes: Dict observation with batch ``B`` -> ``(B, D + hidden)``: the candidate
    scores of :class:`~mabp_gym.agents.candidate_net.CandidateNet` and its critic latent."""

    def __init__(
        self,
        observation_space: spaces.Dict,
        hidden: int = 32,
        layers: int = 3,
        score_bias: float = 0.5,
    ) -> None:
        _check_dict_space(observation_space)
        scores = int(observation_space["action_mask"].shape[0])  # type: ignore[index]
        super().__init__(observation_space, features_dim=scores + hidden)
        self.net = CandidateNet(
            candidate_widths(observation_space), hidden=hidden, layers=layers, score_bias=score_bias
        )

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        scores, latent = self.net(observations)
        return torch.cat([scores, latent], dim=-1)


def _check_positive(**values: Any) -> None:
    for name, value in values.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1
        ):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _adam_foreach(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The optimizer's keywords with Adam's multi-tensor update (``foreach=True``) unless
    they say otherwise: the same arithmetic as the per-parameter loop (bit for bit,
    ``tests/test_sb3_policy.py``) in a few calls instead of about ten per parameter tensor
    (43 here), which on the CPU is where a small network's Adam step spends its time.
    SB3's own default (``eps=1e-5`` where none is given) is kept."""
    given = kwargs.get("optimizer_kwargs")
    if kwargs.get("optimizer_class", torch.optim.Adam) is not torch.optim.Adam:
        return given
    out = {"eps": 1e-5} if given is None else dict(given)
    out.setdefault("foreach", True)
    return out


class _MaskedGraphPolicy(ActorCriticPolicy):
    """What both graph policies share: the split latent, the masked Gaussian with one
    log-std per kind of candidate (or per candidate), and the Dict observation's
    conversion."""

    per_kind_log_std = True

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        lr_schedule: Any,
        *,
        extractor: type[BaseFeaturesExtractor],
        extractor_kwargs: dict[str, Any],
        score_bias: float,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("net_arch") == {"pi": [64, 64], "vf": [64, 64]}:
            del kwargs["net_arch"]  # SB3's default, which files saved before held
        for name in ("net_arch", "features_extractor_class", "features_extractor_kwargs"):
            if kwargs.get(name) is not None:  # net_arch was dropped without a word
                raise ValueError(
                    f"{type(self).__name__} takes no {name}: its action means are the graph "
                    "network's scores and its value head reads that network's latent; size "
                    "the network with hidden= and layers= instead"
                )
        # ortho_init off: pretrained weights stay as they are, fresh ones set their scores.
        kwargs.setdefault("ortho_init", False)
        kwargs.setdefault("log_std_init", -1.5)
        kwargs["optimizer_kwargs"] = _adam_foreach(kwargs)
        if kwargs.get("use_sde"):  # SB3 passes the algorithm's use_sde to its policy
            raise ValueError(
                "use_sde=True is not supported by the graph policies: their masked Gaussian "
                "has no state-dependent noise; leave use_sde=False (the default)"
            )
        for name, value in (("score_bias", score_bias), ("log_std_init", kwargs["log_std_init"])):
            if not is_real(value) or not np.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        self.score_bias = float(score_bias)
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            features_extractor_class=extractor,
            features_extractor_kwargs=extractor_kwargs,
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
        self.action_dist = MaskedDiagGaussian(int(self.action_space.shape[0]))  # type: ignore[index]
        space: Any = self.observation_space
        counts = [int(space[key].shape[0]) for key in ("service", "route", "transfer", "retain")]
        # Each score's kind (service, route, transfer, retain), in the action's layout; not
        # saved (its length is the workload's), rebuilt from the spaces.
        kind = torch.repeat_interleave(torch.arange(4), torch.as_tensor(counts))
        self.register_buffer("score_kind", kind, persistent=False)
        if self.per_kind_log_std:
            # One learned log-std per kind of candidate: no parameter has the workload's
            # candidate count as its shape, and each kind's exploration moves on its own.
            self.log_std = nn.Parameter(torch.full((4,), float(self.log_std_init)))
        self._init_scores()
        self.optimizer = self.optimizer_class(
            self.parameters(),  # type: ignore[call-arg]
            lr=lr_schedule(1),
            **self.optimizer_kwargs,
        )

    def _init_scores(self) -> None:
        """Set the fresh network's initial scores (nothing by default)."""

    def score_log_std(self) -> torch.Tensor:
        """The log-std of every score, ``(D,)``."""
        kind = cast(torch.Tensor, self.score_kind)
        return self.log_std[kind] if self.per_kind_log_std else self.log_std

    def extract_features(self, obs: Any, features_extractor: Any = None) -> Any:
        """The extractor on the observation as it is: SB3 would first cast every array of
        the Dict to float (14 casts per call), and the networks read and cast only what
        they use (float inputs, the index arrays rounded to long)."""
        return (features_extractor or self.features_extractor)(obs)

    def _masked(self, obs: Any) -> tuple[MaskedDiagGaussian, torch.Tensor]:
        """The action distribution and the critic's latent for a batch of observations."""
        latent_pi, latent_vf = self.mlp_extractor(self.extract_features(obs))
        mask = obs["action_mask"].reshape(latent_pi.shape)
        # A distribution of its own per call (SB3 reuses ``self.action_dist``): the policy
        # then holds no tensor of a training step's graph, so it deep-copies at any time.
        distribution = MaskedDiagGaussian(latent_pi.shape[-1])
        return distribution.proba_masked(latent_pi, self.score_log_std(), mask), latent_vf

    def forward(
        self, obs: Any, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not torch.is_grad_enabled():  # SB3's rollouts
            with torch.inference_mode():
                actions, values, log_prob = self._act(obs, deterministic)
            # Ordinary tensors for what the caller keeps (SB3 hands them to callbacks):
            # an inference tensor refuses an in-place change and autograd outside it.
            return actions.clone(), values.clone(), log_prob.clone()
        distribution, latent_vf = self._masked(obs)
        actions = distribution.get_actions(deterministic=deterministic)
        return actions, self.value_net(latent_vf), distribution.log_prob(actions)

    def _act(
        self, obs: Any, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`forward` without autograd, as SB3's rollouts call it: the distribution's
        arithmetic written out, operation for operation (the same draws from torch's
        generator and the same values bit for bit, ``tests/test_sb3_policy.py``), with the
        scale's square and log taken once per score (``(D,)``) rather than per batch row,
        and no distribution object. A rollout step of 8 graphs is bound by the number of
        operations, not by their size. A change to :class:`MaskedDiagGaussian`'s sampling
        or log-probability must be made here too (the test compares the two)."""
        latent_pi, latent_vf = self.mlp_extractor(self.extract_features(obs))
        mean, scale = latent_pi, self.score_log_std().exp()
        mask = obs["action_mask"].reshape(mean.shape).to(mean.dtype)
        actions = mean
        if not deterministic:
            noise = torch.empty(mean.shape, dtype=mean.dtype, device=mean.device).normal_()
            actions = torch.where(mask > 0, mean + noise * scale, mean)
        log_prob = -((actions - mean) ** 2) / (2 * scale**2) - scale.log() - _LOG_SQRT_2PI
        return actions, self.value_net(latent_vf), (log_prob * mask).sum(dim=-1)

    def evaluate_actions(
        self, obs: Any, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        distribution, latent_vf = self._masked(obs)
        return self.value_net(latent_vf), distribution.log_prob(actions), distribution.entropy()

    def get_distribution(self, obs: Any) -> MaskedDiagGaussian:
        return self._masked(obs)[0]

    def for_env(self, env: Any) -> _MaskedGraphPolicy:
        """This policy, its weights and settings, for the spaces of ``env`` (a Gymnasium
        env, vector env or SB3 ``VecEnv`` of any workload: every parameter's shape is the
        same), on this policy's device, ready to act (``predict``, ``sample_scores``).
        ``PPO.load`` refuses another workload's spaces; this is how a policy trained on one
        network runs on another::

            policy = PPO.load("mixed.zip").policy.for_env(gym.make("mabp_gym/Rag-v0"))
        """
        space = getattr(env, "single_observation_space", None) or env.observation_space
        actions = getattr(env, "single_action_space", None) or env.action_space
        settings = self._get_constructor_parameters()
        settings.update(observation_space=space, action_space=actions)
        other = type(self)(**settings)
        try:
            other.load_state_dict(self.state_dict())
        except RuntimeError as error:  # a policy whose weights are sized by the network
            raise ValueError(
                f"{type(self).__name__}'s weights are sized by the network it was trained "
                f"on, so it cannot run on these spaces ({str(error).splitlines()[0][:160]}); "
                "GraphActorCriticPolicy's are not"
            ) from None
        other.set_training_mode(False)
        return other.to(self.device)

    def sample_scores(self, observation: Any, generator: torch.Generator) -> np.ndarray:
        """One draw of the stochastic policy PPO trained, from ``generator`` (so a run is
        reproducible, unlike ``predict(deterministic=False)``, which draws from torch's
        global generator): active candidates at ``mean + std * z``, masked ones at their
        mean, clipped to the action Box as ``predict`` clips.

        Why it matters: only scores above 0 act, and PPO has no reason to push a mean far
        above 0 where the noise already serves the candidate often enough. The means then
        leave single waiting jobs unserved at low load, which the stochastic policy serves
        (``docs/learning.md``, "Acting with the means")."""
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        self.set_training_mode(False)
        obs, vectorized = self.obs_to_tensor(observation)
        with torch.no_grad():
            distribution = self.get_distribution(obs)
            mean = distribution.distribution.mean
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
            active = distribution.active() > 0
            action = torch.where(active, mean + distribution.distribution.stddev * noise, mean)
        space: Any = self.action_space
        scores = np.clip(action.cpu().numpy(), space.low, space.high)
        return scores if vectorized else scores[0]

    def _constructor_extras(self) -> dict[str, Any]:
        raise NotImplementedError

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        # The extractor is fixed by the class; its keywords rebuild it.
        for key in (
            "features_extractor_class",
            "features_extractor_kwargs",
            "share_features_extractor",
            "net_arch",  # SB3's default MLP sizes, which these policies have no use for
        ):
            data.pop(key, None)
        data.update(self._constructor_extras())
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


class GNNActorCriticPolicy(_MaskedGraphPolicy):
    """PPO policy whose Gaussian mean is the :class:`GNNScheduler`'s score vector.

    Args:
        observation_space, action_space, lr_schedule: as for SB3's ``ActorCriticPolicy``.
        hidden: embedding width. layers: message-passing rounds.
        readout: width of the per-candidate read-outs' hidden layer (default ``hidden``).
        shape_free: feed the node table only (not the per-commodity queues and memory),
            with one learned log-std per kind of candidate: every parameter then has a
            shape independent of the workload. Without it (the imitation checkpoints'
            network) the log-std is one per candidate.
        score_bias: with ``shape_free``, the initial mean of every candidate's score before
            the softsign (default 0.5, so a fresh policy serves, routes and retains: the
            projection acts only on scores > 0).
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
        readout: int | None = None,
        **kwargs: Any,
    ) -> None:
        _check_positive(hidden=hidden, layers=layers, readout=readout)
        self.shape_free = bool(shape_free)
        self.per_kind_log_std = self.shape_free
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            extractor=GNNExtractor,
            extractor_kwargs={
                "hidden": int(hidden),
                "layers": int(layers),
                "shape_free": self.shape_free,
                "readout": None if readout is None else int(readout),
            },
            score_bias=score_bias,
            **kwargs,
        )

    def _init_scores(self) -> None:
        if not self.shape_free:
            return
        # Every mean starts at score_bias with small weights (SB3's gain 0.01 for action
        # nets): the fresh policy acts on every candidate in a nearly random order.
        with torch.no_grad():
            for head in (
                self.gnn.service_head,
                self.gnn.route_head,
                self.gnn.transfer_head,
                self.gnn.retain_head,
            ):
                head[-1].weight.mul_(0.01)
                head[-1].bias.fill_(self.score_bias)

    def _constructor_extras(self) -> dict[str, Any]:
        kw = self.features_extractor_kwargs
        return {
            "hidden": kw["hidden"],
            "layers": kw["layers"],
            "readout": kw["readout"],
            "shape_free": self.shape_free,
            "score_bias": self.score_bias,
        }

    @property
    def gnn(self) -> GNNScheduler:
        return self.features_extractor.gnn


class GraphActorCriticPolicy(_MaskedGraphPolicy):
    """The documented per-candidate PPO policy: :class:`CandidateNet` (message passing,
    then a linear read-out per candidate with node- or link-level coefficients) and the
    masked Gaussian with one learned log-std per kind of candidate. Every parameter's
    shape is independent of the workload.

    Args:
        observation_space, action_space, lr_schedule: as for SB3's ``ActorCriticPolicy``.
        hidden: embedding width (32). layers: message-passing rounds (3).
        score_bias: the initial mean of every score before the softsign (0.5: a fresh
            policy serves, routes and retains everything in a nearly random order; the
            projection acts only on scores > 0, so means near 0 would idle).
        **kwargs: passed to ``ActorCriticPolicy`` (``log_std_init`` defaults to -1.5).

    Example::

        from stable_baselines3 import PPO
        from mabp_gym.envs.sb3 import GraphActorCriticPolicy

        model = PPO(GraphActorCriticPolicy, "mabp_gym/SFMSN-v0", n_steps=256)
        model.learn(10_000)
    """

    shape_free = True  # every parameter's shape is independent of the workload

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        lr_schedule: Any,
        hidden: int = 32,
        layers: int = 3,
        score_bias: float = 0.5,
        **kwargs: Any,
    ) -> None:
        _check_positive(hidden=hidden, layers=layers)
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            extractor=CandidateExtractor,
            extractor_kwargs={
                "hidden": int(hidden),
                "layers": int(layers),
                "score_bias": float(score_bias),
            },
            score_bias=score_bias,
            **kwargs,
        )

    def _constructor_extras(self) -> dict[str, Any]:
        kw = self.features_extractor_kwargs
        return {"hidden": kw["hidden"], "layers": kw["layers"], "score_bias": self.score_bias}

    @property
    def net(self) -> CandidateNet:
        return self.features_extractor.net
