"""The one-slot transition of an SFMSN (SPEC section 1), in its exact causal order.

Slot ``t``: (1) observe ``Q(t)``, ``Y^-(t)``; (2) transfers; (3) resident set; (4) every
resident object is active; (5) units in service take compute first, then whole-unit
service, multi-slot starts and routing (routed units join ``Q(t+1)``); (6) outcomes:
successors join the same node at ``t+1``, completed requests leave, objects are generated;
(7) retention by the priority map fixed in the control; (8) Poisson arrivals join
``Q(t+1)``; (9) the penalty ``h(t)``.

Units joining a queue at the end of a slot are appended in this order: routed units (by
route candidate), successors (by completion order: units finishing multi-slot service by
node, then whole units by action), arrivals (by arrival pair). Completed units draw their
successor in the same order, then arrivals are drawn: all randomness comes from the one
``numpy.random.Generator`` seeded by :meth:`Simulator.reset`.

This module's phase methods are the readable reference of the transition;
:mod:`mabp_gym.core.kernels.transition_core` runs the same transition compiled (with
count-based queues) where numba is there, and the tests hold the two identical.

A request born in slot ``t0`` (its arrival joins ``Q(t0 + 1)``) that leaves in slot ``t``
has delay ``t - t0``.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mabp_gym.core.control import CHECK_TOLERANCE, EPS, CheckedControl, Control, check_control
from mabp_gym.core.kernels import check_core, slotcore
from mabp_gym.core.kernels.transition_core import CompiledTransition, RunFifo
from mabp_gym.core.projection import project, project_checked
from mabp_gym.core.state import DequeFifo, SimState
from mabp_gym.core.workload import Workload


class InvariantError(AssertionError):
    """An invariant of SPEC section 6 failed: a simulator bug, never a user error."""


@dataclass(frozen=True)
class SlotOutcome:
    """What happened in one slot. Penalties are the three parts of ``h(t)``."""

    t: int
    arrivals: int
    served: int  # units whose service completed
    hits: int  # completed units that were memory-assisted
    started: int  # units that began multi-slot service
    work: float  # compute spent
    routed: int
    completed: int  # requests that left the network
    delays: tuple[int, ...]  # one per completed request
    transfers: int
    insertions: int  # generated objects retained
    evictions: int  # resident objects dropped by retention
    generated: tuple[tuple[int, int], ...]  # (node, signature) of every generated object
    evicted: tuple[tuple[int, int], ...]  # (node, signature) of every evicted object
    penalty_compute: float
    penalty_transmission: float
    penalty_memory: float
    backlog: int  # ||Q(t+1)||_1
    served_by_action: np.ndarray = field(repr=False)  # (A,) int64
    # One (action, hit bit, successor commodity or -1 for exit, work, penalty) per completed
    # unit: what a serving system observes per request and a learner of primitives uses.
    units: tuple[tuple[int, int, int, float, float], ...] = field(default=(), repr=False)

    @property
    def penalty(self) -> float:
        """``h(t)``."""
        return self.penalty_compute + self.penalty_transmission + self.penalty_memory


@dataclass
class _Served:
    """The units served this slot (completed service, in order) and compute spent per node."""

    action: list[int]
    hit: list[int]
    birth: list[int]
    spent: list[float]


@dataclass
class _Done:
    """What the served units did: exits' delays, generated objects, penalty, unit rows."""

    delays: list[int]
    generated: list[tuple[int, int, int]]  # (node, signature, identity)
    penalty_compute: float
    hits: int
    units: list[tuple[int, int, int, float, float]]


