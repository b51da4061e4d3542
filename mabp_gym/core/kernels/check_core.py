"""The checks of the evaluation harness as kernels: feasibility of a control, SPEC 6's
invariants after a slot.

These kernels only answer *whether* everything holds. Where one says no, the simulator
runs the explainer (:func:`mabp_gym.core.control.check_control`,
``Simulator._explain_invariants``: plain Python and numpy), which raises with the reason,
constraint and numbers. ``tests/test_check_core.py`` holds the verdicts of the two equal
on feasible controls, on thousands of broken ones, and on broken states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.rules import CHECK_TOLERANCE as _TOLERANCE
from mabp_gym.core.kernels.rules import EPS as _EPS
from mabp_gym.core.kernels.rules import in_service_spend
from mabp_gym.core.kernels.transition_core import (
    CompiledTransition,
    FloatField,
    IntField,
    Scalar,
    _compiled,
    _field,
    _hits_after,
    _lengths,
    state_arrays,
)

if TYPE_CHECKING:
    from mabp_gym.core.control import Control
    from mabp_gym.core.state import SimState


def accepts(core: CompiledTransition, state: SimState, control: Control, memory: bool) -> bool:
    """True when the compiled check accepts ``control`` in ``state``. False when it refuses
    it, or leaves it to the explainer :func:`~mabp_gym.core.control.check_control`
    (anything but int64 / float64 vectors of the right shapes): either way the caller
    runs the explainer, which raises with the reason or accepts.

    Args:
        core: the workload's static arrays (:meth:`CompiledTransition.shared`).
    """
    integer = (control.transfers, control.route, control.service, control.start)
    sizes = (None, core.num_routes, core.num_actions, core.num_nodes)
    for array, size in zip(integer, sizes, strict=True):
        if not (
            isinstance(array, np.ndarray)
            and array.dtype == np.int64
            and array.ndim == 1
            and (size is None or array.shape[0] == size)
        ):
            return False
    retain = control.retain
    if not (
        isinstance(retain, np.ndarray)
        and retain.dtype == np.float64
        and retain.shape == (core.num_retains,)
    ):
        return False
    return bool(
        feasible(
            memory,
            integer,
            retain,
            state_arrays(state),
            core.ints,
            core.floats,
        )
    )


@jit.part
def _transfers_fit(transfers, holder, memory_used, ints, floats):  # pragma: no cover
    """SPEC 1 step 2: every transfer names a candidate whose source holds the object and
    whose destination does not, no object moves twice or arrives twice, and each link's
    bandwidth and each receiving node's budget hold after all of them."""
    n_nodes, n_sig = holder.shape
    transfer_link = _field(ints, IntField.TRANSFER_LINK)
    transfer_signature = _field(ints, IntField.TRANSFER_SIGNATURE)
    link_src, link_dst = _field(ints, IntField.LINK_SRC), _field(ints, IntField.LINK_DST)
    signature_size = _field(floats, FloatField.SIGNATURE_SIZE)
    budget = _field(floats, FloatField.BUDGET)
    link_bandwidth = _field(floats, FloatField.LINK_BANDWIDTH)
    flags = np.zeros(n_nodes * n_sig, dtype=np.int8)  # 1 moved out, 2 arriving
    bandwidth = np.zeros(link_bandwidth.shape[0])
    used = memory_used.copy()
    received = np.zeros(n_nodes, dtype=np.bool_)
    for q in range(transfers.shape[0]):
        k = transfers[q]
        if k < 0 or k >= transfer_link.shape[0]:
            return False
        e = transfer_link[k]
        s = transfer_signature[k]
        i = link_src[e]
        j = link_dst[e]
        if holder[i, s] < 0 or flags[i * n_sig + s] & 1:
            return False
        if holder[j, s] >= 0 or flags[j * n_sig + s] & 2:
            return False
        flags[i * n_sig + s] |= 1
        flags[j * n_sig + s] |= 2
        received[j] = True
        bandwidth[e] += signature_size[s]
        used[i] -= signature_size[s]
        used[j] += signature_size[s]
    for e in range(bandwidth.shape[0]):
        if bandwidth[e] > link_bandwidth[e] + _TOLERANCE:
            return False
    for i in range(n_nodes):  # noqa: SIM110 - numba compiles loops, not generators
        if received[i] and used[i] > budget[i] + _TOLERANCE:
            return False
    return True


