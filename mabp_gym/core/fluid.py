"""The fluid flow LP of SPEC section 2 over a workload's index arrays.

:func:`fluid_capacity` is the all-hit (``lambda_ref``, the load scale) or all-miss value of
:func:`mabp_gym.core.capacity.capacity`; it reads only a
:class:`~mabp_gym.core.index.WorkloadIndex`, so the workload type computes its own
``lambda_ref`` without importing the capacity module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mabp_gym.core.index import WorkloadIndex

if TYPE_CHECKING:
    from scipy import sparse

# scipy's sparse matrices and ``linprog`` are imported where the LP is built: importing
# them cost about 0.1 s of every ``import mabp_gym``, and a slot never needs them.

LARGE_LP = 20_000
"""Variables above which the fluid LP is solved by HiGHS's interior point method."""

_TOL = 1e-9


HULL_LIMIT = 20_000
"""Service vectors :func:`whole_unit_hull` may visit at one node (every one, maximal or
not) before it gives up: the fluid row alone then bounds the node from above. Such nodes
have many distinct works or works far below ``mu``, where that row is off by less than one
unit's work."""


@dataclass(frozen=True)
class WholeUnitHull:
    """How whole-unit service bounds one node's rates (:func:`whole_unit_hull`): the
    positions of each distinct work value in ``(0, mu]``, and the maximal counts per value
    that fit ``mu`` in one slot. The long-run rates of each group are at most a convex
    combination of these vectors: ``sum_{k in group g} s_k <= sum_v lambda_v v_g``,
    ``sum_v lambda_v <= 1``, ``lambda >= 0``."""

    groups: tuple[tuple[int, ...], ...]
    vectors: tuple[tuple[int, ...], ...]


def whole_unit_hull(mu: float, works: Sequence[float]) -> WholeUnitHull | None:
    """The whole-unit bound on one node's service rates (``works[k]``: the work of rate
    ``k``), or ``None`` where the fluid row ``sum_k s_k w_k <= mu`` is left alone.

    Why: a slot serves whole units (SPEC 1 step 5), so a verifier of ``mu = 1.5`` serves one
    unit of work 1 a slot, not 1.5: the fluid row alone overstated its capacity by half,
    and a server of ``mu = 3`` with works 2 and 3 serves one unit a slot, not 4/3. The rates
    of works up to ``mu`` a node sustains are the convex hull of its whole service vectors,
    which the fluid row's simplex equals exactly when each of its vertices ``mu / w`` is
    whole: then ``None``, and the LP is unchanged (every built-in workload at its defaults).
    The LPs ask it only for nodes whose every work fits ``mu`` (:func:`node_hull`).
    ``None`` too past :data:`HULL_LIMIT` vectors visited."""
    values = sorted({float(w) for w in works if 0 < w <= mu + _TOL})
    if all(abs(mu / w - round(mu / w)) <= _TOL for w in values):
        return None
    vectors: list[tuple[int, ...]] = []
    stack: list[tuple[float, tuple[int, ...]]] = [(mu, ())]  # (compute left, counts so far)
    visited = 0
    while stack:
        left, prefix = stack.pop()
        visited += 1
        if visited > HULL_LIMIT:
            return None
        j = len(prefix)
        if j == len(values):
            if left < values[0] - _TOL:  # maximal: no further unit fits
                vectors.append(prefix)
            continue
        most = math.floor((left + _TOL) / values[j])
        stack.extend((left - n * values[j], (*prefix, n)) for n in range(most + 1))
    groups = tuple(tuple(k for k, w in enumerate(works) if float(w) == v) for v in values)
    return WholeUnitHull(groups, tuple(vectors))


def node_hull(ix: WorkloadIndex, node: int, works: Sequence[float]) -> WholeUnitHull | None:
    """:func:`whole_unit_hull` of ``node`` for an LP's service columns of work ``works``,
    where every work of the node, hit or miss, fits ``mu``: the node then serves a whole
    service vector every slot, and the hull is exactly what it sustains. ``None`` at a node
    with work above ``mu``: it keeps the fluid row in every LP (its multi-slot units take
    their compute first, which no row here models: an outer bound), so the all-hit and
    no-memory LPs bound the same nodes alike."""
    mu = float(ix.mu[node])
    if not (ix.work[:, ix.action_node == node] <= mu + _TOL).all():
        return None
    return whole_unit_hull(mu, works)


