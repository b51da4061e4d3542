"""Frame-MABP's slot decision as two kernels (compiled by numba where it is there, plain
Python otherwise: :mod:`mabp_gym.core.kernels.jit`).

:func:`frame_fill` computes exactly what :meth:`mabp_gym.agents.frame_mabp.FrameMABP._fill`
computes with numpy after MABP's own scores, in the same order of floating-point
operations: the arrival estimate, the frame values, the plan (greedy, or the enumeration
in ``itertools.combinations``' order with numpy's sums), the batching service classes, the
retention by the plan and the affinity routing. :func:`frame_after` is
:meth:`~mabp_gym.agents.frame_mabp.FrameMABP.control`'s step after the projection: the
sibling caps and the units served. ``tests/test_frame_mabp_core.py`` compares the scores,
the plans and the controls slot by slot on every built-in workload.
:class:`FrameStatics` holds the arrays that do not change within an episode, by name.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mabp_gym.agents.mabp_core import _max, _min
from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.rules import numpy_row_sum

EXACT_PLAN_OBJECTS = 12
"""Nodes with at most this many candidate objects get an exact (enumerated) frame plan."""

HIT_OFFSET, ACQUIRE_OFFSET = 2e6, 1e6
"""Score offsets of frame-MABP's service classes: hits, then acquisitions, then other misses."""


class FrameStatics(NamedTuple):
    """The workload's arrays one frame-MABP decision reads (fixed when the policy is made)."""

    pair_node: np.ndarray  # (P,) int64
    pair_commodity: np.ndarray  # (P,) int64
    action_pair: np.ndarray  # (A,) int64
    action_node: np.ndarray  # (A,) int64
    action_commodity: np.ndarray  # (A,) int64
    assisted: np.ndarray  # (A,) bool: the action has a signature
    retain_of_action: np.ndarray  # (A,) int64 retain candidate of the action's object, -1
    member_retain: np.ndarray  # (Q,) int64 retain candidate of each (candidate, action) pair
    member_action: np.ndarray  # (Q,) int64 its action
    saved: np.ndarray  # (A,) work a hit saves (0 where unassisted)
    action_mu: np.ndarray  # (A,) the compute rate of each action's node
    work: np.ndarray  # (2, A) miss, hit
    retain_cost: np.ndarray  # (K,) one miss of the candidate's first member
    retain_size: np.ndarray  # (K,) size of each retain candidate's object
    node_retain_start: np.ndarray  # (N + 1,) int64 bounds of each node's run in node_retains
    node_retains: np.ndarray  # (K,) int64 retain candidates by node, ascending
    budget: np.ndarray  # (N,) memory budget
    mu: np.ndarray  # (N,) compute rate
    serves: np.ndarray  # (N, C) bool
    route_src: np.ndarray  # (R,) int64 source node of each route
    route_dst: np.ndarray  # (R,) int64
    route_commodity: np.ndarray  # (R,) int64
    route_src_pair: np.ndarray  # (R,) int64
    route_dst_pair: np.ndarray  # (R,) int64
    route_cost: np.ndarray  # (R,) link cost of each route
    slices: np.ndarray  # (4, 2) int64 start, stop of [service | route | transfer | retain]
    scalars: np.ndarray  # (6,) frame, smoothing, slack, switch, nu, memory (1 or 0)


def frame_fill(
    queues, held, hit, statics, previous, arrival, served, ratio, net, planned, out
):  # pragma: no cover
    """One slot of frame-MABP into ``out``, which holds MABP's scores on entry. ``held``
    (``(K,)`` bool) and ``hit`` (``(A,)`` bool) are the observation's bits; ``previous``,
    ``arrival``, ``served`` (``(A,)``) and ``ratio`` (``(N, C)``) advance in place as the
    policy's attributes of those names do; ``net`` (``(K,)``) and ``planned`` (``(K,)``
    bool, all False on entry) receive the frame values and the plan. Returns whether the
    memory part ran (``False``: no memory or no retain candidates, only the arrival
    estimate advanced)."""
    s = statics
    frame, smoothing, slack_share = s.scalars[0], s.scalars[1], s.scalars[2]
    switch, nu, memory = s.scalars[3], s.scalars[4], s.scalars[5]
    n_act = s.action_pair.shape[0]
    backlog = np.empty(s.pair_node.shape[0])
    for p in range(backlog.shape[0]):
        backlog[p] = queues[s.pair_node[p], s.pair_commodity[p]]
    own = np.empty(n_act)
    rate = 1.0 / smoothing
    for a in range(n_act):
        own[a] = backlog[s.action_pair[a]]
        arrived = _max(own[a] - previous[a] + served[a], 0.0)
        arrival[a] = (1 - rate) * arrival[a] + rate * arrived
        previous[a] = own[a]
        served[a] = 0.0
    n_retains = net.shape[0]
    if memory == 0.0 or n_retains == 0:
        return False
    _frame_values(own, held, arrival, frame, switch, s, net)
    _plan(net, s, planned)

    _service_classes(own, held, hit, arrival, planned, slack_share, s, out)

    # Retention: planned by net value per size, the rest in MABP's order below them.
    start = s.slices[3, 0]
    for k in range(n_retains):
        if planned[k]:
            out[start + k] = HIT_OFFSET + net[k] / s.retain_size[k]
        else:
            out[start + k] = _min(_max(out[start + k], -1.0), ACQUIRE_OFFSET - 1.0)
    for q in range(s.slices[2, 0], s.slices[2, 1]):
        out[q] = -1.0

    _affinity_routes(backlog, held, planned, nu, s, ratio, out)
    return True


