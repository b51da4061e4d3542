"""One-slot controls and their feasibility check (SPEC section 1, steps 2-7).

A :class:`Control` is indexed by the workload's candidate lists (``workload.index``):
transfers are transfer-candidate indices, routing amounts are per route candidate,
whole-unit service amounts are per action, ``start`` names per node the action whose unit
begins multi-slot service with the compute the node has left, and ``retain`` is the
retention priority map per retain candidate, fixed before outcomes are seen.

:func:`check_control` raises :class:`InfeasibleControlError` naming the violated
constraint, the node and the commodity (or link and signature) whenever a control breaks
any constraint; the simulator calls it on every control it executes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mabp_gym.core.kernels import rules
from mabp_gym.core.kernels.rules import CHECK_TOLERANCE, EPS
from mabp_gym.core.kernels.transition_core import CompiledTransition

if TYPE_CHECKING:
    from mabp_gym.core.state import SimState
    from mabp_gym.core.workload import Workload

__all__ = [
    "CHECK_TOLERANCE",
    "EPS",
    "CheckedControl",
    "Control",
    "InfeasibleControlError",
    "check_control",
    "compute_left",
    "hit_bits",
    "holders_after",
]


class InfeasibleControlError(ValueError):
    """A control violates a constraint of the slot it was given for."""

    def __init__(self, constraint: str, where: str, detail: str) -> None:
        super().__init__(f"infeasible control: {constraint} violated at {where}: {detail}")
        self.constraint = constraint
        self.where = where


@dataclass(frozen=True)
class Control:
    """A complete one-slot control.

    Shapes: ``T'`` executed transfers (any order, each a transfer-candidate index).
    """

    transfers: np.ndarray  # (T',) int64, indices into the transfer candidates
    route: np.ndarray  # (R,) int64, units routed per route candidate
    service: np.ndarray  # (A,) int64, whole units served per action this slot
    start: np.ndarray  # (N,) int64, action starting one multi-slot unit, -1 for none
    retain: np.ndarray  # (K,) float64, retention priority per retain candidate

    def as_dict(self) -> dict[str, np.ndarray]:
        """The control as a dict of arrays (what the env puts in ``info["control"]``)."""
        return {
            "transfers": self.transfers,
            "route": self.route,
            "service": self.service,
            "start": self.start,
            "retain": self.retain,
        }

    @staticmethod
    def idle(workload: Workload) -> Control:
        """The control that does nothing and drops every object."""
        ix = workload.index
        return Control(
            transfers=np.zeros(0, dtype=np.int64),
            route=np.zeros(ix.num_routes, dtype=np.int64),
            service=np.zeros(ix.num_actions, dtype=np.int64),
            start=np.full(ix.num_nodes, -1, dtype=np.int64),
            retain=np.full(ix.num_retains, -1.0),
        )


def _sparse(name: str, value: np.ndarray, length: int) -> list[tuple[int, int]]:
    """``(index, amount)`` of the nonzero entries of an integer control vector."""
    array = _as_int_array(name, value, length)
    nonzero = array.nonzero()[0]
    return list(zip(nonzero.tolist(), array[nonzero].tolist(), strict=True))


def _as_int_array(name: str, value: np.ndarray, length: int | None) -> np.ndarray:
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.ndim != 1 or (length is not None and array.shape[0] != length):
        expected = f"({length},)" if length is not None else "(n,)"
        raise InfeasibleControlError(
            "shape", f"control.{name}", f"expected shape {expected}, got {array.shape}"
        )
    if array.dtype.kind not in "iu":
        if array.dtype.kind not in "f" or (
            array.size
            and not (np.all(np.abs(array) < 2.0**53) and np.all(array == np.round(array)))
        ):
            raise InfeasibleControlError(
                "integrality",
                f"control.{name}",
                f"amounts must be integers, got dtype {array.dtype}",
            )
        array = array.astype(np.int64)
    return array


def _as_int_list(name: str, value: np.ndarray, length: int | None) -> list[int]:
    return _as_int_array(name, value, length).tolist()


def holders_after(
    workload: Workload, holder: np.ndarray, transfers: Sequence[int] | np.ndarray
) -> np.ndarray:
    """``holder`` (``(N, S)`` identities) after the transfer candidates ``transfers`` (known
    feasible), by the rule :func:`~mabp_gym.core.kernels.rules.move_objects`. A copy when
    anything moves; ``holder`` itself otherwise."""
    if not len(transfers):
        return holder
    core = CompiledTransition.shared(workload)
    moved = holder.copy()
    rules.move_objects(
        np.asarray(transfers, dtype=np.int64),
        core.field("transfer_link"),
        core.field("transfer_signature"),
        core.field("link_src"),
        core.field("link_dst"),
        moved,
    )
    return moved


def hit_bits(
    workload: Workload,
    holder: np.ndarray,
    memory: bool,
    transfers: Sequence[int] | np.ndarray = (),
) -> np.ndarray:
    """Hit bit of every action, ``(A,)`` int64, under the memory ``holder`` (``(N, S)``
    identities) after ``transfers`` (known feasible), by the rule
    :func:`~mabp_gym.core.kernels.rules.hit_bits`; all 0 without memory."""
    ix = workload.index
    hit = np.zeros(ix.num_actions, dtype=np.int64)
    if memory and ix.num_signatures:
        after = holders_after(workload, holder, transfers)
        hit_slot = CompiledTransition.shared(workload).field("hit_slot")
        rules.hit_bits(np.ascontiguousarray(after), hit_slot, hit)  # read by raveled position
    return hit


def compute_left(workload: Workload, state: SimState) -> np.ndarray:
    """Compute per node left for new service after the units in service, ``(N,)``, by the
    rule :func:`~mabp_gym.core.kernels.rules.in_service_spend`."""
    mu = CompiledTransition.shared(workload).field("mu")
    spend = np.empty(mu.shape[0])
    rules.in_service_spend(mu, state.service_action, state.service_residual, spend)
    return mu - spend


def _link_name(workload: Workload, e: int) -> str:
    link = workload.links[e]
    return f"link {workload.nodes[link.src].name}->{workload.nodes[link.dst].name}"


def _pair_name(workload: Workload, p: int) -> str:
    ix = workload.index
    return (
        f"node {workload.nodes[ix.pair_node[p]].name}, commodity "
        f"{workload.commodities[ix.pair_commodity[p]].name!r}"
    )


@dataclass(frozen=True)
class CheckedControl:
    """A control that passed :func:`check_control`, in sparse form, with the hit bits the
    explainer worked out (for a caller that wants them; the transition reads the control)."""

    hit: list[int]  # (A,) hit bit of every action under the post-transfer memory
    transfers: list[int]  # transfer-candidate indices
    route: list[tuple[int, int]]  # (route candidate, units), nonzero entries
    service: list[tuple[int, int]]  # (action, units), nonzero entries
    start: list[tuple[int, int]]  # (node, action) of each multi-slot start


def check_control(
    workload: Workload, state: SimState, control: Control, *, memory: bool = True
) -> CheckedControl:
    """Raise :class:`InfeasibleControlError` unless ``control`` is feasible in ``state``.

    The constraint families are checked in a fixed order (shapes, transfers, links,
    compute, starts, queues), so a control that breaks several is always refused for
    the same one.

    Returns:
        The control in sparse form with the hit bit of every action under the
        post-transfer resident memory (the activation of SPEC 1 step 4).

    Raises:
        ValueError: ``state`` is not one of ``workload`` (its arrays' shapes).
    """
    state.check_fits(workload)
    return feasibility(workload, state, control, memory=memory)


def feasibility(
    workload: Workload, state: SimState, control: Control, *, memory: bool = True
) -> CheckedControl:
    """:func:`check_control` for a state known to be the workload's (a simulator's own)."""
    ix = workload.index
    transfers = _as_int_list("transfers", control.transfers, None)
    route = _sparse("route", control.route, ix.num_routes)
    service = _sparse("service", control.service, ix.num_actions)
    start = _as_int_list("start", control.start, ix.num_nodes)
    _check_retain(ix.num_retains, control.retain)
    if transfers:
        _check_transfers(workload, state, transfers, memory)
    hit = hit_bits(workload, state.holder, memory, transfers).tolist()
    # Units taken from each queue (pair), by routing, service and starts together.
    taken: dict[int, int] = {}
    _check_links(workload, route, taken)
    spent = _check_compute(workload, state, service, hit, taken)
    starts = _check_starts(workload, start, spent, hit, taken)
    if taken:
        _check_queues(workload, state, taken)
    return CheckedControl(hit=hit, transfers=transfers, route=route, service=service, start=starts)


def _check_retain(num_retains: int, value: np.ndarray) -> None:
    """The retention priorities: one finite float per retain candidate."""
    retain = np.asarray(value)
    if retain.shape != (num_retains,):
        raise InfeasibleControlError(
            "shape", "control.retain", f"expected shape ({num_retains},), got {retain.shape}"
        )
    if retain.size and not np.isfinite(retain).all():
        raise InfeasibleControlError(
            "finite priorities", "control.retain", "retention priorities must be finite"
        )


def _check_links(workload: Workload, route: list[tuple[int, int]], taken: dict[int, int]) -> None:
    """Nonnegative routing amounts within each link's capacity; adds the routed units to
    ``taken``."""
    ix = workload.index
    fx = ix.fast
    route_link, route_src_pair = fx.route_link, fx.route_src_pair
    load = [0] * ix.num_links
    for r, n in route:
        if n < 0:
            raise InfeasibleControlError("nonnegativity", f"control.route[{r}]", f"amount {n} < 0")
        load[route_link[r]] += n
        p = route_src_pair[r]
        taken[p] = taken.get(p, 0) + n
    capacity = ix.link_capacity.tolist()
    for e, units in enumerate(load):
        if units > capacity[e]:
            raise InfeasibleControlError(
                "link capacity",
                _link_name(workload, e),
                f"{units} units routed, capacity {capacity[e]}",
            )


def _check_compute(
    workload: Workload,
    state: SimState,
    service: list[tuple[int, int]],
    hit: list[int],
    taken: dict[int, int],
) -> list[float]:
    """Units in service first, then whole units, within each node's ``mu``; adds the
    served units to ``taken``.

    Returns:
        The compute spent per node, ``(N,)``.
    """
    fx = workload.index.fast
    work, mu, action_node, action_pair = fx.work, fx.mu, fx.action_node, fx.action_pair
    spend = np.empty(len(mu))
    mu_rule = CompiledTransition.shared(workload).field("mu")
    rules.in_service_spend(mu_rule, state.service_action, state.service_residual, spend)
    spent = spend.tolist()
    for a, n in service:
        if n < 0:
            raise InfeasibleControlError(
                "nonnegativity", f"control.service[{a}]", f"amount {n} < 0"
            )
        spent[action_node[a]] += n * work[hit[a]][a]
        p = action_pair[a]
        taken[p] = taken.get(p, 0) + n
    for i, total in enumerate(spent):
        if total > mu[i] + CHECK_TOLERANCE:
            raise InfeasibleControlError(
                "compute capacity",
                f"node {workload.nodes[i].name}",
                f"work {total:g} exceeds mu {mu[i]:g}",
            )
    return spent


def _check_starts(
    workload: Workload,
    start: list[int],
    spent: list[float],
    hit: list[int],
    taken: dict[int, int],
) -> list[tuple[int, int]]:
    """At most one multi-slot start per node, of its own action whose work exceeds
    ``mu``, with compute left after ``spent``; adds the started units to ``taken``.

    Returns:
        ``(node, action)`` of each start.
    """
    ix = workload.index
    fx = ix.fast
    starts: list[tuple[int, int]] = []
    for i, a in enumerate(start):
        if a == -1:
            continue
        if not 0 <= a < ix.num_actions or fx.action_node[a] != i:
            raise InfeasibleControlError(
                "start action",
                f"node {workload.nodes[i].name}",
                f"action {a} is not an action of this node (or -1)",
            )
        left = fx.mu[i] - spent[i]
        work = fx.work[hit[a]][a]
        # The projection starts a unit only with more than EPS of compute left; the check
        # wants clearly more than nothing, far below EPS, so the two never disagree.
        if left <= 1e-3 * EPS or work <= fx.mu[i] + EPS:
            raise InfeasibleControlError(
                "multi-slot start",
                f"node {workload.nodes[i].name}",
                f"only a unit whose work exceeds mu ({fx.mu[i]:g}) starts in service, "
                f"with compute left; work {work:g}, compute left {left:g}",
            )
        p = fx.action_pair[a]
        taken[p] = taken.get(p, 0) + 1
        starts.append((i, a))
    return starts


def _check_queues(workload: Workload, state: SimState, taken: dict[int, int]) -> None:
    """Routed + served + started units of each (node, commodity) at most the waiting
    units."""
    queue = state.queue_len
    waiting = queue.item  # a Python int: cheaper to compare than a numpy scalar
    for p, units in taken.items():
        if units > waiting(p):
            raise InfeasibleControlError(
                "queue",
                _pair_name(workload, p),
                f"{units} units routed or served, {int(queue[p])} waiting",
            )


def _check_transfers(
    workload: Workload, state: SimState, transfers: list[int], memory: bool
) -> None:
    """Check transfers (SPEC 1 step 2).

    The source holds the object, each object moves once, the link's bandwidth, one replica
    of a signature per node, the destination budget after all transfers.
    """
    ix = workload.index
    fx = ix.fast
    names = workload.nodes
    if not memory:
        raise InfeasibleControlError(
            "no-memory mode", "control.transfers", "the no-memory system has no objects to move"
        )
    holder = state.holder
    bandwidth: dict[int, float] = {}
    used = state.memory_used.tolist()
    moved: set[tuple[int, int]] = set()
    arriving: set[tuple[int, int]] = set()

    def where(i: int, j: int, s: int) -> str:
        return f"link {names[i].name}->{names[j].name}, signature {workload.signatures[s].name!r}"

    for k in transfers:
        if not 0 <= k < ix.num_transfers:
            raise InfeasibleControlError(
                "candidate range", "control.transfers", f"index {k} not in [0, {ix.num_transfers})"
            )
        e, s = fx.transfer_link[k], fx.transfer_signature[k]
        i, j = fx.link_src[e], fx.link_dst[e]
        if holder[i, s] < 0:
            raise InfeasibleControlError(
                "transfer source", where(i, j, s), "the source does not hold the object"
            )
        if (i, s) in moved:
            raise InfeasibleControlError(
                "object moves at most once", where(i, j, s), "the object is moved twice in one slot"
            )
        if holder[j, s] >= 0 or (j, s) in arriving:
            raise InfeasibleControlError(
                "one replica per node",
                where(i, j, s),
                "the destination already holds or receives a replica",
            )
        moved.add((i, s))
        arriving.add((j, s))
        size = fx.signature_size[s]
        bandwidth[e] = bandwidth.get(e, 0.0) + size
        used[i] -= size
        used[j] += size
    for e, size in bandwidth.items():
        if size > ix.link_bandwidth[e] + CHECK_TOLERANCE:
            raise InfeasibleControlError(
                "transfer bandwidth",
                _link_name(workload, e),
                f"{size:g} size units moved, bandwidth {ix.link_bandwidth[e]:g}",
            )
    for i in {node for pair in arriving for node in pair[:1]}:
        if used[i] > fx.budget[i] + CHECK_TOLERANCE:
            raise InfeasibleControlError(
                "memory budget",
                f"node {names[i].name}",
                f"{used[i]:g} size units resident after transfers, budget {fx.budget[i]:g}",
            )
