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

The transition's rules are kernels (:mod:`mabp_gym.core.kernels.transition_core`: queues
counted in runs of equal birth slots), compiled by numba where it is there and run as plain
Python otherwise; this module drives them and states the outcome.

A request born in slot ``t0`` (its arrival joins ``Q(t0 + 1)``) that leaves in slot ``t``
has delay ``t - t0``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mabp_gym.core.control import CHECK_TOLERANCE, Control, feasibility
from mabp_gym.core.kernels import check_core
from mabp_gym.core.kernels.transition_core import (
    RUN_SLOTS,
    CompiledTransition,
    RunFifo,
    slot_cost,
    state_arrays,
)
from mabp_gym.core.projection import project_checked, project_own
from mabp_gym.core.state import SimState
from mabp_gym.core.validate import is_seed
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


RUNS_CHECKED_A_SLOT = 256
"""FIFO runs the invariant check walks per slot on average, at most (:class:`Simulator`;
a row in use counts as the :data:`RUN_SLOTS` runs it can hold)."""


class Simulator:
    """Simulates a :class:`Workload` slot by slot.

    Args:
        workload: the network.
        memory: ``False`` for the no-memory system: every action a miss, generated objects
            discarded, budgets zero.
        check_invariants: assert SPEC 6's invariants after every slot (on in tests and in
            every evaluation). The queue lengths are recounted from the FIFO's runs on
            average over at most :data:`RUNS_CHECKED_A_SLOT` runs a slot (every slot while
            the rows in use hold fewer), so that the check's cost stays bounded per slot when
            queues grow: walking every run every slot made an overloaded run quadratic in
            time.
    """

    def __init__(
        self,
        workload: Workload,
        *,
        memory: bool = True,
        check_invariants: bool = False,
    ) -> None:
        if not isinstance(workload, Workload):
            raise TypeError(
                f"workload must be a Workload (mabp_gym.make_workload(name)), got "
                f"{type(workload).__name__}"
            )
        for name, value in (("memory", memory), ("check_invariants", check_invariants)):
            if not isinstance(value, (bool, np.bool_)):  # bool("no") is True
                raise TypeError(f"{name} must be True or False, got {value!r}")
        self.workload = workload
        self.memory = bool(memory)
        self.check_invariants = bool(check_invariants)
        self._run_credit = 0  # runs the invariant check may walk before it walks them all
        # The static arrays shared, the buffers its own.
        self._core = CompiledTransition.shared(workload).copy()
        self._replicas = workload.replicas
        self._generates = self.memory and not workload.fixed_memory
        self._ready = False
        self.rng = np.random.default_rng()
        self.state = self._empty_state()

    # ----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> SimState:
        """Empty queues, a fresh generator seeded with ``seed``, and the initial memory.

        The initial memory is alternative ``seed % len(workload.initial_memory)`` (drawn
        from the generator when ``seed`` is None).
        """
        numpy_seed = (np.random.SeedSequence, np.random.BitGenerator, np.random.Generator)
        if not (seed is None or isinstance(seed, numpy_seed) or is_seed(seed)):
            raise ValueError(f"seed must be None or an integer >= 0, got {seed!r}")
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
        return SimState.empty(self.workload, RunFifo(self.workload.index.num_pairs))

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
        return project_own(self.workload, self.state, scores, memory=self.memory)

    def step_scores(self, scores: np.ndarray) -> tuple[Control, SlotOutcome]:
        """Project ``scores`` and execute the resulting control.

        The projected control is feasible by construction and is executed without
        :func:`~mabp_gym.core.control.check_control` (the training path), unless
        ``check_invariants`` is on; :meth:`step` checks every control it is given.
        """
        self._require_reset()
        control = self.project(scores)
        if self.check_invariants:
            feasibility(self.workload, self.state, control, memory=self.memory)
        return control, self._execute(control)

    def step_checked_scores(self, scores: np.ndarray) -> tuple[float, int]:
        """The training path's slot: project ``scores`` that
        :func:`~mabp_gym.core.projection.validate_scores` returned and execute the control
        (feasible by construction), returning only ``(h(t), backlog)``: no
        :class:`SlotOutcome` is built (the env's step without diagnostics needs no more).
        With ``check_invariants`` on it takes :meth:`step_scores`' path."""
        if self.check_invariants:
            _, outcome = self.step_scores(scores)
            return outcome.penalty, outcome.backlog
        self._require_reset()
        control = project_checked(self.workload, self.state, scores, memory=self.memory)
        core, st = self._core, self.state
        core(st, self.rng, self._generates, control)
        counts, sums = core.counts.tolist(), core.sums.tolist()
        st.units += counts[2] - counts[4]  # arrivals - completed
        st.t += 1
        return slot_cost(self.workload, st.memory_used, counts, sums), st.units

    # ----------------------------------------------------------------------------------
    def step(self, control: Control) -> SlotOutcome:
        """Execute one slot under ``control`` (checked for feasibility first)."""
        self._require_reset()
        if not self._feasible(control):
            # The explainer: raises with the reason, or (a control the kernel leaves to
            # it, such as one of another integer dtype) accepts it.
            feasibility(self.workload, self.state, control, memory=self.memory)
        return self._execute(control)

    def _feasible(self, control: Control) -> bool:
        """The feasibility kernel's verdict (:func:`~mabp_gym.core.kernels.check_core.accepts`)."""
        return check_core.accepts(self._core, self.state, control, self.memory)

    def _require_reset(self) -> None:
        if not self._ready:
            raise RuntimeError(
                "call reset(seed) before step(): the simulator draws all its "
                "randomness from the generator seeded there"
            )

    def _execute(self, control: Control) -> SlotOutcome:
        """The slot's transition under a feasible ``control``, in SPEC 1's order."""
        outcome = self._transition(control)
        if self.check_invariants:
            self._assert_invariants(outcome)
        return outcome

    def _transition(self, control: Control) -> SlotOutcome:
        """Run the transition's kernels and read their outputs into a :class:`SlotOutcome`."""
        core, st, wl = self._core, self.state, self.workload
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

    def _assert_invariants(self, outcome: SlotOutcome) -> None:
        """SPEC 6 invariants; the control was already checked for feasibility. The
        kernel answers whether they hold; the explainer says which one fails."""
        core, st = self._core, self.state
        fifo = st.fifo
        assert isinstance(fifo, RunFifo)
        self._run_credit += RUNS_CHECKED_A_SLOT
        in_use = fifo.pool.shape[0] - int(fifo.meta[1])
        runs = self._run_credit >= in_use * RUN_SLOTS  # at most this many runs
        if runs:
            self._run_credit = 0
        if check_core.invariants_hold(
            self.memory and self.workload.index.num_signatures > 0,
            st.units,
            state_arrays(st),
            fifo.arrays(),
            core.ints,
            core.floats,
            runs,
        ):
            return
        self._explain_invariants(outcome)

    def _explain_invariants(self, outcome: SlotOutcome) -> None:
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
