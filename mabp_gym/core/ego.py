"""An agent's local observation as its ego network, for GNN policies (SPEC 10).

The ego network of agent ``i`` has node 0 = ``i`` and nodes ``1..Nb`` = its out-neighbours
(the heads of its links), with one edge ``0 -> k`` per link. Node features are what the
agent knows of each node (its own state fresh, its neighbours' as stale as the telemetry);
candidate tables hang off the graph the way :func:`mabp_gym.to_pyg` hangs the global ones:
service and retain rows on node 0, route and transfer rows on the edge of their link.

``ego_graph(obs)`` returns numpy arrays with every padded neighbour kept (fixed shapes,
batchable by stacking); ``ego_pyg(obs)`` returns a ``torch_geometric.data.Data`` with the
padded neighbours dropped (torch and PyG are imported on first use only).

The upstream telemetry (in-neighbours' queue lengths of the commodities they route to the
agent) has no node of its own in the ego network: it rides on node 0 as ``upstream_x``
rows, one per route into the agent, and each edge carries the head's relayed upstream
queue lengths (``edge_upstream``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mabp_gym.core.workload import ROLES

EGO_NODE_FEATURES = (
    "is_self",
    "telemetry_age",
    "queues...",
    "memory...",
    "roles...",
    "mu",
    "budget",
)
"""Layout of a row of ``x``: 2 + C + S + len(ROLES) + 2 columns."""


def ego_graph(obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ego network of one agent's observation, as fixed-shape numpy arrays.

    Returns:
        ``x`` ``(1 + Nb, 2 + C + S + 9)`` float32 (see :data:`EGO_NODE_FEATURES`);
        ``node_mask`` ``(1 + Nb,)`` bool; ``edge_index`` ``(2, Nb)`` int64 (``0 -> k``);
        ``edge_attr`` ``(Nb, 3)``: link capacity, cost, bandwidth; ``edge_mask`` ``(Nb,)``;
        ``service_x`` / ``route_x`` / ``transfer_x`` / ``retain_x``: the candidate rows;
        ``route_edge`` ``(R_max,)`` and ``transfer_edge`` ``(T_max,)``: the edge of each
        row (``-1`` pads); ``candidate_mask`` ``(D_l,)`` bool; ``upstream_x`` ``(U, 3)``
        float32: queue length, its age and the fanout of its source pair, one row per
        route into the agent; ``upstream_commodity`` ``(U,)`` (``-1`` pads);
        ``edge_upstream`` ``(Nb, U)``: the head's upstream queue lengths as it relays them.
    """
    if not isinstance(obs, Mapping) or "neighbour_queues" not in obs:
        keys = sorted(obs)[:4] if isinstance(obs, Mapping) else type(obs).__name__
        raise ValueError(
            "ego_graph reads one agent's observation of the parallel env (obs[agent], with "
            f"'node', 'neighbour_queues', ...), got {keys!r}: the all-agents dict or the "
            "single env's observation?"
        )
    node = np.asarray(obs["node"], dtype=np.float32)
    queues = np.asarray(obs["queues"], dtype=np.float32)
    memory = np.asarray(obs["memory"], dtype=np.float32)
    nb_queues = np.asarray(obs["neighbour_queues"], dtype=np.float32)
    nb_memory = np.asarray(obs["neighbour_memory"], dtype=np.float32)
    static = np.asarray(obs["neighbour_static"], dtype=np.float32)
    nb_mask = np.asarray(obs["neighbour_mask"]).astype(bool)
    nb = nb_queues.shape[0]
    roles = len(ROLES)
    own = np.concatenate([[1.0, 0.0], queues, memory, node[: roles + 2]]).astype(np.float32)
    others = np.concatenate(
        [
            np.zeros((nb, 1), dtype=np.float32),
            np.asarray(obs["neighbour_age"], dtype=np.float32)[:, None],
            nb_queues,
            nb_memory,
            static[:, : roles + 2],
        ],
        axis=1,
    )
    route_index = np.asarray(obs["route_index"])
    transfer_index = np.asarray(obs["transfer_index"])
    upstream_index = np.asarray(obs["upstream_index"])
    return {
        "x": np.concatenate([own[None, :], others], axis=0),
        "node_mask": np.concatenate([[True], nb_mask]),
        "edge_index": np.stack(
            [np.zeros(nb, dtype=np.int64), np.arange(1, nb + 1, dtype=np.int64)]
        ),
        "edge_attr": static[:, roles + 2 :].copy(),
        "edge_mask": nb_mask,
        "service_x": np.asarray(obs["service"], dtype=np.float32),
        "route_x": np.asarray(obs["route"], dtype=np.float32),
        "route_edge": route_index[0].astype(np.int64),
        "transfer_x": np.asarray(obs["transfer"], dtype=np.float32),
        "transfer_edge": transfer_index[0].astype(np.int64),
        "retain_x": np.asarray(obs["retain"], dtype=np.float32),
        "candidate_mask": np.asarray(obs["candidate_mask"]).astype(bool),
        "upstream_x": np.stack(
            [
                np.asarray(obs["upstream_queues"], dtype=np.float32),
                np.asarray(obs["upstream_age"], dtype=np.float32),
                np.asarray(upstream_index[1], dtype=np.float32),
            ],
            axis=1,
        ),
        "upstream_commodity": upstream_index[0].astype(np.int64),
        "edge_upstream": np.asarray(obs["neighbour_upstream"], dtype=np.float32),
    }


def ego_pyg(obs: Mapping[str, np.ndarray]) -> Any:
    """The ego network as a ``torch_geometric.data.Data`` without padded neighbours.

    ``x``, ``edge_index`` and ``edge_attr`` hold the real neighbours only (node ``k`` of
    the padded layout keeps its number when every neighbour before it is real, which
    :func:`mabp_gym.parallel_env` guarantees: padding comes last). Candidate tables keep
    their padded rows (``candidate_mask`` tells which act), so a model's per-row scores
    land in the agent's action layout unchanged.
    """
    import torch
    from torch_geometric.data import Data

    graph = ego_graph(obs)
    keep = graph["node_mask"]
    edges = graph["edge_mask"]
    per_edge = ("edge_attr", "edge_upstream")
    tensors = {
        key: torch.as_tensor(value)
        for key, value in graph.items()
        if key not in ("x", "node_mask", "edge_index", "edge_mask", *per_edge)
    }
    return Data(
        x=torch.as_tensor(graph["x"][keep]),
        edge_index=torch.as_tensor(graph["edge_index"][:, edges]),
        **{key: torch.as_tensor(graph[key][edges]) for key in per_edge},
        **tensors,
    )
