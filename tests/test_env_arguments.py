"""The env's constructor and step refuse what Python or numpy would silently reinterpret."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mabp_gym
from mabp_gym.env import SFMSNEnv


@pytest.mark.parametrize("keyword", ["frameskip", "frame_skip", "from_pixels"])
def test_env__an_unknown_keyword_is_a_type_error_like_python_s(keyword):
    # TorchRL's GymEnv tries gym.make(id, frameskip=...) and falls back on this TypeError.
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        gym.make("mabp_gym/Mixed-v0", **{keyword: 1})
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        SFMSNEnv(mabp_gym.make_workload("work_reuse"), **{keyword: 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(nu="5"), "nu: must be a number, got '5'"),
        (dict(nu=1 + 0j), "nu: must be a number"),
        (dict(nu=-1.0), "nu: must be >= 0"),
        (dict(reward_scale=0), "reward_scale: must be > 0"),
        (dict(reward_scale=np.array([1.0, 2.0])), "reward_scale: must be a number"),
        (dict(memory="no"), "memory must be True or False, got 'no'"),
        (dict(memory=0), "memory must be True or False, got 0"),
        (dict(check_invariants="yes"), "check_invariants must be True or False"),
        (dict(load="0.5"), "load must be a number"),
        (dict(reward=["backlog"]), "reward must be one of"),
    ],
)
def test_env__bad_argument_values_raise_clear_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("mabp_gym/Mixed-v0", **kwargs)


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (np.ones(384) * (1 + 1j), "real-valued scores"),
        (np.ma.masked_array(np.ones(384), mask=np.arange(384) < 10), "masked array"),
        (["1"] * 384, "real-valued scores"),
        (np.ones(384, dtype=object), "real-valued scores"),
        (np.ones(384, dtype=bool), "real-valued scores"),
    ],
)
def test_env__actions_numpy_would_reinterpret_are_refused(action, message):
    env = gym.make("mabp_gym/Mixed-v0")
    env.reset(seed=0)
    before = env.unwrapped.sim.state.t
    with pytest.raises(ValueError, match=message):
        env.step(action)
    assert env.unwrapped.sim.state.t == before  # nothing happened
    env.step(np.ones(384, dtype=np.float32))  # the env is still usable