def fluid_capacity(
    ix: WorkloadIndex, *, hit: bool, name: str = "workload", whole_units: bool = True
) -> float:
    """Largest ``theta`` with ``theta * mix`` carried by the fluid network (``inf`` if no
    resource binds); every memory-assisted action a hit (``hit``) or a miss; each node's
    service bounded by :func:`whole_unit_hull` too unless ``whole_units`` is ``False``."""
    from scipy import sparse
    from scipy.optimize import linprog

    has_memory = ix.action_signature >= 0
    hit_bits = np.where(has_memory, 1 if hit else 0, 0)
    arange = np.arange(ix.num_actions)
    work = ix.work[hit_bits, arange]
    law = ix.successor_law[hit_bits, arange, :-1]  # (A, C)

    n_r, n_a, n_p = ix.num_routes, ix.num_actions, ix.num_pairs
    n_var = 1 + n_r + n_a  # theta, route flows, service rates
    r_cols = 1 + np.arange(n_r)
    s_cols = 1 + n_r + arange
    # Flow balance per pair, as sparse triplets (duplicates summed): memory and time linear
    # in the network's size (a dense matrix was pairs x variables).
    succ_a, succ_c = np.nonzero(law)
    a_eq = sparse.coo_matrix(
        (
            np.concatenate(
                [ix.arrival_share, np.ones(n_r), -np.ones(n_r), -np.ones(n_a), law[succ_a, succ_c]]
            ),
            (
                np.concatenate(
                    [
                        ix.arrival_pair,
                        ix.route_dst_pair,
                        ix.route_src_pair,
                        ix.action_pair,
                        ix.pair_of[ix.action_node[succ_a], succ_c],
                    ]
                ),
                np.concatenate(
                    [np.zeros(len(ix.arrival_pair), dtype=np.int64), r_cols, r_cols, s_cols]
                    + [s_cols[succ_a]]
                ),
            ),
        ),
        shape=(n_p, n_var),
    ).tocsr()
    # Link capacities (links some route uses) and compute per node (nodes with actions).
    links = np.unique(ix.route_link)
    nodes = np.unique(ix.action_node)
    link_row = np.searchsorted(links, ix.route_link)
    node_row = len(links) + np.searchsorted(nodes, ix.action_node)
    a_ub = sparse.coo_matrix(
        (
            np.concatenate([np.ones(n_r), work]),
            (np.concatenate([link_row, node_row]), np.concatenate([r_cols, s_cols])),
        ),
        shape=(len(links) + len(nodes), n_var),
    ).tocsr()
    b_ub = np.concatenate([ix.link_capacity[links], ix.mu[nodes]]).astype(np.float64)
    if whole_units:
        a_ub, a_eq, b_ub = _with_whole_unit_hulls(ix, work, s_cols, a_ub, a_eq, b_ub)
    n_var = a_ub.shape[1]
    objective = np.zeros(n_var)
    objective[0] = -1.0
    result = linprog(
        objective,
        A_ub=a_ub if a_ub.shape[0] else None,
        b_ub=b_ub if a_ub.shape[0] else None,
        A_eq=a_eq,
        b_eq=np.zeros(n_p),
        bounds=[(0, None)] * n_var,
        # HiGHS's simplex on the small LPs (every built-in workload: their lambda_ref are
        # its); its interior point on large ones, 3.5x faster at 2,500 nodes.
        method="highs" if n_var <= LARGE_LP else "highs-ipm",
    )
    if result.status == 3:
        return float("inf")
    if result.status != 0:
        raise RuntimeError(f"capacity LP failed for {name!r}: {result.message}")
    return float(result.x[0])


def _with_whole_unit_hulls(
    ix: WorkloadIndex,
    work: np.ndarray,
    s_cols: np.ndarray,
    a_ub: sparse.csr_matrix,
    a_eq: sparse.csr_matrix,
    b_ub: np.ndarray,
) -> tuple[sparse.csr_matrix, sparse.csr_matrix, np.ndarray]:
    """The LP with every node's :func:`whole_unit_hull` (new columns ``lambda``, after the
    others; nothing appended where no node has one)."""
    from scipy import sparse

    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    rhs: list[float] = []
    n_var = a_ub.shape[1]
    for i in np.unique(ix.action_node):
        actions = np.flatnonzero(ix.action_node == i)
        hull = node_hull(ix, int(i), work[actions].tolist())
        if hull is None:
            continue
        one, first = len(rhs), len(rhs) + 1  # sum lambda <= 1, then a row per group
        rhs += [1.0] + [0.0] * len(hull.groups)
        for g, positions in enumerate(hull.groups):
            rows += [first + g] * len(positions)
            cols += [int(s_cols[actions[k]]) for k in positions]
            values += [1.0] * len(positions)
        for vector in hull.vectors:
            rows += [one] + [first + g for g, n in enumerate(vector) if n]
            cols += [n_var] * (1 + sum(1 for n in vector if n))
            values += [1.0] + [-float(n) for n in vector if n]
            n_var += 1
    if not rhs:
        return a_ub, a_eq, b_ub
    grown = n_var - a_ub.shape[1]
    extra = sparse.coo_matrix((values, (rows, cols)), shape=(len(rhs), n_var))
    a_ub = sparse.vstack([sparse.hstack([a_ub, sparse.csr_matrix((a_ub.shape[0], grown))]), extra])
    a_eq = sparse.hstack([a_eq, sparse.csr_matrix((a_eq.shape[0], grown))])
    return a_ub.tocsr(), a_eq.tocsr(), np.concatenate([b_ub, rhs])
