"""Fluid capacity LPs (SPEC section 2).

``capacity(workload, reference)`` is the largest ``theta`` such that the arrival vector
``theta * mix`` satisfies the fluid flow LP:

* flow conservation at every admissible node-commodity pair, with expected successor rates:
  ``theta * mix + inflow + successors = outflow + service``;
* link capacities: ``sum_c f_e^c <= C_e``;
* compute capacities: ``sum_a s_a w(a) <= mu_i``.

``reference="full"`` evaluates every memory-assisted action as a hit (the all-hit system;
its value is ``lambda_ref``, the normalizer of ``load``); ``"nomem"`` evaluates every action
as a miss (the paper's ``Lambda_no-mem``). Both use the realized successor laws (with
transition noise), the laws the simulator samples. ``"occ"`` is the per-node relaxation of
the occupation-measure bound (paper Thm. 1, SPEC 9.1; :mod:`mabp_gym.occupation`), which
lies between the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from scipy.optimize import linprog

if TYPE_CHECKING:
    from mabp_gym.workload import Workload

REFERENCES = ("full", "nomem", "occ")


def capacity(workload: Workload, reference: Literal["full", "nomem", "occ"] = "full") -> float:
    """Fluid capacity in requests per slot (``inf`` if no resource binds).

    Args:
        workload: the network.
        reference: ``"full"`` (every memory-assisted action a hit), ``"nomem"``
            (every action a miss) or ``"occ"`` (the occupation-measure relaxation, see
            :func:`mabp_gym.occupation.occupation_bound`).

    Returns:
        The largest total arrival rate the fluid network carries with the workload's mix.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if reference == "occ":
        from mabp_gym.occupation import occupation_bound

        return occupation_bound(workload, exact=False)
    ix = workload.index
    hit = 1 if reference == "full" else 0
    has_memory = ix.action_signature >= 0
    hit_bits = np.where(has_memory, hit, 0)
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
        raise RuntimeError(f"capacity LP failed for {workload.name!r}: {result.message}")
    return float(result.x[0])
