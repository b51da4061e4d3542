"""The PyTorch Geometric GNN scheduler: message passing over the observation graph, one score
per candidate, the same telemetry as MABP and the same projection as every policy.

:class:`GNNScheduler` is a plain ``nn.Module`` over the batched graph of
:func:`mabp_gym.envs.pyg.to_pyg` (graphs batched by index offsets, never
``Batch.from_data_list``). :class:`GNNPolicy` wraps a trained checkpoint as a
:class:`~mabp_gym.agents.base.Policy`, so the evaluation harness runs it like any scripted agent;
its ``scores_batch`` scores a whole vector of observations in one forward pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import GINEConv

from mabp_gym.agents import checkpoint_file
from mabp_gym.agents.base import Policy
from mabp_gym.agents.checkpoint_file import given_checkpoint, missing_checkpoint
from mabp_gym.core.encoding import symlog
from mabp_gym.core.workload import Workload
from mabp_gym.envs.pyg import to_pyg

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[k], sizes[k + 1]))
        if k < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _first_weight(head: nn.Sequential) -> torch.Tensor:
    first = head[0]
    assert isinstance(first, nn.Linear)
    return first.weight


def observation_dims(observation_space: Any) -> dict[str, int]:
    """Input widths the model needs, from the env's observation space."""

    def width(key: str) -> int:
        return int(observation_space[key].shape[-1])

    return {
        "node": width("node_features") + width("queues") + width("memory"),
        "edge": width("edge_features"),
        "service": width("service"),
        "route": width("route"),
        "transfer": width("transfer"),
        "retain": width("retain"),
        "scores": int(observation_space["action_mask"].shape[0]),
    }


class Candidates(NamedTuple):
    """Where each candidate reads the embeddings, and its own features (from
    :func:`mabp_gym.envs.pyg.to_pyg`, global ids over the batch)."""

    service_node: torch.Tensor  # (B*A,) long
    service_x: torch.Tensor  # (B*A, 5)
    route_edge: torch.Tensor  # (B*R,) long
    route_x: torch.Tensor  # (B*R, 4)
    transfer_edge: torch.Tensor  # (B*T,) long
    transfer_x: torch.Tensor  # (B*T, 3)
    retain_node: torch.Tensor  # (B*K,) long
    retain_x: torch.Tensor  # (B*K, 3)

    @classmethod
    def of(cls, graph: Any) -> Candidates:
        """The candidates of a ``Data`` from :func:`mabp_gym.envs.pyg.to_pyg`."""
        return cls(*(getattr(graph, name) for name in cls._fields))


