"""The transition's kernels (mabp_gym.core.kernels.transition_core): their count-based FIFO,
initial backlogs, a pool that grows mid-slot, packed fields and per-simulator buffers.
Every slot on every workload is held to golden digests in ``test_slot_golden.py``."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import pytest

from mabp_gym import Simulator, make_workload
from mabp_gym.agents import make_policy
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import jit
from mabp_gym.core.kernels.transition_core import RUN_SLOTS, RunFifo


def _outcome(outcome) -> dict:
    row = {f.name: getattr(outcome, f.name) for f in fields(outcome)}
    row["served_by_action"] = outcome.served_by_action.tolist()
    return row


def test_transition_core__an_initial_backlog_is_served_oldest_first():
    """``add_units`` with old births, then service: the FIFO holds them oldest first, the
    old units leave with their delays, and the one-row outputs and pool grow on the way."""
    wl = make_workload("successor", load=0.9)
    sim = Simulator(wl, check_invariants=True)  # also recounts the FIFO every slot
    sim.reset(2)
    core = sim._core
    core._grow_outputs(1)
    sim.state.fifo = RunFifo(wl.index.num_pairs, rows=1)
    expected = []
    for p in range(wl.index.num_pairs):
        node, commodity = int(wl.index.pair_node[p]), int(wl.index.pair_commodity[p])
        sim.add_units(node, commodity, 3 + p, birth=-5 - p)
        sim.add_units(node, commodity, 2, birth=-1)
        expected.append((-5 - p,) * (3 + p) + (-1, -1))
    assert sim.state.queues == expected
    assert sim.state.fifo.lengths() == sim.state.queue_len.tolist()
    policy = make_policy("bp", wl)
    encoder = ObservationEncoder(wl)
    delays = []
    for _ in range(60):
        delays.extend(sim.step_scores(policy.scores(encoder.encode(sim.state)))[1].delays)
    assert max(delays) >= 5  # an initial unit of birth <= -5 left
    assert core.done.shape[0] > 1 and sim.state.fifo.pool.shape[0] > 1


def test_run_fifo__runs_grow_past_the_pool_and_keep_fifo_order():
    fifo = RunFifo(3, rows=2)
    expected: list[list[int]] = [[], [], []]
    rng = np.random.default_rng(0)
    for step in range(200):
        p, count = int(rng.integers(3)), int(rng.integers(1, 4))
        birth = step // 3  # repeated births merge into the tail run
        fifo.extend(p, birth, count)
        expected[p].extend([birth] * count)
    assert fifo.pool.shape[0] >= 16  # three doublings at least
    assert [fifo.births(p) for p in range(3)] == expected
    # A pair's runs share rows: far fewer rows in use than runs.
    runs = sum(len(fifo.runs(p)) for p in range(3))
    assert fifo.pool.shape[0] - int(fifo.meta[1]) <= runs // RUN_SLOTS + 3
    assert fifo.lengths() == [len(q) for q in expected]
    pairs, births = fifo.heads()
    assert pairs.tolist() == [0, 1, 2] and births.tolist() == [q[0] for q in expected]


@pytest.mark.parametrize(
    "name, overrides",
    [("work_reuse", {}), ("successor", {}), ("separation", {}), ("mixed", {"copies": 2})],
)
def test_transition_core__packed_fields_read_back_as_the_index(name, overrides):
    from mabp_gym.core.kernels import transition_core as tc

    if jit.COMPILED:  # the kernels' own reader (a numba intrinsic), compiled
        tc = SimpleNamespace(**vars(tc))
        tc._field = jit.njit(lambda pack, k: jit.pack_field(pack, k).copy())
    wl = make_workload(name, **overrides)
    core, ix = tc.CompiledTransition(wl), wl.index
    derived = {"successor_ptr", "successor_pair", "successor_bound", "arrival_cum", "retain_ptr"}
    derived |= {"node_actions", "node_action_ptr", "node_routes", "node_route_ptr", "node_pair_ptr"}
    for k, field in enumerate(tc.INT_FIELDS):
        if field not in derived:
            assert np.array_equal(tc._field(core.ints, k), np.ravel(getattr(ix, field))), field
    for k, field in enumerate(tc.FLOAT_FIELDS):
        if field not in derived:
            assert np.array_equal(tc._field(core.floats, k), np.ravel(getattr(ix, field))), field
    # The derived fields: each (hit, action) row's successor law, the arrival mix, and
    # each node's range of retention candidates.
    ptr = tc._field(core.ints, tc.IntField.SUCCESSOR_PTR)
    bound = tc._field(core.floats, tc.FloatField.SUCCESSOR_BOUND)
    target = tc._field(core.ints, tc.IntField.SUCCESSOR_PAIR)
    for h in range(2):
        for a in range(ix.num_actions):
            rows = slice(ptr[h * ix.num_actions + a], ptr[h * ix.num_actions + a + 1])
            assert bound[rows].tolist() == list(ix.successor_cum[h][a])
            assert target[rows].tolist() == list(ix.successor_pair[h][a])
    cum = tc._field(core.floats, tc.FloatField.ARRIVAL_CUM)
    assert np.array_equal(cum, np.cumsum(ix.arrival_share)[:-1])
    for name in tc.INT_FIELDS + tc.FLOAT_FIELDS:  # the views the explainer reads
        pack = core.ints if name in tc.INT_FIELDS else core.floats
        k = tc.INT_FIELDS.index(name) if name in tc.INT_FIELDS else tc.FLOAT_FIELDS.index(name)
        assert np.array_equal(core.field(name), tc._field(pack, k)), name
    with pytest.raises(KeyError, match="no packed field 'nope'"):
        core.field("nope")
    starts = tc._field(core.ints, tc.IntField.RETAIN_PTR)
    assert starts[0] == 0 and starts[-1] == ix.num_retains
    for i in range(ix.num_nodes):
        assert (ix.retain_node[starts[i] : starts[i + 1]] == i).all()
    # The service and routing candidates node by node, each node's in index order.
    for kind, node in (("ACTION", ix.action_node), ("ROUTE", ix.pair_node[ix.route_src_pair])):
        members = tc._field(core.ints, tc.IntField[f"NODE_{kind}S"])
        bounds = tc._field(core.ints, tc.IntField[f"NODE_{kind}_PTR"])
        assert sorted(members.tolist()) == list(range(node.shape[0])), kind
        assert bounds[0] == 0 and bounds[-1] == node.shape[0]
        for i in range(ix.num_nodes):
            group = members[bounds[i] : bounds[i + 1]]
            assert (node[group] == i).all() and (np.diff(group) > 0).all(), (kind, i)
    # Each node's pairs, numbered node by node in commodity order (the encoder sums a
    # node's queues over them alone).
    bounds = tc._field(core.ints, tc.IntField.NODE_PAIR_PTR)
    assert bounds[0] == 0 and bounds[-1] == ix.num_pairs
    for i in range(ix.num_nodes):
        assert (ix.pair_node[bounds[i] : bounds[i + 1]] == i).all()
        assert (np.diff(ix.pair_commodity[bounds[i] : bounds[i + 1]]) > 0).all()
    assert core.ints[tc.Scalar.REPLICAS] == wl.replicas
    assert core.floats[tc.Scalar.TOTAL_RATE] == wl.total_rate
    assert core.floats[tc.Scalar.MIGRATION_COST] == wl.migration_cost


def test_transition_core__routing_from_a_full_pool_grows_it_first():
    """A pool with no free row and a control routing part of the oldest run (which frees
    no row) to an empty queue (which needs one): the kernel asks for rows before it
    changes anything, and the routed units join the destination oldest first."""
    from mabp_gym.core.control import Control

    wl = make_workload("mixed")
    ix = wl.index
    r = 0
    p, q = int(ix.route_src_pair[r]), int(ix.route_dst_pair[r])
    node, commodity = int(ix.pair_node[p]), int(ix.pair_commodity[p])
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    sim.state.fifo = RunFifo(ix.num_pairs, rows=1)
    # Seven runs: the first row's six, then the second row (the pool's last free one).
    for birth in range(-7, 0):
        sim.add_units(node, commodity, 7 if birth == -7 else 1, birth=birth)
    fifo = sim.state.fifo
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
    out = sim.step(control)
    n = int(route[r])
    assert out.routed == n > 1
    queues = sim.state.queues
    assert queues[q][:n] == (-7,) * n  # arrivals, if any, join after the routed units
    assert queues[p][: 7 - n + 6] == (-7,) * (7 - n) + tuple(range(-6, 0))
    assert sim.state.fifo.pool.shape[0] > 2


def test_transition_core__simulators_of_one_workload_keep_their_own_buffers():
    """Two simulators of one workload share the static arrays, never a slot's outputs:
    interleaved, each gives what it gives alone."""
    wl = make_workload("mixed", load=0.9)
    alone = []
    for seed in (1, 2):
        sim = Simulator(wl)
        sim.reset(seed)
        alone.append(
            [_outcome(sim.step_scores(np.ones(wl.index.num_scores))[1]) for _ in range(40)]
        )
    pair = [Simulator(wl) for _ in range(2)]
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


def test_arrivals__pick_their_pair_by_bisect_right_over_many_bins():
    """A network of many sources has many arrival bins: each uniform's pair is the bin
    that ``bisect_right`` over the cumulative shares picks, exact boundaries included."""
    from mabp_gym.core.kernels.transition_core import CompiledTransition, _arrive

    wl = make_workload("multihop", nodes=300, load=0.3)
    core = CompiledTransition.shared(wl)
    cum, pairs = core.field("arrival_cum"), core.field("arrival_pair")
    assert cum.shape[0] > 100
    rng = np.random.default_rng(0)
    uniforms = np.concatenate([rng.random(5000), cum[::7], np.nextafter(cum[::7], 0.0)])
    queue_len = np.zeros(wl.index.num_pairs, dtype=np.int64)
    fifo = RunFifo(wl.index.num_pairs)
    fifo.reserve(wl.index.num_pairs)
    arrivals = np.empty(wl.index.num_pairs, dtype=np.int64)  # the kernel's scratch
    _arrive(
        3,
        None,
        uniforms,
        uniforms.shape[0],
        queue_len,
        fifo.arrays(),
        core.ints,
        core.floats,
        arrivals,
    )
    bins = np.searchsorted(cum, uniforms, side="right")
    expected = np.bincount(pairs[bins], minlength=wl.index.num_pairs)
    np.testing.assert_array_equal(queue_len, expected)
    assert fifo.lengths() == expected.tolist()


def test_simulator__a_slot_that_draws_in_the_kernel_keeps_no_reference_to_the_generator():
    # gen_prob 0.5: the outcome kernel draws from the simulator's generator. numba takes a
    # reference to a generator handed to it from Python, which a kernel without the
    # runtime never gave back: one reference (and a small record) leaked every slot.
    import sys

    wl = make_workload("rag", gen_prob=0.5)
    sim = Simulator(wl)
    sim.reset(seed=0)
    assert sim._core.draws_in_kernel and sim._generates
    scores = np.ones(wl.index.num_scores)
    sim.step_scores(scores)
    before = sys.getrefcount(sim.rng)
    for _ in range(50):
        sim.step_scores(scores)
    after = sys.getrefcount(sim.rng)  # outside the assert: pytest's rewrite holds one more
    assert after == before


@pytest.mark.skipif(not jit.COMPILED, reason="the intrinsic is numba's")
def test_pack_field__a_read_only_pack_gives_a_read_only_view():
    from numba.core.errors import TypingError

    pack = np.array([2, 4, 7, 8], dtype=np.int64)  # one field, [7, 8]
    read = jit.njit(lambda p: jit.pack_field(p, 0).sum())
    write = jit.njit(lambda p: jit.pack_field(p, 0).fill(0))
    assert read(pack) == 15
    pack.setflags(write=False)
    assert read(pack) == 15
    with pytest.raises(TypingError):
        write(pack)
    assert pack.tolist() == [2, 4, 7, 8]


def test_views__shaped_and_flat_are_the_views_numpy_makes():
    buffer = np.arange(30, dtype=np.float64)
    grid = np.arange(12, dtype=np.int64).reshape(3, 4)
    if jit.COMPILED:
        shaped = jit.njit(lambda b, start: jit.shaped(b, start, (2, 3, 4)))
        flat = jit.njit(lambda a: jit.flat(a))
    else:
        shaped, flat = (lambda b, start: jit.shaped(b, start, (2, 3, 4))), jit.flat
    view = shaped(buffer, 5)
    assert view.shape == (2, 3, 4) and view.strides == (96, 32, 8)
    assert np.array_equal(view, buffer[5:29].reshape(2, 3, 4))
    view[1, 2, 3] = -1.0  # a view: written through
    assert buffer[28] == -1.0
    line = flat(grid)
    assert line.tolist() == list(range(12)) and np.shares_memory(line, grid)


@pytest.mark.skipif(not jit.COMPILED, reason="the intrinsics are numba's")
def test_views__a_read_only_array_gives_read_only_views():
    from numba.core.errors import TypingError

    buffer = np.zeros(8)
    buffer.setflags(write=False)
    with pytest.raises(TypingError):
        jit.njit(lambda b: jit.shaped(b, 0, (2, 4)).fill(1.0))(buffer)
    with pytest.raises(TypingError):
        jit.njit(lambda b: jit.flat(b).fill(1.0))(buffer)
    assert jit.njit(lambda b: jit.shaped(b, 2, (2, 3)).sum())(buffer) == 0.0
