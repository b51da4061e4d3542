"""The env's constructor and step refuse what Python or numpy would silently reinterpret."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mabp_gym
from mabp_gym.envs.env import SFMSNEnv


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
        (dict(load=np.array(0.5)), r"load must be a number .*got array\(0.5\)"),  # TypeError
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


# -- a reward of your own (injectable, as in Jumanji) ---------------------------
def test_reward_function__reproduces_the_builtins_and_is_checked():
    def backlog(outcome, before, after, nu):
        return -(outcome.backlog + nu * outcome.penalty)

    def drift(outcome, before, after, nu):
        lyapunov = 0.5 * float(after @ after) - 0.5 * float(before @ before)
        return -(lyapunov + nu * outcome.penalty)

    rng = np.random.default_rng(0)
    for builtin, own in (("backlog", backlog), ("drift_plus_penalty", drift)):
        a = gym.make("mabp_gym/Rag-v0", reward=builtin)
        b = gym.make("mabp_gym/Rag-v0", reward=own)
        a.reset(seed=1)
        b.reset(seed=1)
        for _ in range(30):
            action = rng.uniform(-1, 1, a.action_space.shape)
            assert a.step(action)[1] == pytest.approx(b.step(action)[1], rel=1e-12)
    env = gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a, nu: float("nan"))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="rewards must be finite"):
        env.step(env.action_space.sample())
    env = gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a, nu: "high")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="must return a real number"):
        env.step(env.action_space.sample())
    with pytest.raises(ValueError, match="or a function"):
        gym.make("mabp_gym/Rag-v0", reward=3)


@pytest.mark.parametrize(
    ("value", "reward"),
    [(np.array(1.5), 1.5), (np.float32(2.0), 2.0), (np.int64(3), 3.0), (4, 4.0)],
)
def test_reward_function__numpy_scalars_and_0d_arrays_are_numbers(value, reward):
    """What a numpy or torch reward computation returns is one real number, taken as such;
    a 1-element array, a bool or a complex number is not."""
    env = gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a, nu: value, reward_scale=1.0)
    env.reset(seed=0)
    assert env.step(env.action_space.sample())[1] == reward
    for bad in (np.array([1.0]), np.array(True), 1j):
        env = gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a, nu, bad=bad: bad)
        env.reset(seed=0)
        with pytest.raises(ValueError, match="must return a real number"):
            env.step(env.action_space.sample())


def test_reward_function__a_torch_scalar_is_a_number():
    torch = pytest.importorskip("torch", reason="a torch reward needs torch (extra learn)")
    env = gym.make(
        "mabp_gym/Rag-v0", reward=lambda o, b, a, nu: torch.tensor(2.5), reward_scale=1.0
    )
    env.reset(seed=0)
    assert env.step(env.action_space.sample())[1] == 2.5


def test_reward_function__vector_env_steps_each_env_on_its_own():
    from mabp_gym.envs.vector_env import SFMSNVectorEnv

    def served(outcome, before, after, nu):
        return float(outcome.served)

    vec = SFMSNVectorEnv(2, workload="rag", reward=served)
    assert not vec.compiled
    vec.reset(seed=0)
    single = gym.make("mabp_gym/Rag-v0", reward=served)
    single.reset(seed=0)
    action = np.full((2, vec.single_action_space.shape[0]), 0.5)
    assert vec.step(action)[1][0] == single.step(action[0])[1]


def test_reward_function__the_parallel_view_refuses_it():
    pytest.importorskip("pettingzoo", reason="the decentralized view needs PettingZoo (extra marl)")
    from mabp_gym.envs.parallel import parallel_env

    with pytest.raises(ValueError, match="single env's"):
        parallel_env("rag", reward=lambda o, b, a, nu: 0.0)


def test_reward_function__signature_and_every_kind_of_bad_value_are_refused_clearly():
    from fractions import Fraction

    with pytest.raises(ValueError, match=r"must take \(outcome, before, after, nu\)"):
        gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a: 0.0)
    for value, match in (
        (np.complex128(1), "real number"),
        (np.timedelta64(1, "s"), "reward function"),  # numpy counts it an integer
        (10**400, "finite floats"),
    ):
        env = gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a, nu, v=value: v)
        env.reset(seed=0)
        with pytest.raises(ValueError, match=match):
            env.step(env.action_space.sample())
    env = gym.make("mabp_gym/Rag-v0", reward=lambda o, b, a, nu: Fraction(1, 2))
    env.reset(seed=0)
    assert env.step(env.action_space.sample())[1] == pytest.approx(0.5 / 100)


def test_env__a_workload_objects_load_interval_is_checked_at_construction():
    # By name the high end was refused at once; on a Workload object only some seeds'
    # reset drew a load above 10 and failed.
    wl = mabp_gym.make_workload("rag")
    for make in (
        lambda: gym.make("mabp_gym/SFMSN-v0", workload=wl, load=(0.3, 50.0)),
        lambda: gym.make_vec("mabp_gym/SFMSN-v0", num_envs=2, workload=wl, load=(0.3, 50.0)),
    ):
        with pytest.raises(ValueError, match=r"load interval \(0.3, 50.0\), high end"):
            make()
    env = gym.make("mabp_gym/SFMSN-v0", workload=wl, load=(0.3, 1.5))
    for seed in range(4):
        env.reset(seed=seed)


def test_env__the_envs_memory_switch_says_where_multihops_memory_parameter_goes():
    with pytest.raises(ValueError, match=r"workload=make_workload\('multihop', memory=...\)"):
        gym.make("mabp_gym/SFMSN-v0", workload="multihop", memory=0)


def test_env__a_refused_reset_changes_nothing():
    # The options check came after the reseed: the refused reset(seed=123, ...) reseeded the
    # env, so the next reset() drew another load and another episode.
    def episode(env):
        obs, info = env.reset()
        rewards = [env.step(np.ones(env.action_space.shape))[1] for _ in range(3)]
        return info["load"], rewards, obs["queues"].tolist()

    untouched = SFMSNEnv("mixed", load=(0.2, 0.9))
    untouched.reset(seed=0)
    refused = SFMSNEnv("mixed", load=(0.2, 0.9))
    refused.reset(seed=0)
    with pytest.raises(ValueError, match="options are not supported"):
        refused.reset(seed=123, options={"typo": 1})
    assert episode(refused) == episode(untouched)


def test_env__a_workload_file_given_as_a_path_and_a_workload_objects_keyword():
    from pathlib import Path

    from mabp_gym.agents import make_policy

    path = Path(mabp_gym.__file__).parent / "examples" / "multihop14.json"  # was refused
    assert SFMSNEnv(path).workload.name == SFMSNEnv(str(path)).workload.name == "multihop14"
    assert make_policy("mabp", path).workload.name == "multihop14"
    records = mabp_gym.evaluate("bp", path, [0.3], [0], horizon=30, progress=False)
    assert records[0]["workload"] == "multihop14"
    # horizon is a parameter of agentic, not of a Workload object (which the message said).
    with pytest.raises(TypeError, match=r"a Workload object takes only load=.*make_workload"):
        SFMSNEnv(mabp_gym.make_workload("agentic"), horizon=50)
