"""The fleet Gymnasium id: check_env, determinism, pickling, vector stepping, rewards."""

from __future__ import annotations

import pickle

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import mabp_gym

KWARGS = {"num_requests": 120, "load": 0.9}


def make(**kwargs):
    return gymnasium.make(mabp_gym.FLEET_ENV_ID, **{**KWARGS, **kwargs})


def rollout(env, seed, policy=None):
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    done, info = False, {}
    while not done:
        action = policy(obs) if policy else env.action_space.sample()
        obs, reward, done, truncated, info = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        assert not truncated
    return np.array(observations), np.array(rewards), info


def test_fleet_env__passes_check_env():
    check_env(make().unwrapped, skip_render_check=True)


def test_fleet_env__same_seed_same_rollout_and_other_seed_differs():
    env = make()
    env.action_space.seed(0)
    obs_a, rew_a, _ = rollout(env, 11)
    env.action_space.seed(0)
    obs_b, rew_b, _ = rollout(env, 11)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(rew_a, rew_b)
    env.action_space.seed(0)
    obs_c, _, _ = rollout(env, 12)
    assert obs_c.shape != obs_a.shape or not np.array_equal(obs_a, obs_c)


def test_fleet_env__return_is_slo_goodput_count_minus_drops():
    env = make(num_workers=2, max_waiting=3)
    _, rewards, info = rollout(env, 0, policy=lambda obs: 0)  # everything on one worker
    sim = env.unwrapped.sim
    good = sum(
        1 for ttft, _, tpot, down, _ in sim.records if not down and ttft <= 2.0 and tpot <= 0.1
    )
    assert sim.dropped > 0
    assert rewards.sum() == pytest.approx(good - sim.dropped)
    assert info["metrics"]["drop_rate"] == pytest.approx(sim.dropped / sim.arrived)


def test_fleet_env__pickles_and_steps_in_a_vector_env():
    env = make()
    env.reset(seed=1)
    clone = pickle.loads(pickle.dumps(env))
    a = env.step(1)
    b = clone.step(1)
    np.testing.assert_array_equal(a[0], b[0])
    vec = gymnasium.vector.SyncVectorEnv([lambda: make() for _ in range(2)])
    obs, _ = vec.reset(seed=[0, 1])
    obs, reward, *_ = vec.step(np.array([0, 3]))
    assert obs.shape == (2, 4 * 6 + 4) and reward.shape == (2,)


def test_fleet_env__a_router_drives_it_through_the_observation():
    # The cached-fraction features let a greedy reuse rule beat always-worker-0.
    env = make()

    def reuse(obs):
        workers = obs[:24].reshape(4, 6)
        return int(np.argmax(workers[:, 4] - workers[:, 0]))  # cached fraction - load

    _, rewards_reuse, _ = rollout(env, 3, policy=reuse)
    _, rewards_zero, _ = rollout(env, 3, policy=lambda obs: 0)
    assert rewards_reuse.sum() > rewards_zero.sum()


def test_fleet_env__rejects_bad_actions_and_arguments():
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"worker index in \[0, 4\)"):
        env.step(9)
    with pytest.raises(TypeError, match="unexpected keyword argument 'workerz'"):
        make(workerz=2)  # as Python raises for any unknown argument (the env's docs)
    with pytest.raises(ValueError, match="num_requests must be"):
        make(num_requests=1)


def test_fleet_env__stable_baselines3_ppo_trains_a_few_hundred_steps():
    import torch
    from stable_baselines3 import PPO

    env = make(num_requests=80)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=192)
    assert model.num_timesteps >= 192
    after = list(model.policy.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, after, strict=True))
    action, _ = model.predict(env.observation_space.sample(), deterministic=True)
    assert env.action_space.contains(int(action))


def test_fleet_env__arguments_are_checked_as_a_user_expects(tmp_path):
    import json

    import gymnasium as gym
    import numpy as np
    import pytest

    from mabp_gym.fleet import shipped_trace

    with pytest.raises(TypeError, match="unexpected keyword argument 'workerz'"):
        gym.make("mabp_gym/Fleet-v0", workerz=4)
    with pytest.raises(ValueError, match="load must be a number > 0"):
        gym.make("mabp_gym/Fleet-v0", load=(0.2, 0.9))
    for fleet in ("mabp_gym/Fleet-v0", "mabp_gym/Fleet-v1"):  # its imaginary part was dropped
        with pytest.raises(ValueError, match="load must be a number > 0"):
            gym.make(fleet, load=np.complex128(0.5 + 1j))
    with pytest.raises(ValueError, match="trace must be a shipped trace name"):
        gym.make("mabp_gym/Fleet-v0", trace=3)
    # numpy counts are counts; a Trace object is a trace.
    env = gym.make(
        "mabp_gym/Fleet-v0",
        num_requests=np.int64(30),
        num_workers=np.int64(3),
        trace=shipped_trace("synthetic"),
    )
    env.reset(seed=0)
    assert env.unwrapped.config.num_workers == 3 and len(env.unwrapped.trace) == 30
    with pytest.raises(ValueError, match="worker index"):
        env.step(True)
    env.step(np.int64(1))
    # A trace file is read afresh: a rewritten file is replayed as it is now.
    path = tmp_path / "t.jsonl"

    def write(tokens: int) -> None:
        lines = [
            {"timestamp": 100 * k, "input_length": tokens, "output_length": 4, "hash_ids": [k]}
            for k in range(5)
        ]
        path.write_text("\n".join(json.dumps(x) for x in lines))

    write(600)
    first = gym.make("mabp_gym/Fleet-v0", trace=str(path), num_requests=None)
    write(900)
    second = gym.make("mabp_gym/Fleet-v0", trace=str(path), num_requests=None)
    assert first.unwrapped.trace.requests[0].input_length == 600
    assert second.unwrapped.trace.requests[0].input_length == 900


