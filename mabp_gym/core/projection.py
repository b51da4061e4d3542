"""The shared projection of candidate scores onto a feasible control (SPEC 3.2).

Every policy, scripted or learned, and the Gymnasium environment produce one score per
candidate and go through :func:`project`; only their scores differ. A score vector has
length ``D = A + R + T + K`` laid out as ``[service | route | transfer | retain]``
(``workload.index.score_slices``). Only order and sign matter:

1. transfers with score > 0, in descending score: move if the source held the object at the
   start of the slot and it has not moved yet, the link's transfer bandwidth and the
   destination budget allow it, and the destination neither held nor receives a replica of
   the signature this slot;
2. units already in service take the compute they need first; then service candidates with
   score > 0, in descending score, each take the largest whole number of units their queue
   and the node's compute allow. A unit whose work exceeds the node's ``mu`` can never fit
   whole: its candidate starts one unit in service with all the compute the node has left,
   and the node serves nothing else this slot. Units with work at most ``mu`` are always
   served whole within a slot, so with every work at most ``mu`` this is exactly the
   paper's per-slot constraint (SPEC 1 step 5);
3. then route candidates with score > 0, in descending score, move what is left of each
   queue within link capacities;
4. retention uses the retain scores as the priority map: after outcomes each node keeps its
   objects in descending score while they fit; negative scores are dropped.

Ties are broken by candidate index (a stable sort), so the order is fixed and documented:
services by action index, routes by link then commodity, transfers by link then signature.

This module is the readable reference. :func:`project` runs the same algorithm compiled
(:mod:`mabp_gym.core.kernels.slotcore`) when numba is installed; the tests hold the two identical.
"""

from __future__ import annotations

import weakref

import numpy as np

from mabp_gym.core.control import EPS, CheckedControl, Control, compute_left, hit_bits
from mabp_gym.core.index import WorkloadIndex
from mabp_gym.core.kernels import slotcore
from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Workload

# One compiled projection (static arrays and scratch) per workload index.
_COMPILED: weakref.WeakKeyDictionary[WorkloadIndex, slotcore.CompiledProjection] = (
    weakref.WeakKeyDictionary()
)