def _service_classes(own, held, hit, arrival, planned, slack_share, s, out):  # pragma: no cover
    """The service block of ``out``: hits, then acquisitions of planned objects, then other
    misses, and a miss outside the plan held back (``FrameMABP._fill`` says when)."""
    n_act = own.shape[0]
    n_nodes = s.mu.shape[0]
    start = s.slices[0, 0]
    offset = np.zeros(n_act)  # HIT_OFFSET for a live hit, ACQUIRE_OFFSET for an acquisition
    busy = np.zeros(n_nodes, dtype=np.bool_)
    expected = np.zeros(n_nodes)
    for a in range(n_act):
        k = s.retain_of_action[a]
        if own[a] > 0 and out[start + a] > 0:
            if hit[a] and s.assisted[a]:
                offset[a] = HIT_OFFSET
            elif not hit[a] and k >= 0 and planned[k] and not held[k]:
                offset[a] = ACQUIRE_OFFSET
        if offset[a] > 0:
            busy[s.action_node[a]] = True
        covered = (held[k] or planned[k]) if k >= 0 else not s.assisted[a]
        work = s.work[1, a] if covered else s.work[0, a]
        expected[s.action_node[a]] += arrival[a] * work
    for a in range(n_act):
        k = s.retain_of_action[a]
        score = out[start + a]
        if offset[a] > 0:
            score = score + offset[a]
        # A miss outside the plan waits for it, unless its object can never fit or the
        # node would otherwise idle with slack.
        if not hit[a] and s.assisted[a] and k >= 0 and not planned[k]:
            node = s.action_node[a]
            fits = s.retain_size[k] <= s.budget[node] + 1e-9
            slack = expected[node] < slack_share * s.mu[node]
            if fits and (busy[node] or not slack):
                score = -1.0
        out[start + a] = score


def _affinity_routes(backlog, held, planned, nu, s, ratio, out):  # pragma: no cover
    """The route block of ``out`` and the slot's ``ratio`` (``(N, C)``, in place): queues
    counted in work under the plan, relative to the best server of the commodity from a
    node that does not serve it."""
    n_act = s.action_pair.shape[0]
    n_nodes = s.mu.shape[0]
    ratio[:, :] = 1.0
    for a in range(n_act):
        k = s.retain_of_action[a]
        if s.assisted[a] and k >= 0:
            if held[k] or planned[k]:
                value = 1.0
            else:
                value = s.work[0, a] / _max(s.work[1, a], 1e-9)
            ratio[s.action_node[a], s.action_commodity[a]] = value
    n_comm = ratio.shape[1]
    best = np.full(n_comm, np.inf)
    for i in range(n_nodes):
        for c in range(n_comm):
            if s.serves[i, c]:
                best[c] = _min(best[c], ratio[i, c])
    for c in range(n_comm):
        if not np.isfinite(best[c]):
            best[c] = 1.0
    start = s.slices[1, 0]
    for r in range(s.route_src.shape[0]):
        src, dst, c = s.route_src[r], s.route_dst[r], s.route_commodity[r]
        sibling = s.serves[src, c]
        q_src = backlog[s.route_src_pair[r]] * (ratio[src, c] if sibling else 1.0)
        q_dst = backlog[s.route_dst_pair[r]] * ratio[dst, c] / (1.0 if sibling else best[c])
        out[start + r] = q_src - q_dst - nu * s.route_cost[r]


def _frame_values(own, held, arrival, frame, switch, s, net):  # pragma: no cover
    """:meth:`FrameMABP.frame_values` into ``net``."""
    n_act = own.shape[0]
    per_action = np.empty(n_act)
    for a in range(n_act):
        demand = own[a] + frame * arrival[a]
        batch = _min(demand, frame * s.action_mu[a] / _max(s.work[1, a], 1e-9))
        per_action[a] = batch * s.saved[a] if s.assisted[a] else 0.0
    net[:] = 0.0
    for q in range(s.member_retain.shape[0]):
        net[s.member_retain[q]] += per_action[s.member_action[q]]
    for k in range(net.shape[0]):
        cost = s.retain_cost[k]
        kept = (switch - 1.0 if net[k] > 0 else 0.0) * cost
        net[k] = net[k] - (-kept if held[k] else cost)


