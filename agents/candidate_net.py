"""The fast per-candidate network behind :class:`mabp_gym.envs.sb3.GraphActorCriticPolicy`.

Message passing runs over the workload's graph, and every candidate's score is a gather
and a small product: the network computes, per node and per link, the coefficients of a
linear function of a candidate's own features (symlog-scaled), and a candidate's score is
that function of its features,

    score(c) = softsign(alpha[n(c)] + beta[n(c)] . symlog(x_c)),

where ``n(c)`` is the candidate's node (service, retain) or link (route, transfer). The
nonlinear work is per node and per link (8 and 21 on ``mixed``), not per candidate (384):
an MLP per candidate cost 86% of a forward. A linear function of symlog features still
orders candidates by ratios such as queue over work, which is what a backpressure
priority is.

Batches keep the batch as an inner dimension (``(rows, B, width)``): every graph of a
batch has the same structure (one workload), so a gather or a scatter moves one block of
``B`` rows per node, link or candidate instead of one row per graph and candidate, which
is what makes the backward pass cheap on a CPU. A batch that mixes structures is refused.

Every parameter's shape is independent of the workload (the node and edge tables and the
candidates' feature widths are fixed), so one ``state_dict`` runs on every workload.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mabp_gym.core.encoding import symlog

KINDS = ("service", "route", "transfer", "retain")
"""The candidate kinds in the action's layout."""

STRUCTURE = {
    "service": ("service_index", "node"),
    "route": ("route_index", "link"),
    "transfer": ("transfer_index", "link"),
    "retain": ("retain_index", "node"),
}
"""Each kind's index array (row 0: the node or link a candidate belongs to) and which
table its coefficients come from."""


def _symlog(x: torch.Tensor) -> torch.Tensor:
    """``symlog`` of an input array as float: one pass to a new tensor, the rest in place
    (``log(1 + |x|)`` as an add and a log, which vectorize where ``log1p`` does not; the
    same values to float precision). The observation itself is never written."""
    if x.requires_grad:
        return symlog(x.float())
    y = x.abs() if x.dtype == torch.float32 else x.float().abs_()
    return y.add_(1.0).log_().copysign_(x)