class GNNScheduler(nn.Module):
    """GINE message passing with edge features and per-candidate read-outs.

    Each read-out is a two-layer MLP over ``[node or link embeddings | the candidate's own
    features]``. Its first layer is linear, so it is applied in parts: the embedding part
    once per node (and, for a link, per end node and per link), the candidate part to the
    candidate's few features; a candidate then costs a gather, a small product and the
    last layer (the same outputs as the MLP over the concatenated input, to float
    rounding; ``tests/test_sb3_policy.py`` checks it).

    Args:
        dims: input widths (:func:`observation_dims`).
        hidden: embedding width. layers: message-passing rounds.
        readout: width of the read-outs' hidden layer (default: ``hidden``).

    Shapes:
        input: node features ``x`` ``(B*N, F)``, ``edge_index`` ``(2, B*E)``, ``edge_attr``
        ``(B*E, 3)``, the :class:`Candidates` and ``num_graphs`` ``B``, as
        :func:`mabp_gym.envs.pyg.to_pyg` batches them (:meth:`forward_graph` takes its ``Data``);
        output: scores ``(B, D)`` in ``(-1, 1)`` (softsign: monotone, so the projection
        sees the raw order, and SB3's clipping of actions to the Box never ties them) and a
        graph embedding ``(B, 2 * hidden)`` for a value head.
    """

    def __init__(
        self, dims: dict[str, int], hidden: int = 64, layers: int = 3, readout: int | None = None
    ) -> None:
        super().__init__()
        self.dims = dict(dims)
        self.hidden = hidden
        self.readout = hidden if readout is None else int(readout)
        width = self.readout
        self.node_in = _mlp([dims["node"], hidden, hidden])
        self.edge_in = nn.Linear(dims["edge"], hidden)
        self.convs = nn.ModuleList(
            GINEConv(_mlp([hidden, hidden, hidden]), edge_dim=hidden) for _ in range(layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.service_head = _mlp([hidden + dims["service"], width, 1])
        self.route_head = _mlp([3 * hidden + dims["route"], width, 1])
        self.transfer_head = _mlp([3 * hidden + dims["transfer"], width, 1])
        self.retain_head = _mlp([hidden + dims["retain"], width, 1])

    def embed(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Node embeddings ``(B*N, hidden)`` and link embeddings ``(B*E, hidden)``.

        Each round is PyG's ``GINEConv`` (``nn((1 + eps) h + sum_j relu(h_j + lin(e_ji)))``,
        summed at each link's destination) with a residual and a layer norm."""
        h = self.node_in(symlog(x))
        e = self.edge_in(symlog(edge_attr))
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = norm(h + torch.relu(conv(h, edge_index, e)))
        return h, e

    def forward(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor,
        candidates: Candidates,
        num_graphs: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores ``(B, D)`` and the pooled graph embedding ``(B, 2 * hidden)``."""
        batch = num_graphs
        h, e = self.embed(x, edge_index, edge_attr)
        src, dst = edge_index
        hid = self.hidden

        def node_part(head: nn.Sequential) -> tuple[torch.Tensor, torch.Tensor]:
            weight = _first_weight(head)  # [h_node | x]
            return h @ weight[:, :hid].T, weight[:, hid:]

        def link_part(head: nn.Sequential) -> tuple[torch.Tensor, torch.Tensor]:
            weight = _first_weight(head)  # [h_src | h_dst | e | x]: node parts per node first
            per_link = (
                (h @ weight[:, :hid].T).index_select(0, src)
                + (h @ weight[:, hid : 2 * hid].T).index_select(0, dst)
                + e @ weight[:, 2 * hid : 3 * hid].T
            )
            return per_link, weight[:, 3 * hid :]

        def read(head, part, where, features) -> torch.Tensor:
            shared, own = part
            first = shared.index_select(0, where) + torch.addmm(
                head[0].bias, symlog(features), own.T
            )
            return head[2](torch.relu(first)).reshape(batch, -1)

        c = candidates
        heads = (
            (self.service_head, node_part, c.service_node, c.service_x),
            (self.route_head, link_part, c.route_edge, c.route_x),
            (self.transfer_head, link_part, c.transfer_edge, c.transfer_x),
            (self.retain_head, node_part, c.retain_node, c.retain_x),
        )
        raw = torch.cat([read(head, part(head), where, x) for head, part, where, x in heads], 1)
        h3 = h.view(batch, -1, hid)  # every graph of a batch has the same node count
        pooled = torch.cat([h3.mean(dim=1), h3.amax(dim=1)], dim=-1)
        return nn.functional.softsign(raw), pooled

    def forward_graph(self, graph: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` on a batched ``Data`` from :func:`mabp_gym.envs.pyg.to_pyg`."""
        return self(
            graph.x, graph.edge_index, graph.edge_attr, Candidates.of(graph), graph.num_graphs
        )

    def scores(self, obs: dict[str, Any]) -> torch.Tensor:
        """Scores ``(B, D)`` for an observation dict (with or without a batch dimension)."""
        return self.forward_graph(to_pyg(obs))[0]


def shape_of(workload: Workload) -> dict[str, int]:
    """What a checkpoint must match: the candidate counts and graph sizes."""
    ix = workload.index
    return {
        "nodes": ix.num_nodes,
        "links": ix.num_links,
        "commodities": ix.num_commodities,
        "signatures": ix.num_signatures,
        "actions": ix.num_actions,
        "routes": ix.num_routes,
        "transfers": ix.num_transfers,
        "retains": ix.num_retains,
    }


TRAINED_NU = 5.0
"""The ``nu`` GNN training runs at (the env's and MABP's default): a checkpoint acts for it."""


def save_checkpoint(path: str | Path, model: GNNScheduler, workload: Workload, **extra: Any) -> str:
    """Save the model with the full description of the workload it was trained for
    (``extra``: JSON-serializable notes such as the epoch or the command); return the
    content digest. See :mod:`mabp_gym.agents.checkpoint_file` for the format."""
    meta = {
        "nu": TRAINED_NU,  # the training's rewards and teacher: the env's and MABP's default
        "dims": model.dims,
        "hidden": model.hidden,
        "layers": len(model.convs),
        "workload": workload.name,
        "shape": shape_of(workload),
        "workload_identity": checkpoint_file.workload_identity(workload),
        **extra,
    }
    return checkpoint_file.save(path, "gnn", dict(model.state_dict()), meta)


def load_checkpoint(
    path: str | Path, workload: Workload, device: str = "cpu", *, any_parameters: bool = False
) -> tuple[GNNScheduler, dict[str, Any]]:
    """Load a GNN checkpoint (read with ``weights_only=True``, digest verified).

    Args:
        path: the checkpoint file.
        workload: the workload it will schedule.
        device: where the model goes.
        any_parameters: accept a workload of the same shape whose parameters differ from
            the training workload's (a transfer experiment); by default that is refused.

    Raises:
        ValueError: the file is not a sound GNN checkpoint, or was made for another shape
            (or, unless ``any_parameters``, for other parameters; they are named).
    """
    tensors, meta = checkpoint_file.load(path, "gnn")
    expected = shape_of(workload)
    if meta.get("shape") != expected:
        raise ValueError(
            f"checkpoint {path} was trained on workload {meta.get('workload')!r} with shape "
            f"{meta.get('shape')}, but this workload {workload.name!r} has shape {expected}"
        )
    if not any_parameters:
        checkpoint_file.check_workload(meta, workload, path)
    try:
        model = GNNScheduler(meta["dims"], hidden=int(meta["hidden"]), layers=int(meta["layers"]))
        model.load_state_dict(tensors)
    except (KeyError, TypeError, RuntimeError) as error:
        raise ValueError(
            f"{path}: the stored model does not fit the GNN "
            f"({type(error).__name__}: {str(error).splitlines()[0][:200]})"
        ) from None
    model.to(device).eval()
    return model, meta


def default_checkpoint(workload_name: str) -> Path:
    """The shipped checkpoint ``make_policy("gnn", ...)`` loads for a workload."""
    return checkpoint_file.default_checkpoint("gnn", workload_name)


class GNNPolicy(Policy):
    """A trained GNN scheduler as a policy (scores for the shared projection).

    Args:
        checkpoint: a file saved by :func:`save_checkpoint` (default: the checkpoint
            shipped for ``mixed``).
        device: ``"auto"`` (cuda when available), ``"cpu"`` or ``"cuda"``.
        any_parameters: run a checkpoint on a workload of the same shape but other
            parameters, or at another ``nu`` than it was trained at (both refused by
            default: see :func:`load_checkpoint`; the scores do not read ``nu``).
    """

    name = "gnn"
    memory_aware = True

    def __init__(
        self,
        workload: Workload,
        *,
        checkpoint: str | Path | None = None,
        device: str = "cpu",
        any_parameters: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(workload, **kw)
        path = given_checkpoint(checkpoint, lambda: default_checkpoint(workload.name))
        if not path.exists():
            raise ValueError(missing_checkpoint("gnn", path, workload, "GNN"))
        self.device = resolve_device(device)
        self.model, self.info = load_checkpoint(
            path, workload, self.device, any_parameters=bool(any_parameters)
        )
        # The observation does not hold nu: the scores are the trained nu's whatever this
        # policy's nu says. Checkpoints made before nu was recorded were trained at 5.
        trained_nu = float(self.info.get("nu", TRAINED_NU))
        if self.nu != trained_nu and not any_parameters:
            raise ValueError(
                f"the GNN checkpoint {path} was trained at nu={trained_nu:g} and its scores do "
                f"not read nu, so it cannot act for nu={self.nu:g}: run it at nu="
                f"{trained_nu:g}, train one at this nu, or pass any_parameters=True (a "
                "transfer experiment)"
            )
        self.checkpoint = str(path)

    @torch.no_grad()
    def scores_batch(self, obs: dict[str, Any]) -> np.ndarray:
        """Scores ``(B, D)`` for a batch of observations (one forward pass)."""
        tensors = {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in obs.items()}
        return self.model.scores(tensors).double().cpu().numpy()

    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """One observation's scores ``(D,)`` (a batch goes to :meth:`scores_batch`)."""
        self._queues(obs)  # this workload's dict observation, one env's: else say so
        self.t += 1
        return self.scores_batch(obs)[0]


def resolve_device(device: str | torch.device) -> str:
    """``"auto"`` -> ``"cuda"`` when available, else ``"cpu"``; a ``torch.device`` is read
    as its name."""
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:k]', got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:k]', got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for but torch sees no CUDA device")
    return device