def _plan(net, s, chosen):  # pragma: no cover
    """:meth:`FrameMABP.plan` into ``chosen`` (all False on entry)."""
    n_retains = s.node_retains.shape[0]
    useful = np.empty(n_retains, dtype=np.int64)
    keys = np.empty(n_retains)
    order = np.empty(n_retains, dtype=np.int64)
    scratch = np.empty(n_retains, dtype=np.int64)
    terms = np.empty(EXACT_PLAN_OBJECTS)
    for i in range(s.node_retain_start.shape[0] - 1):
        n = 0
        for j in range(s.node_retain_start[i], s.node_retain_start[i + 1]):
            k = s.node_retains[j]
            if net[k] > 0:
                useful[n] = k
                n += 1
        if n == 0:
            continue
        budget = s.budget[i] + 1e-9
        low, high = s.retain_size[useful[0]], s.retain_size[useful[0]]
        for j in range(n):
            low = _min(low, s.retain_size[useful[j]])
            high = _max(high, s.retain_size[useful[j]])
        if n <= EXACT_PLAN_OBJECTS and high > low:
            _plan_exact(useful, n, net, s.retain_size, budget, terms, chosen)
            continue
        for j in range(n):
            keys[j] = -net[useful[j]] / s.retain_size[useful[j]]
        _stable_order(keys, n, order, scratch)
        used = 0.0
        for j in range(n):
            k = useful[order[j]]
            if used + s.retain_size[k] <= budget:
                chosen[k] = True
                used += s.retain_size[k]


def _stable_order(keys, n, order, scratch):  # pragma: no cover - compiled
    """``np.argsort(keys[:n], kind="stable")`` into ``order[:n]``: a bottom-up merge sort
    (numba's own argsort tripled the kernel's compilation)."""
    for j in range(n):
        order[j] = j
    width = 1
    while width < n:
        low = 0
        while low < n:
            middle, high = min(low + width, n), min(low + 2 * width, n)
            i, j = low, middle
            for m in range(low, high):
                if j < high and (i >= middle or keys[order[j]] < keys[order[i]]):
                    scratch[m] = order[j]
                    j += 1
                else:
                    scratch[m] = order[i]
                    i += 1
            low = high
        for j in range(n):
            order[j] = scratch[j]
        width *= 2


def _plan_exact(useful, n, net, size, budget, terms, chosen):  # pragma: no cover
    """The subset of ``useful[:n]`` of largest net value within ``budget``, by enumeration
    in ``itertools.combinations``' order (the first of equal totals wins), into ``chosen``."""
    best = np.empty(n, dtype=np.int64)
    best_r = 0
    best_value = 0.0
    index = np.empty(n, dtype=np.int64)
    for r in range(1, n + 1):
        for j in range(r):
            index[j] = j
        while True:
            for j in range(r):
                terms[j] = size[useful[index[j]]]
            if numpy_row_sum(terms, 0, r) <= budget:
                for j in range(r):
                    terms[j] = net[useful[index[j]]]
                total = numpy_row_sum(terms, 0, r)
                if total > best_value:
                    best_value = total
                    best_r = r
                    for j in range(r):
                        best[j] = useful[index[j]]
            j = r - 1
            while j >= 0 and index[j] == n - r + j:
                j -= 1
            if j < 0:
                break
            index[j] += 1
            for m in range(j + 1, r):
                index[m] = index[m - 1] + 1
    for j in range(best_r):
        chosen[best[j]] = True


def frame_after(route, service, start, backlog, ratio, statics, served):  # pragma: no cover
    """:meth:`FrameMABP.control` after the projection: ``route`` (a copy the caller owns)
    capped in place between two servers of a commodity at the amount that balances their
    queues in work (``backlog`` per pair, ``ratio`` the slot's), and ``served`` (``(A,)``)
    set to the units the control takes from each action's queue. Returns whether a route
    was live (else ``route`` is unchanged)."""
    s = statics
    live = False
    for r in range(route.shape[0]):
        if route[r] == 0:
            continue
        live = True
        src, dst, c = s.route_src[r], s.route_dst[r], s.route_commodity[r]
        if not s.serves[src, c]:
            continue
        r_src, r_dst = ratio[src, c], ratio[dst, c]
        excess = (backlog[s.route_src_pair[r]] * r_src - backlog[s.route_dst_pair[r]] * r_dst) / (
            r_src + r_dst
        )
        cap = np.int64(_max(np.floor(excess), 0.0))
        if cap < route[r]:
            route[r] = cap
    n_act = service.shape[0]
    units = np.empty(n_act)
    for a in range(n_act):
        units[a] = np.float64(service[a])
    for a in start:
        if a >= 0:
            units[a] += 1.0
    by_pair = np.zeros(s.pair_node.shape[0])
    for a in range(n_act):
        by_pair[s.action_pair[a]] += units[a]
    for a in range(n_act):
        served[a] = by_pair[s.action_pair[a]]
    return live


_frame_values = jit.part(_frame_values)
_service_classes = jit.part(_service_classes)
_affinity_routes = jit.part(_affinity_routes)
_stable_order = jit.part(_stable_order)
_plan_exact = jit.part(_plan_exact)
_plan = jit.part(_plan)
frame_fill = jit.kernel(frame_fill)
frame_after = jit.kernel(frame_after)
