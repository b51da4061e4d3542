"""The documented per-candidate SB3 policy (mabp_gym.sb3.GraphActorCriticPolicy)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

import mabp_gym  # noqa: F401
from mabp_gym.sb3 import GraphActorCriticPolicy

MULTIHOP = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")
SHAPES = ["mixed", "rag", "agentic", MULTIHOP]


def _env(workload: str, horizon: int = 40, **kw) -> gym.Env:
    return gym.make(
        "mabp_gym/SFMSN-v0", workload=workload, horizon=horizon, max_episode_steps=horizon, **kw
    )


def _policy(env: gym.Env, seed: int = 0) -> GraphActorCriticPolicy:
    torch.manual_seed(seed)
    return GraphActorCriticPolicy(env.observation_space, env.action_space, lambda _: 3e-4)


def _means(policy: GraphActorCriticPolicy, obs: dict) -> torch.Tensor:
    tensors, _ = policy.obs_to_tensor(obs)
    with torch.no_grad():
        return policy.get_distribution(tensors).distribution.mean


@pytest.mark.parametrize("workload", ["mixed", MULTIHOP], ids=["mixed", "multihop14"])
def test_graph_policy__ppo_learns_a_few_hundred_steps(workload):
    torch.set_num_threads(1)
    envs = DummyVecEnv([lambda: _env(workload) for _ in range(2)])
    model = PPO(
        GraphActorCriticPolicy, envs, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu"
    )
    before = {k: p.detach().clone() for k, p in model.policy.named_parameters()}
    model.learn(256)
    assert model.num_timesteps >= 256
    changed = {k for k, p in model.policy.named_parameters() if not torch.equal(before[k], p)}
    # Message passing, the service and route read-outs, the value head and the log-std
    # all learn (multihop14 has no memory, so its transfer / retain heads get no input).
    for part in (
        "gnn.node_in",
        "gnn.convs",
        "gnn.service_head",
        "gnn.route_head",
        "value_net",
        "log_std",
    ):
        assert any(part in k for k in changed), f"{part} was not updated"
    actions, _ = model.predict(envs.reset(), deterministic=True)
    assert actions.shape == (2, envs.action_space.shape[0])


def test_graph_policy__one_state_dict_runs_on_every_workload_shape():
    reference_env = _env("mixed")
    state = _policy(reference_env).state_dict()
    assert state["log_std"].shape == (1,)
    sizes = set()
    for workload in SHAPES:
        env = _env(workload)
        policy = _policy(env, seed=1)
        policy.load_state_dict(state)  # strict: every parameter has the same shape
        obs, _ = env.reset(seed=0)
        actions, _ = policy.predict(obs, deterministic=True)
        assert actions.shape == env.action_space.shape
        assert np.isfinite(actions).all()
        sizes.add(env.action_space.shape[0])
    assert len(sizes) == len(SHAPES), "the shapes tried have different candidate counts"


def test_graph_policy__candidate_mean_reads_that_candidates_own_features():
    env = _env("mixed")
    policy = _policy(env)
    obs, _ = env.reset(seed=0)
    for _ in range(20):  # some backlog, so that features are not all zero
        obs, *_ = env.step(env.action_space.sample())
    service, route, _, retain = env.unwrapped.workload.index.score_slices
    slices = {"service": service, "route": route, "retain": retain}
    base = _means(policy, obs)[0]
    for key, part, row in (
        ("service", "service", 7),
        ("route", "route", 11),
        ("retain", "retain", 3),
    ):
        changed_obs = {k: v.copy() for k, v in obs.items()}
        changed_obs[key][row] += 5.0
        diff = (_means(policy, changed_obs)[0] - base).abs()
        start = slices[part].start
        assert diff[start + row] > 1e-6, f"{part} candidate {row} ignores its own features"
        others = torch.ones_like(diff, dtype=torch.bool)
        others[start + row] = False
        # A pooled vector mapped linearly would move every mean; a per-candidate
        # read-out moves only the candidate whose features changed.
        assert diff[others].max() == 0.0


def test_graph_policy__batched_forward_equals_one_observation_at_a_time():
    envs = gym.make_vec(
        "mabp_gym/SFMSN-v0", num_envs=3, workload="rag", horizon=40, max_episode_steps=40
    )
    torch.manual_seed(0)
    policy = GraphActorCriticPolicy(
        envs.single_observation_space, envs.single_action_space, lambda _: 3e-4
    )
    obs, _ = envs.reset(seed=[0, 1, 2])
    for _ in range(5):
        obs, *_ = envs.step(envs.action_space.sample())
    batched = _means(policy, obs)
    assert batched.shape == (3, envs.single_action_space.shape[0])
    for i in range(3):
        one = _means(policy, {k: v[i] for k, v in obs.items()})
        torch.testing.assert_close(batched[i], one[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(batched[0], batched[1])


def test_graph_policy__save_and_load_round_trip(tmp_path):
    env = _env("agentic")
    policy = _policy(env)
    obs, _ = env.reset(seed=0)
    policy.save(str(tmp_path / "policy.pt"))
    loaded = GraphActorCriticPolicy.load(str(tmp_path / "policy.pt"), device="cpu")
    assert loaded.shape_free
    torch.testing.assert_close(_means(loaded, obs), _means(policy, obs))


def test_graph_policy__flat_observations_are_refused_with_a_clear_error():
    env = _env("mixed", obs_mode="flat")
    with pytest.raises(TypeError, match="Dict observation"):
        _policy(env)


def test_readme__ppo_example_runs_as_written_with_a_tiny_budget():
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
        if "GraphActorCriticPolicy" in b
    ]
    assert len(blocks) == 1 and "model.learn(10_000)" in blocks[0]
    assert len(blocks[0].strip().splitlines()) <= 6
    torch.set_num_threads(1)
    namespace: dict = {}
    code = blocks[0].replace("model.learn(10_000)", "model.learn(256)")
    exec(compile(code, "README PPO example", "exec"), namespace)  # noqa: S102
    model = namespace["model"]
    assert model.num_timesteps >= 256
    assert isinstance(model.policy, GraphActorCriticPolicy)


def test_graph_policy__a_fresh_policy_serves_instead_of_idling():
    # The projection acts only on scores > 0: with the default score_bias every mean
    # starts positive (softsign(0.5) = 1/3, the weights are small), so the deterministic
    # policy serves from the first slot; score_bias=0 starts it idling (docs/learning.md).
    env = _env("mixed", load=0.5, diagnostics=True)
    obs, _ = env.reset(seed=0)
    means = _means(_policy(env), obs)
    assert torch.all(means > 0.25) and torch.all(means < 0.45)
    served = 0
    for _ in range(20):
        action = _means(_policy(env), obs).numpy()[0]
        obs, _, _, _, info = env.step(action)
        served += int(np.asarray(info["control"]["service"]).sum())
    assert served > 0
    idle = GraphActorCriticPolicy(
        env.observation_space, env.action_space, lambda _: 3e-4, score_bias=0.0
    )
    assert torch.all(_means(idle, obs).abs() < 0.1)
    with pytest.raises(ValueError, match="score_bias"):
        GraphActorCriticPolicy(
            env.observation_space, env.action_space, lambda _: 3e-4, score_bias=float("nan")
        )
