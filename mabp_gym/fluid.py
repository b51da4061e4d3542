"""The fluid flow LP of SPEC section 2 over a workload's index arrays.

:func:`fluid_capacity` is the all-hit (``lambda_ref``, the load scale) or all-miss value of
:func:`mabp_gym.capacity.capacity`; it reads only a :class:`~mabp_gym.index.WorkloadIndex`,
so the workload type computes its own ``lambda_ref`` without importing the capacity module.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from mabp_gym.index import WorkloadIndex


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
    a_eq = np.zeros((n_p, n_var))
    a_eq[ix.arrival_pair, 0] += ix.arrival_share
    r_cols = 1 + np.arange(n_r)
    np.add.at(a_eq, (ix.route_dst_pair, r_cols), 1.0)
    np.add.at(a_eq, (ix.route_src_pair, r_cols), -1.0)
    s_cols = 1 + n_r + arange
    np.add.at(a_eq, (ix.action_pair, s_cols), -1.0)
    # Successors of action a join (node(a), c') with rate s_a * P(c' | a).
    for a in range(n_a):
        for c in np.flatnonzero(law[a]):
            a_eq[ix.pair_of[ix.action_node[a], c], s_cols[a]] += law[a, c]

    rows_ub, b_ub = [], []
    for e in range(ix.num_links):
        row = np.zeros(n_var)
        row[r_cols[ix.route_link == e]] = 1.0
        if row.any():
            rows_ub.append(row)
            b_ub.append(float(ix.link_capacity[e]))
    for i in range(ix.num_nodes):
        mine = ix.action_node == i
        if mine.any():
            row = np.zeros(n_var)
            row[s_cols[mine]] = work[mine]
            rows_ub.append(row)
            b_ub.append(float(ix.mu[i]))
    objective = np.zeros(n_var)
    objective[0] = -1.0
    result = linprog(
        objective,
        A_ub=np.asarray(rows_ub) if rows_ub else None,
        b_ub=np.asarray(b_ub) if b_ub else None,
        A_eq=a_eq,
        b_eq=np.zeros(n_p),
        bounds=[(0, None)] * n_var,
        method="highs",
    )
    if result.status == 3:
        return float("inf")
    if result.status != 0:
        raise RuntimeError(f"capacity LP failed for {name!r}: {result.message}")
    return float(result.x[0])
