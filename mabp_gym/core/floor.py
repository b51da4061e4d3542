"""A lower bound on every request's delay: its shortest possible path through the network.

A request that never waits and whose every memory-assisted service is a hit still needs
slots: one per hop (a routed unit joins the next queue in the next slot), ``ceil(work /
mu)`` per service (at least one), and a successor joins its queue in the slot after its
parent's completes. Take, from every admissible node-commodity pair, the fastest way out
over every route and service candidate and every outcome its successor laws (hit or miss)
give positive probability: that is a floor under the delay of every request entering there,
whatever the policy does. Over the arrival mix it gives a floor under any quantile of the
delay, the P95 the benchmark reports among them, so a policy's headroom is a number.

It is a bound, not an estimate: it ignores queueing, compute and link limits, and lets
every request take its luckiest outcomes (no verification, no re-planning), so no policy
reaches it at a real load; what it says is that a scheduler cannot go below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mabp_gym.core.workload import Workload


@dataclass(frozen=True)
class DelayFloor:
    """The floor of a workload's request delays, in slots."""

    per_pair: np.ndarray  # (P,) float64: slots from queued at the pair to the exit slot
    per_arrival: np.ndarray  # (Z,) float64: delay floor of each arrival stream
    arrival_share: np.ndarray  # (Z,) float64, sums to 1

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the floor over the arrival mix (``q`` in ``[0, 1]``)."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        order = np.argsort(self.per_arrival, kind="stable")
        cumulative = np.cumsum(self.arrival_share[order])
        at = int(np.searchsorted(cumulative, q - 1e-12, side="left"))
        return float(self.per_arrival[order[min(at, order.size - 1)]])

    @property
    def p95(self) -> float:
        """The P95 of the floor over the arrival mix. Every completed request's delay is at
        least its stream's floor; a P95 over a sample (whose mix of streams varies) or one
        counting unfinished requests at their age can sit slightly below this."""
        return self.quantile(0.95)


def delay_floor(workload: Workload) -> DelayFloor:
    """The shortest possible delay of a request from every pair and arrival stream.

    A pair from which no request can ever leave (no server reachable) has an infinite
    floor.
    """
    ix = workload.index
    steps = np.array(_service_steps(workload), dtype=np.int64).reshape(-1, 3)
    src, slots, dst = steps[:, 0], steps[:, 1], steps[:, 2]  # from pair, slots, to pair or -1
    exits = dst < 0
    # A route: queued at the destination in the next slot. A successor: queued at the
    # node in the slot after the completion. An exit: the completion slot is the exit slot.
    route_src, route_dst = ix.route_src_pair, ix.route_dst_pair
    step_src, step_dst, step_cost = src[~exits], dst[~exits], slots[~exits].astype(np.float64)
    floor = np.full(ix.num_pairs, math.inf)
    np.minimum.at(floor, src[exits], slots[exits].astype(np.float64) - 1.0)
    for _ in range(ix.num_pairs + 1):  # a shortest path visits every pair at most once
        relaxed = floor.copy()
        np.minimum.at(relaxed, route_src, 1.0 + floor[route_dst])
        np.minimum.at(relaxed, step_src, step_cost + floor[step_dst])
        if np.array_equal(relaxed, floor):
            break
        floor = relaxed
    born_to_queued = 1.0  # a request born in slot t is first queued in slot t + 1
    return DelayFloor(
        per_pair=floor,
        per_arrival=born_to_queued + floor[ix.arrival_pair],
        arrival_share=np.asarray(ix.arrival_share, dtype=np.float64),
    )


def _service_steps(workload: Workload) -> list[tuple[int, int, int]]:
    """``(pair, slots until the completion, successor pair or -1 to exit)`` for every
    service action and every outcome of positive probability, under a hit where the action
    can be memory-assisted and under a miss."""
    ix = workload.index
    exit_column = ix.successor_law.shape[2] - 1
    steps: list[tuple[int, int, int]] = []
    for a in range(ix.action_node.shape[0]):
        node, pair = int(ix.action_node[a]), int(ix.action_pair[a])
        mu = float(ix.mu[node])
        if mu <= 0.0:
            continue
        outcomes = (0, 1) if ix.action_signature[a] >= 0 else (0,)
        for hit in outcomes:
            slots = max(1, math.ceil(float(ix.work[hit, a]) / mu - 1e-9))
            for column in np.flatnonzero(ix.successor_law[hit, a] > 0.0):
                if column == exit_column:
                    steps.append((pair, slots, -1))
                    continue
                successor = int(ix.pair_of[node, column])
                if successor >= 0:
                    steps.append((pair, slots, successor))
    return steps
