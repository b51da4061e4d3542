"""The graph observation of a simulator state (SPEC 7), without gymnasium or torch.

:class:`ObservationEncoder` turns a :class:`~mabp_gym.core.state.SimState` into the arrays of
the env's Dict observation; :attr:`ObservationEncoder.layout` gives each array's shape,
dtype and bounds, from which the Gymnasium env builds its ``spaces.Dict``. The harness,
the agents and the training code encode states with it directly.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from mabp_gym.core.kernels import slotcore
from mabp_gym.core.kernels.transition_core import CompiledTransition, state_arrays
from mabp_gym.core.workload import ROLES, Workload

NODE_FEATURES = (
    *(f"role_{r}" for r in ROLES),
    "mu",
    "budget",
    "memory_used",
    "backlog",
    "in_service",
    "residual_work",
)
EDGE_FEATURES = ("capacity", "cost", "bandwidth")
SERVICE_FEATURES = ("work", "penalty", "hit", "successor_pressure", "queue")
ROUTE_FEATURES = ("differential", "cost", "dst_compatible_memory", "queue")
TRANSFER_FEATURES = ("src_holds", "size", "dst_free_budget")
RETAIN_FEATURES = ("held", "size", "demand")
DYNAMIC_KEYS = (
    "node_features",
    "queues",
    "memory",
    "service",
    "route",
    "transfer",
    "retain",
    "action_mask",
)
"""The observation's arrays that a slot changes, in the order the encoding kernel and
:meth:`ObservationEncoder._observation` take them (the others are the static structure:
``edge_index``, ``edge_features`` and every ``*_index`` array)."""


def symlog(x: Any) -> Any:
    """``sign(x) log(1 + |x|)`` of a numpy array or a torch tensor: queue counts span
    orders of magnitude. The one definition the flat observation and the learned
    policies' encoders share."""
    if isinstance(x, np.ndarray):
        return np.sign(x) * np.log1p(np.abs(x))
    return x.abs().log1p().copysign(x)  # the same values in two passes over the tensor


class ArraySpec(NamedTuple):
    """Shape, dtype and bounds of one observation array."""

    shape: tuple[int, ...]
    dtype: type
    low: float
    high: float


def _array(shape: tuple[int, ...], low: float = 0.0, high: float = np.inf) -> ArraySpec:
    return ArraySpec(shape, np.float32, low, high)