def validate_scores(workload: Workload, scores: np.ndarray) -> np.ndarray:
    """Return ``scores`` as a float64 vector or raise ``ValueError`` naming the shape."""
    expected = workload.index.num_scores
    array = np.asarray(scores, dtype=np.float64)
    if array.shape != (expected,):
        raise ValueError(
            f"scores must have shape ({expected},) for workload "
            f"{workload.name!r}, got {np.shape(scores)}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"scores must be finite floats of shape ({expected},); got NaN or inf")
    return array


def project(
    workload: Workload, state: SimState, scores: np.ndarray, *, memory: bool = True
) -> Control:
    """Project a score vector onto a feasible control for ``state``.

    Args:
        workload: the network.
        state: the state at the start of the slot.
        scores: ``(D,)`` finite floats, ``D = workload.index.num_scores``.
        memory: ``False`` for the no-memory system (no transfers, every action a miss).

    Returns:
        A :class:`Control` that :func:`mabp_gym.core.control.check_control` accepts.
    """
    if slotcore.AVAILABLE:
        return _project_compiled(workload, state, scores, memory)[0]
    return project_reference(workload, state, scores, memory=memory)[0]


def project_checked(
    workload: Workload,
    state: SimState,
    scores: np.ndarray,
    *,
    memory: bool = True,
    compiled: bool | None = None,
) -> tuple[Control, CheckedControl]:
    """:func:`project`, with the control also in the sparse form the transition executes.

    The control is feasible by construction, so a caller that executes it may skip
    :func:`~mabp_gym.core.control.check_control` (the training path does; the evaluation
    harness checks every control it executes).

    Args:
        compiled: ``True`` for the compiled core, ``False`` for this module's reference
            loops, ``None`` (default) for the compiled core when numba is available.
    """
    if compiled is None:
        compiled = slotcore.AVAILABLE
    if not compiled:
        return project_reference(workload, state, scores, memory=memory)
    if not slotcore.AVAILABLE:
        raise RuntimeError(
            "the compiled slot core needs numba (pip install numba), and MABP_GYM_PURE unset"
        )
    control, hit = _project_compiled(workload, state, scores, memory)
    return control, _checked(control, hit.tolist())


def _project_compiled(
    workload: Workload, state: SimState, scores: np.ndarray, memory: bool
) -> tuple[Control, np.ndarray]:
    """The compiled projection: the control and the hit bits of the post-transfer memory."""
    ix = workload.index
    scores = validate_scores(workload, scores)
    kernel = _COMPILED.get(ix)
    if kernel is None:
        kernel = _COMPILED[ix] = slotcore.CompiledProjection(workload)
    transfers, hit, route, service, start = kernel(state, scores, memory)
    control = Control(
        transfers=transfers,
        route=route,
        service=service,
        start=start,
        retain=scores[ix.score_slices[3]].copy(),
    )
    return control, hit


def _checked(control: Control, hit: list[int]) -> CheckedControl:
    """The sparse form of a projected control (entries in index order, as the check gives)."""
    route = control.route.nonzero()[0]
    service = control.service.nonzero()[0]
    start = (control.start >= 0).nonzero()[0]
    return CheckedControl(
        hit=hit,
        transfers=control.transfers.tolist(),
        route=list(zip(route.tolist(), control.route[route].tolist(), strict=True)),
        service=list(zip(service.tolist(), control.service[service].tolist(), strict=True)),
        start=list(zip(start.tolist(), control.start[start].tolist(), strict=True)),
    )


def project_reference(
    workload: Workload, state: SimState, scores: np.ndarray, *, memory: bool = True
) -> tuple[Control, CheckedControl]:
    """The projection in plain Python and numpy: the readable reference of the algorithm.

    One function per phase of the module docstring, in its order: each phase takes what
    the earlier ones left (the transfers' hit bits, the units still waiting per pair).
    """
    ix = workload.index
    scores = validate_scores(workload, scores)
    transfers = _transfer_phase(ix, state, scores) if memory and ix.num_transfers else []
    hit = hit_bits(workload, state.holder, memory, transfers)
    service, starts, avail = _service_phase(workload, state, scores, hit)
    route = _route_phase(ix, state, scores, avail) if ix.num_routes else {}
    # 4. Retention needs no projection: the retain scores are the priority map applied
    # after outcomes.
    control = Control(
        transfers=np.asarray(transfers, dtype=np.int64),
        route=_dense(route, ix.num_routes),
        service=_dense(service, ix.num_actions),
        start=_dense(starts, ix.num_nodes, fill=-1),
        retain=scores[ix.score_slices[3]].copy(),
    )
    return control, _checked(control, hit)


def _transfer_phase(ix: WorkloadIndex, state: SimState, scores: np.ndarray) -> list[int]:
    """1. Transfers in descending score (the candidates executed, in that order). Only the
    holder entries at the ends of the wanted transfers are read."""
    fx = ix.fast
    offset = ix.num_actions + ix.num_routes
    transfer_scores = scores[offset : offset + ix.num_transfers]
    wanted = _descending(transfer_scores, transfer_scores > 0)
    transfers: list[int] = []
    if wanted:
        flat = state.holder.ravel()
        src_held = (flat[ix.transfer_src_slot[wanted]] >= 0).tolist()
        dst_held = (flat[ix.transfer_dst_slot[wanted]] >= 0).tolist()
        used = state.memory_used.tolist()
        bandwidth = ix.link_bandwidth.tolist()
        moved: set[tuple[int, int]] = set()
        arrived: set[tuple[int, int]] = set()
        for q, k in enumerate(wanted):
            e, s = fx.transfer_link[k], fx.transfer_signature[k]
            i, j = fx.link_src[e], fx.link_dst[e]
            size = fx.signature_size[s]
            if (
                not src_held[q]
                or (i, s) in moved
                or (i, s) in arrived
                or dst_held[q]
                or (j, s) in arrived
                or bandwidth[e] < size - EPS
                or used[j] + size > fx.budget[j] + EPS
            ):
                continue
            moved.add((i, s))
            arrived.add((j, s))
            used[i] -= size
            used[j] += size
            bandwidth[e] -= size
            transfers.append(k)
    return transfers


def _service_phase(
    workload: Workload, state: SimState, scores: np.ndarray, hit: list[int]
) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """2. Units in service take their compute first; then service in descending score.

    Returns:
        Units served per action, the action starting a multi-slot unit per node, and the
        units left waiting per pair the phase touched (routing takes from those).
    """
    ix = workload.index
    fx = ix.fast
    left = compute_left(workload, state).tolist()
    queue = state.queue_len
    service_scores = scores[: ix.num_actions]
    wanted = _descending(service_scores, (service_scores > 0) & (queue[ix.action_pair] > 0))
    service: dict[int, int] = {}
    starts: dict[int, int] = {}
    avail: dict[int, int] = {}
    if wanted:
        work, mu = fx.work, fx.mu
        action_pair, action_node = fx.action_pair, fx.action_node
        waiting = queue.item  # a queue length as a Python int, cheaper than int(queue[p])
        for a in wanted:
            i = action_node[a]
            if left[i] <= EPS:
                continue
            p = action_pair[a]
            q = avail[p] if p in avail else waiting(p)
            if q == 0:
                continue
            w = work[hit[a]][a]
            if w > mu[i] + EPS:
                # The unit can never fit whole: it starts in service with all the compute
                # left, and the node serves nothing else this slot.
                starts[i] = a
                q -= 1
                left[i] = 0.0
            else:
                n = q if w <= 0 else min(q, int((left[i] + EPS) // w))
                if n >= 1:
                    service[a] = n
                    q -= n
                    left[i] -= n * w
            avail[p] = q
    return service, starts, avail


def _route_phase(
    ix: WorkloadIndex, state: SimState, scores: np.ndarray, avail: dict[int, int]
) -> dict[int, int]:
    """3. Routing in descending score with what is left of each queue (``avail``: the
    units left per pair the service phase touched; it is updated)."""
    fx = ix.fast
    queue = state.queue_len
    n_act = ix.num_actions
    route_scores = scores[n_act : n_act + ix.num_routes]
    wanted = _descending(route_scores, (route_scores > 0) & (queue[ix.route_src_pair] > 0))
    route: dict[int, int] = {}
    if wanted:
        capacity = ix.link_capacity.tolist()
        src_pair, route_link = fx.route_src_pair, fx.route_link
        waiting = queue.item
        for r in wanted:
            p, e = src_pair[r], route_link[r]
            q = avail[p] if p in avail else waiting(p)
            n = min(q, capacity[e])
            if n > 0:
                route[r] = n
                avail[p] = q - n
                capacity[e] -= n
    return route


def _descending(block: np.ndarray, live: np.ndarray) -> list[int]:
    """Indices of the live candidates in descending score, ties by index (stable)."""
    candidates = np.flatnonzero(live)
    if candidates.size > 1:
        candidates = candidates[np.argsort(-block[candidates], kind="stable")]
    return candidates.tolist()


def _dense(entries: dict[int, int], length: int, fill: int = 0) -> np.ndarray:
    array = np.full(length, fill, dtype=np.int64)
    if entries:
        array[list(entries)] = list(entries.values())
    return array
