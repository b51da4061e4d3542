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
from dataclasses import replace
from typing import Any

import numpy as np

from mabp_gym.agents.base import Policy
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
    compute_left,
    feasibility,
    hit_bits,
    holders_after,
)
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import check_core, jit
from mabp_gym.core.kernels.transition_core import CompiledTransition
from mabp_gym.core.projection import project_own
from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Workload

TOLERANCE = 1e-9
"""Relative tolerance of the never-worse-than-MABP gate (objectives are O(backlog))."""

_KNAPSACK_SCALES = (1, 2, 4, 5, 8, 10, 16, 20, 25, 50, 100, 1000)
_KNAPSACK_MAX_UNITS = 100_000
_ENUMERATE_MAX_ITEMS = 16
_PAIR_POOL = 40  # largest transfer pool for which the search tries adding two at once


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
        self._core = CompiledTransition.shared(workload)  # for the feasibility kernel
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
            # The explainer: raises with the reason (or accepts another dtype).
            feasibility(self.workload, state, control, memory=self.memory)
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
        fallback = project_own(wl, state, scores, memory=self.memory)
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
        for transfers, label in plans:
            # Service before routing, as in the shared projection (SPEC 3.2, 9.4): first the
            # exact service and starts, then the exact routing of what is left. One joint
            # program lets a queue differential outbid service and bounces units between
            # sibling servers (v1: backlog 42 at load 0.1 against MABP's 3).
            candidate, status = self._solve(state, transfers, weight)
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
        self, state: SimState, transfers: np.ndarray, weight: np.ndarray
    ) -> tuple[Control | None, Any]:
        """Optimal integer service and starts given the transfers (routing is solved after,
        on what they leave: :meth:`_route_leftover`).

        The program separates by node: every constraint (compute, queue, start) involves
        only the service and starts of one node. Nodes whose upper bounds are jointly
        feasible are solved in closed form (every variable at its bound; a node that can
        only start picks its best start) and only the others go to HiGHS, which keeps the
        MILP small. :func:`mabp_gym.agents.oracle_core.slot_program` builds the program and
        :func:`~mabp_gym.agents.oracle_core.read_solution` reads its solution.

        Returns:
            The control (retention placeholder -1 everywhere) and the solver status
            (``"trivial"`` when no MILP was needed, ``"lp"`` when the LP relaxation's
            vertex was integral), or ``(None, status)`` when the solver found no solution.
        """
        from mabp_gym.agents.highs import Columns, solve  # scipy: imported at first use

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
        matrix = Columns(model.indptr, model.indices, model.data, (bound.size, n))
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

    def _route_leftover(
        self, state: SimState, control: Control, route_weight: np.ndarray
    ) -> Control:
        """``control`` with the best routing of the units its service and starts leave.

        Each route variable sits in one queue row and one link row, so the program's matrix
        is totally unimodular and the LP's vertex is integral; when neither kind of row
        binds every positive route takes its bound.
        """
        from mabp_gym.agents.highs import Columns, solve  # scipy: imported at first use

        ix = self.ix
        route = np.zeros(ix.num_routes, dtype=np.int64)
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
        take, unsolved = _knapsacks(
            net[candidates], size[candidates], ix.retain_node[candidates], ix.budget
        )
        chosen = candidates[take]
        priority[chosen] = 1.0 + density[chosen]
        for i in np.flatnonzero(unsolved).tolist():  # no scale fits their sizes
            members = candidates[ix.retain_node[candidates] == i]
            take = _knapsack_unscaled(net[members], size[members], float(ix.budget[i]))
            chosen = members[take]
            priority[chosen] = 1.0 + density[chosen]
        return priority


def knapsack(values: np.ndarray, sizes: np.ndarray, capacity: float) -> np.ndarray:
    """Exact 0/1 knapsack: which items to take, ``(n,)`` bool.

    Sizes are scaled to integers (the smallest of a few scales that makes them integral)
    and solved by dynamic programming over capacity units (:func:`_knapsacks_kernel`, one
    node); when no scale works, up to 16 items are enumerated, and beyond that items are
    taken greedily by value density (an approximation no built-in workload reaches).

    Args:
        values: item values (only positive ones can be worth taking).
        sizes: item sizes, > 0.
        capacity: the budget.

    Returns:
        A mask of the items in an optimal set (no item of value <= 0 is taken).
    """
    values, sizes = np.asarray(values, dtype=np.float64), np.asarray(sizes, dtype=np.float64)
    one_node = np.zeros(values.shape[0], dtype=np.int64)
    take, unsolved = _knapsacks(values, sizes, one_node, np.array([float(capacity)]))
    return _knapsack_unscaled(values, sizes, capacity) if unsolved[0] else take


def _knapsack_unscaled(values: np.ndarray, sizes: np.ndarray, capacity: float) -> np.ndarray:
    """:func:`knapsack` where no scale makes the sizes integral: enumeration up to 16 items,
    value density beyond."""
    n = len(values)
    if n <= _ENUMERATE_MAX_ITEMS:
        subsets = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
        fit = subsets @ sizes <= capacity + EPS
        best = int(np.argmax(np.where(fit, subsets @ values, -np.inf)))
        return subsets[best].astype(bool)
    take = np.zeros(n, dtype=bool)
    room = capacity + EPS
    for k in np.argsort(-values / sizes, kind="stable").tolist():
        if values[k] > 0 and sizes[k] <= room:
            take[k] = True
            room -= sizes[k]
    return take


_SCALES = np.asarray(_KNAPSACK_SCALES, dtype=np.float64)


def _knapsacks_kernel(values, sizes, item_node, budget):  # pragma: no cover - compiled
    """The knapsack of every node at once by dynamic programming over capacity units,
    where a scale makes the node's sizes integral: the items ``(n,)`` are grouped by node
    (``item_node`` ascending); of equal values the earlier set is kept.

    Returns:
        ``take`` ``(n,)`` and ``unsolved`` ``(N,)``: the nodes no scale fits, left to
        :func:`_knapsack_unscaled`.
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


_knapsack_kernel_dp = jit.kernel(_knapsack_kernel_dp)
_knapsacks = jit.kernel(_knapsacks_kernel)