@_compiled
def feasible(memory, control, retain, state, ints, floats):  # pragma: no cover - compiled
    """Whether :func:`~mabp_gym.core.control.check_control` accepts the control
    ``(transfers, route, service, start)`` with ``retain`` in ``state`` (the arrays of
    :data:`~mabp_gym.core.kernels.transition_core.STATE_FIELDS`): same families, same
    arithmetic in the same order."""
    transfers, route, service, start = control
    holder, memory_used, service_action, service_residual = state[0], state[2], state[3], state[4]
    queue_len = state[7]
    n_nodes, n_sig = holder.shape
    n_act = service.shape[0]
    n_pairs = queue_len.shape[0]
    for k in range(retain.shape[0]):
        if not np.isfinite(retain[k]):
            return False
    if transfers.shape[0] > 0 and not (
        memory and _transfers_fit(transfers, holder, memory_used, ints, floats)
    ):
        return False
    # The hit bits under the post-transfer memory.
    hit = np.zeros(n_act, dtype=np.int64)
    if memory and n_sig > 0:
        _hits_after(transfers, ints, holder, hit, holder.copy())  # a copy as scratch
    # Links, then compute (units in service first), then starts, then queues.
    link_capacity = _field(ints, IntField.LINK_CAPACITY)
    action_node = _field(ints, IntField.ACTION_NODE)
    action_pair = _field(ints, IntField.ACTION_PAIR)
    route_link = _field(ints, IntField.ROUTE_LINK)
    route_src_pair = _field(ints, IntField.ROUTE_SRC_PAIR)
    mu, work = _field(floats, FloatField.MU), _field(floats, FloatField.WORK)  # work[h * A + a]
    taken = np.zeros(n_pairs, dtype=np.int64)
    load = np.zeros(link_capacity.shape[0], dtype=np.int64)
    for r in range(route.shape[0]):
        n = route[r]
        if n == 0:
            continue
        if n < 0:
            return False
        load[route_link[r]] += n
        taken[route_src_pair[r]] += n
    for e in range(load.shape[0]):
        if load[e] > link_capacity[e]:
            return False
    spent = np.empty(n_nodes)
    in_service_spend(mu, service_action, service_residual, spent)
    for a in range(n_act):
        n = service[a]
        if n == 0:
            continue
        if n < 0:
            return False
        spent[action_node[a]] += n * work[hit[a] * n_act + a]
        taken[action_pair[a]] += n
    for i in range(n_nodes):
        if spent[i] > mu[i] + _TOLERANCE:
            return False
    for i in range(n_nodes):
        a = start[i]
        if a == -1:
            continue
        if a < 0 or a >= n_act or action_node[a] != i:
            return False
        left = mu[i] - spent[i]
        if left <= 1e-3 * _EPS or work[hit[a] * n_act + a] <= mu[i] + _EPS:
            return False
        taken[action_pair[a]] += 1
    for p in range(n_pairs):  # noqa: SIM110 - numba compiles loops, not generators
        if taken[p] > queue_len[p]:
            return False
    return True


@_compiled
def invariants_hold(memory, units, state, fifo, ints, floats, runs):  # pragma: no cover
    """Whether ``Simulator._explain_invariants`` passes (SPEC 6); ``state`` and ``fifo``
    as for the transition's kernels. With ``runs`` the queue lengths are recounted from
    the FIFO's runs too (a walk of every run: the caller spaces it out)."""
    holder, owner, memory_used, service_action = state[0], state[1], state[2], state[3]
    queue_len = state[7]
    pool, head = fifo[0], fifo[1]
    n_nodes, n_sig = holder.shape
    if runs:
        lengths = np.empty(queue_len.shape[0], dtype=np.int64)
        _lengths(pool, head, lengths)
        for p in range(queue_len.shape[0]):  # noqa: SIM110 - numba compiles loops
            if lengths[p] != queue_len[p]:
                return False
    recount = 0
    for p in range(queue_len.shape[0]):
        if queue_len[p] < 0:
            return False
        recount += queue_len[p]
    for i in range(n_nodes):
        if service_action[i] >= 0:
            recount += 1
    if recount != units:
        return False
    if not memory or n_sig == 0:
        for m in range(owner.shape[0]):  # noqa: SIM110 - numba compiles loops, not generators
            if owner[m] >= 0:
                return False
        return True
    replicas = ints[Scalar.REPLICAS]
    eligible = _field(ints, IntField.ELIGIBLE)
    signature_size = _field(floats, FloatField.SIGNATURE_SIZE)
    budget = _field(floats, FloatField.BUDGET)
    resident = 0
    for i in range(n_nodes):
        held = 0.0
        for s in range(n_sig):
            m = holder[i, s]
            if m < 0:
                continue
            resident += 1
            if owner[m] != i or m // replicas != s or eligible[i * n_sig + s] == 0:
                return False
            held += signature_size[s]
        if abs(memory_used[i] - held) > 1e-6 or held > budget[i] + _TOLERANCE:
            return False
    owned = 0
    for m in range(owner.shape[0]):
        if owner[m] >= 0:
            owned += 1
    return owned == resident