class Simulator:
    """Simulates a :class:`Workload` slot by slot.

    Args:
        workload: the network.
        memory: ``False`` for the no-memory system: every action a miss, generated objects
            discarded, budgets zero.
        check_invariants: assert SPEC 6's invariants after every slot (cheap; on in tests).
        compiled: run the compiled transition (:mod:`mabp_gym.core.kernels.transition_core`) or this
            module's reference; ``None`` (default) compiles where numba is there. Both give
            identical states, outcomes and draws.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        memory: bool = True,
        check_invariants: bool = False,
        compiled: bool | None = None,
    ) -> None:
        if compiled and not slotcore.AVAILABLE:
            raise RuntimeError(
                "the compiled transition needs numba (pip install numba), and MABP_GYM_PURE unset"
            )
        self.workload = workload
        self.memory = bool(memory)
        self.check_invariants = bool(check_invariants)
        self._core: CompiledTransition | None = None
        if slotcore.AVAILABLE if compiled is None else compiled:
            # The static arrays shared, the buffers its own.
            self._core = CompiledTransition.shared(workload).copy()
        self._replicas = workload.replicas
        self._generates = self.memory and not workload.fixed_memory
        self._ready = False
        ix = workload.index
        self._total_rate = workload.total_rate
        self._arrival_pairs = ix.arrival_pair.tolist()
        cum = np.cumsum(ix.arrival_share)
        self._arrival_cum = cum[:-1].tolist()
        self.rng = np.random.default_rng()
        self.state = self._empty_state()
        # Retain candidates per node (they are sorted by node, then signature).
        self._retain_slot = ix.retain_node * ix.num_signatures + ix.retain_signature
        self._retain_signature = ix.retain_signature.tolist()
        self._node_retain_ptr = np.searchsorted(
            ix.retain_node, np.arange(ix.num_nodes + 1)
        ).tolist()

    # ----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> SimState:
        """Empty queues, a fresh generator seeded with ``seed``, and the initial memory.

        The initial memory is alternative ``seed % len(workload.initial_memory)`` (drawn
        from the generator when ``seed`` is None).
        """
        self.rng = np.random.default_rng(seed)
        self.state = self._empty_state()
        self._ready = True
        alternatives = self.workload.initial_memory
        if self.memory and alternatives:
            pick = int(self.rng.integers(len(alternatives))) if seed is None else seed
            chosen = alternatives[pick % len(alternatives)]
            for node, signature in chosen:
                self._place(node, signature)
        return self.state

    def _empty_state(self) -> SimState:
        pairs = self.workload.index.num_pairs
        fifo = DequeFifo(pairs) if self._core is None else RunFifo(pairs)
        return SimState.empty(self.workload, fifo)

    def _place(self, node: int, signature: int) -> int:
        st = self.state
        base = signature * self._replicas
        for m in range(base, base + self._replicas):
            if st.owner[m] < 0:
                st.owner[m] = node
                st.holder[node, signature] = m
                st.memory_used[node] += self.workload.index.fast.signature_size[signature]
                return m
        raise ValueError(f"no free replica identity of signature {signature}")

    def add_units(self, node: int, commodity: int, count: int, birth: int | None = None) -> None:
        """Append ``count`` waiting units of ``commodity`` at ``node`` (an initial backlog).

        Each unit is a request born in slot ``birth``, which must be before the current slot
        (default: the previous slot, as for an exogenous arrival that joined ``Q(t)``).
        """
        wl = self.workload
        if not 0 <= node < wl.index.num_nodes or not 0 <= commodity < wl.index.num_commodities:
            raise ValueError(
                f"node must be in [0, {wl.index.num_nodes}) and commodity in "
                f"[0, {wl.index.num_commodities}), got ({node}, {commodity})"
            )
        p = int(wl.index.pair_of[node, commodity])
        if p < 0:
            raise ValueError(
                f"commodity {wl.commodities[commodity].name!r} is not admissible "
                f"at node {wl.nodes[node].name!r}"
            )
        if int(count) != count or count < 0:
            raise ValueError(f"count must be a nonnegative integer, got {count!r}")
        st = self.state
        born = st.t - 1 if birth is None else int(birth)
        if born >= st.t:
            raise ValueError(f"birth must be < the current slot {st.t}, got {born}")
        st.fifo.extend(p, born, int(count))
        st.queue_len[p] += int(count)
        st.units += int(count)

    def project(self, scores: np.ndarray) -> Control:
        """The shared projection (SPEC 3.2) of ``scores`` in the current state."""
        return project(self.workload, self.state, scores, memory=self.memory)

    def step_scores(self, scores: np.ndarray) -> tuple[Control, SlotOutcome]:
        """Project ``scores`` and execute the resulting control.

        The projected control is feasible by construction and is executed without
        :func:`~mabp_gym.core.control.check_control` (the training path), unless
        ``check_invariants`` is on; :meth:`step` checks every control it is given.
        """
        self._require_reset()
        if self._core is not None and not self.check_invariants:
            control = project(self.workload, self.state, scores, memory=self.memory)
            return control, self._execute(control, None)
        control, checked = project_checked(self.workload, self.state, scores, memory=self.memory)
        if self.check_invariants:
            checked = check_control(self.workload, self.state, control, memory=self.memory)
        return control, self._execute(control, checked)

    # ----------------------------------------------------------------------------------
    def step(self, control: Control) -> SlotOutcome:
        """Execute one slot under ``control`` (checked for feasibility first)."""
        self._require_reset()
        if self._core is not None and self._feasible(control):
            return self._execute(control, None)
        # The reference check: raises with the reason, or (a control the compiled check
        # leaves to it, such as one of another integer dtype) accepts it.
        return self._execute(
            control, check_control(self.workload, self.state, control, memory=self.memory)
        )

    def _feasible(self, control: Control) -> bool:
        """The compiled check's verdict (see :func:`~mabp_gym.core.kernels.check_core.accepts`)."""
        assert self._core is not None
        return check_core.accepts(self._core, self.state, control, self.memory)

    def _require_reset(self) -> None:
        if not self._ready:
            raise RuntimeError(
                "call reset(seed) before step(): the simulator draws all its "
                "randomness from the generator seeded there"
            )

    def _execute(self, control: Control, checked: CheckedControl | None) -> SlotOutcome:
        """The slot's transition under a feasible ``control`` (``checked``: its sparse form,
        which only the reference needs), in SPEC 1's order; each phase is a method below."""
        if self._core is not None:
            outcome = self._execute_compiled(control)
            if self.check_invariants:
                self._assert_invariants(outcome)
            return outcome
        assert checked is not None, "the reference transition runs on the checked control"
        st = self.state
        t = st.t
        touched: set[int] = set()  # pairs whose queue changed
        transfer_cost = self._transfer(checked)  # (2)-(4)
        served = self._serve(checked, touched)  # (5)
        incoming: list[tuple[int, list[int]]] = []  # (pair, births) joining Q(t+1)
        routed, penalty_transmission = self._route(checked, touched, incoming)
        done = self._outcomes(served, incoming, t)  # (6)
        # (7) Retention by the priority map fixed before outcomes.
        insertions, held_size = 0, float(st.memory_used.sum())
        evicted: list[tuple[int, int]] = []
        if self._generates:
            insertions, evicted, held_size = self._retain(control.retain, done.generated)
        wl = self.workload
        penalty_memory = transfer_cost + wl.theta * held_size + wl.omega * insertions
        arrived = self._admit(incoming, touched, t)  # (8)
        st.units += arrived - len(done.delays)
        # (9) Penalty; the slot is over.
        st.t = t + 1
        served_by_action = np.bincount(served.action, minlength=wl.index.num_actions).astype(
            np.int64, copy=False
        )
        outcome = SlotOutcome(
            t=t,
            arrivals=arrived,
            served=len(served.action),
            hits=done.hits,
            started=len(checked.start),
            work=float(sum(served.spent)),
            routed=routed,
            completed=len(done.delays),
            delays=tuple(done.delays),
            transfers=len(checked.transfers),
            insertions=insertions,
            evictions=len(evicted),
            generated=tuple((i, s) for i, s, _ in done.generated),
            evicted=tuple(evicted),
            penalty_compute=done.penalty_compute,
            penalty_transmission=penalty_transmission,
            penalty_memory=penalty_memory,
            backlog=st.units,
            served_by_action=served_by_action,
            units=tuple(done.units),
        )
        if self.check_invariants:
            self._assert_invariants(outcome)
        return outcome

    def _execute_compiled(self, control: Control) -> SlotOutcome:
        """:meth:`_execute` by the compiled transition (same state, outcome and draws)."""
        core = self._core
        assert core is not None
        st, wl = self.state, self.workload
        t = st.t
        served = core(st, self.rng, self._generates, control)
        started, routed, arrived, hits, completed, n_generated, insertions, evictions = (
            core.counts.tolist()
        )
        transfer_cost, penalty_transmission, work, penalty_compute = core.sums.tolist()
        held_size = float(st.memory_used.sum())
        st.units += arrived - completed
        st.t = t + 1
        done = core.done[:served]
        return SlotOutcome(
            t=t,
            arrivals=arrived,
            served=served,
            hits=hits,
            started=started,
            work=work,
            routed=routed,
            completed=completed,
            delays=tuple(core.delays[:completed].tolist()),
            transfers=len(control.transfers),
            insertions=insertions,
            evictions=evictions,
            generated=tuple(map(tuple, core.generated[:n_generated, :2].tolist())),
            evicted=tuple(map(tuple, core.evicted[:evictions].tolist())),
            penalty_compute=penalty_compute,
            penalty_transmission=penalty_transmission,
            penalty_memory=transfer_cost + wl.theta * held_size + wl.omega * insertions,
            backlog=st.units,
            served_by_action=core.served_by_action,
            units=tuple(
                zip(
                    done[:, 0].tolist(),
                    done[:, 1].tolist(),
                    core.unit_succ[:served].tolist(),
                    core.unit_floats[:served, 0].tolist(),
                    core.unit_floats[:served, 1].tolist(),
                    strict=True,
                )
            ),
        )

    def _transfer(self, checked: CheckedControl) -> float:
        """(2)-(4) Move the transferred objects; the post-transfer resident set is active.
        Returns the migration cost."""
        wl, st = self.workload, self.state
        fx = wl.index.fast
        holder, owner, used, size = st.holder, st.owner, st.memory_used, fx.signature_size
        cost = 0.0
        for k in checked.transfers:
            e, s = fx.transfer_link[k], fx.transfer_signature[k]
            i, j = fx.link_src[e], fx.link_dst[e]
            m = int(holder[i, s])
            holder[i, s], holder[j, s], owner[m] = -1, m, j
            used[i] -= size[s]
            used[j] += size[s]
            cost += wl.migration_cost * size[s]
        return cost

    def _serve(self, checked: CheckedControl, touched: set[int]) -> _Served:
        """(5) Units in service take their compute first, then whole units, then starts."""
        st, fx = self.state, self.workload.index.fast
        hit, queues = checked.hit, self._deques()
        served = _Served([], [], [], [0.0] * len(fx.mu))
        done_action, done_hit, done_birth, spent = (
            served.action,
            served.hit,
            served.birth,
            served.spent,
        )
        busy = [i for i, a in enumerate(st.service_action.tolist()) if a >= 0]
        for i in busy:
            residual = float(st.service_residual[i])
            spend = min(fx.mu[i], residual)
            spent[i] = spend
            if residual - spend <= EPS:
                done_action.append(int(st.service_action[i]))
                done_hit.append(int(st.service_hit[i]))
                done_birth.append(int(st.service_birth[i]))
                st.service_action[i] = -1
                st.service_residual[i] = 0.0
            else:
                st.service_residual[i] = residual - spend
        for a, n in checked.service:
            h, p = hit[a], fx.action_pair[a]
            queue = queues[p]
            touched.add(p)
            if n == 1:
                done_action.append(a)
                done_hit.append(h)
                done_birth.append(queue.popleft())
            else:
                done_action.extend([a] * n)
                done_hit.extend([h] * n)
                done_birth.extend([queue.popleft() for _ in range(n)])
            spent[fx.action_node[a]] += n * fx.work[h][a]
        for i, a in checked.start:
            h, p = hit[a], fx.action_pair[a]
            touched.add(p)
            st.service_action[i] = a
            st.service_hit[i] = h
            st.service_birth[i] = queues[p].popleft()
            st.service_residual[i] = fx.work[h][a] - (fx.mu[i] - spent[i])
            spent[i] = fx.mu[i]
        return served

    def _route(
        self, checked: CheckedControl, touched: set[int], incoming: list[tuple[int, list[int]]]
    ) -> tuple[int, float]:
        """(5) Routing: units leave their queue now and join the next hop's at ``t + 1``.
        Returns the units routed and their transmission penalty."""
        queues, fx = self._deques(), self.workload.index.fast
        routed = 0
        penalty = 0.0
        for r, n in checked.route:
            p = fx.route_src_pair[r]
            queue = queues[p]
            touched.add(p)
            births = [queue.popleft()] if n == 1 else [queue.popleft() for _ in range(n)]
            incoming.append((fx.route_dst_pair[r], births))
            routed += n
            penalty += n * fx.link_cost[fx.route_link[r]]
        return routed, penalty

    def _outcomes(self, served: _Served, incoming: list[tuple[int, list[int]]], t: int) -> _Done:
        """(6) Outcomes of the units served: successors at the same node, exits, and the
        objects their service generates."""
        ix, rng, holder = self.workload.index, self.rng, self.state.holder
        fx = ix.fast
        done_action, done_hit, done_birth = served.action, served.hit, served.birth
        uniforms = rng.random(len(done_action)).tolist() if done_action else []
        done = _Done([], [], 0.0, 0, [])
        delays, generated, units = done.delays, done.generated, done.units
        pending: set[tuple[int, int]] = set()
        reserved: set[int] = set()
        penalty_compute = 0.0
        hits = 0
        pair_commodity = fx.pair_commodity
        penalty, work, signature_of = fx.penalty, fx.work, fx.action_signature
        successor_cum, successor_pair = ix.successor_cum, ix.successor_pair
        generates = self._generates
        for k, a in enumerate(done_action):
            h = done_hit[k]
            hits += h
            cost = penalty[h][a]
            penalty_compute += cost
            u = uniforms[k]
            target = -1
            for q, bound in enumerate(successor_cum[h][a]):
                if u < bound:
                    target = successor_pair[h][a][q]
                    break
            if target < 0:
                delays.append(t - done_birth[k])
                units.append((a, h, -1, work[h][a], cost))
            else:
                incoming.append((target, [done_birth[k]]))
                units.append((a, h, pair_commodity[target], work[h][a], cost))
            s = signature_of[a]
            if s >= 0 and generates:
                i = fx.action_node[a]
                if holder[i, s] < 0 and (i, s) not in pending:
                    free = self._free_identity(s, reserved)
                    g = fx.gen_prob[a]
                    if free >= 0 and (g >= 1.0 or rng.random() < g):
                        pending.add((i, s))
                        reserved.add(free)
                        generated.append((i, s, free))
        done.penalty_compute, done.hits = penalty_compute, hits
        return done

    def _admit(self, incoming: list[tuple[int, list[int]]], touched: set[int], t: int) -> int:
        """(8) Arrivals, successors and routed units join Q(t+1). Returns the arrivals."""
        st = self.state
        arrivals = self._arrivals()
        for p, n in arrivals.items():
            incoming.append((p, [t] * n))
        queues, queue_len = self._deques(), st.queue_len
        for p, births in incoming:
            queues[p].extend(births)
            touched.add(p)
        for p in touched:
            queue_len[p] = len(queues[p])
        return sum(arrivals.values())

    def _deques(self) -> list[deque[int]]:
        fifo = self.state.fifo
        assert isinstance(fifo, DequeFifo), "the reference transition runs on DequeFifo"
        return fifo.deques

    def _arrivals(self) -> dict[int, int]:
        """Poisson arrivals per pair, drawn as a Poisson total split by the mix.

        Splitting a Poisson(``sum lambda``) total by independent categorical draws gives
        independent Poisson(``lambda_p``) counts per pair, with two generator calls.
        """
        total = int(self.rng.poisson(self._total_rate))
        counts: dict[int, int] = {}
        if total:
            for u in self.rng.random(total).tolist():
                p = self._arrival_pairs[bisect.bisect_right(self._arrival_cum, u)]
                counts[p] = counts.get(p, 0) + 1
        return counts

    def _free_identity(self, signature: int, reserved: set[int]) -> int:
        base = signature * self._replicas
        owner = self.state.owner
        for m in range(base, base + self._replicas):
            if owner[m] < 0 and m not in reserved:
                return m
        return -1

    def _retain(
        self, retain: np.ndarray, generated: list[tuple[int, int, int]]
    ) -> tuple[int, list[tuple[int, int]], float]:
        """Keep, per node, objects in descending priority while they fit (SPEC 3.2 step 3).

        An object that does not fit is skipped and smaller ones after it may still be kept;
        ties go to the lower signature index; negative priorities are dropped.

        Returns:
            Insertions, evicted ``(node, signature)`` pairs, total size held after retention.
        """
        ix, st = self.workload.index, self.state
        fx = ix.fast
        holder, owner, used = st.holder, st.owner, st.memory_used
        size = fx.signature_size
        # Only nodes that generated an object or hold one with a negative priority can
        # change; every other node keeps all it holds (it fitted before and still does).
        # Objects sit only at retain candidates, which are ordered by node then signature.
        held = holder.ravel()[self._retain_slot]  # (K,) identity at each candidate, -1 none
        dropping = ix.retain_node[(held >= 0) & (retain < 0)]
        affected = set(dropping.tolist())
        affected.update(i for i, _, _ in generated)
        insertions = 0
        evicted: list[tuple[int, int]] = []
        if affected:
            priority_of = retain.tolist()
            by_node: dict[int, list[tuple[float, int, int, bool]]] = {i: [] for i in affected}
            ptr, signature_of, held_of = (
                self._node_retain_ptr,
                self._retain_signature,
                held.tolist(),
            )
            for i, ranked in by_node.items():
                for k in range(ptr[i], ptr[i + 1]):
                    if held_of[k] >= 0:
                        ranked.append((-priority_of[k], signature_of[k], held_of[k], False))
            for i, s, m in generated:
                by_node[i].append((-priority_of[fx.retain_of[i][s]], s, m, True))
            for i, ranked in sorted(by_node.items()):
                ranked.sort()
                budget = fx.budget[i] + EPS
                kept = 0.0
                for negative_priority, s, m, new in ranked:
                    if negative_priority <= 0 and kept + size[s] <= budget:
                        kept += size[s]
                        if new:
                            holder[i, s], owner[m] = m, i
                            insertions += 1
                    elif not new:
                        holder[i, s], owner[m] = -1, -1
                        evicted.append((i, s))
                used[i] = kept
        return insertions, evicted, float(used.sum())

    def _assert_invariants(self, outcome: SlotOutcome) -> None:
        """SPEC 6 invariants; the control was already checked for feasibility. The
        compiled check answers whether they hold; the reference says which one fails."""
        core, st = self._core, self.state
        if core is not None and isinstance(st.fifo, RunFifo):
            fifo = st.fifo
            if check_core.invariants_hold(
                self.memory and self.workload.index.num_signatures > 0,
                st.units,
                st.queue_len,
                fifo.pool,
                fifo.head,
                st.service_action,
                st.holder,
                st.owner,
                st.memory_used,
                core.ints,
                core.floats,
            ):
                return
        self._assert_invariants_reference(outcome)

    def _assert_invariants_reference(self, outcome: SlotOutcome) -> None:
        """SPEC 6 invariants, in numpy: raises :class:`InvariantError` naming the one that
        fails."""
        ix, st = self.workload.index, self.state
        if st.fifo.lengths() != st.queue_len.tolist():
            raise InvariantError("queue lengths disagree with the FIFO contents")
        if (st.queue_len < 0).any():
            raise InvariantError("a queue is negative")
        # Units conserved: the running count (previous backlog + arrivals - exits) must
        # equal a recount of waiting units and units in service.
        recount = int(st.queue_len.sum()) + int((st.service_action >= 0).sum())
        if recount != st.units:
            raise InvariantError(
                f"units not conserved: backlog recount {recount}, "
                f"expected {st.units} from arrivals and exits"
            )
        if not self.memory or not ix.num_signatures:
            if (st.owner >= 0).any():
                raise InvariantError("the no-memory system holds an object")
            return
        resident = st.holder >= 0
        nodes, sigs = np.nonzero(resident)
        ids = st.holder[nodes, sigs]
        # Each identity at one node at most: the owner map and the node memories agree
        # one-to-one, and every identity carries its own signature.
        if (
            int((st.owner >= 0).sum()) != len(ids)
            or (st.owner[ids] != nodes).any()
            or (ix.object_signature[ids] != sigs).any()
        ):
            raise InvariantError("object identities and node memories disagree")
        if not ix.eligible[nodes, sigs].all():
            raise InvariantError("an object sits at a node with no compatible action")
        recomputed = resident @ ix.signature_size
        if np.abs(st.memory_used - recomputed).max() > 1e-6:
            raise InvariantError("memory accounting is off")
        if (recomputed > ix.budget + CHECK_TOLERANCE).any():
            raise InvariantError("memory over budget")
