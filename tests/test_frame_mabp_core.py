"""Frame-MABP's compiled decision (mabp_gym.agents.frame_mabp_core) against its numpy path,
bit for bit: scores, plans and controls."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from mabp_gym import Simulator, check_control, make_workload
from mabp_gym.agents.frame_mabp import FrameMABP
from mabp_gym.agents.mabp import MABP
from mabp_gym.agents.residual_mabp import ResidualFrameMABP
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import jit
from mabp_gym.core.workload import Action, Commodity, Node, Signature, Workload
from mabp_gym.core.workloads import WORKLOADS

pytestmark = pytest.mark.skipif(not jit.COMPILED, reason="the kernels run as plain Python here")


@pytest.fixture(autouse=True)
def _compile_at_once(monkeypatch):
    monkeypatch.setattr(MABP, "compile_after", 0)
    monkeypatch.setattr(FrameMABP, "compile_after", 0)


def _knapsack() -> Workload:
    """One server, objects of unequal sizes (the plan enumerates subsets), two commodities
    per object (a retain candidate with two member actions)."""
    sizes = (1.0, 2.0, 3.0, 1.5, 0.5)
    n_comm = 2 * len(sizes)
    return Workload(
        name="knapsack",
        nodes=(Node("s", "server", 3.0, 4.0),),
        links=(),
        commodities=tuple(Commodity(f"c{c}") for c in range(n_comm)),
        signatures=tuple(Signature(f"o{o}", b) for o, b in enumerate(sizes)),
        actions=tuple(
            Action(node=0, commodity=c, signature=c // 2, work_hit=1.0, work_miss=2.0 + c / 7)
            for c in range(n_comm)
        ),
        arrival_mix=tuple((0, c, 1.0 / n_comm) for c in range(n_comm)),
        load=0.9,
    )


def _pair(cls, workload, **kw):
    compiled, twin = cls(workload, **kw), cls(workload, **kw)
    twin._statics = None  # the numpy path
    return compiled, twin


def _run_both(workload, compiled, twin, slots, seed=3):
    """Step the simulator with the compiled policy's controls; at every slot the numpy twin,
    given the same state and observation, must score, plan and control the same."""
    sim = Simulator(workload, memory=compiled.memory)
    sim.reset(seed)
    encoder = ObservationEncoder(workload)
    compiled.reset(seed)
    twin.reset(seed)
    planned = 0
    for _ in range(slots):
        obs = encoder.encode(sim.state)
        got, want = compiled.control(sim.state, obs), twin.control(sim.state, obs)
        assert compiled._statics, "the compiled path did not run"
        for key, value in got.as_dict().items():
            assert value.tobytes() == want.as_dict()[key].tobytes(), key
        assert compiled.planned.tobytes() == twin.planned.tobytes()
        assert compiled._served.tobytes() == twin._served.tobytes()
        assert compiled._ratio.tobytes() == twin._ratio.tobytes()
        check_control(workload, sim.state, got, memory=compiled.memory)
        sim.step(got)
        planned += int(compiled.planned.sum())
    return planned


@pytest.mark.parametrize("workload", WORKLOADS)
def test_frame_mabp_core__controls_scores_and_plans_equal_the_numpy_path(workload):
    wl = make_workload(workload, load=0.9)
    planned = _run_both(wl, *_pair(FrameMABP, wl), slots=150)
    # The plan took objects wherever an object has frame value here (the one retain
    # candidate of successor never does: its units need no second hit).
    assert planned > 0 or workload in ("successor", "separation")


def test_frame_mabp_core__in_a_gymnasium_loop_the_scores_agree():
    env = gym.make("mabp_gym/SFMSN-v0", workload="agentic", load=0.9)
    wl = env.unwrapped.workload
    compiled, twin = _pair(ResidualFrameMABP, wl, weights=np.linspace(-0.4, 0.4, 8))
    obs, _ = env.reset(seed=2)
    for _ in range(150):
        got = compiled.scores(obs)
        assert got.tobytes() == twin.scores(obs).tobytes()
        obs, *_ = env.step(got)
    assert compiled._statics


def test_frame_mabp_core__unequal_sizes_and_shared_objects_equal_the_numpy_path():
    wl = _knapsack()
    assert any(len(m) > 1 for m in FrameMABP(wl)._members)
    assert _run_both(wl, *_pair(FrameMABP, wl), slots=300, seed=0) > 0


@pytest.mark.parametrize("workload", ["mixed", "rag", "multihop"])
def test_frame_mabp_core__the_residual_over_it_and_the_variants_agree(workload):
    wl = make_workload(workload, load=0.95)
    weights = np.array([0.5, -0.3, 0.2, 0.1, -0.2, 0.3, 0.4, -0.1])
    _run_both(wl, *_pair(ResidualFrameMABP, wl, weights=weights), slots=120)
    _run_both(wl, *_pair(FrameMABP, wl, frame=4, slack=0.5, switch=2.0), slots=120)
    _run_both(wl, *_pair(FrameMABP, wl, memory=False), slots=60)


def test_frame_mabp_core__plans_break_ties_as_the_enumeration_does():
    from mabp_gym.agents.frame_mabp_core import _plan

    wl = _knapsack()
    policy = FrameMABP(wl)
    policy.reset(0)
    statics = policy._compiled_statics()
    assert statics is not None
    rng = np.random.default_rng(0)
    for trial in range(300):
        # Small integers make equal totals common; unequal sizes take the enumeration.
        net = rng.integers(-2, 4, wl.index.num_retains).astype(np.float64)
        if trial % 3 == 0:
            net = rng.standard_normal(wl.index.num_retains) * 10.0 ** rng.integers(-6, 6)
        chosen = np.zeros(wl.index.num_retains, dtype=bool)
        _plan(net, statics, chosen)
        assert chosen.tobytes() == policy.plan(net).tobytes(), net


def test_frame_mabp_core__a_subclass_that_changes_the_plan_runs_the_numpy_path():
    class Greedy(FrameMABP):
        def plan(self, net):
            return net > 0

    wl = make_workload("mixed")
    assert Greedy(wl)._compiled_statics() is None
    assert FrameMABP(wl)._compiled_statics() is not None
    assert ResidualFrameMABP(wl)._compiled_statics() is not None


def test_frame_mabp_core__the_first_decisions_run_numpy_then_the_kernels_take_over(monkeypatch):
    import mabp_gym.agents.frame_mabp as module

    monkeypatch.setattr(FrameMABP, "compile_after", 5)
    monkeypatch.setattr(module.WARMUP, "calls", 0)
    monkeypatch.setattr(module.WARMUP, "on_disk", False)  # a fresh install
    wl = make_workload("rag", load=0.9)
    switching, twin = FrameMABP(wl), FrameMABP(wl)
    twin._statics = None
    sim = Simulator(wl)
    sim.reset(1)
    encoder = ObservationEncoder(wl)
    paths = []
    for _ in range(12):
        obs = encoder.encode(sim.state)
        got, want = switching.control(sim.state, obs), twin.control(sim.state, obs)
        paths.append(bool(switching._statics))
        assert got.route.tobytes() == want.route.tobytes()
        assert got.service.tobytes() == want.service.tobytes()
        assert switching._arrival.tobytes() == twin._arrival.tobytes()
        sim.step(got)
    assert paths == [False] * 5 + [True] * 7
