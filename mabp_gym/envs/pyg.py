"""Observation -> PyTorch Geometric graph, for one observation or a batch, without loops.

``to_pyg(obs)`` takes the env's Dict observation (numpy arrays or torch tensors, with or
without a leading batch dimension) and returns one :class:`torch_geometric.data.Data`
holding every graph of the batch, batched by index offsets (``Batch.from_data_list`` is
far slower for many small graphs):

- ``x`` ``(B*N, F)``: node table, queues and memory residency of each node;
  ``edge_index`` ``(2, B*E)`` long; ``edge_attr`` ``(B*E, 3)``; ``batch`` ``(B*N,)``;
- ``service_x`` ``(B*A, 5)`` with ``service_node`` ``(B*A,)`` (global node ids) and
  ``service_commodity``; ``route_x`` ``(B*R, 4)`` with ``route_edge`` (global edge ids),
  ``route_src``, ``route_dst`` (global node ids) and ``route_commodity``; ``transfer_x``
  ``(B*T, 3)`` with ``transfer_edge`` and ``transfer_signature``; ``retain_x`` ``(B*K, 3)``
  with ``retain_node`` and ``retain_signature``;
- ``action_mask`` ``(B, D)`` bool; ``num_graphs`` ``B``.

stable-baselines3 hands models every ``Box`` as float: index arrays are cast back to long.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data


def _tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


GRAPH_KEYS = (
    "node_features",
    "queues",
    "memory",
    "edge_index",
    "edge_features",
    "service",
    "service_index",
    "route",
    "route_index",
    "transfer",
    "transfer_index",
    "retain",
    "retain_index",
    "action_mask",
)
"""The observation's arrays the graph is made of (every key of the dict observation)."""


def to_pyg(obs: Mapping[str, Any]) -> Data:
    """Convert one observation or a batch of observations into a batched PyG ``Data``.

    Raises:
        ValueError: ``obs`` is not the env's dict observation (a flat one, a list), or
            lacks one of its keys.
    """
    if not (hasattr(obs, "items") and hasattr(obs, "keys")):  # a dict, a TensorDict
        raise ValueError(
            "to_pyg takes the env's dict observation (obs_mode='dict', no FlattenObservation), "
            f"or a vector env's batch of them, got {type(obs).__name__}"
        )
    missing = [key for key in GRAPH_KEYS if key not in obs]
    if missing:
        raise ValueError(f"to_pyg: the observation lacks {missing}; it needs {list(GRAPH_KEYS)}")
    tensors = {key: _tensor(value) for key, value in obs.items()}
    single = tensors["node_features"].dim() == 2
    if single:
        tensors = {key: value.unsqueeze(0) for key, value in tensors.items()}
    nodes = tensors["node_features"].float()
    batch_size, n_nodes = nodes.shape[0], nodes.shape[1]
    n_edges = tensors["edge_index"].shape[-1]
    device = nodes.device
    graph = torch.arange(batch_size, device=device)
    node_offset = (graph * n_nodes).view(batch_size, 1)
    edge_offset = (graph * n_edges).view(batch_size, 1)

    x = torch.cat([nodes, tensors["queues"].float(), tensors["memory"].float()], dim=-1)
    edge_index = tensors["edge_index"].round().long()  # (B, 2, E)
    edge_index = (edge_index + node_offset.view(batch_size, 1, 1)).permute(1, 0, 2)

    def flat(key: str) -> torch.Tensor:
        value = tensors[key].float()
        return value.reshape(-1, value.shape[-1])

    def index(key: str, row: int) -> torch.Tensor:
        return tensors[key][:, row, :].round().long()

    service_node = index("service_index", 0) + node_offset
    route_edge = index("route_index", 0) + edge_offset
    flat_edges = edge_index.reshape(2, -1)
    transfer_edge = index("transfer_index", 0) + edge_offset
    return Data(
        x=x.reshape(batch_size * n_nodes, -1),
        edge_index=flat_edges,
        edge_attr=flat("edge_features"),
        batch=graph.repeat_interleave(n_nodes),
        service_x=flat("service"),
        service_node=service_node.reshape(-1),
        service_commodity=index("service_index", 1).reshape(-1),
        route_x=flat("route"),
        route_edge=route_edge.reshape(-1),
        route_src=flat_edges[0, route_edge.reshape(-1)],
        route_dst=flat_edges[1, route_edge.reshape(-1)],
        route_commodity=index("route_index", 1).reshape(-1),
        transfer_x=flat("transfer"),
        transfer_edge=transfer_edge.reshape(-1),
        transfer_signature=index("transfer_index", 1).reshape(-1),
        retain_x=flat("retain"),
        retain_node=(index("retain_index", 0) + node_offset).reshape(-1),
        retain_signature=index("retain_index", 1).reshape(-1),
        action_mask=tensors["action_mask"].bool().reshape(batch_size, -1),
        num_graphs=batch_size,
        num_nodes=batch_size * n_nodes,
    )
