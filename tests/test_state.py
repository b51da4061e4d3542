"""The simulator state (mabp_gym.core.state.SimState): an empty state, and the backlog that
counts units in service."""

from __future__ import annotations

import numpy as np

from mabp_gym import Simulator, make_workload
from mabp_gym.core.kernels.transition_core import RunFifo
from mabp_gym.core.scores import queue_length_scores
from mabp_gym.core.state import SimState


def test_empty__holds_nothing_and_serves_nothing():
    wl = make_workload("mixed")
    state = SimState.empty(wl, RunFifo(wl.index.num_pairs))
    ix = wl.index
    assert state.t == 0 and state.units == 0 and len(state.queues) == ix.num_pairs
    assert state.holder.shape == (ix.num_nodes, ix.num_signatures) and (state.holder < 0).all()
    assert (state.service_action < 0).all() and not state.memory_used.any()


def test_backlog__counts_waiting_units_and_those_in_service():
    wl = make_workload("mixed", load=1.2)
    sim = Simulator(wl)
    sim.reset(0)
    for _ in range(200):
        sim.step_scores(queue_length_scores(wl, sim.state))
        if (sim.state.service_action >= 0).any():
            break
    state = sim.state
    busy = int((state.service_action >= 0).sum())
    assert busy > 0
    pairs = state.backlog_pairs(wl)
    assert pairs.sum() == state.queue_len.sum() + busy == state.units
    matrix = state.backlog_matrix(wl)
    assert matrix.shape == (wl.index.num_nodes, wl.index.num_commodities)
    assert matrix.sum() == pairs.sum()
    assert np.array_equal(matrix[wl.index.pair_node, wl.index.pair_commodity], pairs)
