"""The observation encoder (mabp_gym.core.encoding): its layout describes what it encodes."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym import Simulator, make_workload
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.scores import queue_length_scores


@pytest.mark.parametrize("name", ["mixed", "work_reuse", "separation"])
def test_encoder__arrays_fit_their_layout(name):
    wl = make_workload(name, load=0.8)
    sim = Simulator(wl)
    sim.reset(1)
    encoder = ObservationEncoder(wl)
    for _ in range(20):
        sim.step_scores(queue_length_scores(wl, sim.state))
    obs = encoder.encode(sim.state)
    assert set(obs) == set(encoder.layout)
    for key, spec in encoder.layout.items():
        array = obs[key]
        assert array.shape == spec.shape and array.dtype == spec.dtype, key
        assert np.all(array >= spec.low) and np.all(array <= spec.high), key
