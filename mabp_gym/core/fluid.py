"""The fluid flow LP of SPEC section 2 over a workload's index arrays.

:func:`fluid_capacity` is the all-hit (``lambda_ref``, the load scale) or all-miss value of
:func:`mabp_gym.core.capacity.capacity`; it reads only a
:class:`~mabp_gym.core.index.WorkloadIndex`, so the workload type computes its own
``lambda_ref`` without importing the capacity module.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from mabp_gym.core.index import WorkloadIndex

LARGE_LP = 20_000
"""Variables above which the fluid LP is solved by HiGHS's interior point method."""


def fluid_capacity(ix: WorkloadIndex, *, hit: bool, name: str = "workload") -> float:
    """Largest ``theta`` with ``theta * mix`` carried by the fluid network (``inf`` if no
    resource binds); every memory-assisted action a hit (``hit``) or a miss."""
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
