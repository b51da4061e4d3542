"""Memory-oblivious backpressure and its cost- and cache-aware variants (SPEC 4).

One rule, three parameter settings:

- ``bp``: route by ``Q_i^c - Q_j^c``; serve by
  ``(Q_i^c - sum_c' Pbar(c'|a) Q_i^c') / wbar`` where ``Pbar``, ``wbar`` average the hit and
  miss primitives (memory is never read); keep memory most-recently-used; no transfers.
- ``cost-bp``: ``bp`` with the reference cost: routing ``- nu d``, service ``- nu pbar``.
- ``greedycache-bp``: ``cost-bp`` with popularity retention (decayed counts of queued
  units that each signature would serve, per node) and transfers toward the node that
  requests a signature most.

Only the retention and transfer scores of ``greedycache-bp`` look at demand; no variant
ever reads the memory state, so all of them take only passive hits.
"""

from __future__ import annotations

import numpy as np

from mabp_gym.agents.base import Policy, RecencyRetention, successor_support
from mabp_gym.core.validate import is_real
from mabp_gym.core.workload import Workload


class Backpressure(Policy):
    """Backpressure over memory-averaged primitives.

    Args:
        cost: subtract ``nu`` times the routing cost and the averaged service penalty.
        cache: ``"recency"`` (most recently used) or ``"popularity"`` retention.
        transfers: move objects toward the node whose popularity is higher.
        decay: per-slot decay of the popularity counts.
    """

    name = "bp"

    def __init__(
        self,
        workload: Workload,
        *,
        cost: bool = False,
        cache: str = "recency",
        transfers: bool = False,
        decay: float = 0.9,
        **kw,
    ) -> None:
        super().__init__(workload, **kw)
        if cache not in ("recency", "popularity"):
            raise ValueError(f"cache must be 'recency' or 'popularity', got {cache!r}")
        if not is_real(decay) or not 0 <= decay <= 1:
            raise ValueError(f"decay must be a number in [0, 1], got {decay!r}")
        ix = self.ix
        self.cost = cost
        self.cache = cache
        self.transfers = transfers
        self.decay = float(decay)
        assisted = ix.action_signature >= 0
        # Memory-averaged primitives: the mean of the hit and miss values (the no-memory
        # system only ever misses).
        weight = np.where(assisted & self.memory, 0.5, 0.0)
        mix = weight[:, None]
        self._law_positions, law = successor_support(ix)  # (A, W), (2, A, W)
        self._law = mix * law[1] + (1 - mix) * law[0]  # (A, W)
        self._work = weight * ix.work[1] + (1 - weight) * ix.work[0]
        self._penalty = weight * ix.penalty[1] + (1 - weight) * ix.penalty[0]
        # Route candidates whose source itself serves the commodity (sibling links).
        self._sibling = ix.serves[
            ix.pair_node[ix.route_src_pair], ix.pair_commodity[ix.route_src_pair]
        ]
        self._route_cost = ix.link_cost[ix.route_link]
        self._recency = RecencyRetention(workload)
        self._popularity = np.zeros(ix.num_retains)
        # Transfer candidate -> retain candidates at its two ends.
        src = ix.link_src[ix.transfer_link]
        dst = ix.link_dst[ix.transfer_link]
        self._transfer_src = ix.retain_of[src, ix.transfer_signature]
        self._transfer_dst = ix.retain_of[dst, ix.transfer_signature]

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._recency.reset()
        self._popularity[:] = 0.0

    def _fill(self, obs, queues, out) -> None:
        ix = self.ix
        backlog = self.pair_backlog(queues)
        own = backlog[ix.action_pair]
        pressure = (self._law * queues.ravel()[self._law_positions]).sum(axis=1)
        weight = own - pressure
        if self.cost:
            weight = weight - self.nu * self._penalty
        out[self.slices[0]] = np.where(own > 0, weight / np.maximum(self._work, 1e-9), -1.0)
        route = backlog[ix.route_src_pair] - backlog[ix.route_dst_pair]
        if self.cost:
            route = route - self.nu * self._route_cost
            # A unit that its own server defers for cost gains nothing from a sibling server
            # that defers it for the same cost: moving it only pays d, and moving it back.
            best = np.full(ix.num_pairs, -np.inf)
            np.maximum.at(best, ix.action_pair, weight)
            held = self._sibling & (best[ix.route_src_pair] < 0)
            route = np.where(held, -1.0, route)
        out[self.slices[1]] = route
        if self.cache == "recency":
            out[self.slices[3]] = self._recency.priorities(queues, self.t)
        else:
            demand = self._recency.demand(queues)
            self._popularity = self.decay * self._popularity + demand
            size = ix.signature_size[ix.retain_signature]
            out[self.slices[3]] = self._popularity / size
        if self.transfers and ix.num_transfers:
            here = self._popularity[self._transfer_src]
            there = self._popularity[self._transfer_dst]
            out[self.slices[2]] = (there - here) / (1.0 + here + there) - 0.25


def make_bp(workload: Workload, **kw) -> Backpressure:
    policy = Backpressure(workload, **kw)
    policy.name = "bp"
    return policy


def make_cost_bp(workload: Workload, **kw) -> Backpressure:
    policy = Backpressure(workload, cost=True, **kw)
    policy.name = "cost-bp"
    return policy


def make_greedycache_bp(workload: Workload, **kw) -> Backpressure:
    policy = Backpressure(workload, cost=True, cache="popularity", transfers=True, **kw)
    policy.name = "greedycache-bp"
    return policy
