"""The check kernels (mabp_gym.core.kernels.check_core) give the explainers' verdicts
(check_control, Simulator._explain_invariants): on feasible controls, on thousands of broken
ones, and on corrupted states."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import mabp_gym
from mabp_gym import Simulator, make_workload
from mabp_gym.agents import make_policy
from mabp_gym.core.control import InfeasibleControlError, check_control
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.simulator import InvariantError

WORKLOADS = [(name, {}) for name in mabp_gym.WORKLOADS] + [("mixed", {"copies": 2})]


def _explainer_accepts(sim: Simulator, control) -> bool:
    try:
        check_control(sim.workload, sim.state, control, memory=sim.memory)
    except InfeasibleControlError:
        return False
    return True


def _broken(rng: np.random.Generator, control, ix, holder: np.ndarray):
    """One random way of breaking (or not) a feasible control."""
    kind = int(rng.integers(9))
    route, service, start = control.route.copy(), control.service.copy(), control.start.copy()
    transfers, retain = control.transfers.copy(), control.retain.copy()
    if kind == 0 and route.size:  # more (or fewer, even negative) units on a route
        route[rng.integers(route.size)] += int(rng.integers(-3, 12))
    elif kind == 1 and service.size:
        service[rng.integers(service.size)] += int(rng.integers(-2, 6))
    elif kind == 2:  # any start, of any node's action or none
        start[rng.integers(start.size)] = int(rng.integers(-2, ix.num_actions + 1))
    elif kind == 3 and ix.num_transfers:  # one more transfer, possibly out of range
        extra = int(rng.integers(-1, ix.num_transfers + 1))
        transfers = np.append(transfers, extra).astype(np.int64)
    elif kind == 4 and transfers.size:  # the same transfer twice
        transfers = np.append(transfers, transfers[0]).astype(np.int64)
    elif kind == 5 and retain.size:
        retain[rng.integers(retain.size)] = [np.nan, np.inf, -1.0][int(rng.integers(3))]
    elif kind == 6 and ix.num_transfers:  # transfers from wherever objects are
        held = np.flatnonzero(holder.ravel()[ix.transfer_src_slot] >= 0)
        if held.size:
            pick = rng.choice(held, size=min(held.size, int(rng.integers(1, 4))), replace=False)
            transfers = np.asarray(pick, dtype=np.int64)
    elif kind == 7 and route.size:  # everything everywhere
        route += rng.integers(0, 3, route.size)
        service += rng.integers(0, 2, service.size)
    return replace(
        control, route=route, service=service, start=start, transfers=transfers, retain=retain
    )


@pytest.mark.parametrize("name, overrides", WORKLOADS, ids=lambda v: str(v)[-20:])
def test_check_core__feasibility_verdict_is_the_explainers(name, overrides):
    wl = make_workload(name, **overrides)
    ix = wl.index
    rng = np.random.default_rng(4)
    counts = {True: 0, False: 0}
    for memory in (True, False):
        sim = Simulator(wl, memory=memory)
        sim.reset(5)
        encoder = ObservationEncoder(wl, memory=memory)
        policy = make_policy("mabp", wl, memory=memory)
        policy.reset(5)
        for t in range(150):
            scores = policy.scores(encoder.encode(sim.state))
            if t % 2:
                scores = rng.uniform(-1, 1, ix.num_scores)
            control = sim.project(scores)
            assert sim._feasible(control) and _explainer_accepts(sim, control)
            for _ in range(8):
                broken = _broken(rng, control, ix, sim.state.holder)
                verdict = sim._feasible(broken)
                assert verdict == _explainer_accepts(sim, broken), (name, memory, t, broken)
                counts[verdict] += 1
            sim.step(control)
    assert counts[False] > 300 and counts[True] > 100, counts


def test_check_core__refused_controls_get_the_explainers_error():
    wl = make_workload("mixed")
    ix = wl.index
    sims = [Simulator(wl) for _ in range(2)]
    for sim in sims:
        sim.reset(0)
        for _ in range(30):
            sim.step(sim.project(np.ones(ix.num_scores)))
    sim = sims[0]
    control = sim.project(np.ones(ix.num_scores))
    broken = replace(control, route=control.route + 100)
    assert not sim._feasible(broken)
    with pytest.raises(InfeasibleControlError, match="capacity"):
        sim.step(broken)
    assert sim.state.t == 30  # nothing was executed
    # A control of another integer dtype is the explainer's to accept: the same slot.
    as_int32 = replace(control, route=control.route.astype(np.int32))
    assert not sim._feasible(as_int32)
    outs = [sims[0].step(as_int32), sims[1].step(control)]
    assert outs[0].backlog == outs[1].backlog and outs[0].delays == outs[1].delays


def _corruptions(sim: Simulator):
    st = sim.state
    p = int(np.flatnonzero(st.queue_len > 0)[0])
    yield "queue_len", lambda: st.queue_len.__setitem__(p, st.queue_len[p] + 1)
    yield "units", lambda: setattr(st, "units", st.units - 1)
    nodes, sigs = np.nonzero(st.holder >= 0)
    i, s = int(nodes[0]), int(sigs[0])
    m = int(st.holder[i, s])
    yield "owner", lambda: st.owner.__setitem__(m, (i + 1) % st.holder.shape[0])
    yield "memory_used", lambda: st.memory_used.__setitem__(i, st.memory_used[i] + 0.5)
    yield "a lost identity", lambda: st.holder.__setitem__((i, s), -1)
    free = np.flatnonzero(st.owner < 0)
    if free.size:
        yield "a stray owner", lambda: st.owner.__setitem__(int(free[0]), 0)


def test_check_core__invariants_verdict_is_the_explainers():
    wl = make_workload("mixed", load=0.9)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(2)
    policy, encoder = make_policy("mabp", wl), ObservationEncoder(wl)
    for _ in range(80):
        sim.step(sim.project(policy.scores(encoder.encode(sim.state))))
    out = sim.step(sim.project(policy.scores(encoder.encode(sim.state))))
    sim._assert_invariants(out)  # holds
    names = [name for name, _ in _corruptions(sim)]
    assert len(names) >= 5
    for name in names:
        saved = [a.copy() for a in (sim.state.queue_len, sim.state.owner, sim.state.holder)]
        saved_used, saved_units = sim.state.memory_used.copy(), sim.state.units
        dict(_corruptions(sim))[name]()
        with pytest.raises(InvariantError):
            sim._assert_invariants(out)
        sim.state.queue_len[:], sim.state.owner[:], sim.state.holder[:] = saved
        sim.state.memory_used[:], sim.state.units = saved_used, saved_units
        sim._assert_invariants(out)  # holds again once restored


def test_invariants__the_fifo_recount_is_spaced_out_as_queues_grow_but_never_skipped():
    # Walking every FIFO run each slot made long overloaded runs quadratic; the walk now
    # comes once the slots since the last one have budgeted it, so a bad run count is
    # still found, within (runs / RUNS_CHECKED_A_SLOT) + 1 checks.
    from mabp_gym.core.kernels.transition_core import _LO, _RUNS, RUN_SLOTS
    from mabp_gym.core.simulator import RUNS_CHECKED_A_SLOT

    wl = make_workload("mixed", load=3.0)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(0)
    fifo = sim.state.fifo
    # The budget counts RUN_SLOTS runs for every row in use (at most that many runs).
    while (fifo.pool.shape[0] - int(fifo.meta[1])) * RUN_SLOTS < 4 * RUNS_CHECKED_A_SLOT:
        _, out = sim.step_scores(-np.ones(wl.index.num_scores))  # serve nothing: runs pile up
    runs = (fifo.pool.shape[0] - int(fifo.meta[1])) * RUN_SLOTS
    pair = int(np.flatnonzero(sim.state.queue_len)[0])
    row = fifo.pool[fifo.head[pair]]
    row[_RUNS + 2 * row[_LO] + 1] += 1  # one unit more in a run than its queue counts
    checks = 0
    with pytest.raises(InvariantError, match="FIFO"):
        while checks < 100:
            checks += 1
            sim._assert_invariants(out)
    assert 1 < checks <= runs // RUNS_CHECKED_A_SLOT + 1
