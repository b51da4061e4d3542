"""The slot rules the projection, the feasibility check, the encoder and Oracle-Sur share
(mabp_gym.core.control): compute left after the units in service, memory after transfers, hit
bits."""

from __future__ import annotations

import numpy as np

from mabp_gym import Simulator, make_workload
from mabp_gym.core.control import compute_left, hit_bits, holders_after
from mabp_gym.core.kernels.rules import in_service_spend
from mabp_gym.core.scores import queue_length_scores


def _busy_state():
    wl = make_workload("mixed", load=1.2)  # misses of long work keep units in service
    sim = Simulator(wl)
    sim.reset(0)
    for _ in range(40):
        sim.step_scores(queue_length_scores(wl, sim.state))
        if (sim.state.service_action >= 0).any():
            break
    return wl, sim.state


def test_compute_left__units_in_service_take_theirs_first():
    wl, state = _busy_state()
    mu = wl.index.mu
    busy = state.service_action >= 0
    assert busy.any()
    spend = np.empty(wl.index.num_nodes)
    in_service_spend(mu, state.service_action, state.service_residual, spend)
    assert np.all(spend[~busy] == 0.0)
    assert np.allclose(spend[busy], np.minimum(mu[busy], state.service_residual[busy]))
    assert np.allclose(compute_left(wl, state), mu - spend)
    assert np.all(compute_left(wl, state) >= 0)


def test_holders_after__a_transfer_moves_the_object_and_changes_only_its_hit_bits():
    wl = make_workload("mixed")
    ix = wl.index
    sim = Simulator(wl)
    sim.reset(1)
    holder = sim.state.holder
    # A transfer candidate whose source holds its object and whose destination does not.
    src = ix.link_src[ix.transfer_link]
    dst = ix.link_dst[ix.transfer_link]
    sig = ix.transfer_signature
    ready = np.flatnonzero((holder[src, sig] >= 0) & (holder[dst, sig] < 0))
    if not ready.size:  # the initial memory of mixed leaves nothing to move: place one
        holder = holder.copy()
        holder[src[0], sig[0]] = 0
        ready = np.array([0])
    k = int(ready[0])
    moved = holders_after(wl, holder, np.array([k]))
    assert moved is not holder
    assert moved[dst[k], sig[k]] == holder[src[k], sig[k]] and moved[src[k], sig[k]] == -1
    assert holders_after(wl, holder, np.array([], dtype=np.int64)) is holder
    # The hit bits after the transfer are those of the moved memory, and only the actions
    # of its signature at its two ends change.
    after, before = hit_bits(wl, holder, True, [k]), hit_bits(wl, holder, True)
    assert np.array_equal(after, hit_bits(wl, moved, True))
    ends = (ix.action_signature == sig[k]) & np.isin(ix.action_node, [src[k], dst[k]])
    assert np.array_equal(after[~ends], before[~ends]) and (after[ends] != before[ends]).any()
    assert not hit_bits(wl, holder, False, [k]).any()


def test_hit_bits__a_holder_of_any_layout_gives_the_same_bits():
    # The rule reads the memory by raveled position; a Fortran-ordered or strided holder
    # (a caller's own array) is read as the same memory.
    wl = make_workload("mixed")
    sim = Simulator(wl)
    sim.reset(seed=0)
    for _ in range(30):
        sim.step_scores(np.ones(wl.index.num_scores))
    holder = sim.state.holder
    expected = hit_bits(wl, holder, True)
    assert expected.sum() > 0  # some actions are memory-assisted here
    strided = np.repeat(holder, 2, axis=1)[:, ::2]
    for other in (np.asfortranarray(holder), strided):
        np.testing.assert_array_equal(hit_bits(wl, other, True), expected)
