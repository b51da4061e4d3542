"""The index arrays of a workload: what the simulator, the projection and the LPs read.

:class:`WorkloadIndex` is built once per :class:`~mabp_gym.core.workload.Workload` (its
``index``); it holds numpy arrays only, so the modules below the workload type (the fluid
LP of :mod:`mabp_gym.core.fluid`) read a network without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class FastLists:
    """Python-list mirrors of index arrays for the Python loops of the explainer and
    Oracle-Sur (indexing a list is several times cheaper than indexing a numpy array by a
    scalar)."""

    action_node: list[int]
    action_pair: list[int]
    route_link: list[int]
    route_src_pair: list[int]
    transfer_link: list[int]
    transfer_signature: list[int]
    link_src: list[int]
    link_dst: list[int]
    work: list[list[float]]
    signature_size: list[float]
    mu: list[float]
    budget: list[float]


@dataclass(frozen=True, eq=False)
class WorkloadIndex:
    """Index arrays derived from a :class:`Workload` (read-only by convention).

    Shapes use ``N`` nodes, ``E`` links, ``C`` commodities, ``S`` signatures, ``M``
    object identities, ``A`` actions, ``P`` admissible pairs, ``R`` route candidates,
    ``T`` transfer candidates and ``K`` retain candidates.
    """

    num_nodes: int
    num_links: int
    num_commodities: int
    num_signatures: int
    num_objects: int
    num_actions: int
    num_pairs: int
    num_routes: int
    num_transfers: int
    num_retains: int
    mu: np.ndarray  # (N,) float64
    budget: np.ndarray  # (N,) float64
    link_src: np.ndarray  # (E,) int64
    link_dst: np.ndarray  # (E,) int64
    link_capacity: np.ndarray  # (E,) int64
    link_cost: np.ndarray  # (E,) float64
    link_bandwidth: np.ndarray  # (E,) float64
    signature_size: np.ndarray  # (S,) float64
    object_signature: np.ndarray  # (M,) int64, identity m = s * replicas + r
    pair_node: np.ndarray  # (P,) int64
    pair_commodity: np.ndarray  # (P,) int64
    pair_of: np.ndarray  # (N, C) int64, -1 where inadmissible
    serves: np.ndarray  # (N, C) bool
    eligible: np.ndarray  # (N, S) bool: node has an action compatible with the signature
    max_budget: np.ndarray  # (N,) float64: B_i^max, the eligible-object footprint
    action_node: np.ndarray  # (A,) int64
    action_commodity: np.ndarray  # (A,) int64
    action_pair: np.ndarray  # (A,) int64
    action_signature: np.ndarray  # (A,) int64, -1 when never memory-assisted
    work: np.ndarray  # (2, A) float64, [hit, action]
    loss: np.ndarray  # (2, A) float64
    credit: np.ndarray  # (2, A) float64
    penalty: np.ndarray  # (2, A) float64, loss - eta * credit
    successor_law: np.ndarray  # (2, A, C + 1) float64, last column = exit
    gen_prob: np.ndarray  # (A,) float64
    route_link: np.ndarray  # (R,) int64
    route_commodity: np.ndarray  # (R,) int64
    route_src_pair: np.ndarray  # (R,) int64
    route_dst_pair: np.ndarray  # (R,) int64
    transfer_link: np.ndarray  # (T,) int64
    transfer_signature: np.ndarray  # (T,) int64
    retain_node: np.ndarray  # (K,) int64
    retain_signature: np.ndarray  # (K,) int64
    retain_of: np.ndarray  # (N, S) int64, -1 where the node can never hold the signature
    arrival_pair: np.ndarray  # (Z,) int64
    arrival_share: np.ndarray  # (Z,) float64, sums to 1
    # Successor sampling tables, per hit bit and action: cumulative probabilities and the
    # pair each outcome joins (EXIT to leave). Python lists: they are read one unit at a time.
    successor_cum: tuple[list[list[float]], list[list[float]]] = field(repr=False)
    successor_pair: tuple[list[list[int]], list[list[int]]] = field(repr=False)
    fast: FastLists = field(repr=False)
    hit_slot: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]  # (A,) int64
    # Raveled (N * S) holder positions at the two ends of every transfer candidate, and the
    # actions every retain candidate (i, s) makes hits: a transfer changes only those hit
    # bits, so that no per-slot structure spans all nodes x signatures.
    transfer_src_slot: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]
    transfer_dst_slot: np.ndarray = field(default=None, repr=False)  # type: ignore[arg-type]
    retain_actions: tuple[tuple[int, ...], ...] = field(default=(), repr=False)  # (K,) ragged

    @property
    def num_scores(self) -> int:
        """Length ``D`` of a score vector: service, route, transfer, retain candidates."""
        return self.num_actions + self.num_routes + self.num_transfers + self.num_retains

    @property
    def score_slices(self) -> tuple[slice, slice, slice, slice]:
        """Slices of a score vector: ``(service, route, transfer, retain)``."""
        a, r, t = self.num_actions, self.num_routes, self.num_transfers
        return (
            slice(0, a),
            slice(a, a + r),
            slice(a + r, a + r + t),
            slice(a + r + t, a + r + t + self.num_retains),
        )
