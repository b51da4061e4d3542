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


def test_encoder__a_route_is_compatible_when_any_action_at_its_destination_hits():
    # Each route's actions at its destination: the first in one array, the others as
    # (route, action) rows (no built-in workload has any; here they are made). The same
    # observation whichever way they are given, and compatible means one of them hits.
    wl = make_workload("mixed", load=0.9)
    sim = Simulator(wl)
    sim.reset(2)
    for _ in range(40):
        sim.step_scores(queue_length_scores(wl, sim.state))
    encoder = ObservationEncoder(wl)
    first, more, *rest = encoder.kernel_statics
    assert (first >= 0).all() and more.shape == (0, 2)
    obs = encoder.encode(sim.state)
    hit = obs["service"][:, 2]
    assert 0 < obs["route"][:, 2].sum() < len(first)  # else this test could not fail
    assert np.array_equal(obs["route"][:, 2], hit[first])
    routes = np.arange(len(first))
    for given in (
        (np.full_like(first, -1), np.stack([routes, first], axis=1)),  # all in the rows
        (first, np.stack([routes, first], axis=1)),  # each twice
        (np.full_like(first, -1), np.zeros((0, 2), dtype=np.int64)),  # none: never
    ):
        encoder.kernel_statics = (*given, *rest)
        route = encoder.encode(sim.state)["route"]
        expected = obs["route"].copy()
        if given[1].shape[0] == 0:
            expected[:, 2] = 0.0
        assert np.array_equal(route, expected)
