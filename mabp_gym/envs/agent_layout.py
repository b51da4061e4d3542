"""What each agent of the decentralized view owns and whom it hears from.

:func:`agent_layouts` lists, once per workload, every agent's :class:`AgentLayout`: its
candidates, its out-neighbours and the routes into its node (global indices), the age of
what it receives over each link and the telemetry it receives and sends per slot.
:data:`NEIGHBOUR_STATIC_FEATURES` names the columns of what an agent knows of a neighbour
that never changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from mabp_gym.core.workload import ROLES, Workload

NEIGHBOUR_STATIC_FEATURES = (
    *(f"role_{r}" for r in ROLES),
    "mu",
    "budget",
    "link_capacity",
    "link_cost",
    "link_bandwidth",
)
"""Columns of ``neighbour_static``: role one-hot, ``mu``, budget, and the capacity, cost and
bandwidth of the link to the neighbour."""


@dataclass(frozen=True, eq=False)
class AgentLayout:
    """What one agent owns and whom it hears from (static; global indices).

    The agent's action is ``[service (A) | route (R) | transfer (T) | retain (K)]`` with
    every block padded to the largest agent's (``SFMSNParallelEnv.local_slices``); row
    ``k`` of a block scores the ``k``-th candidate listed here.
    """

    name: str
    node: int
    actions: np.ndarray  # (A_i,) int64, service candidates (global action ids)
    routes: np.ndarray  # (R_i,) int64, route candidates on links leaving the node
    transfers: np.ndarray  # (T_i,) int64, transfer candidates on links leaving the node
    retains: np.ndarray  # (K_i,) int64, retain candidates of the node
    neighbours: np.ndarray  # (Nb_i,) int64, heads of the node's links, in link order
    neighbour_links: np.ndarray  # (Nb_i,) int64, the link to each neighbour
    neighbour_delays: np.ndarray  # (Nb_i,) int64, age of each neighbour's telemetry
    route_neighbour: np.ndarray  # (R_i,) int64, neighbour slot of each route's head
    transfer_neighbour: np.ndarray  # (T_i,) int64, neighbour slot of each transfer's head
    upstream_routes: np.ndarray  # (U_i,) int64, route candidates INTO the node (ascending)
    upstream_delays: np.ndarray  # (U_i,) int64, age of each upstream queue length
    relayed: np.ndarray  # (Nb_i,) bool, the neighbour relays its upstream queue lengths
    telemetry_received: int  # numbers received per slot
    telemetry_sent: int  # numbers this node's message costs per slot, summed over readers


def agent_layouts(workload: Workload, delays: np.ndarray, memory: bool) -> list[AgentLayout]:
    """One layout per node with at least one candidate, in node order; ``delays`` is the
    ``(E,)`` telemetry delay per link and ``memory`` whether nodes publish residency."""
    ix = workload.index
    route_src = ix.link_src[ix.route_link]
    transfer_src = ix.link_src[ix.transfer_link]
    route_dst = ix.link_dst[ix.route_link]
    # Message of node j to the tails of its links: its backlog on its admissible pairs
    # and, with memory, its residency bits of the signatures it can hold plus its free
    # budget. Over a link that carries transfers it adds the upstream queue lengths it
    # received (one per route into j), relayed so that the tail can value j's memory as j
    # does. Besides, j sends the head of each of its routes its queue length of the
    # route's commodity (one number per route).
    pairs = np.bincount(ix.pair_node, minlength=ix.num_nodes)
    inbound = np.bincount(route_dst, minlength=ix.num_nodes)
    holdable = ix.eligible.sum(axis=1) if memory else np.zeros(ix.num_nodes, dtype=np.int64)
    message = pairs + holdable + (holdable > 0)
    readers = np.zeros(ix.num_nodes, dtype=np.int64)
    relay_readers = np.zeros(ix.num_nodes, dtype=np.int64)
    carries_transfers = np.zeros(ix.num_links, dtype=bool)
    carries_transfers[ix.transfer_link] = True
    layouts = []
    for i, node in enumerate(workload.nodes):
        actions = np.flatnonzero(ix.action_node == i)
        routes = np.flatnonzero(route_src == i)
        transfers = np.flatnonzero(transfer_src == i)
        retains = np.flatnonzero(ix.retain_node == i)
        if not (actions.size or routes.size or transfers.size or retains.size):
            continue
        links = np.flatnonzero(ix.link_src == i)
        neighbours = ix.link_dst[links]
        upstream = np.flatnonzero(route_dst == i)
        slot_of = {int(j): k for k, j in enumerate(neighbours)}
        readers[neighbours] += 1
        relayed = carries_transfers[links]
        relay_readers[neighbours[relayed]] += 1
        layouts.append(
            AgentLayout(
                name=node.name,
                node=i,
                actions=actions,
                routes=routes,
                transfers=transfers,
                retains=retains,
                neighbours=neighbours.copy(),
                neighbour_links=links,
                neighbour_delays=delays[links].copy(),
                route_neighbour=np.asarray(
                    [slot_of[int(ix.link_dst[ix.route_link[r]])] for r in routes], dtype=np.int64
                ),
                transfer_neighbour=np.asarray(
                    [slot_of[int(ix.link_dst[ix.transfer_link[k]])] for k in transfers],
                    dtype=np.int64,
                ),
                upstream_routes=upstream,
                upstream_delays=delays[ix.route_link[upstream]].copy(),
                relayed=relayed,
                telemetry_received=int(
                    message[neighbours].sum() + inbound[neighbours[relayed]].sum() + upstream.size
                ),
                telemetry_sent=0,
            )
        )
    # Upstream queue lengths go only to heads that are agents (that read observations).
    is_agent = np.zeros(ix.num_nodes, dtype=bool)
    is_agent[[x.node for x in layouts]] = True
    outbound = np.bincount(route_src[is_agent[route_dst]], minlength=ix.num_nodes)
    return [
        replace(
            x,
            telemetry_sent=int(
                message[x.node] * readers[x.node]
                + inbound[x.node] * relay_readers[x.node]
                + outbound[x.node]
            ),
        )
        for x in layouts
    ]
