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

The phases run in one kernel, :func:`mabp_gym.core.kernels.slotcore._project_kernel`
(compiled by numba where it is there, plain Python otherwise).
"""

from __future__ import annotations

import weakref

import numpy as np

from mabp_gym.core.control import Control
from mabp_gym.core.index import WorkloadIndex
from mabp_gym.core.kernels import slotcore
from mabp_gym.core.state import SimState
from mabp_gym.core.validate import checked_action
from mabp_gym.core.workload import Workload

# One compiled projection (static arrays and scratch) per workload index.
_COMPILED: weakref.WeakKeyDictionary[WorkloadIndex, slotcore.CompiledProjection] = (
    weakref.WeakKeyDictionary()
)


def validate_scores(workload: Workload, scores: np.ndarray, what: str = "scores") -> np.ndarray:
    """Return ``scores`` as a float64 vector or raise ``ValueError`` naming what is wrong:
    not real numbers (:func:`~mabp_gym.core.validate.checked_action`, naming ``what``), the
    shape, NaN or inf."""
    expected = workload.index.num_scores
    if type(scores) is not np.ndarray or scores.dtype.kind != "f":  # the common case skips it
        scores = checked_action(scores, what)
    array = np.asarray(scores, dtype=np.float64)
    if array.shape != (expected,):
        raise ValueError(
            f"scores must have shape ({expected},) for workload "
            f"{workload.name!r}, got {np.shape(scores)}"
        )
    if not np.isfinite(array).all():
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
    if not isinstance(state, SimState):
        raise TypeError(f"state must be a SimState (sim.state), got {type(state).__name__}")
    state.check_fits(workload)
    return project_own(workload, state, scores, memory=memory)


def project_own(
    workload: Workload, state: SimState, scores: np.ndarray, *, memory: bool = True
) -> Control:
    """:func:`project` for a state known to be the workload's (a simulator's own, or the one
    the harness hands a policy's ``act``): the scores are checked, the state is not."""
    return project_checked(workload, state, validate_scores(workload, scores), memory=memory)


def project_checked(
    workload: Workload, state: SimState, scores: np.ndarray, *, memory: bool = True
) -> Control:
    """:func:`project` of ``scores`` that :func:`validate_scores` already returned (a
    float64 vector of the right shape, finite): the env's step checks its action once."""
    ix = workload.index
    kernel = _COMPILED.get(ix)
    if kernel is None:
        kernel = _COMPILED[ix] = slotcore.CompiledProjection(workload)
    transfers, _hit, route, service, start = kernel(state, scores, memory)
    return Control(
        transfers=transfers,
        route=route,
        service=service,
        start=start,
        retain=scores[ix.score_slices[3]].copy(),
    )
