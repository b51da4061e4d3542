"""stable-baselines3 adapters: the per-candidate graph actor-critic and a pooled extractor.

The documented path is :class:`GraphActorCriticPolicy`, a PPO (or A2C) policy whose
Gaussian mean is one read-out per candidate decision of a GINE message-passing network
over the observation graph (the same candidate features MABP reads), and whose value
head reads the pooled graph embedding::

    from stable_baselines3 import PPO
    from mabp_gym.envs.sb3 import GraphActorCriticPolicy

    model = PPO(GraphActorCriticPolicy, "mabp_gym/SFMSN-v0", n_steps=256, batch_size=256)
    model.learn(10_000)

For several envs, :func:`make_sb3_vec_env` gives SB3 the batched vector env (every env's
slot in one compiled call; the same transitions as ``DummyVecEnv`` of the same envs)::

    envs = make_sb3_vec_env("mabp_gym/Mixed-v0", n_envs=8, load=(0.3, 0.8), seed=0)
    PPO(GraphActorCriticPolicy, envs, n_steps=256, batch_size=256).learn(100_000)

:class:`UpdateThreads` runs PPO's updates on more torch threads than its rollouts
(``learn(..., callback=UpdateThreads(2))``).

Every parameter's shape is independent of the workload, so the same class (and the same
``state_dict``) runs on ``mixed``, ``rag``, ``agentic`` and file workloads; a vector env's
observations are scored in one batched graph forward. See ``docs/learning.md``.

:class:`GraphFeaturesExtractor` is the older alternative for ``MultiInputPolicy``: it
pools the graph into one vector, which SB3 then maps linearly to the ``D`` candidate
scores; that loses the per-candidate structure and learns far worse::

    PPO("MultiInputPolicy", env,
        policy_kwargs={"features_extractor_class": GraphFeaturesExtractor,
                       "features_extractor_kwargs": {"hidden": 64}})

The extractor rebuilds the batched graph with :func:`mabp_gym.envs.pyg.to_pyg` (index arrays
arrive as floats from SB3 and are cast back to long there), runs GINE message passing with
edge features, and pools node embeddings (mean and max) plus pooled candidate telemetry
into a fixed-size vector for SB3's policy and value heads.
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn
from torch_geometric.nn import GINEConv, global_max_pool, global_mean_pool

from mabp_gym.agents.gnn_sb3 import GNNActorCriticPolicy, GraphActorCriticPolicy
from mabp_gym.core.encoding import symlog
from mabp_gym.envs.pyg import to_pyg
from mabp_gym.envs.sb3_vec import SB3VecEnv, make_sb3_vec_env

__all__ = [
    "GNNActorCriticPolicy",
    "GraphActorCriticPolicy",
    "GraphFeaturesExtractor",
    "SB3VecEnv",
    "UpdateThreads",
    "make_sb3_vec_env",
    "symlog",
]


class GraphFeaturesExtractor(BaseFeaturesExtractor):
    """GINE message passing over the observation graph, pooled to ``3 * hidden`` features.

    Shapes:
        input: the env's Dict observation with a batch dimension ``B``;
        output: ``(B, 3 * hidden)``: mean- and max-pooled node embeddings and the mean
        embedding of the service candidates' telemetry.
    """

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64, layers: int = 2) -> None:
        super().__init__(observation_space, features_dim=3 * hidden)

        def width(key: str) -> int:
            shape = observation_space[key].shape
            assert shape is not None
            return int(shape[-1])

        node_dim = sum(width(key) for key in ("node_features", "queues", "memory"))
        edge_dim = width("edge_features")
        service_dim = width("service")
        self.embed = nn.Sequential(nn.Linear(node_dim, hidden), nn.ReLU())
        self.convs = nn.ModuleList(
            GINEConv(
                nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)),
                edge_dim=edge_dim,
            )
            for _ in range(layers)
        )
        self.service = nn.Sequential(nn.Linear(service_dim + hidden, hidden), nn.ReLU())

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        graph = to_pyg(observations)
        h = self.embed(symlog(graph.x))
        edge_attr = symlog(graph.edge_attr)
        for conv in self.convs:
            h = torch.relu(conv(h, graph.edge_index, edge_attr))
        service = self.service(torch.cat([symlog(graph.service_x), h[graph.service_node]], -1))
        service_batch = torch.div(
            graph.service_node, graph.x.shape[0] // graph.num_graphs, rounding_mode="floor"
        )
        return torch.cat(
            [
                global_mean_pool(h, graph.batch, graph.num_graphs),
                global_max_pool(h, graph.batch, graph.num_graphs),
                global_mean_pool(service, service_batch, graph.num_graphs),
            ],
            dim=-1,
        )


class UpdateThreads(BaseCallback):
    """An SB3 callback that runs the updates of an on-policy algorithm (PPO, A2C) on
    ``threads`` torch threads and everything else on the count in place before: it sets
    ``threads`` when a rollout ends (the update follows) and gives the count back when the
    next rollout starts and when ``learn`` ends.

    Why: a rollout's forward on a few small graphs is fastest on one thread, while a
    minibatch of 256 graphs' backward uses more: on the 2-core machine, PPO's updates on two
    threads took about 0.77x the time of one (``benchmarks/RESULTS.md``). The arithmetic's
    order depends on the thread count, so a run reproduces for one count only. SB3 calls no
    callback when an update raises (Ctrl-C in a notebook): the count then stays at
    ``threads`` until the next ``learn`` with this callback, or ``torch.set_num_threads``.

    Example::

        torch.set_num_threads(1)  # the rollouts
        model.learn(100_000, callback=UpdateThreads(2))

    Raises:
        ValueError: ``threads`` is not a positive integer.
    """

    def __init__(self, threads: int) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        super().__init__()
        self.threads = threads
        self._before: int | None = None

    def _on_rollout_end(self) -> None:
        if self._before is None:
            self._before = torch.get_num_threads()
        torch.set_num_threads(self.threads)

    def _give_back(self) -> None:
        if self._before is not None:
            torch.set_num_threads(self._before)
            self._before = None

    def _on_rollout_start(self) -> None:
        self._give_back()

    def _on_training_end(self) -> None:
        self._give_back()

    def _on_step(self) -> bool:
        return True