def _static(obs: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    """The structural index array ``key`` of the batch's first graph, as long, after
    checking that every graph of the batch has the same one."""
    index = obs[key]
    if index.shape[0] > 1 and not torch.equal(index, index[:1].expand_as(index)):
        raise ValueError(
            f"the observations of one batch have different {key!r} arrays: the graph "
            "policy batches graphs of one workload structure (one env id and workload per "
            "vector env)"
        )
    return index[0].round().long()


class _Structure:
    """What one workload structure gives every forward: the message-passing endpoints and
    each candidate's node or link, built once per structure and dtype of the index arrays
    (SB3's rollout buffer hands them back as floats).

    ``matches`` checks that every graph of a batch has this structure (one compare per
    index array); :func:`_static` is the full check with its message when they do not."""

    KEYS = ("edge_index", *(STRUCTURE[kind][0] for kind in KINDS))

    def __init__(self, obs: dict[str, torch.Tensor]) -> None:
        self.rows = {key: obs[key][:1].clone() for key in self.KEYS}
        self.src, self.dst = _static(obs, "edge_index")
        # Each kind's candidates' rows in its node or link table.
        self.owner = {kind: _static(obs, STRUCTURE[kind][0])[0] for kind in KINDS}

    def matches(self, obs: dict[str, torch.Tensor]) -> bool:
        for key, row in self.rows.items():
            index = obs[key]
            if index.dtype != row.dtype or index.shape[1:] != row.shape[1:]:
                return False
            if not torch.equal(index, row.expand_as(index)):
                return False
        return True


class CandidateNet(nn.Module):
    """GINE-style message passing and per-node / per-link coefficients of every
    candidate's linear score.

    Args:
        widths: input widths: ``node`` (the node table), ``edge``, and one per kind
            (``service``, ``route``, ``transfer``, ``retain``).
        hidden: embedding width. layers: message-passing rounds.
        score_bias: every score's initial mean before the softsign (the last layers start
            with small weights and this bias): a fresh policy acts on every candidate.

    Shapes:
        input: the env's Dict observation with a batch dimension ``B`` (tensors);
        output: scores ``(B, D)`` in ``(-1, 1)`` and a critic latent ``(B, hidden)``.
    """

    def __init__(
        self, widths: dict[str, int], hidden: int = 32, layers: int = 3, score_bias: float = 0.5
    ) -> None:
        super().__init__()
        self.widths = dict(widths)
        self.hidden = hidden
        self.node_in = nn.Sequential(
            nn.Linear(widths["node"], hidden), nn.ReLU(), nn.Linear(hidden, hidden)
        )
        self.edge_in = nn.Linear(widths["edge"], hidden)
        self.edge_lin = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.update = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            for _ in range(layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        # Per node: service and retain coefficients; per link: route and transfer ones.
        self.split = {kind: 1 + widths[kind] for kind in KINDS}
        self._structures: dict[torch.dtype, _Structure] = {}  # per index dtype, not saved
        self.node_head = nn.Sequential(
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, self.split["service"] + self.split["retain"]),
        )
        self.link_head = nn.Sequential(
            nn.Linear(3 * hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, self.split["route"] + self.split["transfer"]),
        )
        self.value = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        with torch.no_grad():
            for head, kinds in (
                (self.node_head, ("service", "retain")),
                (self.link_head, ("route", "transfer")),
            ):
                last = head[-1]
                assert isinstance(last, nn.Linear)
                last.weight.mul_(0.01)
                last.bias.zero_()
                start = 0
                for kind in kinds:
                    last.bias[start] = score_bias  # alpha; the betas start at 0
                    start += self.split[kind]

    def forward(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        nodes = obs["node_features"]
        structure = self._structure(obs)
        src, dst = structure.src, structure.dst
        # (rows, B, width): the batch is the inner dimension.
        h = self.node_in(_symlog(nodes).transpose(0, 1))
        e = self.edge_in(_symlog(obs["edge_features"]).transpose(0, 1))
        for lin, update, norm in zip(self.edge_lin, self.update, self.norms, strict=True):
            message = torch.relu(h.index_select(0, src) + lin(e))
            total = torch.zeros_like(h).index_add_(0, dst, message)
            h = norm(h + torch.relu(update(total + h)))
        node = self.node_head(h)
        link = self.link_head[2](torch.relu(self._link_in(h, e, src, dst)))
        service, retain = node.split([self.split["service"], self.split["retain"]], dim=-1)
        route, transfer = link.split([self.split["route"], self.split["transfer"]], dim=-1)
        tables = {"service": service, "route": route, "transfer": transfer, "retain": retain}
        raw = torch.cat(
            [self._scores(tables[kind], structure.owner[kind], obs[kind]) for kind in KINDS]
        ).T  # (B, D), in the action's layout
        pooled = torch.cat([h.mean(dim=0), h.amax(dim=0)], dim=-1)
        return nn.functional.softsign(raw), self.value(pooled)

    def _structure(self, obs: dict[str, torch.Tensor]) -> _Structure:
        """The batch's structure, from the cache when its index arrays are the cached ones."""
        dtype = obs["edge_index"].dtype
        cached = self._structures.get(dtype)
        if cached is not None and cached.matches(obs):
            return cached
        with torch.inference_mode(False):  # kept for training too: plain tensors
            self._structures[dtype] = built = _Structure(obs)
        return built

    @staticmethod
    def _scores(table: torch.Tensor, owner: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """One kind's raw scores ``(count, B)``: ``alpha + beta . symlog(x)`` with each
        candidate's ``[alpha | beta]`` the row of ``table`` (``(rows, B, 1 + f)``, per node
        or link) at ``owner``, and ``x`` its features ``(B, count, f)``.

        Laid out ``(count, 1 + f, B)``: the batch is the contiguous inner dimension of the
        gather and of the product, and each kind keeps its own width (no padding to the
        widest kind, no copy of the features into one table). On a 256-graph minibatch of
        ``mixed`` this stage's forward and backward took about half of the padded single
        table's (``benchmarks/RESULTS.md``)."""
        coefficients = table.permute(0, 2, 1).contiguous().index_select(0, owner)
        inputs = _symlog(features.permute(1, 2, 0))
        return coefficients[:, 0] + (coefficients[:, 1:] * inputs).sum(1)

    def _link_in(
        self, h: torch.Tensor, e: torch.Tensor, src: torch.Tensor, dst: torch.Tensor
    ) -> torch.Tensor:
        """The link head's first layer on ``[h[src] | h[dst] | e]``, computed as three
        products whose node parts run on the nodes before the gather (8 rows, not 21 on
        ``mixed``): the same layer and parameters, fewer multiplications."""
        first = self.link_head[0]
        assert isinstance(first, nn.Linear)
        w_src, w_dst, w_edge = first.weight.split(self.hidden, dim=1)
        return (
            (h @ w_src.T).index_select(0, src)
            + (h @ w_dst.T).index_select(0, dst)
            + nn.functional.linear(e, w_edge, first.bias)
        )


def candidate_widths(observation_space: Any) -> dict[str, int]:
    """The input widths :class:`CandidateNet` needs, from the env's observation space."""

    def width(key: str) -> int:
        return int(observation_space[key].shape[-1])

    return {
        "node": width("node_features"),
        "edge": width("edge_features"),
        **{kind: width(kind) for kind in KINDS},
    }
