"""Oracle-Sur's slot program (``mabp_gym.agents.oracle_core``) on real slots: the solver's
paths are reached (closed form, integral LP vertex, branch and bound, nodes with several
starts), every control is feasible, and branch and bound finds the LP-first control's
objective. Its controls are held to golden digests in ``test_slot_golden.py`` and to brute
force in ``test_oracle.py``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import mabp_gym.agents.oracle as oracle_module
from mabp_gym import Simulator, make_workload
from mabp_gym.agents.oracle import OracleSur
from mabp_gym.agents.oracle_core import SlotModel, slot_program
from mabp_gym.core.encoding import ObservationEncoder

CASES = [
    ("mixed", {"load": 0.3}, True, 0),
    ("mixed", {"load": 0.85}, True, 1),
    ("mixed", {"load": 1.3}, True, 2),  # past the bound: queues and hard nodes grow
    ("mixed", {"load": 2.0}, False, 3),  # memory off (the solver is rarely needed)
    ("separation", {"load": 1.2}, True, 0),
    ("boundary", {"load": 1.2, "K": 2.0}, True, 4),  # multi-slot starts
    ("rag", {"load": 0.6}, True, 0),
    ("moe", {"load": 1.2}, True, 1),
    ("agentic", {"load": 0.6}, True, 2),
    ("multihop", {"load": 0.6}, True, 0),
]
SEVERAL_STARTS = ("mixed", "rag", "moe", "agentic")  # nodes with several start candidates
BRANCH_AND_BOUND = [CASES[1], CASES[5], CASES[7]]


def _case_id(case: tuple) -> str:
    return f"{Path(case[0]).stem}-{case[1]}-{'memory' if case[2] else 'no memory'}"


def _several_starts_at_a_hard_node(oracle: OracleSur, sim: Simulator, obs, transfers) -> bool:
    """Whether the slot's program sends HiGHS a node with two start candidates or more (so
    its one-start row binds two binaries)."""
    ix = sim.workload.index
    weight = oracle.weights(np.asarray(obs["queues"], dtype=np.float64))
    gain, work = oracle._gain_work(sim.state, transfers, weight)
    model = SlotModel(
        *slot_program(
            gain,
            work,
            oracle._node_mu,
            oracle._available(sim.state),
            sim.state.queue_len,
            ix.action_node,
            ix.action_pair,
            ix.pair_node,
            ix.link_src,
            ix.link_capacity,
        )
    )
    starts = model.action[model.kind == 1]
    nodes = ix.action_node[starts].tolist()
    return len(nodes) != len(set(nodes))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_slot_program__reaches_every_path_with_feasible_controls(case):
    name, overrides, memory, seed = case
    wl = make_workload(name, **overrides)
    sim = Simulator(wl, memory=memory, check_invariants=True)
    sim.reset(seed)
    encoder = ObservationEncoder(wl, memory=memory)
    oracle = OracleSur(wl, memory=memory)
    seen = {"lp": 0, "hard": 0, "several starts": 0}
    for _ in range(150):
        obs = encoder.encode(sim.state)
        control = oracle.control(sim.state, obs)  # raises if below MABP's objective
        statuses = oracle.last_info["milp_status"]
        seen["lp"] += statuses.count("lp")
        seen["hard"] += any(s != "trivial" for s in statuses)
        if name in SEVERAL_STARTS and memory and not seen["several starts"]:
            seen["several starts"] += _several_starts_at_a_hard_node(
                oracle, sim, obs, control.transfers
            )
        sim.step(control)  # checked for feasibility
    # The slots reached the solver, its integral LP vertex, and nodes with several start
    # candidates where the workload has them.
    assert seen["hard"] > 0 and seen["lp"] > 0, seen
    if name in SEVERAL_STARTS and memory:
        assert seen["several starts"] > 0, seen


@pytest.mark.parametrize("case", BRANCH_AND_BOUND, ids=_case_id)
def test_slot_program__branch_and_bound_finds_the_lp_vertex_objective(case, monkeypatch):
    """An integral LP vertex is optimal: with it refused every slot, branch and bound (where
    it proves optimality) reaches the same service objective on the same states."""
    name, overrides, memory, seed = case
    wl = make_workload(name, **overrides)
    sim = Simulator(wl, memory=memory)
    sim.reset(seed)
    encoder = ObservationEncoder(wl, memory=memory)
    lp_first, branching = OracleSur(wl, memory=memory), OracleSur(wl, memory=memory)
    real_fix = oracle_module.integral_fix
    compared = 0
    for _ in range(150):
        obs = encoder.encode(sim.state)
        control = lp_first.control(sim.state, obs)
        monkeypatch.setattr(oracle_module, "integral_fix", lambda *args: False)
        branched = branching.control(sim.state, obs)
        monkeypatch.setattr(oracle_module, "integral_fix", real_fix)
        statuses = branching.last_info["milp_status"]
        assert "lp" not in statuses
        if (
            lp_first.last_info["milp_status"] == ["lp"]
            and statuses == [0]
            and np.array_equal(control.transfers, branched.transfers)
        ):
            # The service program's objective: the routing of what service leaves is a
            # program of its own, and tied service optima may leave different queues.
            served = [replace(c, route=np.zeros_like(c.route)) for c in (control, branched)]
            assert branching.one_slot_objective(sim.state, served[1], obs) == pytest.approx(
                lp_first.one_slot_objective(sim.state, served[0], obs), rel=1e-9, abs=1e-9
            )
            compared += 1
        sim.step(control)
    assert compared > 0
