"""The rules that several kernels and the explainer share, each stated once (SPEC 1).

The projection (:mod:`~mabp_gym.core.kernels.slotcore`), the feasibility check
(:mod:`~mabp_gym.core.kernels.check_core`), the transition
(:mod:`~mabp_gym.core.kernels.transition_core`), the encoding, Oracle-Sur and the explainer
(:func:`mabp_gym.core.control.check_control`) all ask which actions are memory-assisted
after the slot's transfers and how much compute the units in service take first; they ask
these functions. Each writes into an array its caller owns, so that it runs the same
compiled by numba or as plain Python (:mod:`~mabp_gym.core.kernels.jit`). The kernels
that must give the floats numpy gives sum as numpy does (:func:`numpy_sum`).
"""

from __future__ import annotations

from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.jit import kernel

EPS = 1e-9
"""The rules' slack for float comparisons (a fill, a fit, a finished unit)."""
CHECK_TOLERANCE = 1e-6
"""How much more the feasibility check accepts than the projection fills: both sum the same
floats in a different order, and the last bit must never turn a projected control into a
rejected one."""


@kernel
def move_objects(transfers, transfer_link, transfer_signature, link_src, link_dst, holder):
    """SPEC 1 steps 2-3: each transferred object leaves its source for its destination.

    ``holder`` (``(N, S)`` identities, -1 none) is changed in place; ``transfers`` are
    transfer-candidate indices already known to be feasible (a node that held a signature
    at the start of the slot never receives it, so their order does not matter).
    """
    for q in range(transfers.shape[0]):
        k = transfers[q]
        e = transfer_link[k]
        s = transfer_signature[k]
        holder[link_dst[e], s] = holder[link_src[e], s]
        holder[link_src[e], s] = -1


@kernel
def hit_bits(holder, hit_slot, hit):
    """SPEC 1 step 4: every resident object is active, so an action is memory-assisted
    (hit bit 1) when its node holds its signature; ``hit_slot[a]`` is that (node, signature)
    raveled, ``N * S`` for an action without one. Written into ``hit`` ``(A,)``."""
    flat = jit.flat(holder)  # read by raveled position: no division per action
    size = flat.shape[0]
    for a in range(hit.shape[0]):
        slot = hit_slot[a]
        hit[a] = 1 if slot < size and flat[slot] >= 0 else 0


@kernel
def in_service_spend(mu, service_action, service_residual, spend):
    """SPEC 1 step 5: a unit in service takes its compute first, all that is left of its
    work and at most its node's ``mu``; an idle node spends 0. Written into ``spend``
    ``(N,)``."""
    for i in range(mu.shape[0]):
        residual = service_residual[i]
        spend[i] = (residual if residual < mu[i] else mu[i]) if service_action[i] >= 0 else 0.0


def backlog_pairs(queue_len, service_action, action_pair, backlog):  # pragma: no cover
    """The backlog per pair, units in service included
    (:meth:`mabp_gym.core.state.SimState.backlog_pairs`), written into ``backlog``."""
    for p in range(backlog.shape[0]):
        backlog[p] = queue_len[p]
    for node in range(service_action.shape[0]):
        if service_action[node] >= 0:
            backlog[action_pair[service_action[node]]] += 1


def numpy_sum(values, stack, frames):  # pragma: no cover
    """The sum of ``values`` (float64) in numpy's order, so that a kernel gets the float
    ``ndarray.sum`` gets (a sum one by one differs from it in the last bits past 8 terms):
    pairwise over halves (the left one a multiple of 8 long) down to blocks of at most 128
    (:func:`numpy_row_sum`), each half's sum computed before the next. Without recursion (numba
    does not load a recursive function from its cache): ``stack`` (float64) and ``frames``
    (int64, three per level) hold the halves pending, 64 levels at most."""
    lo, size, top = 0, values.shape[0], 0
    while True:
        while size > 128:  # down the left halves, each right half pending
            half = size // 2
            half -= half % 8
            frames[3 * top] = lo + half
            frames[3 * top + 1] = size - half
            frames[3 * top + 2] = 0  # its left half not yet summed
            top += 1
            size = half
        total = numpy_row_sum(values, lo, size)
        while top > 0 and frames[3 * top - 1] == 1:  # right halves done: add to their left
            top -= 1
            total = stack[top] + total
        if top == 0:
            return total
        stack[top - 1] = total  # a left half done: its right half next
        frames[3 * top - 1] = 1
        lo, size = frames[3 * top - 3], frames[3 * top - 2]


def numpy_row_sum(values, lo, n):  # pragma: no cover
    """numpy's sum of ``values[lo : lo + n]`` (float64), ``n`` at most 128: one by one from
    zero below 8 terms, else eight running sums combined pairwise."""
    if n < 8:
        total = 0.0
        for k in range(lo, lo + n):
            total += values[k]
        return total
    r0, r1, r2, r3 = values[lo], values[lo + 1], values[lo + 2], values[lo + 3]
    r4, r5, r6, r7 = values[lo + 4], values[lo + 5], values[lo + 6], values[lo + 7]
    k = lo + 8
    while k < lo + n - n % 8:
        r0 += values[k]
        r1 += values[k + 1]
        r2 += values[k + 2]
        r3 += values[k + 3]
        r4 += values[k + 4]
        r5 += values[k + 5]
        r6 += values[k + 6]
        r7 += values[k + 7]
        k += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for m in range(k, lo + n):
        total += values[m]
    return total


if jit.COMPILED:
    backlog_pairs = jit.part(backlog_pairs)
    numpy_row_sum = jit.part(numpy_row_sum)
    numpy_sum = jit.leaf(numpy_sum)
