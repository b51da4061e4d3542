"""The one episode loop (mabp_gym.rollout.episode) and the Policy protocol."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym import InfeasibleControlError, Simulator, make_policy, make_workload
from mabp_gym.core.control import Control
from mabp_gym.core.scores import queue_length_scores
from mabp_gym.policy import Policy, ScoreFunction
from mabp_gym.rollout import episode, rollout


def test_policy_protocol__every_builtin_and_a_score_function_follow_it():
    wl = make_workload("mixed")
    for name in ("bp", "mabp", "oracle-sur", "frame-mabp"):
        assert isinstance(make_policy(name, wl), Policy)
    assert isinstance(ScoreFunction(queue_length_scores, wl), Policy)


def test_episode__checked_and_unchecked_paths_give_the_same_slots():
    wl = make_workload("mixed", load=0.6)
    outcomes = []
    for check in (True, False):
        sim = Simulator(wl)
        sim.reset(4)
        policy = make_policy("mabp", wl)
        policy.reset(4)
        outcomes.append([s.outcome.backlog for s in episode(sim, policy, 60, check=check)])
    assert outcomes[0] == outcomes[1] and max(outcomes[0]) > 0


def test_episode__a_score_function_is_not_encoded_for():
    wl = make_workload("work_reuse")
    sim = Simulator(wl)
    sim.reset(0)
    slots = list(episode(sim, ScoreFunction(queue_length_scores, wl), 5))
    assert len(slots) == 5 and all(s.obs is None for s in slots)
    assert all(s.decision_s >= 0 for s in slots)


def test_episode__a_policys_own_control_is_checked_before_it_runs():
    wl = make_workload("work_reuse", load=2.0)

    class Greedy:
        name, observes = "greedy", False

        def reset(self, seed=None):
            pass

        def act(self, obs, state):  # serves far more than the node's compute
            ix = wl.index
            service = np.full(ix.num_actions, 10**6, dtype=np.int64)
            return Control(
                transfers=np.zeros(ix.num_transfers, dtype=np.int64),
                route=np.zeros(ix.num_routes, dtype=np.int64),
                service=service,
                start=np.full(ix.num_nodes, -1, dtype=np.int64),
                retain=np.zeros(ix.num_retains),
            )

    sim = Simulator(wl)
    sim.reset(0)
    with pytest.raises(InfeasibleControlError):
        list(episode(sim, Greedy(), 3, check=False))


def test_rollout__matches_the_episode_of_its_score_rule():
    wl = make_workload("successor", load=0.7)
    trace = rollout(wl, queue_length_scores, 2, horizon=40)
    sim = Simulator(wl, check_invariants=True)
    sim.reset(2)
    backlog = [
        s.outcome.backlog
        for s in episode(sim, ScoreFunction(queue_length_scores, wl), 40, check=False)
    ]
    assert list(trace.backlog) == backlog


@pytest.mark.parametrize(
    ("horizon", "message"),
    [
        (-3, "must be >= 1"),
        (0, "must be >= 1"),
        (2.5, "must be an integer"),
        (True, "must be a number"),
    ],
)
def test_rollout__a_horizon_that_is_not_a_positive_integer_is_refused(horizon, message):
    # A negative horizon used to run no slot and return an empty trace.
    wl = make_workload("successor")
    with pytest.raises(ValueError, match=f"rollout: horizon: {message}"):
        rollout(wl, queue_length_scores, 0, horizon=horizon)
    sim = Simulator(wl)
    sim.reset(0)
    with pytest.raises(ValueError, match="episode: slots: must be >= 0"):
        list(episode(sim, ScoreFunction(queue_length_scores, wl), -1))


@pytest.mark.parametrize("dtype", [bool, complex, str, object])
def test_project__scores_numpy_would_reinterpret_are_refused(dtype):
    # np.asarray(..., float64) reads "1" as 1.0, True as 1.0 and drops an imaginary part.
    from mabp_gym import project

    wl = make_workload("mixed")
    sim = Simulator(wl)
    sim.reset(0)
    scores = np.ones(wl.index.num_scores).astype(dtype)
    with pytest.raises(ValueError, match="scores must be real-valued scores"):
        project(wl, sim.state, scores)
    with pytest.raises(ValueError, match="scores must be real-valued scores"):
        sim.step_scores(scores)
    assert sim.state.t == 0
    masked = np.ma.masked_array(np.ones(wl.index.num_scores), mask=True)
    with pytest.raises(ValueError, match="masked array"):
        project(wl, sim.state, masked)
