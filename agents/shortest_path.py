"""Queue-oblivious baselines: shortest path (SP), join-the-shortest-queue (JSQ) and random
scores.

Both serve the longest queue first at every node, route a unit only from a node that does
not serve its commodity (units stay where they can be served), make no transfers and keep
memory most-recently-used without reading it (:class:`mabp_gym.agents.base.RecencyRetention`).

- ``sp``: each unit takes the cheapest link (least ``d``; ties to the lowest link index)
  toward a server of its commodity, ignoring queues.
- ``jsq``: each unit joins the eligible next hop with the smallest queue of its commodity;
  what the shortest cannot take (link capacity) goes to the next shortest.
- ``random``: uniform scores in (-1, 1) every slot (:class:`RandomScores`).
"""

from __future__ import annotations

import numpy as np

from mabp_gym.agents.base import Policy, RecencyRetention
from mabp_gym.core.workload import Workload


class _QueueObliviousRouting(Policy):
    def __init__(self, workload: Workload, **kw) -> None:
        super().__init__(workload, **kw)
        ix = self.ix
        src_node = ix.link_src[ix.route_link]
        # Routes leave only appearance nodes: a node that serves the commodity keeps it.
        self._leaves = ~ix.serves[src_node, ix.route_commodity]
        self._recency = RecencyRetention(workload)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._recency.reset()

    def _service(self, queues: np.ndarray, out: np.ndarray) -> None:
        backlog = self.pair_backlog(queues)[self.ix.action_pair]
        out[self.slices[0]] = np.where(backlog > 0, backlog / (1.0 + backlog.max(initial=0)), -1.0)

    def _fill(self, obs, queues, out) -> None:
        self._service(queues, out)
        out[self.slices[1]] = np.where(self._leaves, self._route(queues), -1.0)
        out[self.slices[3]] = self._recency.priorities(queues, self.t)

    def _route(self, queues: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class ShortestPath(_QueueObliviousRouting):
    """SP: the cheapest link toward a server, fixed for the whole episode."""

    name = "sp"

    def __init__(self, workload: Workload, **kw) -> None:
        super().__init__(workload, **kw)
        ix = self.ix
        cost = ix.link_cost[ix.route_link]
        chosen = np.zeros(ix.num_routes, dtype=bool)
        for p in np.unique(ix.route_src_pair):
            routes = np.flatnonzero(ix.route_src_pair == p)
            chosen[routes[np.argmin(cost[routes])]] = True
        self._route_scores = np.where(chosen, 1.0, -1.0)

    def _route(self, queues: np.ndarray) -> np.ndarray:
        return self._route_scores


class JoinShortestQueue(_QueueObliviousRouting):
    """JSQ: the eligible next hop with the smallest queue of the commodity."""

    name = "jsq"

    def _route(self, queues: np.ndarray) -> np.ndarray:
        destination = self.pair_backlog(queues)[self.ix.route_dst_pair]
        return 1.0 / (1.0 + destination)


class RandomScores(Policy):
    """``random``: every score uniform in (-1, 1), drawn afresh each slot from a generator
    seeded by :meth:`reset` (so a run is reproducible). The reference "no rule" policy the
    learning curves compare with; about half the candidates act each slot, in random order.
    """

    name = "random"

    def __init__(self, workload: Workload, **kw) -> None:
        super().__init__(workload, **kw)
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._rng = np.random.default_rng(seed)

    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        self.t += 1
        return self._rng.uniform(-1.0, 1.0, self.ix.num_scores)


class ConstantScores(Policy):
    """``constant``: the same score ``value`` (default 0.5) for every candidate, every slot:
    everything with a positive score acts, in the shared projection's own order (SPEC 3.2).
    The "do nothing clever" baseline of the learning tables: a learned policy that does not
    beat it has learned nothing the projection does not already do. A learned policy's
    initial scores sit near +0.5, so this is also what an untrained one approximates.
    """

    name = "constant"

    def __init__(self, workload: Workload, value: float = 0.5, **kw) -> None:
        super().__init__(workload, **kw)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"constant: value must be a number, got {value!r}")
        if not -1.0 <= float(value) <= 1.0:
            raise ValueError(f"constant: value must be in [-1, 1] (the score range), got {value!r}")
        self.value = float(value)

    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        self.t += 1
        return np.full(self.ix.num_scores, self.value)