class ObservationEncoder:
    """Encodes a :class:`~mabp_gym.core.state.SimState` into the env's Dict observation."""

    def __init__(self, workload: Workload, *, memory: bool = True) -> None:
        self.workload = workload
        self.memory = memory
        ix = workload.index
        n, e, c, s = ix.num_nodes, ix.num_links, ix.num_commodities, ix.num_signatures
        a, r, t, k = ix.num_actions, ix.num_routes, ix.num_transfers, ix.num_retains
        roles = np.zeros((n, len(ROLES)), dtype=np.float32)
        roles[np.arange(n), [ROLES.index(node.role) for node in workload.nodes]] = 1.0
        budget = ix.budget if memory else np.zeros(n)
        self._static_nodes = np.concatenate(
            [roles, ix.mu[:, None], budget[:, None]], axis=1
        ).astype(np.float32)
        self._edge_index = np.stack([ix.link_src, ix.link_dst]).astype(np.int64)
        self._edge_features = np.stack(
            [ix.link_capacity, ix.link_cost, ix.link_bandwidth], axis=1
        ).astype(np.float32)
        self._service_index = np.stack([ix.action_node, ix.action_commodity]).astype(np.int64)
        self._route_index = np.stack([ix.route_link, ix.route_commodity]).astype(np.int64)
        self._transfer_index = np.stack([ix.transfer_link, ix.transfer_signature]).astype(np.int64)
        self._retain_index = np.stack([ix.retain_node, ix.retain_signature]).astype(np.int64)
        self._arange_a = np.arange(a)
        # Successor laws are sparse (a few outcomes per action): keep, per action, the flat
        # positions of its successor queues in an (N * C + 1) vector (the extra last entry
        # reads 0) and their probabilities per hit bit, so that the successor pressure is a
        # gather instead of an (A, C) product.
        width = max(1, int((ix.successor_law[:, :, :c] > 0).any(axis=0).sum(axis=1).max(initial=0)))
        positions = np.full((a, width), n * c, dtype=np.int64)
        probs = np.zeros((2, a, width), dtype=np.float32)
        for act in range(a):
            outcomes = np.flatnonzero((ix.successor_law[:, act, :c] > 0).any(axis=0))
            positions[act, : outcomes.size] = ix.action_node[act] * c + outcomes
            probs[:, act, : outcomes.size] = ix.successor_law[:, act, outcomes]
        self._successor_positions = positions
        self._successor_probs = probs
        self.long_laws = width >= 8
        """Whether some successor law has 8 terms or more: numpy sums the pressure (the
        kernel sums shorter ones in its order, one by one)."""
        self._route_dst_node = ix.link_dst[ix.route_link]
        self._route_cost = ix.link_cost[ix.route_link].astype(np.float32)
        self._transfer_dst = ix.link_dst[ix.transfer_link]
        # Demand served by a retained signature: queued units of the commodities it makes a
        # hit at its node, (K, C).
        compat = np.zeros((n, s, c), dtype=bool)
        assisted = ix.action_signature >= 0
        compat[
            ix.action_node[assisted], ix.action_signature[assisted], ix.action_commodity[assisted]
        ] = True
        retain_commodities = compat[ix.retain_node, ix.retain_signature]  # (K, C)
        width = max(1, int(retain_commodities.sum(axis=1).max(initial=0)))
        self._retain_positions = np.full((k, width), n * c, dtype=np.int64)
        for cand in range(k):
            served = np.flatnonzero(retain_commodities[cand])
            self._retain_positions[cand, : served.size] = ix.retain_node[cand] * c + served
        # Scratch queues with one extra entry that always reads 0, so that padded positions
        # can be gathered without masks.
        self._queue_flat = np.zeros(n * c + 1, dtype=np.float32)
        self._pairs = np.empty(ix.num_pairs, dtype=np.int64)  # the kernel's scratch
        sizes = ix.signature_size
        self._transfer_size = sizes[ix.transfer_signature].astype(np.float32)
        self._retain_size = sizes[ix.retain_signature].astype(np.float32)
        self._penalty = ix.penalty.astype(np.float32)
        self._kernel_statics(workload)
        inf = np.inf
        self.layout: dict[str, ArraySpec] = {
            "node_features": _array((n, len(NODE_FEATURES))),
            "edge_index": ArraySpec((2, e), np.int64, 0, max(n - 1, 0)),
            "edge_features": _array((e, len(EDGE_FEATURES)), low=-inf),
            "queues": _array((n, c)),
            "memory": _array((n, s), high=1.0),
            "service": _array((a, len(SERVICE_FEATURES)), low=-inf),
            "service_index": ArraySpec((2, a), np.int64, 0, max(n, c, 1) - 1),
            "route": _array((r, len(ROUTE_FEATURES)), low=-inf),
            "route_index": ArraySpec((2, r), np.int64, 0, max(e, c, 1) - 1),
            "transfer": _array((t, len(TRANSFER_FEATURES)), low=-inf),
            "transfer_index": ArraySpec((2, t), np.int64, 0, max(e, s, 1) - 1),
            "retain": _array((k, len(RETAIN_FEATURES)), low=-inf),
            "retain_index": ArraySpec((2, k), np.int64, 0, max(n, s, 1) - 1),
            "action_mask": ArraySpec((ix.num_scores,), np.int8, 0, 1),
        }
        """Shape, dtype and bounds of every array of the observation (the env's
        ``spaces.Dict`` is built from it)."""

    def _kernel_statics(self, workload: Workload) -> None:
        """Static arrays of the encoding kernel (:mod:`mabp_gym.core.kernels.slotcore`)."""
        ix = workload.index
        # Route r's destination holds memory compatible with its commodity when one of the
        # actions of that (node, commodity) is a hit: the first of them per route (-1:
        # none), and every other one as a (route, action) pair (most routes have one: the
        # kernel's pass over the routes has no inner loop).
        by_pair: dict[tuple[int, int], list[int]] = {}
        for a, (i, c) in enumerate(
            zip(ix.action_node.tolist(), ix.action_commodity.tolist(), strict=True)
        ):
            by_pair.setdefault((i, c), []).append(a)
        members = [
            by_pair.get(key, [])
            for key in zip(self._route_dst_node.tolist(), ix.route_commodity.tolist(), strict=True)
        ]
        self._compat_first = np.asarray([m[0] if m else -1 for m in members], dtype=np.int64)
        self._compat_more = np.asarray(
            [(r, a) for r, m in enumerate(members) for a in m[1:]], dtype=np.int64
        ).reshape(-1, 2)
        self._transfer_dst_node = np.ascontiguousarray(self._transfer_dst)
        self._work = np.ascontiguousarray(ix.work)
        self._packs = CompiledTransition.shared(workload)  # the static arrays, packed
        self.kernel_statics = (
            self._compat_first,
            self._compat_more,
            self._retain_positions,
            self._static_nodes,
            self._successor_probs,
            self._successor_positions,
        )
        """The encoding kernel's ``statics`` (``slotcore.encode_compiled``)."""

    def encode(self, state) -> dict[str, np.ndarray]:
        """The observation of ``state`` (fresh arrays every call)."""
        ix = self.workload.index
        n, c = ix.num_nodes, ix.num_commodities
        hit = np.empty(ix.num_actions, dtype=np.int64)
        nodes = np.empty((n, len(NODE_FEATURES)), dtype=np.float32)
        queues = np.zeros((n, c), dtype=np.float32)
        memory = np.empty((n, ix.num_signatures), dtype=np.float32)
        service = np.empty((ix.num_actions, len(SERVICE_FEATURES)), dtype=np.float32)
        route = np.empty((ix.num_routes, len(ROUTE_FEATURES)), dtype=np.float32)
        transfer = np.empty((ix.num_transfers, len(TRANSFER_FEATURES)), dtype=np.float32)
        retain = np.empty((ix.num_retains, len(RETAIN_FEATURES)), dtype=np.float32)
        mask = np.empty(ix.num_scores, dtype=np.int8)
        slotcore.encode_compiled(
            self.memory,
            state_arrays(state),
            self._packs.ints,
            self._packs.floats,
            self.kernel_statics,
            (
                self._queue_flat,
                hit,
                nodes,
                queues,
                memory,
                service,
                route,
                transfer,
                retain,
                mask,
                self._pairs,
            ),
            True,  # fresh arrays: the static columns too
        )
        if self.long_laws:  # numpy's pairwise float32 sum
            service[:, 3] = (
                self._successor_probs[hit, self._arange_a]
                * self._queue_flat[self._successor_positions]
            ).sum(axis=1)
        return self._observation(nodes, queues, memory, service, route, transfer, retain, mask)

    def _observation(
        self,
        nodes: np.ndarray,
        queues: np.ndarray,
        memory: np.ndarray,
        service: np.ndarray,
        route: np.ndarray,
        transfer: np.ndarray,
        retain: np.ndarray,
        mask: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The observation dict: this slot's arrays and fresh copies of the static ones."""
        return {
            "node_features": nodes,
            "edge_index": self._edge_index.copy(),
            "edge_features": self._edge_features.copy(),
            "queues": queues,
            "memory": memory,
            "service": service,
            "service_index": self._service_index.copy(),
            "route": route,
            "route_index": self._route_index.copy(),
            "transfer": transfer,
            "transfer_index": self._transfer_index.copy(),
            "retain": retain,
            "retain_index": self._retain_index.copy(),
            "action_mask": mask,
        }
