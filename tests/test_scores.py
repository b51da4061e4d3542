"""The fixed queue-length score rule (mabp_gym.core.scores): one score in [-1, 1] per
candidate, in the layout the projection reads."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym import Simulator, make_workload
from mabp_gym.core.scores import queue_length_scores


@pytest.mark.parametrize("name", ["mixed", "separation", "boundary"])
def test_queue_length_scores__layout_and_range(name):
    wl = make_workload(name, load=0.8)
    sim = Simulator(wl)
    sim.reset(0)
    for _ in range(30):
        sim.step_scores(queue_length_scores(wl, sim.state))
    scores = queue_length_scores(wl, sim.state)
    ix = wl.index
    service, route, transfer, retain = (scores[s] for s in ix.score_slices)
    assert scores.shape == (ix.num_scores,) and np.all(np.abs(scores) <= 1.0)
    assert np.all(transfer == -1.0) and np.all(retain == 1.0)
    queue = sim.state.queue_len.astype(float)
    assert np.all((service > 0) == (queue[ix.action_pair] > 0))
