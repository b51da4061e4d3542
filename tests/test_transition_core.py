"""The compiled transition (mabp_gym.core.kernels.transition_core) gives exactly the reference
transition's states, outcomes and generator streams, on every workload."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
from compiled_cases import WORKLOADS as COMPILED_WORKLOADS

from mabp_gym import Simulator, make_workload
from mabp_gym.agents import make_policy
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import slotcore
from mabp_gym.core.kernels.transition_core import RunFifo

pytestmark = pytest.mark.skipif(
    not slotcore.AVAILABLE, reason="numba is not installed (or MABP_GYM_PURE is set)"
)

WORKLOADS = [
    *COMPILED_WORKLOADS,
    ("mixed", {"load": 1.3}),  # past the bound: long queues of many runs
    ("agentic", {"gen_prob": 0.6}),  # generation draws between the successor draws
]


def _snapshot(sim: Simulator) -> tuple:
    st = sim.state
    return (
        st.t,
        st.units,
        st.queues,
        st.queue_len.tolist(),
        st.holder.tolist(),
        st.owner.tolist(),
        st.memory_used.tolist(),
        st.service_action.tolist(),
        st.service_residual.tolist(),
        st.service_hit.tolist(),
        st.service_birth.tolist(),
        sim.rng.bit_generator.state,
    )


def _outcome(outcome) -> dict:
    row = {f.name: getattr(outcome, f.name) for f in fields(outcome)}
    row["served_by_action"] = outcome.served_by_action.tolist()
    return row


@pytest.mark.parametrize("name, overrides", WORKLOADS, ids=lambda v: str(v)[-20:])
def test_transition_core__identical_to_the_reference(name, overrides):
    """Side by side on the same controls: mabp's scores and random scores (about half of
    all candidates positive: many transfers, drops and generated objects), memory on and
    off, through both ``step_scores`` (training) and ``step`` (checked)."""
    wl = make_workload(name, **overrides)
    for memory in (True, False):
        compiled = Simulator(wl, memory=memory, check_invariants=True, compiled=True)
        reference = Simulator(wl, memory=memory, check_invariants=True, compiled=False)
        compiled.reset(7)
        reference.reset(7)
        assert isinstance(compiled.state.fifo, RunFifo)
        encoder = ObservationEncoder(wl, memory=memory)
        policy = make_policy("mabp", wl, memory=memory)
        policy.reset(7)
        rng = np.random.default_rng(8)
        for t in range(300 if memory else 100):
            if t % 3 == 2:
                scores = rng.uniform(-1, 1, wl.index.num_scores)
            else:
                scores = policy.scores(encoder.encode(reference.state))
            if t % 2:
                control, out = compiled.step_scores(scores)
                control_ref, out_ref = reference.step_scores(scores)
                assert np.array_equal(control.route, control_ref.route)
            else:
                control = reference.project(scores)
                out = compiled.step(control)
                out_ref = reference.step(control)
            assert _outcome(out) == _outcome(out_ref), (name, memory, t)
            assert _snapshot(compiled) == _snapshot(reference), (name, memory, t)


def test_transition_core__an_initial_backlog_and_its_delays_match():
    """``add_units`` with old births, then service: the same FIFO order and delays; the
    compiled side starts with one-row outputs and pool, so both grow on the way."""
    wl = make_workload("successor", load=0.9)
    sims = [Simulator(wl, compiled=flag) for flag in (True, False)]
    for sim in sims:
        sim.reset(2)
    core = sims[0]._core
    assert core is not None
    core._grow_outputs(1)
    sims[0].state.fifo = RunFifo(wl.index.num_pairs, rows=1)
    for sim in sims:
        for p in range(wl.index.num_pairs):
            node, commodity = int(wl.index.pair_node[p]), int(wl.index.pair_commodity[p])
            sim.add_units(node, commodity, 3 + p, birth=-5 - p)
            sim.add_units(node, commodity, 2, birth=-1)
    assert sims[0].state.queues == sims[1].state.queues
    assert sims[0].state.fifo.lengths() == sims[0].state.queue_len.tolist()
    policy = make_policy("bp", wl)
    encoder = ObservationEncoder(wl)
    for _ in range(60):
        scores = policy.scores(encoder.encode(sims[1].state))
        outs = [sim.step_scores(scores)[1] for sim in sims]
        assert _outcome(outs[0]) == _outcome(outs[1])
    assert sims[0].state.queues == sims[1].state.queues
    assert core.done.shape[0] > 1 and sims[0].state.fifo.pool.shape[0] > 1


def test_run_fifo__runs_grow_past_the_pool_and_keep_fifo_order():
    fifo = RunFifo(3, rows=2)
    expected: list[list[int]] = [[], [], []]
    rng = np.random.default_rng(0)
    for step in range(200):
        p, count = int(rng.integers(3)), int(rng.integers(1, 4))
        birth = step // 3  # repeated births merge into the tail run
        fifo.extend(p, birth, count)
        expected[p].extend([birth] * count)
    assert fifo.pool.shape[0] >= 64
    assert [fifo.births(p) for p in range(3)] == expected
    assert fifo.lengths() == [len(q) for q in expected]
    pairs, births = fifo.heads()
    assert pairs.tolist() == [0, 1, 2] and births.tolist() == [q[0] for q in expected]


def test_transition_core__compiled_request_without_numba_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(slotcore, "AVAILABLE", False)
    with pytest.raises(RuntimeError, match="needs numba"):
        Simulator(make_workload("successor"), compiled=True)
    assert Simulator(make_workload("successor")).state.fifo.__class__.__name__ == "DequeFifo"


@pytest.mark.parametrize("name, overrides", WORKLOADS[:3] + [("mixed", {"copies": 2})])
def test_transition_core__packed_fields_read_back_as_the_index(name, overrides):
    from mabp_gym.core.kernels import transition_core as tc

    wl = make_workload(name, **overrides)
    core, ix = tc.CompiledTransition(wl), wl.index
    for k, field in enumerate(tc.INT_FIELDS):
        assert np.array_equal(tc._field(core.ints, k), np.ravel(getattr(ix, field))), field
    for k, field in enumerate(tc.FLOAT_FIELDS):
        assert np.array_equal(tc._field(core.floats, k), getattr(ix, field)), field
    assert core.ints[tc._REPLICAS] == wl.replicas
    assert core.floats[tc._TOTAL_RATE] == wl.total_rate
    assert core.floats[tc._MIGRATION_COST] == wl.migration_cost


def test_transition_core__routing_from_a_full_pool_grows_it_first():
    """A pool with no free row and a control routing part of the oldest run (which frees
    no row) to an empty queue (which needs one): the kernel asks for rows before it
    changes anything, and the slot matches the reference."""
    from mabp_gym.core.control import Control

    wl = make_workload("mixed")
    ix = wl.index
    r = 0
    p = int(ix.route_src_pair[r])
    node, commodity = int(ix.pair_node[p]), int(ix.pair_commodity[p])
    sims = [Simulator(wl, compiled=flag) for flag in (True, False)]
    for sim in sims:
        sim.reset(0)
    sims[0].state.fifo = RunFifo(ix.num_pairs, rows=1)
    for sim in sims:
        for birth in range(-8, 0):  # eight runs: the pool doubles to exactly eight rows
            sim.add_units(node, commodity, 7 if birth == -8 else 1, birth=birth)
    fifo = sims[0].state.fifo
    assert isinstance(fifo, RunFifo) and fifo.meta[1] == 0
    route = np.zeros(ix.num_routes, dtype=np.int64)
    route[r] = min(6, int(ix.link_capacity[ix.route_link[r]]))
    control = Control(
        transfers=np.zeros(0, dtype=np.int64),
        route=route,
        service=np.zeros(ix.num_actions, dtype=np.int64),
        start=np.full(ix.num_nodes, -1, dtype=np.int64),
        retain=np.zeros(ix.num_retains),
    )
    outs = [sim.step(control) for sim in sims]
    assert outs[0].routed == route[r] > 1
    assert _outcome(outs[0]) == _outcome(outs[1])
    assert _snapshot(sims[0]) == _snapshot(sims[1])
    assert fifo.pool.shape[0] > 8


def test_transition_core__simulators_of_one_workload_keep_their_own_buffers():
    """Two simulators of one workload share the static arrays, never a slot's outputs:
    interleaved, each gives what it gives alone."""
    wl = make_workload("mixed", load=0.9)
    alone = []
    for seed in (1, 2):
        sim = Simulator(wl, compiled=True)
        sim.reset(seed)
        alone.append(
            [_outcome(sim.step_scores(np.ones(wl.index.num_scores))[1]) for _ in range(40)]
        )
    pair = [Simulator(wl, compiled=True) for _ in range(2)]
    assert pair[0]._core is not None and pair[1]._core is not None
    assert pair[0]._core.ints is pair[1]._core.ints and pair[0]._core.done is not pair[1]._core.done
    for sim, seed in zip(pair, (1, 2), strict=True):
        sim.reset(seed)
    together: list[list[dict]] = [[], []]
    for _ in range(40):
        outs = [sim.step_scores(np.ones(wl.index.num_scores))[1] for sim in pair]
        for k in range(2):
            together[k].append(_outcome(outs[k]))
    assert together == alone