# -- Fleet-v1: each request's reward credited to its routing step ------------------------
def make_v1(**kwargs):
    return gymnasium.make(mabp_gym.FLEET_ROUTER_ENV_ID, **{**KWARGS, **kwargs})


@pytest.mark.parametrize("engine", ["simple", "step"])
def test_fleet_v1__passes_check_env_and_stays_in_the_unit_box(engine):
    env = make_v1(engine=engine, trace="conversation")
    check_env(env.unwrapped, skip_render_check=True)
    observations, _, _ = rollout(env, 3)
    assert observations.min() >= 0.0 and observations.max() <= 1.0
    assert env.observation_space.shape == (4 * 5 + 4,)


@pytest.mark.parametrize("engine", ["simple", "step"])
def test_fleet_v1__every_request_is_credited_once_to_the_step_that_routed_it(engine):
    env = make_v1(engine=engine, num_workers=2, max_waiting=3)
    obs, _ = env.reset(seed=0)
    credited: dict[int, float] = {}
    routed_rid, total, done, step = {}, 0.0, False, 0
    while not done:
        routed_rid[step] = env.unwrapped._request.rid
        obs, reward, done, _, info = env.step(0)  # one worker: long queues and drops
        assert info["step"] == step
        for at, value in info["credit"]:
            assert at <= step and at not in credited and -1.0 <= value <= 0.0
            credited[at] = value
        assert reward == pytest.approx(sum(v for _, v in info["credit"]))
        total += reward
        step += 1
    sim = env.unwrapped.sim
    assert sorted(credited) == list(range(step))  # every routing step, once
    assert sum(v == -1.0 for v in credited.values()) >= sim.dropped > 0
    assert total == pytest.approx(sum(credited.values()))
    # A credit is the TTFT of the request routed at that step: check one against the records.
    ttft = {rid: t for t, _, _, _, rid in sim.records}
    slo = env.unwrapped.config.slo_ttft_s
    some = next(at for at, v in credited.items() if v > -1.0 and routed_rid[at] in ttft)
    expected = -min(ttft[routed_rid[some]] / slo, 4.0) / 4.0
    assert credited[some] == pytest.approx(expected)


def test_fleet_v1__reads_no_exact_engine_state(monkeypatch):
    from mabp_gym.fleet.simulator import ExactState

    def oracle_only(*args, **kwargs):
        raise AssertionError("Fleet-v1 read the exact engine state")

    for method in ("prefill_backlog_s", "kv_used_fraction", "cached_blocks", "tool_cached"):
        monkeypatch.setattr(ExactState, method, oracle_only)
    rollout(make_v1(engine="step"), 1)
    # The control: Fleet-v0's observation does read it.
    with pytest.raises(AssertionError, match="exact engine state"):
        make(engine="step").reset(seed=0)


def test_fleet_v1__refuses_an_unknown_engine():
    with pytest.raises(ValueError, match="engine must be one of"):
        make_v1(engine="vidur")


def test_fleet_env__edge_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="max_waiting must be > 0"):
        make(max_waiting=0)
    with pytest.raises(ValueError, match="num_requests must be at most the trace's"):
        make(num_requests=10**7)
    with pytest.raises(ValueError, match=r"num_requests\)"):
        make(num_requests=2)
    env = make_v1()
    with pytest.raises(ValueError, match="options are not supported"):
        env.reset(options={"x": 1})


def test_fleet_env__spread_bursts_spreads_the_conversation_traces_equal_times():
    literal = make_v1(trace="conversation", num_requests=100, load=None).unwrapped
    spread = make_v1(trace="conversation", num_requests=100, load=None, spread_bursts=True)
    times, original = spread.unwrapped.trace.timestamps_s(), literal.trace.timestamps_s()
    assert (np.diff(original) == 0).mean() > 0.5
    last_run = int((original == original[-1]).sum())  # nothing to spread it up to: kept
    assert (np.diff(times)[: -(last_run - 1)] > 0).all()
    rollout(spread, 0)
    with pytest.raises(ValueError, match="spread_bursts must be True or False"):
        make_v1(spread_bursts="yes")


def test_fleet_router_env__a_refused_reset_changes_nothing():
    # The router-side bookkeeping was cleared before the options were refused: the next
    # step raised a bare KeyError.
    env = gymnasium.make("mabp_gym/Fleet-v1", num_requests=50)
    env.reset(seed=0)
    for _ in range(10):
        env.step(0)
    with pytest.raises(ValueError, match="options are not supported"):
        env.reset(options={"x": 1})
    for _ in range(5):
        env.step(1)
    # A refused seed too: it is checked after the bookkeeping was cleared (KeyError: 0).
    with pytest.raises(gymnasium.error.Error, match="Seed must be"):
        env.reset(seed=-1)
    for _ in range(5):
        env.step(1)


def test_fleet_env__a_trace_path_is_read(tmp_path):
    from pathlib import Path

    from mabp_gym.fleet import load_trace, write_mooncake

    path = tmp_path / "t.jsonl"
    write_mooncake(load_trace("synthetic", 30), path)
    env = gymnasium.make("mabp_gym/Fleet-v1", trace=Path(path), num_requests=None, load=None)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
