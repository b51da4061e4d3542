"""The delay floor: every request's shortest possible path, checked by hand on the service
graphs and against simulated delays, which it bounds and, at a light load, meets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mabp_gym import make_workload
from mabp_gym.core.floor import delay_floor
from mabp_gym.core.simulator import Simulator
from mabp_gym.registry import make_policy
from mabp_gym.rollout import episode


@pytest.mark.parametrize(
    ("name", "floors", "p95"),
    [
        # gw -> ret (1 slot), retrieve (1, a hit), ret -> gen (1), generate and exit (1).
        ("rag", {4.0}, 4.0),
        # gw -> moe (1), the expert's hit exits in its slot (1).
        ("moe", {2.0}, 2.0),
        # gw -> gen, plan, gen -> tool, the tool's result exits: 4, never verified or re-planned.
        ("agentic", {4.0}, 4.0),
        # MoE's 2 slots are 30% of the arrivals: the P95 is the others' 4.
        ("mixed", {2.0, 4.0}, 4.0),
        # Arrivals queue at the one server, a miss's work 4 fits mu 4: served in its first slot.
        ("work_reuse", {1.0}, 1.0),
    ],
)
def test_floor__is_the_shortest_path_by_hand(name, floors, p95):
    floor = delay_floor(make_workload(name))
    assert set(floor.per_arrival.tolist()) == floors
    assert floor.p95 == p95
    assert floor.quantile(0.0) == min(floors) and floor.quantile(1.0) == max(floors)


def test_floor__a_miss_that_needs_several_slots_counts_them_where_no_hit_is_possible():
    rag = make_workload("rag")
    never_assisted = dataclasses.replace(
        rag, actions=tuple(dataclasses.replace(a, signature=-1) for a in rag.actions)
    )
    # Each service is then a miss, work 4 at mu 2: two slots at ret and at gen, 4 + 2.
    assert delay_floor(never_assisted).p95 == 6.0
    assert delay_floor(make_workload("rag", K=6.0)).p95 == 4.0  # a hit is still one slot


@pytest.mark.parametrize("name", ["rag", "moe", "agentic", "mixed", "multihop", "work_reuse"])
@pytest.mark.parametrize("policy", ["bp", "mabp"])
def test_floor__bounds_every_simulated_delay_and_a_light_load_meets_it(name, policy):
    workload = make_workload(name, load=0.05)
    floor = delay_floor(workload)
    sim = Simulator(workload)
    sim.reset(3)
    delays = np.array(
        [
            d
            for slot in episode(sim, make_policy(policy, workload), 800)
            for d in slot.outcome.delays
        ]
    )
    assert delays.size > 50
    assert delays.min() >= floor.per_arrival.min()
    # MABP (drift plus penalty) serves work_reuse's miss only once its queue outweighs nu
    # times the miss's penalty: at a light load its first units wait.
    if name != "work_reuse" or policy == "bp":
        assert delays.min() == floor.per_arrival.min()  # the slot conventions are the model's
    assert np.percentile(delays, 95) >= floor.p95


def test_floor__bad_quantiles_are_refused():
    floor = delay_floor(make_workload("mixed"))
    assert np.all(np.isfinite(floor.per_arrival))
    with pytest.raises(ValueError, match=r"q must be in \[0, 1\], got 1.5"):
        floor.quantile(1.5)
