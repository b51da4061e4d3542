"""The agents' layouts as padded tables, so that an observation is a few array operations.

:class:`AgentTables` holds one row per agent (in agent order) of its candidates, its
neighbours and the routes into its node, the parts of its observation that never change,
where each entry of its local action goes in the global score vector, and computes the
rows of its route and transfer candidates and its candidate mask from what it has received.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mabp_gym.core.encoding import ROUTE_FEATURES, TRANSFER_FEATURES
from mabp_gym.core.workload import ROLES, Workload
from mabp_gym.envs.agent_layout import NEIGHBOUR_STATIC_FEATURES, AgentLayout


class AgentTables:
    """Padded per-agent gathers of a workload's :class:`AgentLayout` list.

    The ``*_valid`` masks mark the real entries; candidate tables pad with their block's
    candidate count and ``nb_node`` with node ``N`` ("no neighbour"), one past the last
    index, which the gathers read as zeros. A load drawn at reset changes no index, so the
    tables of the first workload serve every episode.

    Args:
        workload: the workload (its index and node roles).
        layouts: its agents' layouts (:func:`~mabp_gym.envs.agent_layout.agent_layouts`).
        link_delays: ``(E,)`` telemetry delay per link.
        memory: whether nodes have memory (else every budget reads 0).
    """

    def __init__(
        self,
        workload: Workload,
        layouts: list[AgentLayout],
        link_delays: np.ndarray,
        memory: bool,
    ) -> None:
        self.workload = workload
        self.layouts = layouts
        self.link_delays = link_delays
        self.memory = memory
        lays = self.layouts
        a_max = max(len(x.actions) for x in lays)
        r_max = max(len(x.routes) for x in lays)
        t_max = max(len(x.transfers) for x in lays)
        k_max = max(len(x.retains) for x in lays)
        nb_max = max(len(x.neighbours) for x in lays)
        self.sizes = (a_max, r_max, t_max, k_max)
        self.nb_max = nb_max
        up_index = self._build_upstream()
        self._build_candidates()
        self._build_static_parts(up_index)
        self._build_score_map()

    def _pad(self, rows: list[Any], width: int, fill: int) -> np.ndarray:
        """``rows`` (one per agent) as a table of ``width`` columns, padded with ``fill``."""
        table = np.full((len(self.layouts), width), fill, dtype=np.int64)
        for q, row in enumerate(rows):
            table[q, : len(row)] = row
        return table

    def _build_upstream(self) -> np.ndarray:
        """The routes into every node, for the upstream telemetry; returns their index
        rows ``(N + 1, 2, U)`` (commodity, fan-out of the source pair)."""
        ix = self.workload.index
        n = ix.num_nodes
        # Routes into every node (ascending), for the upstream telemetry: an agent's own
        # and, relayed, its out-neighbours'. Row n (no neighbour) and padding read node n.
        route_dst = ix.link_dst[ix.route_link]
        into = [np.flatnonzero(route_dst == j) for j in range(n)]
        u_max = max(r.size for r in into)
        self.u_max = u_max
        fanout = np.bincount(ix.route_src_pair, minlength=ix.num_pairs)
        up_src = np.full((n + 1, u_max), n, dtype=np.int64)
        up_comm = np.zeros((n + 1, u_max), dtype=np.int64)
        up_delay = np.zeros((n + 1, u_max), dtype=np.int64)
        up_index = np.full((n + 1, 2, u_max), -1, dtype=np.int64)
        for j, routes in enumerate(into):
            k = routes.size
            up_src[j, :k] = ix.link_src[ix.route_link[routes]]
            up_comm[j, :k] = ix.route_commodity[routes]
            up_delay[j, :k] = self.link_delays[ix.route_link[routes]]
            up_index[j, 0, :k] = ix.route_commodity[routes]
            up_index[j, 1, :k] = fanout[ix.route_src_pair[routes]]
        self.up_src, self.up_comm, self.up_delay = up_src, up_comm, up_delay
        self.up_valid = up_src < n
        self.fanout_max = int(fanout.max(initial=0))

        return up_index

    def _build_candidates(self) -> None:
        """Each agent's candidates (service, route, transfer, retain) and neighbours as
        padded gathers, and what the route and transfer features read."""
        ix = self.workload.index
        lays = self.layouts
        n_ag = len(lays)
        a_max, r_max, t_max, k_max = self.sizes
        nb_max = self.nb_max
        n, s = ix.num_nodes, ix.num_signatures
        self.agent_node = np.asarray([x.node for x in lays], dtype=np.int64)
        self.svc = self._pad([x.actions for x in lays], a_max, ix.num_actions)
        self.route = self._pad([x.routes for x in lays], r_max, ix.num_routes)
        self.transfer = self._pad([x.transfers for x in lays], t_max, ix.num_transfers)
        self.retain = self._pad([x.retains for x in lays], k_max, ix.num_retains)
        self.nb_node = self._pad([x.neighbours for x in lays], nb_max, n)
        self.nb_delay = self._pad([x.neighbour_delays for x in lays], nb_max, 0)
        self.svc_valid = self.svc < ix.num_actions
        self.route_valid = self.route < ix.num_routes
        self.transfer_valid = self.transfer < ix.num_transfers
        self.retain_valid = self.retain < ix.num_retains
        self.nb_valid = self.nb_node < n
        self.route_slot = self._pad([x.route_neighbour for x in lays], r_max, 0)
        self.transfer_slot = self._pad([x.transfer_neighbour for x in lays], t_max, 0)
        route_comm = np.append(ix.route_commodity, 0)[self.route]
        self.route_comm = route_comm
        self.transfer_sig = np.append(ix.transfer_signature, 0)[self.transfer]
        self.rows = np.arange(n_ag)[:, None]
        # Signatures that make commodity c a hit at the head of each route (for the
        # "compatible memory at the destination" bit); S marks padding and reads 0.
        route_dst = np.append(ix.link_dst[ix.route_link], n)[self.route]
        compat: dict[tuple[int, int], list[int]] = {}
        for act in np.flatnonzero(ix.action_signature >= 0):
            key = (int(ix.action_node[act]), int(ix.action_commodity[act]))
            compat.setdefault(key, []).append(int(ix.action_signature[act]))
        width = max([1, *(len(v) for v in compat.values())])
        self.route_sigs = np.full((n_ag, r_max, width), s, dtype=np.int64)
        for q in range(n_ag):
            for k in range(r_max):
                found = compat.get((int(route_dst[q, k]), int(route_comm[q, k])), [])
                self.route_sigs[q, k, : len(found)] = found
        sizes = np.append(ix.signature_size, 0.0)
        self.transfer_size = sizes[np.append(ix.transfer_signature, s)[self.transfer]].astype(
            np.float32
        )
        bandwidth = np.append(ix.link_bandwidth, 0.0)
        self.transfer_bw = bandwidth[np.append(ix.transfer_link, ix.num_links)[self.transfer]]
        self.budget = ix.budget if self.memory else np.zeros(n)

    def _build_static_parts(self, up_index: np.ndarray) -> None:
        """The observation parts that never change: candidate indices, neighbour roles,
        capacities and costs, relays."""
        wl, ix = self.workload, self.workload.index
        lays = self.layouts
        n_ag = len(lays)
        nb_max = self.nb_max
        n = ix.num_nodes
        route_comm = self.route_comm
        sig = np.append(ix.action_signature, -1)
        comm = np.append(ix.action_commodity, -1)
        self.service_index = np.stack([comm[self.svc], sig[self.svc]], axis=1)
        self.route_index = np.stack(
            [
                np.where(self.route_valid, self.route_slot, -1),
                np.where(self.route_valid, route_comm, -1),
            ],
            axis=1,
        )
        self.transfer_index = np.stack(
            [
                np.where(self.transfer_valid, self.transfer_slot, -1),
                np.where(self.transfer_valid, self.transfer_sig, -1),
            ],
            axis=1,
        )
        self.retain_index = np.append(ix.retain_signature, -1)[self.retain]
        roles = np.zeros((n + 1, len(ROLES)), dtype=np.float32)
        roles[np.arange(n), [ROLES.index(node.role) for node in wl.nodes]] = 1.0
        static = np.zeros((n_ag, nb_max, len(NEIGHBOUR_STATIC_FEATURES)), dtype=np.float32)
        static[..., : len(ROLES)] = roles[self.nb_node]
        static[..., len(ROLES)] = np.append(ix.mu, 0.0)[self.nb_node]
        static[..., len(ROLES) + 1] = np.append(self.budget, 0.0)[self.nb_node]
        links = self._pad([x.neighbour_links for x in lays], nb_max, ix.num_links)
        for f, values in enumerate((ix.link_capacity, ix.link_cost, ix.link_bandwidth)):
            static[..., len(ROLES) + 2 + f] = np.append(values.astype(np.float64), 0.0)[links]
        self.nb_static = static
        self.upstream_index = up_index[self.agent_node]
        relay = np.zeros((n_ag, nb_max), dtype=bool)
        for q, x in enumerate(lays):
            relay[q, : len(x.relayed)] = x.relayed
        self.relay = relay
        self.route_cost = np.append(ix.link_cost[ix.route_link], 0.0)[self.route].astype(np.float32)

    def _build_score_map(self) -> None:
        """Where each agent's action entries go in the global score vector."""
        ix = self.workload.index
        n_ag = len(self.layouts)
        a_max, r_max, t_max, k_max = self.sizes
        offsets = np.cumsum([0, a_max, r_max, t_max])
        global_offsets = np.cumsum([0, ix.num_actions, ix.num_routes, ix.num_transfers])
        local_pos, global_pos = [], []
        d_local = a_max + r_max + t_max + k_max
        for q in range(n_ag):
            for block, (table, valid) in enumerate(
                (
                    (self.svc, self.svc_valid),
                    (self.route, self.route_valid),
                    (self.transfer, self.transfer_valid),
                    (self.retain, self.retain_valid),
                )
            ):
                cols = np.flatnonzero(valid[q])
                local_pos.append(q * d_local + offsets[block] + cols)
                global_pos.append(global_offsets[block] + table[q, cols])
        self.local_pos = np.concatenate(local_pos)
        self.global_pos = np.concatenate(global_pos)
        if np.unique(self.global_pos).size != ix.num_scores:
            raise AssertionError("every candidate must belong to exactly one agent")
        self.d_local = d_local

    # -- local features -----------------------------------------------------------------
    def route_features(
        self, own_queues: np.ndarray, nb_queues: np.ndarray, nb_memory: np.ndarray
    ) -> np.ndarray:
        """Each agent's route candidates: backlog difference as the agent sees it, link cost,
        compatible memory at the destination, own backlog.  # (n_ag, R, 4) float32"""
        rows = self.rows
        route = np.zeros((*self.route.shape, len(ROUTE_FEATURES)), dtype=np.float32)
        src = own_queues[rows, self.route_comm]
        dst = nb_queues[rows, self.route_slot, self.route_comm]
        padded_memory = np.concatenate(
            [nb_memory, np.zeros((*nb_memory.shape[:2], 1), dtype=np.float32)], axis=2
        )
        compatible = padded_memory[
            rows[:, :, None], self.route_slot[:, :, None], self.route_sigs
        ].max(axis=2, initial=0.0)
        valid = self.route_valid
        route[..., 0] = np.where(valid, src - dst, 0.0)
        route[..., 1] = self.route_cost
        route[..., 2] = np.where(valid, compatible, 0.0)
        route[..., 3] = np.where(valid, src, 0.0)

        return route

    def transfer_features(
        self, own_memory: np.ndarray, nb_memory: np.ndarray, nb_free: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each agent's transfer candidates (held here, size, room at the destination) and
        which of them could move now (held here, not there, fits the link and the room)."""
        rows = self.rows
        ix = self.workload.index
        transfer = np.zeros((*self.transfer.shape, len(TRANSFER_FEATURES)), dtype=np.float32)
        if ix.num_signatures:
            holds = own_memory[rows, self.transfer_sig] > 0
            dst_holds = nb_memory[rows, self.transfer_slot, self.transfer_sig] > 0
        else:
            holds = dst_holds = np.zeros(self.transfer.shape, dtype=bool)
        dst_free = nb_free[rows, self.transfer_slot]
        valid = self.transfer_valid
        transfer[..., 0] = holds & valid
        transfer[..., 1] = self.transfer_size
        transfer[..., 2] = np.where(valid, dst_free, 0.0)

        movable = (
            holds
            & ~dst_holds
            & valid
            & (self.transfer_size <= self.transfer_bw)
            & (self.transfer_size <= dst_free + 1e-9)
        )
        return transfer, movable

    def local_mask(self, mask: np.ndarray, movable: np.ndarray) -> np.ndarray:
        """Each agent's candidate mask: the global mask's service and route entries, the
        movable transfers, every retain candidate.  # (n_ag, D_local) int8"""
        ix = self.workload.index
        n_act, n_route = ix.num_actions, ix.num_routes
        a, r, tt, _ = self.sizes
        local_mask = np.zeros((len(self.layouts), self.d_local), dtype=np.int8)
        local_mask[:, :a] = np.append(mask[:n_act], 0)[self.svc]
        local_mask[:, a : a + r] = np.append(mask[n_act : n_act + n_route], 0)[self.route]
        local_mask[:, a + r : a + r + tt] = movable
        local_mask[:, a + r + tt :] = self.retain_valid
        return local_mask


def gather_rows(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` of ``table``; the index ``len(table)`` pads with a row of zeros."""
    padded = np.concatenate([table, np.zeros((1, table.shape[1]), dtype=table.dtype)])
    return padded[index]
