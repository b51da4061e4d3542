"""Oracle-Sur: a near-exact solver of MABP's one-slot surrogate objective (SPEC 4).

MABP optimizes the paper's one-slot surrogate (16) greedily, through score order and the
shared projection. Oracle-Sur optimizes the *same* objective with the same known primitives
and the same weights, but exactly where that is cheap:

1. **Transfers**: start from the transfers the shared projection makes from MABP's scores,
   then local search (add, drop or swap one transfer candidate, or add two at once) on the
   transfer value MABP's transfer scores stand for, ``V_dst - V_src - nu * kappa`` (value
   gained at the destination minus value lost at the source minus the migration cost),
   within the constraints of SPEC 1 step 2 (the source held the object at slot start, each
   object moves once, link bandwidth, destination budget after all transfers, the
   destination neither holds nor receives a replica).
2. **Routing and service**: given the post-transfer memory (hence every hit bit), an
   integer program solved by HiGHS as :func:`scipy.optimize.milp` solves it (through
   :mod:`mabp_gym.agents.highs`) under a node limit:
   whole-unit service ``S_a``, routing ``F_r`` and, for units whose work exceeds the node's
   ``mu`` (they can only start multi-slot service, SPEC 3.2 step 2), a binary start
   ``x_a`` with its compute ``c_a``. It maximizes
   ``sum F_r W_r + sum S_a W_a + sum c_a W_a / w_a`` under compute, link, queue and
   one-start-per-node constraints. The program separates by node; nodes whose bounds are
   jointly feasible are solved in closed form, and the LP relaxation is tried first (when
   its vertex is integral it is optimal and branch and bound is skipped).
3. **Retention**: per node a 0/1 knapsack over the resident objects and those the slot may
   generate, maximizing MABP's marginal object values net of holding; the optimal set
   gets priorities above 1, the rest of the positive-value objects priorities in (0, 1),
   negative-value ones -1.
4. **Guarantee**: the control is scored with :meth:`OracleSur.one_slot_objective` against
   MABP's own projected control; if the MILP fails, times out without a solution or scores
   lower, MABP's control is returned. The returned control never scores below MABP's.

``scores(obs)`` is MABP's score rule, so the agent also runs in any Gymnasium loop (where
it behaves as MABP); :meth:`OracleSur.control` is the exact-control entry point for the
simulator core.

MABP is composed, not subclassed: the oracle holds one (``self.mabp``) and reads its
public :meth:`~mabp_gym.agents.mabp.MABP.weights`,
:meth:`~mabp_gym.agents.mabp.MABP.route_weights`,
:attr:`~mabp_gym.agents.mabp.MABP.object_values`, ``primitives``, ``holding_cost`` and
``migration_cost``, so MABP's internals may change freely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import sparse

from mabp_gym.agents.base import Policy
from mabp_gym.agents.highs import Columns, matvec, solve
from mabp_gym.agents.mabp import MABP
from mabp_gym.agents.oracle_core import (
    SlotModel,
    integral_fix,
    leftover_routes,
    read_solution,
    slot_program,
)
from mabp_gym.core.control import (
    EPS,
    Control,
    InfeasibleControlError,
    check_control,
    compute_left,
    hit_bits,
    holders_after,
)
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import check_core, slotcore
from mabp_gym.core.kernels.transition_core import CompiledTransition
from mabp_gym.core.projection import project
from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Workload

TOLERANCE = 1e-9
"""Relative tolerance of the never-worse-than-MABP gate (objectives are O(backlog))."""

_KNAPSACK_SCALES = (1, 2, 4, 5, 8, 10, 16, 20, 25, 50, 100, 1000)
_KNAPSACK_MAX_UNITS = 100_000
_ENUMERATE_MAX_ITEMS = 16
_PAIR_POOL = 40  # largest transfer pool for which the search tries adding two at once


@dataclass(frozen=True, eq=False)
class SlotProgram:
    """The routing-and-service integer program of one slot, given the post-transfer memory.

    Variables (columns), in four blocks: whole-unit service ``S_a`` of the actions in
    ``serve``, routing ``F_r`` of the routes in ``routes``, and for the actions in
    ``starts`` (work above the node's ``mu``: they can only start multi-slot service) a
    start binary ``x_a`` and the compute ``c_a`` it receives. Variables of weight <= 0 are
    left out: every constraint packs, so they are 0 at an optimum. The objective,
    maximized, is ``sum S_a W_a + sum F_r W_r + sum c_a W_a / w_a``.

    Packing rows ``sum data * var[cols] <= rhs``, as COO entries (``rows``, ``cols``,
    ``data``), in three blocks: node compute (``S_a w_a`` and ``c_a``), link capacity
    (``F_r``) and queue per pair (``S_a``, ``F_r`` and ``x_a``). Every row and every
    variable belongs to one node (``row_node``, ``node``), so the program separates by
    node. The coupling ``c_a <= avail_i x_a`` and one start per node are added by
    :class:`HardProgram` for the nodes that need the solver.
    """

    gain: np.ndarray  # (A,) float64, W_a under the post-transfer hit bits
    work: np.ndarray  # (A,) float64, w_a under those hit bits
    avail: np.ndarray  # (N,) float64, compute left after the units in service
    serve: np.ndarray  # (ns,) int64, actions with a service variable
    serve_upper: np.ndarray  # (ns,) float64, queue and compute bound of S_a
    routes: np.ndarray  # (nr,) int64, routes with a routing variable
    route_upper: np.ndarray  # (nr,) queue and link bound of F_r
    starts: np.ndarray  # (nx,) int64, actions with a start
    start_node: np.ndarray  # (nx,) int64, their nodes
    serve_cols: np.ndarray  # (ns,) int64, the column of each S_a
    route_cols: np.ndarray  # (nr,) int64, of each F_r
    binary_cols: np.ndarray  # (nx,) int64, of each x_a
    compute_cols: np.ndarray  # (nx,) int64, of each c_a
    node: np.ndarray  # (n,) int64, the node of each column
    upper: np.ndarray  # (n,) float64, upper bound of each column (lower bounds are 0)
    value: np.ndarray  # (n,) float64, objective coefficient of each column
    integral: np.ndarray  # (n,) float64, 1 for S, F and x, 0 for c (HiGHS integrality)
    compute_rows: slice  # node compute rows, one per node
    link_rows: slice  # link capacity rows, one per link
    queue_rows: slice  # queue rows, one per admissible pair
    rows: np.ndarray  # (nnz,) int64, packing entries: row,
    cols: np.ndarray  # (nnz,) int64, column,
    data: np.ndarray  # (nnz,) float64, coefficient
    rhs: np.ndarray  # (N + L + P,) float64, right-hand side of each packing row
    row_node: np.ndarray  # (N + L + P,) int64, the node of each packing row

    @property
    def num_variables(self) -> int:
        return len(self.node)


@dataclass(frozen=True, eq=False)
class HardProgram:
    """The MILP over the "hard" nodes of a :class:`SlotProgram`: those whose variables'
    upper bounds violate one of their packing rows, or that can both serve and start.

    Its variables are the slot program's columns ``kept`` (in that order); its rows are
    the hard nodes' binding packing rows, then one coupling row ``c_a - avail_i x_a <= 0``
    per start candidate in ``hard_starts``, then one row ``sum x_a <= 1`` per node with a
    start candidate (empty where the node has only one).
    """

    kept: np.ndarray  # (n_kept,) int64, slot-program columns of the hard nodes
    hard_starts: np.ndarray  # (m,) int64, positions in SlotProgram.starts at hard nodes
    matrix: Columns | sparse.csr_array  # (rows, n_kept)
    bound: np.ndarray  # (rows,) float64, right-hand sides (every row is <=)


class OracleSur(Policy):
    """Exact-control solver of MABP's one-slot objective with known primitives.

    Args:
        workload: the network.
        node_limit: branch-and-bound nodes one MILP solve may explore (default 200). A
            node limit, unlike a wall-clock limit, gives the same control on every machine
            and under any load, so runs stay reproducible; a solve that stops at the limit
            returns its incumbent (or MABP's control, see the guarantee above).
        time_limit: optional wall-clock limit of one solve, seconds (default None). With a
            time limit the controls depend on the machine's speed: runs are no longer
            reproducible.
        nu, memory: as for every policy (also passed to the composed MABP).
        **mabp_kw: the composed MABP's other keyword arguments (``horizon``,
            ``transition``, ``reuse``, ``retention``, ``evidence``, ``primitives``).

    Attributes:
        mabp: the composed :class:`~mabp_gym.agents.mabp.MABP` whose weights, object values
            and primitives the oracle optimizes with; its scores are the oracle's scores.
        last_info: what the last :meth:`control` call did: ``source`` (``"milp"``: the
            searched transfers with the MILP's routing and service; ``"milp-mabp-transfers"``:
            MABP's transfers with the MILP's routing and service; ``"mabp"``: the fallback),
            ``objective``, ``mabp_objective`` and ``milp_status`` (HiGHS status per solve,
            ``"trivial"`` when no solve was needed, ``"error"`` when the solver raised).
    """

    name = "oracle-sur"
    memory_aware = True

    def __init__(
        self,
        workload: Workload,
        *,
        node_limit: int = 200,
        time_limit: float | None = None,
        nu: float = 5.0,
        memory: bool = True,
        **mabp_kw: Any,
    ) -> None:
        super().__init__(workload, nu=nu, memory=memory)
        self.mabp = MABP(workload, nu=nu, memory=memory, **mabp_kw)
        if time_limit is not None and (not math.isfinite(time_limit) or time_limit <= 0):
            raise ValueError(
                f"time_limit must be None or a finite number of seconds > 0, got {time_limit!r}"
            )
        if isinstance(node_limit, bool) or int(node_limit) != node_limit or node_limit < 1:
            raise ValueError(f"node_limit must be an integer >= 1, got {node_limit!r}")
        self.node_limit = int(node_limit)
        self.time_limit = None if time_limit is None else float(time_limit)
        ix = self.ix
        self._encoder: ObservationEncoder | None = None
        # The compiled feasibility check and slot program where numba is there (else the
        # reference's; ``compiled = False`` asks for the reference program).
        self._core = CompiledTransition.shared(workload) if slotcore.AVAILABLE else None
        self.compiled = slotcore.AVAILABLE
        # Within one control() call: (gain, work) per set of transfers, by their indices.
        self._slot: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] | None = None
        self._arange = np.arange(ix.num_actions)
        self._retain_size = ix.signature_size[ix.retain_signature]
        self._node_mu = ix.mu[ix.action_node]
        self._transfer_size = ix.signature_size[ix.transfer_signature]
        self._transfer_src_node = ix.link_src[ix.transfer_link]
        self._transfer_dst_node = ix.link_dst[ix.transfer_link]
        # The retain candidates a transfer moves an object from and to.
        self._transfer_src_retain = ix.retain_of[self._transfer_src_node, ix.transfer_signature]
        self._transfer_dst_retain = ix.retain_of[self._transfer_dst_node, ix.transfer_signature]
        self._route_capacity = ix.link_capacity[ix.route_link]
        self._generates = self.memory and not workload.fixed_memory
        self.last_info: dict[str, Any] = {}

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.mabp.reset(seed)
        self.last_info = {}

    # -- MABP, composed -------------------------------------------------------------------
    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """MABP's scores for this slot's observation, ``(D,)``.

        They also refresh MABP's object values (``self.mabp.object_values``), which the
        transfer search and the retention of :meth:`control` read: MABP's values advance
        its demand average, so they are computed once per slot, here.
        """
        result = self.mabp.scores(obs)
        self.t += 1
        return result

    __call__ = scores

    def weights(self, queues: np.ndarray) -> np.ndarray:
        """MABP's ``W_i^a`` under a miss (row 0) and a hit (row 1), ``(2, A)``."""
        return self.mabp.weights(queues)

    # -- the objective --------------------------------------------------------------------
    def one_slot_objective(
        self, state: SimState, control: Control, obs: dict[str, np.ndarray] | None = None
    ) -> float:
        """Paper (16) for any feasible ``control`` in ``state`` (with MABP's weights).

        ``sum F_r (Q_i^c - Q_j^c - nu d) + sum S_a W_a + sum_starts W_a c_a / w_a
        - nu sum kappa u``, where ``W_a`` uses the hit bit under the post-transfer memory,
        ``c_a`` is the compute a multi-slot start receives (all the node has left) and ``Q``
        is the backlog with units in service (``obs["queues"]``). Units already in service
        take their compute first; they are the same under every control and are left out.

        Raises:
            InfeasibleControlError: the control is infeasible in ``state``.
        """
        if obs is None:
            obs = self._encode(state)
        weight, route_weight = self._weights(obs)
        return self._objective(state, control, weight, route_weight)

    def _weights(self, obs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``W`` per hit bit and action ``(2, A)`` and routing weights ``(R,)``."""
        queues = np.asarray(obs["queues"], dtype=np.float64)
        return self.mabp.weights(queues), self.mabp.route_weights(queues)

    def _objective(
        self, state: SimState, control: Control, weight: np.ndarray, route_weight: np.ndarray
    ) -> float:
        ix = self.ix
        transfers = np.asarray(control.transfers, dtype=np.int64)
        if self._core is None or not check_core.accepts(self._core, state, control, self.memory):
            # The reference check: raises with the reason (or accepts another dtype).
            check_control(self.workload, state, control, memory=self.memory)
        gain, work = self._gain_work(state, transfers, weight)
        service = np.asarray(control.service, dtype=np.float64)
        value = float(np.asarray(control.route, dtype=np.float64) @ route_weight + service @ gain)
        start = np.asarray(control.start, dtype=np.int64)
        started = np.flatnonzero(start >= 0)
        if started.size:
            spent = np.bincount(ix.action_node, weights=service * work, minlength=ix.num_nodes)
            left = self._available(state) - spent
            for i, a in zip(started.tolist(), start[started].tolist(), strict=True):
                value += gain[a] * left[i] / work[a]
        if transfers.size:
            moved = ix.signature_size[ix.transfer_signature[transfers]].sum()
            value -= self.mabp.migration_cost * float(moved)
        return value

    def _available(self, state: SimState) -> np.ndarray:
        """Compute per node left after the units already in service take theirs, ``(N,)``."""
        return compute_left(self.workload, state)

    def _encode(self, state: SimState) -> dict[str, np.ndarray]:
        if self._encoder is None:
            self._encoder = ObservationEncoder(self.workload, memory=self.memory)
        return self._encoder.encode(state)

    # -- the control ----------------------------------------------------------------------
    def act(self, obs: dict[str, np.ndarray] | None, state: SimState) -> Control:
        """The :class:`mabp_gym.policy.Policy` decision: :meth:`control`."""
        return self.control(state, obs)

    def control(self, state: SimState, obs: dict[str, np.ndarray] | None = None) -> Control:
        """An exact, feasible control for ``state`` (call once per slot, like ``scores``).

        Args:
            state: the simulator state at the start of the slot.
            obs: its observation (encoded from ``state`` when omitted).

        Returns:
            A :class:`~mabp_gym.Control` whose one-slot objective is at least that of
            MABP's projected control in the same state.
        """
        self._slot = {}
        try:
            return self._control(state, obs)
        finally:
            self._slot = None

    def _control(self, state: SimState, obs: dict[str, np.ndarray] | None) -> Control:
        if obs is None:
            obs = self._encode(state)
        wl = self.workload
        scores = self.scores(obs)  # MABP's scores; also refreshes the object values
        weight, route_weight = self._weights(obs)
        fallback = project(wl, state, scores, memory=self.memory)
        baseline = self._objective(state, fallback, weight, route_weight)
        floor = baseline - TOLERANCE * max(1.0, abs(baseline))

        mabp_transfers = np.sort(np.asarray(fallback.transfers, dtype=np.int64))
        searched = self._search_transfers(state, mabp_transfers)
        plans = [(searched, "milp")]
        if not np.array_equal(searched, mabp_transfers):
            # The searched transfers are worth more over the retention horizon but may pay
            # more migration than they return this slot; MABP's transfers with the exact
            # routing and service are never worse than MABP on (16).
            plans.append((mabp_transfers, "milp-mabp-transfers"))

        statuses: list[Any] = []
        chosen, source, objective = fallback, "mabp", baseline
        no_routes = np.full_like(route_weight, -1.0)
        for transfers, label in plans:
            # Service before routing, as in the shared projection (SPEC 3.2, 9.4): first the
            # exact service and starts, then the exact routing of what is left. One joint
            # program lets a queue differential outbid service and bounces units between
            # sibling servers (v1: backlog 42 at load 0.1 against MABP's 3).
            candidate, status = self._solve(state, transfers, weight, no_routes)
            statuses.append(status)
            if candidate is None:
                break  # the solver failed or timed out empty-handed: MABP's control
            candidate = self._route_leftover(state, candidate, route_weight)
            try:
                value = self._objective(state, candidate, weight, route_weight)
            except InfeasibleControlError:  # rounding broke a constraint: treat as failure
                statuses[-1] = "infeasible"
                break
            if value >= floor:
                chosen, source, objective = candidate, label, value
                break
        if source != "mabp":
            chosen = replace(chosen, retain=self._retention(state, chosen, scores))
        if objective < floor:
            raise AssertionError(f"oracle-sur objective {objective!r} below MABP's {baseline!r}")
        self.last_info = {
            "source": source,
            "objective": objective,
            "mabp_objective": baseline,
            "milp_status": statuses,
        }
        return chosen

    # -- transfers ------------------------------------------------------------------------
    def transfer_values(self) -> np.ndarray:
        """Value of each transfer candidate this slot, ``(T,)``: MABP's transfer score times
        the object size, ``V_dst - V_src - nu * migration_cost * size``."""
        ix = self.ix
        values = self.mabp.object_values
        if values is None or not ix.num_transfers:
            return np.full(ix.num_transfers, -1.0)
        return (
            values[self._transfer_dst_retain]
            - values[self._transfer_src_retain]
            - self.mabp.migration_cost * self._transfer_size
        )

    def _search_transfers(self, state: SimState, start: np.ndarray) -> np.ndarray:
        """Best-improvement local search over feasible transfer sets, from ``start``.

        Moves: drop one transfer, add one, swap one for another, add two at once. Only
        candidates worth more than 0 are added; the search stops at a local optimum.
        """
        ix = self.ix
        if not self.memory or not ix.num_transfers or self.mabp.object_values is None:
            return start
        fx = ix.fast
        value = self.transfer_values()
        holder = state.holder
        sig = ix.transfer_signature
        pool = np.flatnonzero(
            (value > 0)
            & (holder[self._transfer_src_node, sig] >= 0)
            & (holder[self._transfer_dst_node, sig] < 0)
            & (self._transfer_size <= ix.link_bandwidth[ix.transfer_link] + EPS)
            & (self._transfer_size <= ix.budget[self._transfer_dst_node] + EPS)
        ).tolist()
        chosen = start.tolist()
        if not pool:
            return start
        vals = value.tolist()
        used = state.memory_used.tolist()
        budget, bandwidth = fx.budget, ix.link_bandwidth.tolist()
        size = self._transfer_size.tolist()
        src, dst = self._transfer_src_node.tolist(), self._transfer_dst_node.tolist()
        link, sig_list = fx.transfer_link, sig.tolist()

        def feasible(plan: list[int]) -> bool:
            moved: set[tuple[int, int]] = set()
            arriving: set[tuple[int, int]] = set()
            load: dict[int, float] = {}
            change: dict[int, float] = {}
            for k in plan:
                key_out, key_in = (src[k], sig_list[k]), (dst[k], sig_list[k])
                if key_out in moved or key_in in arriving:
                    return False
                moved.add(key_out)
                arriving.add(key_in)
                load[link[k]] = load.get(link[k], 0.0) + size[k]
                change[src[k]] = change.get(src[k], 0.0) - size[k]
                change[dst[k]] = change.get(dst[k], 0.0) + size[k]
            return all(total <= bandwidth[e] + EPS for e, total in load.items()) and all(
                used[i] + d <= budget[i] + EPS for i, d in change.items()
            )

        while True:
            best_gain, best_plan = 1e-12, None
            members = set(chosen)
            for k in chosen:  # drop a transfer that loses value
                if -vals[k] > best_gain:
                    best_gain, best_plan = -vals[k], [q for q in chosen if q != k]
            for k in pool:
                if k in members:
                    continue
                if vals[k] > best_gain and feasible([*chosen, k]):  # add
                    best_gain, best_plan = vals[k], [*chosen, k]
                for out in chosen:  # swap
                    gain = vals[k] - vals[out]
                    if gain > best_gain:
                        plan = [q for q in chosen if q != out] + [k]
                        if feasible(plan):
                            best_gain, best_plan = gain, plan
            # Add two at once: an exchange between two full nodes (each object moving into
            # the room the other frees) is infeasible one transfer at a time.
            free = [k for k in pool if k not in members] if len(pool) <= _PAIR_POOL else []
            for q, first in enumerate(free):
                for second in free[q + 1 :]:
                    gain = vals[first] + vals[second]
                    if gain > best_gain and feasible([*chosen, first, second]):
                        best_gain, best_plan = gain, [*chosen, first, second]
            if best_plan is None:
                break
            chosen = best_plan
        return np.sort(np.asarray(chosen, dtype=np.int64))

    # -- routing and service --------------------------------------------------------------
    def _solve(
        self, state: SimState, transfers: np.ndarray, weight: np.ndarray, route_weight: np.ndarray
    ) -> tuple[Control | None, Any]:
        """Optimal integer routing, service and starts given the transfers.

        The program separates by node: every constraint (compute, link capacity, queue,
        start) involves only the service, starts and outgoing routes of one node. Nodes
        whose upper bounds are jointly feasible are solved in closed form (every variable
        at its bound; a node that can only start picks its best start) and only the
        others go to HiGHS, which keeps the MILP small.

        Returns:
            The control (retention placeholder -1 everywhere) and the solver status
            (``"trivial"`` when no MILP was needed), or ``(None, status)`` when the solver
            found no solution.
        """
        if self.compiled and not (route_weight > 0).any():
            return self._solve_compiled(state, transfers, weight)
        program = self._program(state, transfers, weight, route_weight)
        binding, hard = self._hard_nodes(program)
        service, route, start = self._closed_form(program, hard)
        kept = np.flatnonzero(hard[program.node])
        if kept.size == 0:
            return self._make(transfers, route, service, start), "trivial"
        milp_program = self._hard_program(program, binding, hard, kept)
        x, status = self._run_milp(program, milp_program)
        if x is None:
            return None, status
        self._read_solution(program, milp_program, hard, x, service, route, start)
        return self._make(transfers, route, service, start), status

    def _solve_compiled(
        self, state: SimState, transfers: np.ndarray, weight: np.ndarray
    ) -> tuple[Control | None, Any]:
        """:meth:`_solve` without routing variables, its program built and its solution
        read by :mod:`mabp_gym.agents.oracle_core` (the same model for HiGHS, the same
        control)."""
        ix = self.ix
        gain, work = self._gain_work(state, transfers, weight)
        avail = self._available(state)
        model = SlotModel(
            *slot_program(
                gain,
                work,
                self._node_mu,
                avail,
                state.queue_len,
                ix.action_node,
                ix.action_pair,
                ix.pair_node,
                ix.link_src,
                ix.link_capacity,
            )
        )
        service, start, kind = model.service, model.start, model.kind
        route = np.zeros(ix.num_routes, dtype=np.int64)
        n = kind.size
        if n == 0:
            return self._make(transfers, route, service, start), "trivial"
        cost, upper, bound = model.cost, model.upper, model.bound
        matrix = Columns(model.indptr, model.indices, model.data, (bound.size, n), model.by_row)
        options, lower = self._milp_options(), np.zeros(n)
        x = np.empty(n)
        try:
            relaxed_status, relaxed = solve(cost, matrix, bound, lower, upper, np.zeros(n), options)
            status: Any = "lp"
            if (
                relaxed_status != 0
                or relaxed is None
                or not integral_fix(
                    x, relaxed, kind, matrix.indptr, matrix.indices, matrix.data, bound
                )
            ):
                status, solution = solve(cost, matrix, bound, lower, upper, model.integral, options)
                if solution is None:
                    return None, status
                x = solution
        except (ValueError, RuntimeError):  # a solver failure is a fallback, not a crash
            return None, "error"
        read_solution(x, kind, model.action, work, avail, ix.action_node, service, start)
        return self._make(transfers, route, service, start), status

    def _gain_work(
        self, state: SimState, transfers: np.ndarray, weight: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``W_a`` and ``w_a`` of every action under the post-transfer hit bits (inside
        :meth:`control`, worked out once per set of transfers: its state and weights are
        the slot's)."""
        key = tuple(sorted(np.asarray(transfers).tolist()))
        known = None if self._slot is None else self._slot.get(key)
        if known is not None:
            return known
        holder = holders_after(self.workload, state.holder, transfers)
        hit = np.asarray(hit_bits(self.workload, holder, self.memory), dtype=np.int64)
        result = weight[hit, self._arange], self.mabp.primitives.work[hit, self._arange]
        if self._slot is not None:
            self._slot[key] = result
        return result

    def _milp_options(self) -> dict[str, Any]:
        return {
            "node_limit": self.node_limit,
            "mip_rel_gap": 0.0,
            **({} if self.time_limit is None else {"time_limit": self.time_limit}),
        }

    def _program(
        self, state: SimState, transfers: np.ndarray, weight: np.ndarray, route_weight: np.ndarray
    ) -> SlotProgram:
        """The slot's :class:`SlotProgram` after ``transfers``."""
        ix = self.ix
        gain, work = self._gain_work(state, transfers, weight)
        queue = state.queue_len
        avail = self._available(state)
        node_avail = avail[ix.action_node]
        waiting = queue[ix.action_pair]
        fits = work <= self._node_mu + EPS

        # Variables with weight <= 0 are left out (0 at an optimum).
        serve = np.flatnonzero(fits & (gain > 0) & (waiting > 0) & (node_avail >= work - EPS))
        serve_upper = np.minimum(
            waiting[serve], np.floor((node_avail[serve] + EPS) / np.maximum(work[serve], EPS))
        )
        starts = np.flatnonzero(~fits & (gain > 0) & (waiting > 0) & (node_avail > EPS))
        route_queue = queue[ix.route_src_pair]
        routes = np.flatnonzero((route_weight > 0) & (route_queue > 0) & (self._route_capacity > 0))
        route_upper = np.minimum(route_queue[routes], self._route_capacity[routes])
        ns, nr, nx = len(serve), len(routes), len(starts)
        serve_cols = np.arange(ns)
        route_cols = ns + np.arange(nr)
        binary_cols = ns + nr + np.arange(nx)
        compute_cols = ns + nr + nx + np.arange(nx)
        start_node = ix.action_node[starts]

        n_nodes, n_links = ix.num_nodes, ix.num_links
        compute_rows = slice(0, n_nodes)
        link_rows = slice(n_nodes, n_nodes + n_links)
        queue_rows = slice(n_nodes + n_links, n_nodes + n_links + ix.num_pairs)
        rows = np.concatenate(
            [
                compute_rows.start + ix.action_node[serve],  # compute: S w_a, c_a
                compute_rows.start + start_node,
                link_rows.start + ix.route_link[routes],  # link: F
                queue_rows.start + ix.action_pair[serve],  # queue: S, F, x
                queue_rows.start + ix.route_src_pair[routes],
                queue_rows.start + ix.action_pair[starts],
            ]
        )
        cols = np.concatenate(
            [serve_cols, compute_cols, route_cols, serve_cols, route_cols, binary_cols]
        )
        data = np.concatenate(
            [work[serve], np.ones(nx), np.ones(nr), np.ones(ns), np.ones(nr), np.ones(nx)]
        )
        return SlotProgram(
            gain=gain,
            work=work,
            avail=avail,
            serve=serve,
            serve_upper=serve_upper,
            routes=routes,
            route_upper=route_upper,
            starts=starts,
            start_node=start_node,
            serve_cols=serve_cols,
            route_cols=route_cols,
            binary_cols=binary_cols,
            compute_cols=compute_cols,
            node=np.concatenate(
                [ix.action_node[serve], ix.link_src[ix.route_link[routes]], start_node, start_node]
            ),
            upper=np.concatenate([serve_upper, route_upper, np.ones(nx), node_avail[starts]]),
            value=np.concatenate(
                [gain[serve], route_weight[routes], np.zeros(nx), gain[starts] / work[starts]]
            ),
            integral=np.concatenate([np.ones(ns + nr + nx), np.zeros(nx)]),
            compute_rows=compute_rows,
            link_rows=link_rows,
            queue_rows=queue_rows,
            rows=rows,
            cols=cols,
            data=data,
            rhs=np.concatenate(
                [avail, ix.link_capacity.astype(np.float64), queue.astype(np.float64)]
            ),
            row_node=np.concatenate([np.arange(n_nodes), ix.link_src, ix.pair_node]),
        )

    def _hard_nodes(self, program: SlotProgram) -> tuple[np.ndarray, np.ndarray]:
        """The binding packing rows ``(N + L + P,)`` and the hard nodes ``(N,)``, bool.

        A row that even the upper bounds cannot violate is redundant. A start's compute
        row counts only when the node also serves: one start per node, ``c_a <= avail``.
        """
        ix = self.ix
        is_compute = program.integral[program.cols] == 0.0
        rows, cols = program.rows[~is_compute], program.cols[~is_compute]
        reach = np.bincount(
            rows,
            weights=program.data[~is_compute] * program.upper[cols],
            minlength=len(program.rhs),
        ).astype(np.float64)
        has_start = np.bincount(program.start_node, minlength=ix.num_nodes) > 0
        has_serve = np.bincount(ix.action_node[program.serve], minlength=ix.num_nodes) > 0
        reach[program.compute_rows] += np.where(has_start & has_serve, program.avail, 0.0)
        binding = reach > program.rhs + EPS
        hard = np.zeros(ix.num_nodes, dtype=bool)
        hard[program.row_node[binding]] = True
        hard |= has_start & has_serve
        return binding, hard

    def _closed_form(
        self, program: SlotProgram, hard: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Service ``(A,)``, routing ``(R,)`` and starts ``(N,)`` of the nodes that are not
        hard: every variable at its upper bound, and the best single start."""
        ix = self.ix
        service = np.zeros(ix.num_actions, dtype=np.int64)
        route = np.zeros(ix.num_routes, dtype=np.int64)
        start = np.full(ix.num_nodes, -1, dtype=np.int64)
        easy_serve = ~hard[program.node[program.serve_cols]]
        service[program.serve[easy_serve]] = program.serve_upper[easy_serve].astype(np.int64)
        easy_route = ~hard[program.node[program.route_cols]]
        route[program.routes[easy_route]] = program.route_upper[easy_route].astype(np.int64)
        if len(program.starts):
            starts, start_node = program.starts, program.start_node
            rate = program.gain[starts] / program.work[starts]
            for q in np.argsort(rate, kind="stable").tolist():  # the best start wins
                if not hard[start_node[q]]:
                    start[start_node[q]] = starts[q]
        return service, route, start

    def _hard_program(
        self, program: SlotProgram, binding: np.ndarray, hard: np.ndarray, kept: np.ndarray
    ) -> HardProgram:
        """The MILP over the hard nodes: their binding packing rows, ``c_a <= avail_i x_a``,
        and at most one start per node where a node has several start candidates."""
        renumber_row = np.full(len(program.rhs), -1, dtype=np.int64)
        used_rows = np.flatnonzero(binding & hard[program.row_node])
        renumber_row[used_rows] = np.arange(used_rows.size)
        n_rows = used_rows.size
        row_rhs = [program.rhs[used_rows]]
        rows, cols, data = renumber_row[program.rows], program.cols, program.data
        hard_starts = np.flatnonzero(hard[program.start_node])
        if hard_starts.size:
            m = hard_starts.size
            coupling_rows = n_rows + np.arange(m)
            nodes_with, node_row, count = np.unique(
                program.start_node[hard_starts], return_inverse=True, return_counts=True
            )
            one_start_rows = n_rows + m + node_row
            several = count[node_row] > 1
            binary = program.binary_cols[hard_starts]
            rows = np.concatenate([rows, coupling_rows, coupling_rows, one_start_rows[several]])
            cols = np.concatenate(
                [cols, program.compute_cols[hard_starts], binary, binary[several]]
            )
            data = np.concatenate(
                [
                    data,
                    np.ones(m),
                    -program.avail[program.start_node[hard_starts]],
                    np.ones(int(several.sum())),
                ]
            )
            row_rhs += [np.zeros(m), np.ones(len(nodes_with))]
            n_rows += m + len(nodes_with)
        renumber_col = np.full(program.num_variables, -1, dtype=np.int64)
        renumber_col[kept] = np.arange(kept.size)
        keep = (rows >= 0) & (renumber_col[cols] >= 0)
        matrix = Columns.from_entries(
            rows[keep], renumber_col[cols[keep]], data[keep], (n_rows, kept.size)
        )
        return HardProgram(
            kept=kept, hard_starts=hard_starts, matrix=matrix, bound=np.concatenate(row_rhs)
        )

    def _run_milp(self, program: SlotProgram, hard: HardProgram) -> tuple[np.ndarray | None, Any]:
        """Solve ``hard``: the slot program's solution vector ``(n,)`` (zero outside the
        kept columns) and the status, or ``(None, status)`` when HiGHS found none."""
        kept = hard.kept
        options = self._milp_options()
        cost, lower, upper = -program.value[kept], np.zeros(kept.size), program.upper[kept]
        x = np.zeros(program.num_variables)
        try:
            # The LP relaxation first: it bounds the MILP, and on these programs its vertex
            # is usually integral once each start's binary is opened where its compute
            # flows (x_a gates c_a only and carries no objective). Then it is optimal and
            # the branch-and-bound solve, several times slower, is skipped.
            relaxed_status, relaxed = solve(
                cost, hard.matrix, hard.bound, lower, upper, np.zeros(kept.size), options
            )
            status: Any = "lp"
            if relaxed_status != 0 or not self._integral_fix(x, program, hard, relaxed):
                status, solution = solve(
                    cost, hard.matrix, hard.bound, lower, upper, program.integral[kept], options
                )
                if solution is None:
                    return None, status
                x[kept] = solution
        except (ValueError, RuntimeError):  # a solver failure is a fallback, not a crash
            return None, "error"
        return x, status

    def _read_solution(
        self,
        program: SlotProgram,
        hard_program: HardProgram,
        hard: np.ndarray,
        x: np.ndarray,
        service: np.ndarray,
        route: np.ndarray,
        start: np.ndarray,
    ) -> None:
        """Write the hard nodes' service, routing and starts from ``x`` into the
        closed-form ``service``, ``route`` and ``start`` (in place)."""
        ix = self.ix
        hard_serve = hard[program.node[program.serve_cols]]
        service[program.serve[hard_serve]] = np.rint(x[program.serve_cols][hard_serve]).astype(
            np.int64
        )
        hard_route = hard[program.node[program.route_cols]]
        route[program.routes[hard_route]] = np.rint(x[program.route_cols][hard_route]).astype(
            np.int64
        )
        hard_starts = hard_program.hard_starts
        if hard_starts.size:
            spent = np.bincount(
                ix.action_node, weights=service * program.work, minlength=ix.num_nodes
            )
            chosen = hard_starts[
                (np.rint(x[program.binary_cols[hard_starts]]) >= 1)
                & (x[program.compute_cols[hard_starts]] > EPS)
            ]
            for q in chosen.tolist():
                a, i = int(program.starts[q]), int(program.start_node[q])
                if start[i] < 0 and program.avail[i] - spent[i] > EPS:
                    start[i] = a

    def _route_leftover(
        self, state: SimState, control: Control, route_weight: np.ndarray
    ) -> Control:
        """``control`` with the best routing of the units its service and starts leave.

        Each route variable sits in one queue row and one link row, so the program's matrix
        is totally unimodular and the LP's vertex is integral; when neither kind of row
        binds every positive route takes its bound.
        """
        ix = self.ix
        route = np.zeros(ix.num_routes, dtype=np.int64)
        if self.compiled:
            routes, upper, free, bound = leftover_routes(
                state.queue_len,
                control.service,
                control.start,
                ix.action_pair,
                route_weight,
                ix.route_src_pair,
                ix.route_link,
                self._route_capacity,
                ix.link_capacity,
            )
            pair, link = ix.route_src_pair[routes], ix.route_link[routes]
        else:
            left = state.queue_len - np.bincount(
                ix.action_pair, weights=control.service, minlength=ix.num_pairs
            ).astype(np.int64)
            started = control.start[control.start >= 0]
            if started.size:
                left -= np.bincount(ix.action_pair[started], minlength=ix.num_pairs)
            routes = np.flatnonzero(
                (route_weight > 0) & (left[ix.route_src_pair] > 0) & (self._route_capacity > 0)
            )
            pair, link = ix.route_src_pair[routes], ix.route_link[routes]
            upper = np.minimum(left[pair], self._route_capacity[routes])
            pair_load = np.bincount(pair, weights=upper, minlength=ix.num_pairs)
            link_load = np.bincount(link, weights=upper, minlength=ix.num_links)
            free = bool((pair_load <= left).all() and (link_load <= ix.link_capacity).all())
            bound = np.concatenate([np.maximum(left, 0), ix.link_capacity]).astype(np.float64)
        if routes.size and free:
            route[routes] = upper
        elif routes.size:
            n = routes.size
            # One queue row and one link row per route variable.
            matrix = Columns.two_per_column(pair, ix.num_pairs + link, ix.num_pairs + ix.num_links)
            _, solution = solve(
                -route_weight[routes],
                matrix,
                bound,
                np.zeros(n),
                upper.astype(np.float64),
                np.zeros(n),
            )
            if solution is not None:  # None cannot happen for a bounded packing LP
                route[routes] = np.floor(solution + 1e-7).astype(np.int64)
        return Control(control.transfers, route, control.service, control.start, control.retain)

    @staticmethod
    def _integral_fix(
        x: np.ndarray, program: SlotProgram, hard: HardProgram, relaxed: np.ndarray | None
    ) -> bool:
        """Write the LP solution into ``x`` with start binaries opened where compute flows;
        True when the result is integral and feasible (then it is MILP-optimal)."""
        if relaxed is None:
            return False
        x[hard.kept] = relaxed
        compute_cols = program.compute_cols[hard.hard_starts]
        compute = x[compute_cols]
        x[program.binary_cols[hard.hard_starts]] = compute > EPS
        x[compute_cols] = np.where(compute > EPS, compute, 0.0)
        integer = program.integral == 1.0
        rounded = np.rint(x[integer])
        if np.abs(x[integer] - rounded).max(initial=0.0) > 1e-7:
            return False
        x[integer] = rounded
        return bool(np.all(matvec(hard.matrix, x[hard.kept]) <= hard.bound + 1e-7))

    def _make(
        self, transfers: np.ndarray, route: np.ndarray, service: np.ndarray, start: np.ndarray
    ) -> Control:
        return Control(
            transfers=np.asarray(transfers, dtype=np.int64),
            route=route,
            service=service,
            start=start,
            retain=np.full(self.ix.num_retains, -1.0),
        )

    # -- retention ------------------------------------------------------------------------
    def _retention(self, state: SimState, control: Control, scores: np.ndarray) -> np.ndarray:
        """Knapsack-optimal retention priorities (SPEC 3.2 step 3) for ``control``.

        Per node, the items are the objects resident after the transfers and the objects
        this slot may generate there (signatures of actions completing at the node,
        served whole or finishing multi-slot service, that the node does not hold; a unit
        that only starts service completes in a later slot). Item value is MABP's marginal
        value net of holding over its horizon. The optimal set gets ``1 + density``,
        positive-value objects outside it ``density / (1 + density)`` in (0, 1) so that the
        simulator fills leftover room with them, zero-value ones 0 and negative-value ones
        -1.
        """
        ix = self.ix
        retain_scores = scores[self.slices[3]]
        values = self.mabp.object_values
        if not ix.num_retains or values is None:
            return retain_scores.copy()
        size = self._retain_size
        net = values - self.mabp.holding_cost * size
        density = net / size
        priority = np.where(
            net > 0, density / (1.0 + np.abs(density)), np.where(net < 0, -1.0, 0.0)
        )
        holder = holders_after(self.workload, state.holder, control.transfers)
        item = np.zeros(ix.num_retains, dtype=bool)
        resident = ix.retain_of[holder >= 0]
        item[resident[resident >= 0]] = True
        if self._generates:
            completing = np.asarray(control.service) > 0
            busy = np.flatnonzero(state.service_action >= 0)
            finishing = state.service_action[busy][
                state.service_residual[busy] <= ix.mu[busy] + EPS
            ]
            completing[finishing] = True
            acts = np.flatnonzero(completing & (ix.action_signature >= 0))
            nodes, sigs = ix.action_node[acts], ix.action_signature[acts]
            new = ix.retain_of[nodes, sigs][holder[nodes, sigs] < 0]
            item[new[new >= 0]] = True
        candidates = np.flatnonzero(item & (net > 0))  # ascending: grouped by node
        if not candidates.size:
            return priority
        if slotcore.AVAILABLE:
            take, unsolved = _knapsacks(
                net[candidates], size[candidates], ix.retain_node[candidates], ix.budget
            )
            chosen = candidates[take]
            priority[chosen] = 1.0 + density[chosen]
            nodes = np.flatnonzero(unsolved)  # no scale fits their sizes: the reference
        else:
            nodes = np.unique(ix.retain_node[candidates])
        for i in nodes.tolist():
            members = candidates[ix.retain_node[candidates] == i]
            take = knapsack(net[members], size[members], float(ix.budget[i]))
            chosen = members[take]
            priority[chosen] = 1.0 + density[chosen]
        return priority


def knapsack(values: np.ndarray, sizes: np.ndarray, capacity: float) -> np.ndarray:
    """Exact 0/1 knapsack: which items to take, ``(n,)`` bool.

    Sizes are scaled to integers (the smallest of a few scales that makes them integral)
    and solved by dynamic programming over capacity units; when no scale works, up to 16
    items are enumerated, and beyond that items are taken greedily by value density (an
    approximation no built-in workload reaches).

    Args:
        values: item values (only positive ones can be worth taking).
        sizes: item sizes, > 0.
        capacity: the budget.

    Returns:
        A mask of the items in an optimal set (no item of value <= 0 is taken).
    """
    n = len(values)
    take = np.zeros(n, dtype=bool)
    if n == 0 or capacity <= 0:
        return take
    for scale in _KNAPSACK_SCALES:
        scaled = sizes * scale
        units = np.rint(scaled)
        if (
            np.all(np.abs(scaled - units) <= 1e-9 * scale)
            and capacity * scale <= _KNAPSACK_MAX_UNITS
        ):
            return _knapsack_dp(
                values, units.astype(np.int64), int(math.floor(capacity * scale + 1e-9))
            )
    if n <= _ENUMERATE_MAX_ITEMS:
        subsets = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
        fit = subsets @ sizes <= capacity + EPS
        best = int(np.argmax(np.where(fit, subsets @ values, -np.inf)))
        return subsets[best].astype(bool)
    room = capacity + EPS
    for k in np.argsort(-values / sizes, kind="stable").tolist():
        if values[k] > 0 and sizes[k] <= room:
            take[k] = True
            room -= sizes[k]
    return take


def _knapsack_dp(values: np.ndarray, units: np.ndarray, capacity: int) -> np.ndarray:
    best = np.zeros(capacity + 1)  # best value within each capacity
    took = np.zeros((len(values), capacity + 1), dtype=bool)
    for k, (value, size) in enumerate(zip(values.tolist(), units.tolist(), strict=True)):
        if value <= 0 or size > capacity:
            continue
        with_item = best[: capacity + 1 - size] + value
        better = with_item > best[size:] + 1e-12
        took[k, size:] = better
        best[size:] = np.where(better, with_item, best[size:])
    take = np.zeros(len(values), dtype=bool)
    room = capacity
    for k in range(len(values) - 1, -1, -1):
        if took[k, room]:
            take[k] = True
            room -= int(units[k])
    return take


_SCALES = np.asarray(_KNAPSACK_SCALES, dtype=np.float64)


def _knapsacks_kernel(values, sizes, item_node, budget):  # pragma: no cover - compiled
    """:func:`knapsack` for every node at once, where a scale makes the node's sizes
    integral: the items ``(n,)`` are grouped by node (``item_node`` ascending). The same
    dynamic program in the same arithmetic (a capacity loop run downwards reads the
    previous item's row, as the vectorized update does), so the same optimal set.

    Returns:
        ``take`` ``(n,)`` and ``unsolved`` ``(N,)``: the nodes no scale fits, left to
        :func:`knapsack`'s other methods.
    """
    n = values.shape[0]
    take = np.zeros(n, dtype=np.bool_)
    unsolved = np.zeros(budget.shape[0], dtype=np.bool_)
    first = 0
    while first < n:
        node = item_node[first]
        end = first
        while end < n and item_node[end] == node:
            end += 1
        capacity = budget[node]
        if capacity > 0:
            solved = False
            for scale in _SCALES:
                fits = capacity * scale <= _KNAPSACK_MAX_UNITS
                for k in range(first, end):
                    scaled = sizes[k] * scale
                    if not abs(scaled - np.rint(scaled)) <= 1e-9 * scale:
                        fits = False
                if fits:
                    _knapsack_kernel_dp(
                        values,
                        sizes,
                        scale,
                        first,
                        end,
                        int(math.floor(capacity * scale + 1e-9)),
                        take,
                    )
                    solved = True
                    break
            unsolved[node] = not solved
        first = end
    return take, unsolved


def _knapsack_kernel_dp(values, sizes, scale, first, end, capacity, take):  # pragma: no cover
    best = np.zeros(capacity + 1)
    took = np.zeros((end - first, capacity + 1), dtype=np.bool_)
    units = np.empty(end - first, dtype=np.int64)
    for k in range(first, end):
        units[k - first] = int(np.rint(sizes[k] * scale))
    for k in range(first, end):
        value, size = values[k], units[k - first]
        if value <= 0 or size > capacity:
            continue
        for c in range(capacity, size - 1, -1):
            with_item = best[c - size] + value
            if with_item > best[c] + 1e-12:
                took[k - first, c] = True
                best[c] = with_item
    room = capacity
    for k in range(end - 1, first - 1, -1):
        if took[k - first, room]:
            take[k] = True
            room -= units[k - first]


_knapsacks: Any = _knapsacks_kernel  # without numba: the reference knapsack runs instead
if slotcore.AVAILABLE:
    _knapsack_kernel_dp = slotcore.njit(cache=True)(_knapsack_kernel_dp)
    _knapsacks = slotcore.njit(cache=True)(_knapsacks_kernel)
