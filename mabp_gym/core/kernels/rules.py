"""The rules that several kernels and the explainer share, each stated once (SPEC 1).

The projection (:mod:`~mabp_gym.core.kernels.slotcore`), the feasibility check
(:mod:`~mabp_gym.core.kernels.check_core`), the transition
(:mod:`~mabp_gym.core.kernels.transition_core`), the encoding, Oracle-Sur and the explainer
(:func:`mabp_gym.core.control.check_control`) all ask which actions are memory-assisted
after the slot's transfers and how much compute the units in service take first; they ask
these functions. Each writes into an array its caller owns, so that it runs the same
compiled by numba or as plain Python (:mod:`~mabp_gym.core.kernels.jit`).
"""

from __future__ import annotations

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
    size = holder.shape[0] * holder.shape[1]
    flat = holder.reshape(size)  # read by raveled position: no division per action
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
