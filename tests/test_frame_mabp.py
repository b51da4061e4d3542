"""Frame-MABP (SPEC 9.5): feasible every slot, stable under the memory bound, exact plans."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mabp_gym import Simulator, check_control, make_workload, project
from mabp_gym.agents import POLICIES, make_policy
from mabp_gym.agents.frame_mabp import FrameMABP
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.workload import Action, Commodity, Node, Signature, Workload
from mabp_gym.harness.runs import RunSpec, run


@pytest.mark.parametrize("name", ["mixed", "boundary", "rag"])
def test_frame_mabp__every_control_is_feasible(name):
    wl = make_workload(name, load=0.9)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(5)
    encoder = ObservationEncoder(wl)
    policy = make_policy("frame-mabp", wl)
    policy.reset(5)
    planned = 0
    for _ in range(150):
        obs = encoder.encode(sim.state)
        control = policy.control(sim.state, obs)
        check_control(wl, sim.state, control)  # raises on any violated constraint
        # The scores alone (a Gymnasium loop) also project onto a feasible control.
        check_control(wl, sim.state, project(wl, sim.state, policy.scores(obs)))
        sim.step(control)
        planned += int(policy.planned.sum())
    assert planned > 0


def test_frame_mabp__is_registered_and_validates_its_arguments():
    assert "frame-mabp" in POLICIES
    assert isinstance(make_policy("frame-mabp", "mixed"), FrameMABP)
    for bad in ({"frame": 0}, {"smoothing": 0.5}, {"slack": 1.5}, {"switch": 0.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            FrameMABP(make_workload("mixed"), **bad)


@pytest.mark.parametrize(
    ("name", "overrides"), [("work_reuse", {}), ("successor", {}), ("boundary", {})]
)
def test_frame_mabp__stable_just_under_the_memory_bound(name, overrides):
    # Load 0.95 of the occupation bound (= the all-hit LP on these workloads), far above
    # the no-memory capacity (1/4, 1/2 and 1/2 of it).
    for seed in (0, 1):
        record = run(
            RunSpec(
                "frame-mabp", name, 0.95, seed, horizon=1500, overrides=tuple(overrides.items())
            )
        )
        assert record["slope"] < 0.035 and record["mean_backlog"] < 60, record
        assert record["hit_ratio"] > 0.97


def test_frame_mabp__unstable_above_the_bound_on_work_reuse():
    record = run(RunSpec("frame-mabp", "work_reuse", 1.15, 0, horizon=1500))
    assert record["slope"] > 0.2


def test_frame_mabp__batches_better_than_mabp_on_boundary():
    # Two servers, one object each: holding it and routing its units there is the point.
    frame = [run(RunSpec("frame-mabp", "boundary", 0.9, s, horizon=1000)) for s in (0, 1)]
    mabp = [run(RunSpec("mabp", "boundary", 0.9, s, horizon=1000)) for s in (0, 1)]
    assert np.mean([r["mean_backlog"] for r in frame]) < 0.5 * np.mean(
        [r["mean_backlog"] for r in mabp]
    )
    assert np.mean([r["hit_ratio"] for r in frame]) > np.mean([r["hit_ratio"] for r in mabp])


def test_frame_mabp__plan_is_the_best_budget_feasible_set_with_unequal_sizes():
    sizes = (1.0, 2.0, 3.0, 1.5)
    actions = tuple(
        Action(node=0, commodity=c, signature=c, work_hit=1.0, work_miss=3.0)
        for c in range(len(sizes))
    )
    wl = Workload(
        name="knapsack",
        nodes=(Node("s", "server", 3.0, 4.0),),
        links=(),
        commodities=tuple(Commodity(f"c{c}") for c in range(len(sizes))),
        signatures=tuple(Signature(f"o{c}", b) for c, b in enumerate(sizes)),
        actions=actions,
        arrival_mix=tuple((0, c, 0.25) for c in range(len(sizes))),
    )
    policy = FrameMABP(wl)
    rng = np.random.default_rng(0)
    for _ in range(20):
        net = rng.normal(2.0, 3.0, size=len(sizes))
        chosen = policy.plan(net)
        best = max(
            (
                sum(net[list(s)])
                for r in range(len(sizes) + 1)
                for s in itertools.combinations(range(len(sizes)), r)
                if sum(sizes[k] for k in s) <= 4.0 and all(net[k] > 0 for k in s)
            ),
            default=0.0,
        )
        assert sum(np.asarray(sizes)[chosen]) <= 4.0
        assert net[chosen].sum() == pytest.approx(best)


def test_frame_mabp__frame_values_cap_the_demand_at_what_the_frame_can_serve():
    # H = 5 slots of mu = 2 serve at most H mu / w_hit = 10 hits, each saving
    # w_miss - w_hit = 2: object 0 with 25 queued units is worth 10 * 2 = 20 (not 50),
    # object 1 with 4 units 4 * 2 = 8, less one miss (3) to acquire it, as it is not held.
    wl = Workload(
        name="two_objects",
        nodes=(Node("s", "server", 2.0, 1.0),),
        links=(),
        commodities=(Commodity("c0"), Commodity("c1")),
        signatures=(Signature("o0", 1.0), Signature("o1", 1.0)),
        actions=tuple(
            Action(node=0, commodity=c, signature=c, work_hit=1.0, work_miss=3.0) for c in (0, 1)
        ),
        arrival_mix=((0, 0, 0.5), (0, 1, 0.5)),
    )
    policy = FrameMABP(wl, frame=5)
    policy.reset(0)  # no arrivals estimated yet: the frame demand is the queue
    ix = wl.index
    own = np.array([25.0, 4.0])[ix.action_commodity]
    held = ix.retain_signature == 0
    values = policy.frame_values(own, held)
    assert values[ix.retain_signature.tolist().index(0)] == pytest.approx(20.0)
    assert values[ix.retain_signature.tolist().index(1)] == pytest.approx(5.0)
