"""MABP's slot decision as one kernel (compiled by numba where it is there, plain Python
otherwise: :mod:`mabp_gym.core.kernels.jit`).

:func:`mabp_fill` computes exactly what :meth:`mabp_gym.agents.mabp.MABP._fill` computes
with numpy, in the same order of floating-point operations, so the scores are the same to
the bit (``tests/test_mabp_core.py`` compares them slot by slot on every built-in
workload): the service pressure per unit of work, the routing differentials and, with
marginal-value retention, the objects' values, their retain scores and the transfers'
gains. Where numpy sums a row pairwise (eight terms or more), the kernel does the same
(:func:`~mabp_gym.core.kernels.rules.numpy_row_sum`). :class:`MABPStatics` holds the
arrays that do not change within an episode, by name.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.rules import numpy_row_sum


class MABPStatics(NamedTuple):
    """The workload's arrays one MABP decision reads (fixed when the policy is made)."""

    pair_node: np.ndarray  # (P,) int64
    pair_commodity: np.ndarray  # (P,) int64
    action_pair: np.ndarray  # (A,) int64
    action_node: np.ndarray  # (A,) int64
    penalty: np.ndarray  # (2, A) miss, hit
    work: np.ndarray  # (2, A) miss, hit
    law: np.ndarray  # (2, A, W) successor probabilities over the support
    law_positions: np.ndarray  # (A, W) int64 raveled (node, commodity) of each outcome
    route_src_pair: np.ndarray  # (R,) int64
    route_dst_pair: np.ndarray  # (R,) int64
    route_cost: np.ndarray  # (R,) link cost of each route
    mu: np.ndarray  # (A,) the compute rate of each action's node
    inflow_action: np.ndarray  # (M,) int64
    inflow_pair: np.ndarray  # (M,) int64
    inflow_share: np.ndarray  # (M,)
    assisted: np.ndarray  # (A,) bool: the action has a signature
    member_retain: np.ndarray  # (Q,) int64 retain candidate of each (candidate, action) pair
    member_action: np.ndarray  # (Q,) int64 its action
    retain_size: np.ndarray  # (K,) size of each retain candidate's object
    transfer_src: np.ndarray  # (T,) int64 retain candidate at the transfer's source
    transfer_dst: np.ndarray  # (T,) int64 at its destination
    transfer_size: np.ndarray  # (T,) size of the object moved
    slices: np.ndarray  # (4, 2) int64 start, stop of [service | route | transfer | retain]
    scalars: np.ndarray  # (5,) nu, holding cost, migration cost, evidence, effective horizon


def _max(a, b):  # pragma: no cover - compiled
    """``np.maximum`` of two floats (the first where they compare equal or it is NaN)."""
    return a if (a >= b or a != a) else b


def _min(a, b):  # pragma: no cover - compiled
    """``np.minimum`` of two floats."""
    return a if (a <= b or a != a) else b


def mabp_fill(queues, hit, transition, demand, statics, out, value):  # pragma: no cover
    """One slot of MABP into ``out`` (scores, the service, route, transfer and retain
    blocks; the caller fills it with -1 first) and ``value`` (each retain candidate's
    object value, ``(K,)``); ``demand`` (the demand evidence, ``(A,)``) advances in place.
    ``hit`` is each action's hit bit (0 without memory). Retention is marginal-value
    (the caller runs the recency rule itself)."""
    s = statics
    nu, holding_cost, migration_cost = s.scalars[0], s.scalars[1], s.scalars[2]
    evidence = s.scalars[3]
    n_act = s.action_pair.shape[0]
    n_cols = queues.shape[1]
    backlog = np.empty(s.pair_node.shape[0])
    for p in range(backlog.shape[0]):
        backlog[p] = queues[s.pair_node[p], s.pair_commodity[p]]
    width = s.law_positions.shape[1]
    terms = np.empty(width)
    weight = np.empty((2, n_act))
    for h in range(2):
        for a in range(n_act):
            weight[h, a] = backlog[s.action_pair[a]] - nu * s.penalty[h, a]
            if transition:
                for w in range(width):
                    position = s.law_positions[a, w]
                    queued = queues[position // n_cols, position % n_cols]
                    terms[w] = s.law[h, a, w] * queued
                weight[h, a] = weight[h, a] - numpy_row_sum(terms, 0, width)
    ratio = np.empty(n_act)
    start = s.slices[0, 0]
    for a in range(n_act):
        own = backlog[s.action_pair[a]]
        ratio[a] = weight[hit[a], a] / _max(s.work[hit[a], a], 1e-9)
        out[start + a] = ratio[a] if own > 0 else -1.0
    start = s.slices[1, 0]
    for r in range(s.route_src_pair.shape[0]):
        differential = backlog[s.route_src_pair[r]] - backlog[s.route_dst_pair[r]]
        out[start + r] = differential - nu * s.route_cost[r]
    n_retains = value.shape[0]
    if n_retains == 0:
        return
    _object_values(weight, ratio, backlog, queues.shape[0], demand, s, evidence, value)
    start = s.slices[3, 0]
    for k in range(n_retains):
        out[start + k] = value[k] / s.retain_size[k] - holding_cost
    start = s.slices[2, 0]
    for q in range(s.transfer_src.shape[0]):
        gained = value[s.transfer_dst[q]] - value[s.transfer_src[q]]
        out[start + q] = gained / s.transfer_size[q] - migration_cost


def _object_values(weight, ratio, backlog, n_nodes, demand, s, evidence, value):  # pragma: no cover
    """:meth:`MABP._object_values` into ``value``; ``demand`` advances in place."""
    nu, effective_horizon = s.scalars[0], s.scalars[4]
    n_act = ratio.shape[0]
    price = np.ones(n_nodes)
    for a in range(n_act):
        price[s.action_node[a]] = _max(price[s.action_node[a]], ratio[a])
    coming = np.zeros(n_act)
    for m in range(s.inflow_action.shape[0]):
        coming[s.inflow_action[m]] += s.inflow_share[m] * backlog[s.inflow_pair[m]]
    rate = 1.0 / evidence
    per_action = np.empty(n_act)
    for a in range(n_act):
        own = backlog[s.action_pair[a]]
        w_miss, w_hit = _max(s.work[0, a], 1e-9), _max(s.work[1, a], 1e-9)
        frozen = _max(
            _min(own, s.mu[a] / w_hit) * _max(weight[1, a], 0.0)
            - _min(own, s.mu[a] / w_miss) * _max(weight[0, a], 0.0),
            0.0,
        )
        saved = (
            nu * (s.penalty[0, a] - s.penalty[1, a]) + (w_miss - w_hit) * price[s.action_node[a]]
        )
        servable = _min(own + coming[a], s.mu[a] / w_hit)
        demand[a] = (1 - rate) * demand[a] + rate * servable
        future = effective_horizon * demand[a] * _max(saved, 0.0)
        per_action[a] = frozen + future if s.assisted[a] else 0.0
    value[:] = 0.0
    for q in range(s.member_retain.shape[0]):
        value[s.member_retain[q]] += per_action[s.member_action[q]]


_max = jit.part(_max)
_min = jit.part(_min)
_object_values = jit.part(_object_values)
mabp_fill = jit.kernel(mabp_fill)
