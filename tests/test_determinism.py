"""Randomness comes only from the generator seeded by ``reset``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from mabp_gym import Simulator, make_workload
from mabp_gym.core.scores import queue_length_scores


def trajectory(name: str, seed: int, slots: int = 150, **overrides) -> list[tuple]:
    wl = make_workload(name, **overrides)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(seed)
    rows = []
    for _ in range(slots):
        control, out = sim.step_scores(queue_length_scores(wl, sim.state))
        rows.append(
            (
                out.arrivals,
                out.served,
                out.hits,
                out.delays,
                out.generated,
                out.evicted,
                out.backlog,
                control.route.tobytes(),
                sim.state.holder.tobytes(),
            )
        )
    return rows


def test_simulator__same_seed_same_trajectory_on_every_workload():
    for name in ("mixed", "work_reuse", "successor", "boundary", "agentic"):
        assert trajectory(name, 7) == trajectory(name, 7)


def test_simulator__different_seeds_differ():
    assert trajectory("mixed", 0) != trajectory("mixed", 1)
    assert trajectory("successor", 0, eps=0.2) != trajectory("successor", 1, eps=0.2)


def test_simulator__ignores_global_random_state():
    np.random.seed(0)
    first = trajectory("mixed", 3, slots=50)
    np.random.seed(12345)
    np.random.random(100)
    assert trajectory("mixed", 3, slots=50) == first


def test_simulator__pickled_mid_run_continues_identically():
    wl = make_workload("mixed")
    sim = Simulator(wl, check_invariants=True)
    sim.reset(5)
    for _ in range(40):
        sim.step_scores(queue_length_scores(wl, sim.state))
    clone = pickle.loads(pickle.dumps(sim))
    for _ in range(40):
        _, a = sim.step_scores(queue_length_scores(wl, sim.state))
        _, b = clone.step_scores(queue_length_scores(wl, clone.state))
        assert (a.arrivals, a.delays, a.backlog, a.generated) == (
            b.arrivals,
            b.delays,
            b.backlog,
            b.generated,
        )


def test_simulator__a_pickle_with_another_fifo_row_layout_is_refused_by_name():
    """Rows of an older layout (``(birth, units, next)``) would be read as rows of this
    one without a bounds check: unpickling refuses them and says why."""
    sim = Simulator(make_workload("mixed"))
    sim.reset(0)
    sim.state.fifo.pool = np.zeros((8, 3), dtype=np.int64)
    data = pickle.dumps(sim)
    with pytest.raises(ValueError, match=r"pool rows \(8, 3\).*another version of mabp-gym"):
        pickle.loads(data)
