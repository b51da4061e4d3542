"""The PyG view of the observation (mabp_gym.envs.pyg) and the SB3 feature extractor over it
(mabp_gym.envs.sb3), on the env: extra ``learn``."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

LEARNING = "needs the learning stack: pip install torch==2.13.0 && pip install -e '.[dev]'"
torch = pytest.importorskip("torch", reason=LEARNING)
pytest.importorskip("torch_geometric", reason=LEARNING)

from mabp_gym import to_pyg  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet_and_single_threaded():
    # Tiny graphs: one torch thread is much faster than two fighting over a core.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Box observation space (min|max)imum.*")
        yield
    torch.set_num_threads(threads)


def test_render__rgb_array_draws_an_image():
    env = gym.make("mabp_gym/Mixed-v0", render_mode="rgb_array")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    image = env.render()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.std() > 0


def test_to_pyg__round_trip_single_and_batch():
    env = gym.make("mabp_gym/Mixed-v0")
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(env.action_space.sample())
    data = to_pyg(obs)
    n, e = obs["node_features"].shape[0], obs["edge_index"].shape[1]
    assert data.num_nodes == n and data.edge_index.shape == (2, e)
    x = np.concatenate([obs["node_features"], obs["queues"], obs["memory"]], axis=1)
    assert np.allclose(data.x.numpy(), x)
    assert np.array_equal(data.edge_index.numpy(), obs["edge_index"])
    assert np.allclose(data.service_x.numpy(), obs["service"])
    assert np.array_equal(data.action_mask.numpy()[0], obs["action_mask"].astype(bool))
    # A batch of three (as SB3 hands it: every Box as float) is offset, not looped.
    obs2, *_ = env.step(env.action_space.sample())
    obs3, *_ = env.step(env.action_space.sample())
    batch = {k: torch.as_tensor(np.stack([o[k] for o in (obs, obs2, obs3)])).float() for k in obs}
    data = to_pyg(batch)
    assert data.num_graphs == 3 and data.x.shape[0] == 3 * n
    assert data.edge_index.shape == (2, 3 * e)
    assert torch.equal(data.edge_index[:, e : 2 * e] - n, torch.as_tensor(obs2["edge_index"]))
    assert torch.equal(data.batch, torch.arange(3).repeat_interleave(n))
    a = obs["service"].shape[0]
    assert torch.equal(data.service_node[a : 2 * a] - n, torch.as_tensor(obs2["service_index"][0]))
    route_edge = torch.as_tensor(obs3["route_index"][0])
    r = route_edge.shape[0]
    assert torch.equal(
        data.route_src[2 * r :] - 2 * n, torch.as_tensor(obs3["edge_index"][0])[route_edge]
    )
    assert np.allclose(data.route_x[2 * r :].numpy(), obs3["route"])


def test_sb3__ppo_multiinputpolicy_trains_a_few_hundred_steps():
    import torch
    from stable_baselines3 import PPO

    env = gym.make("mabp_gym/Mixed-v0", load=0.5)
    model = PPO(
        "MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu"
    )
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(256)
    assert model.num_timesteps >= 256
    # The updates reached the weights (a detached graph or a zero rate would not).
    after = list(model.policy.parameters())
    assert any(not torch.equal(b, p) for b, p in zip(before, after, strict=True))
    action, _ = model.predict(env.reset(seed=0)[0], deterministic=True)
    assert action.shape == (384,)


def test_sb3__ppo_with_the_pyg_features_extractor_learns():
    from stable_baselines3 import PPO

    from mabp_gym.envs.sb3 import GraphFeaturesExtractor

    env = gym.make("mabp_gym/Mixed-v0", load=0.5)
    model = PPO(
        "MultiInputPolicy",
        env,
        n_steps=64,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={
            "features_extractor_class": GraphFeaturesExtractor,
            "features_extractor_kwargs": {"hidden": 32},
        },
    )
    before = [p.detach().clone() for p in model.policy.features_extractor.parameters()]
    model.learn(256)
    after = list(model.policy.features_extractor.parameters())
    assert model.num_timesteps >= 256
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


def test_to_pyg__anything_but_the_dict_observation_is_refused_by_name():
    env = gym.make("mabp_gym/SFMSN-v0")
    obs, _ = env.reset(seed=0)
    for bad in (np.zeros(5), [obs, obs]):
        with pytest.raises(ValueError, match="to_pyg takes the env's dict observation"):
            to_pyg(bad)
    with pytest.raises(ValueError, match=r"the observation lacks \['retain'\]"):
        to_pyg({k: v for k, v in obs.items() if k != "retain"})
