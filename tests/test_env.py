"""The Gymnasium environment: every registered id, determinism, pickling, vector envs,
bad actions, rewards, rendering, the PyG conversion and the stable-baselines3 adapter."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import mabp_gym

ALL_IDS = ["mabp_gym/SFMSN-v0", *mabp_gym.ENV_IDS.values()]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Box observation space (min|max)imum.*")
        yield


def rollout(env: gym.Env, seed: int, steps: int) -> list:
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    rows = [obs]
    for _ in range(steps):
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        rows.append((obs, reward, terminated, truncated, info["delays"], info["backlog"]))
    return rows


def same(a, b) -> bool:
    from gymnasium.utils.env_checker import data_equivalence

    return data_equivalence(a, b)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_env__check_env_passes(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=False)
    assert env.spec.max_episode_steps is None  # the env's horizon decides truncation alone


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_env__same_seed_same_rollout(env_id):
    a = rollout(gym.make(env_id, diagnostics=True), seed=3, steps=30)
    b = rollout(gym.make(env_id, diagnostics=True), seed=3, steps=30)
    assert same(a, b)


def test_env__different_seeds_differ():
    a = rollout(gym.make("mabp_gym/Mixed-v0", diagnostics=True), seed=1, steps=30)
    b = rollout(gym.make("mabp_gym/Mixed-v0", diagnostics=True), seed=2, steps=30)
    assert not same(a, b)


@pytest.mark.parametrize("env_id", ["mabp_gym/Mixed-v0", "mabp_gym/Successor-v0"])
def test_env__pickles_mid_episode_and_continues_identically(env_id):
    env = gym.make(env_id)
    env.reset(seed=11)
    rng = np.random.default_rng(0)
    for _ in range(25):
        env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
    clone = pickle.loads(pickle.dumps(env))
    for _ in range(25):
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        assert same(env.step(action), clone.step(action))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_env__make_vec_steps(mode):
    envs = gym.make_vec(
        "mabp_gym/Mixed-v0", num_envs=2, vectorization_mode=mode, load=0.5, diagnostics=True
    )
    try:
        obs, info = envs.reset(seed=[0, 1])
        envs.action_space.seed(0)
        assert obs["queues"].shape == (2, 8, 64)
        for _ in range(20):
            actions = envs.action_space.sample()
            obs, reward, terminated, truncated, info = envs.step(actions)
        assert reward.shape == (2,) and not terminated.any()
        assert info["control"]["route"].shape[0] == 2
        assert info["control"]["transfers"].shape == (2, 48)
        assert obs["action_mask"].shape == (2, envs.single_action_space.shape[0])
    finally:
        envs.close()


def test_env__truncates_at_horizon_and_never_terminates():
    env = gym.make("mabp_gym/WorkReuse-v0", horizon=7)  # no TimeLimit: the env's own rule
    env.reset(seed=0)
    flags = [env.step(env.action_space.sample())[2:4] for _ in range(7)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])


@pytest.mark.parametrize(("horizon", "expected"), [(5, 5), (650, 650)])
def test_env__the_horizon_alone_decides_truncation(horizon, expected):
    """A horizon past the default is not cut at 600 by a registered TimeLimit."""
    env = gym.make("mabp_gym/Boundary-v0", horizon=horizon)
    env.reset(seed=0)
    action = np.zeros(env.action_space.shape, dtype=np.float32)
    steps, truncated = 0, False
    while not truncated:
        *_, truncated, _ = env.step(action)
        steps += 1
    assert steps == expected
    assert env.unwrapped.sim.state.t == expected


@pytest.mark.parametrize(
    "bad", [np.zeros(3), np.full(384, np.nan), np.full(384, np.inf), np.zeros((384, 1))]
)
def test_env__bad_actions_raise_value_error_with_expected_shape(bad):
    env = gym.make("mabp_gym/Mixed-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"\(384,\)"):
        env.step(bad)


def test_env__all_negative_scores_are_a_legal_idle_action():
    env = gym.make("mabp_gym/Mixed-v0", load=0.5, diagnostics=True)
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, _, info = env.step(-np.ones(384, dtype=np.float32))
        assert info["served"] == 0 and info["routed"] == 0
        assert not info["control"]["service"].any()
    # Scores outside [-1, 1] are fine: only order and sign matter.
    env.step(np.linspace(-50, 50, 384))


def test_env__rewards_follow_spec_3_3():
    nu, scale = 5.0, 100.0
    env = gym.make("mabp_gym/Mixed-v0", load=0.6, nu=nu, reward_scale=scale, diagnostics=True)
    env.reset(seed=0)
    for _ in range(10):
        _, reward, _, _, info = env.step(env.action_space.sample())
        assert reward == pytest.approx(-(info["backlog"] + nu * info["penalty"]) / scale)
    env = gym.make(
        "mabp_gym/Mixed-v0",
        load=0.6,
        nu=nu,
        reward="drift_plus_penalty",
        reward_scale=1.0,
        diagnostics=True,
    )
    obs, _ = env.reset(seed=0)
    for _ in range(10):
        before = 0.5 * float((obs["queues"].astype(np.float64) ** 2).sum())
        obs, reward, _, _, info = env.step(env.action_space.sample())
        after = 0.5 * float((obs["queues"].astype(np.float64) ** 2).sum())
        assert reward == pytest.approx(-(after - before + nu * info["penalty"]))
    with pytest.raises(ValueError, match="reward must be one of"):
        gym.make("mabp_gym/Mixed-v0", reward="throughput")


def test_env__parameters_pass_through_make():
    env = gym.make("mabp_gym/SFMSN-v0", workload="successor", load=0.7, mu_u=3.0)
    wl = env.unwrapped.workload
    assert wl.name == "successor" and wl.load == 0.7 and wl.index.mu[0] == 3.0
    # An unknown keyword is a TypeError, as Python raises for any unknown argument.
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'mu_x'"):
        gym.make("mabp_gym/Successor-v0", mu_x=1.0)
    env = gym.make("mabp_gym/Mixed-v0", memory=False)
    env.reset(seed=0)
    for _ in range(20):
        obs, *_ = env.step(np.ones(384, dtype=np.float32))
    assert obs["memory"].sum() == 0 and obs["service"][:, 2].sum() == 0


def test_env__observation_matches_state_and_mask_marks_live_candidates():
    env = gym.make("mabp_gym/Mixed-v0", load=0.8)
    env.reset(seed=0)
    for _ in range(30):
        obs, *_ = env.step(env.action_space.sample())
    sim = env.unwrapped.sim
    wl = env.unwrapped.workload
    ix = wl.index
    assert np.array_equal(obs["queues"], sim.state.backlog_matrix(wl))
    assert np.array_equal(obs["memory"], sim.state.holder >= 0)
    hit = obs["service"][:, 2].astype(bool)
    assert np.array_equal(obs["service"][:, 0], np.where(hit, ix.work[1], ix.work[0]))
    law = ix.successor_law[hit.astype(int), np.arange(ix.num_actions), :-1]
    pressure = (law * sim.state.backlog_matrix(wl)[ix.action_node]).sum(axis=1)
    assert np.allclose(obs["service"][:, 3], pressure, rtol=1e-5)
    compatible = np.zeros((ix.num_retains, ix.num_commodities))
    for a in np.flatnonzero(ix.action_signature >= 0):
        compatible[
            ix.retain_of[ix.action_node[a], ix.action_signature[a]], ix.action_commodity[a]
        ] = 1
    demand = (compatible * sim.state.backlog_matrix(wl)[ix.retain_node]).sum(axis=1)
    assert np.allclose(obs["retain"][:, 2], demand) and demand.sum() > 0
    mask = obs["action_mask"].astype(bool)
    state = sim.state
    # A service candidate is live when its queue holds a unit and its node has compute
    # left after the unit in service (if any); a route when its source queue holds one;
    # every retention candidate is live.
    busy = state.service_action[ix.action_node] >= 0
    taken = np.where(
        busy, np.minimum(ix.mu[ix.action_node], state.service_residual[ix.action_node]), 0.0
    )
    service_live = (state.queue_len[ix.action_pair] > 0) & (ix.mu[ix.action_node] - taken > 1e-9)
    route_live = state.queue_len[ix.route_src_pair] > 0
    assert np.array_equal(mask[ix.score_slices[0]], service_live) and service_live.any()
    assert (~service_live).any()
    assert np.array_equal(mask[ix.score_slices[1]], route_live) and route_live.any()
    assert (~route_live).any()
    assert mask[ix.score_slices[3]].all()


def test_env__render_ansi():
    env = gym.make("mabp_gym/Mixed-v0", render_mode="ansi")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    text = env.render()
    assert "gen0" in text and "slot 1" in text


def test_env__step_info_is_empty_by_default_and_names_the_option_for_diagnostics():
    env = gym.make("mabp_gym/Mixed-v0", load=0.5)
    _, reset_info = env.reset(seed=0)
    assert reset_info == {}
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info == {}
    with pytest.raises(KeyError, match="diagnostics=True"):
        info["backlog"]
    with pytest.raises(KeyError) as error:
        info["no such key"]
    assert "diagnostics" not in str(error.value)
    full = gym.make("mabp_gym/Mixed-v0", load=0.5, diagnostics=True)
    _, reset_info = full.reset(seed=0)
    assert set(reset_info) == {"action_mask"}
    _, _, _, _, info = full.step(full.action_space.sample())
    assert tuple(info) == mabp_gym.envs.env.DIAGNOSTIC_KEYS
    with pytest.raises(ValueError, match="diagnostics must be True or False"):
        gym.make("mabp_gym/Mixed-v0", diagnostics="yes")


def test_env__diagnostics_do_not_change_the_episode():
    slim, full = (gym.make("mabp_gym/Mixed-v0", load=0.7, diagnostics=d) for d in (False, True))
    obs_s, _ = slim.reset(seed=4)
    obs_f, _ = full.reset(seed=4)
    rng = np.random.default_rng(4)
    for _ in range(40):
        action = rng.uniform(-1, 1, slim.action_space.shape).astype(np.float32)
        obs_s, reward_s, _, _, _ = slim.step(action)
        obs_f, reward_f, _, _, _ = full.step(action)
        assert reward_s == reward_f
        for key in obs_s:
            assert np.array_equal(obs_s[key], obs_f[key]), key


@pytest.mark.parametrize(
    "between",
    [
        "",
        # TorchRL runs this at import: it must not use up the hook that registers the ids
        # (they were then never registered, and gym.make raised NamespaceNotFound).
        "import importlib.util; importlib.util.find_spec('gymnasium')",
    ],
)
def test_env_ids__registered_when_gymnasium_is_imported_after_mabp_gym(between):
    import subprocess
    import sys

    code = (
        f"import mabp_gym\n{between}\nimport gymnasium as gym\n"
        "assert 'mabp_gym/SFMSN-v0' in gym.registry\n"
        "gym.make('mabp_gym/Mixed-v0').close()\n"
        "import sys; assert not [f for f in sys.meta_path if 'mabp_gym' in type(f).__module__]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_env_ids__one_per_built_in_workload():
    # multihop, the generated network, had none ("one id per workload", the README says).
    assert set(mabp_gym.ENV_IDS) == set(mabp_gym.WORKLOADS)
    env = gym.make("mabp_gym/Multihop-v0", nodes=20)
    assert len(env.unwrapped.workload.nodes) == 20


# -- the training step: one compiled call, the same slots as the outcome path -------------


def _fused_against_outcome_path(steps: int, seed: int = 5, **kwargs) -> None:
    """An env without diagnostics (the fused step: projection, transition and encoding in
    one compiled call, no SlotOutcome) against one with them (the simulator's outcome
    path, held to the golden digests), the same random scores, through truncations."""
    from mabp_gym.core.kernels import jit
    from mabp_gym.envs.env import SFMSNEnv

    fused, outcome = SFMSNEnv(**kwargs), SFMSNEnv(diagnostics=True, **kwargs)
    fused.compile_after = 0  # the compiled step from the first step on, cached or not
    assert fused._fused_ok == jit.COMPILED and not outcome._lean
    rng = np.random.default_rng(seed)
    got_obs, _ = fused.reset(seed=seed)
    want_obs, _ = outcome.reset(seed=seed)
    for step in range(steps):
        if isinstance(want_obs, dict):
            for key, value in want_obs.items():
                np.testing.assert_array_equal(got_obs[key], value, err_msg=f"{step} {key}")
        else:
            np.testing.assert_array_equal(got_obs, want_obs, err_msg=str(step))
        action = rng.uniform(-1, 1, fused.action_space.shape).astype(np.float32)
        got_obs, got_reward, _, got_done, _ = fused.step(action)
        want_obs, want_reward, _, want_done, _ = outcome.step(action)
        assert (fused._fused is not None) == jit.COMPILED
        assert got_reward == want_reward and got_done == want_done, step
        if got_done:
            got_obs, _ = fused.reset()
            want_obs, _ = outcome.reset()


@pytest.mark.parametrize("workload", sorted(mabp_gym.WORKLOADS))
def test_env__the_training_step_gives_the_outcome_paths_slots(workload):
    _fused_against_outcome_path(70, workload=workload, load=0.85, horizon=30)


def test_env__the_training_step_with_flat_observations_drift_reward_and_load_interval():
    _fused_against_outcome_path(
        60,
        workload="rag",
        load=(0.5, 1.2),
        obs_mode="flat",
        reward="drift_plus_penalty",
        horizon=25,
    )


def test_env__the_training_step_grows_its_buffers_and_draws_generations_in_the_kernel():
    # Load 1.6 grows the queues past the first pool and unit rows; gen_prob 0.5 makes the
    # kernel draw the generations from the env's generator.
    _fused_against_outcome_path(300, workload="mixed", load=1.6, gen_prob=0.5, horizon=300)


def test_env__the_training_step_follows_a_simulator_reset_from_outside():
    from mabp_gym.envs.env import SFMSNEnv

    fused, outcome = SFMSNEnv(workload="agentic"), SFMSNEnv(workload="agentic", diagnostics=True)
    fused.compile_after = 0
    action = np.full(fused.action_space.shape, 0.5, dtype=np.float32)
    for env in (fused, outcome):
        env.reset(seed=1)
        env.step(action)
        env.sim.reset(9)  # a new state and generator behind the env's back
    for _ in range(5):
        got, want = fused.step(action), outcome.step(action)
        assert got[1] == want[1]
        for key, value in want[0].items():
            np.testing.assert_array_equal(got[0][key], value, err_msg=key)


def test_env__training_steps_wait_for_the_compiled_step_until_it_is_cached_or_due(monkeypatch):
    """A short run never compiles the single compiled step (15 s once per install): the
    kernels run one by one until ``compile_after`` steps of the process, or at once when
    numba's disk cache holds it."""
    from mabp_gym.envs import env as env_module
    from mabp_gym.envs.env import SFMSNEnv

    monkeypatch.setattr(env_module.WARMUP, "on_disk", False)
    monkeypatch.setattr(env_module.WARMUP, "calls", 0)
    env = SFMSNEnv(workload="mixed")
    reference = SFMSNEnv(workload="mixed", diagnostics=True)
    env.compile_after = 3
    for each in (env, reference):
        each.reset(seed=0)
    rng = np.random.default_rng(0)
    fused = []
    for _ in range(6):  # the same slots on both sides of the switch
        action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
        got, want = env.step(action), reference.step(action)
        fused.append(env._fused is not None)
        assert got[1] == want[1]
        np.testing.assert_array_equal(got[0]["queues"], want[0]["queues"])
    assert fused == [False, False, False, *[env._fused_ok] * 3]
    action = np.zeros(env.action_space.shape, dtype=np.float32)
    monkeypatch.setattr(env_module.WARMUP, "on_disk", True)
    other = SFMSNEnv(workload="mixed")
    other.reset(seed=0)
    other.step(action)
    assert (other._fused is not None) == other._fused_ok


def test_env__a_strided_action_is_the_same_action():
    from mabp_gym.envs.env import SFMSNEnv

    envs = [SFMSNEnv(workload="rag") for _ in range(2)]
    for env in envs:
        env.compile_after = 0
        env.reset(seed=3)
    wide = np.random.default_rng(0).uniform(-1, 1, (envs[0].action_space.shape[0], 2))
    got = envs[0].step(wide[:, 0])  # a strided view
    want = envs[1].step(wide[:, 0].copy())
    assert got[1] == want[1]
    np.testing.assert_array_equal(got[0]["queues"], want[0]["queues"])
