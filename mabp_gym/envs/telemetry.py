"""The decentralized view's stale telemetry.

:func:`link_delays` reads the ``staleness`` argument as one delay per link, at most
:data:`MAX_STALENESS` slots. :class:`TelemetryBuffer` keeps the last slots of the state
every node published and reads what each agent has received by a slot
(:class:`StaleTelemetry`), every number as old as the links it travelled over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mabp_gym.core.workload import Workload
from mabp_gym.envs.agent_tables import AgentTables

MAX_STALENESS = 10_000
"""The longest telemetry delay in slots: the buffer holds that many slots of every node's
published state (about 7.5 kB a slot on ``mixed``, so 75 MB at the limit; 2e5 slots asked
for 1.5 GB and then failed)."""


def link_delays(workload: Workload, staleness: Any) -> np.ndarray:
    """``(E,)`` telemetry delay per link from the ``staleness`` argument."""
    ix = workload.index
    limit = min(workload.horizon, MAX_STALENESS)
    allowed = (
        "an integer >= 0, a sequence of one integer per link, or a mapping "
        "{(src name, dst name): delay}"
    )

    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(
                f"staleness{where} must be an integer number of slots, got "
                f"{value!r}; staleness is {allowed}"
            )
        if not 0 <= value <= limit:
            raise ValueError(
                f"staleness{where} must be in [0, {limit}] (at most the horizon, "
                f"{workload.horizon}, and {MAX_STALENESS:,} slots: the telemetry buffer keeps "
                f"that many slots of state), got {value}"
            )
        return int(value)

    if isinstance(staleness, Mapping):
        delays = np.zeros(ix.num_links, dtype=np.int64)
        names = {
            (workload.nodes[link.src].name, workload.nodes[link.dst].name): e
            for e, link in enumerate(workload.links)
        }
        for key, value in staleness.items():
            if key not in names:
                raise ValueError(
                    f"staleness names link {key!r}, which does not exist; links: {sorted(names)}"
                )
            delays[names[key]] = check(value, f"[{key!r}]")
        return delays
    sequence = isinstance(staleness, Sequence) and not isinstance(staleness, str)
    if sequence or (isinstance(staleness, np.ndarray) and staleness.ndim > 0):
        values = list(staleness)
        if len(values) != ix.num_links:
            raise ValueError(
                f"staleness as a sequence needs one delay per link "
                f"({ix.num_links}), got {len(values)}"
            )
        return np.asarray([check(v, f"[{e}]") for e, v in enumerate(values)], dtype=np.int64)
    return np.full(ix.num_links, check(staleness, ""), dtype=np.int64)


@dataclass(frozen=True)
class StaleTelemetry:
    """What every agent has received by a slot (one row per agent, padding reads 0)."""

    neighbour_queues: np.ndarray  # (n_ag, Nb, C) float32, out-neighbours' queue lengths
    neighbour_memory: np.ndarray  # (n_ag, Nb, S) float32, out-neighbours' residency
    neighbour_free: np.ndarray  # (n_ag, Nb) float32, out-neighbours' free budget
    neighbour_age: np.ndarray  # (n_ag, Nb) float32, slots since they were published
    upstream_queues: np.ndarray  # (n_ag, U) float32, at the tail of each route into the node
    upstream_age: np.ndarray  # (n_ag, U) float32, slots since they were published
    neighbour_upstream: np.ndarray  # (n_ag, Nb, U) float32, relayed by each out-neighbour


class TelemetryBuffer:
    """Ring buffers of the state every node published, as deep as the oldest number an
    agent reads; row ``N`` is "no neighbour" and reads 0. A reader ``d`` slots behind sees
    the state at the episode start before slot ``d``.

    Args:
        tables: the agents' padded tables: whom each agent hears from, with which delay.
    """

    def __init__(self, tables: AgentTables) -> None:
        self.tables = tables
        ix = tables.workload.index
        n, c, s = ix.num_nodes, ix.num_commodities, ix.num_signatures
        # Relayed upstream queue lengths travel two links, so they can be twice as old.
        self.depth = 2 * max(int(tables.link_delays.max(initial=0)), 0) + 1
        self.queues = np.zeros((self.depth, n + 1, c), dtype=np.float32)
        self.memory = np.zeros((self.depth, n + 1, s), dtype=np.float32)
        self.free = np.zeros((self.depth, n + 1), dtype=np.float32)

    def publish(self, t: int, queues: np.ndarray, memory: np.ndarray, free: np.ndarray) -> None:
        """Slot ``t``'s published state: ``(N, C)`` queue lengths (units in service
        included), ``(N, S)`` residency and ``(N,)`` free budget."""
        here = t % self.depth
        self.queues[here, :-1] = queues
        self.memory[here, :-1] = memory
        self.free[here, :-1] = free

    def read(self, t: int) -> StaleTelemetry:
        """What every agent has received by slot ``t``."""
        tb, depth = self.tables, self.depth
        # Telemetry of each neighbour slot as it was d slots ago (the episode start before).
        seen = np.maximum(t - tb.nb_delay, 0)
        slot = seen % depth
        nb_queues = self.queues[slot, tb.nb_node]  # (n_ag, Nb, C)
        nb_memory = self.memory[slot, tb.nb_node]  # (n_ag, Nb, S)
        nb_free = self.free[slot, tb.nb_node]  # (n_ag, Nb)
        age = np.where(tb.nb_valid, t - seen, 0).astype(np.float32)
        # Upstream queue lengths: the agent's own, each as old as its route's link, and each
        # neighbour's as that neighbour received them, relayed over the link to it.
        own_up = tb.agent_node
        up_seen = np.maximum(t - tb.up_delay[own_up], 0)
        up_queues = self.queues[up_seen % depth, tb.up_src[own_up], tb.up_comm[own_up]]  # (n_ag, U)
        up_age = np.where(tb.up_valid[own_up], t - up_seen, 0).astype(np.float32)
        relay_seen = np.maximum(seen[:, :, None] - tb.up_delay[tb.nb_node], 0)
        nb_upstream = np.where(
            tb.relay[:, :, None],
            self.queues[relay_seen % depth, tb.up_src[tb.nb_node], tb.up_comm[tb.nb_node]],
            np.float32(0.0),
        )  # (n_ag, Nb, U)
        return StaleTelemetry(
            neighbour_queues=nb_queues,
            neighbour_memory=nb_memory,
            neighbour_free=nb_free,
            neighbour_age=age,
            upstream_queues=up_queues,
            upstream_age=up_age,
            neighbour_upstream=nb_upstream,
        )
