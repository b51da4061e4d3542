"""SB3's VecEnv over the batched vector env (mabp_gym.envs.sb3_vec): what SB3 sees is what
DummyVecEnv of the same envs gives it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

LEARNING = "needs the learning stack: pip install torch==2.13.0 && pip install -e '.[dev]'"
torch = pytest.importorskip("torch", reason=LEARNING)
pytest.importorskip("stable_baselines3", reason=LEARNING)
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

import mabp_gym  # noqa: E402, F401
from mabp_gym.envs.sb3 import GraphActorCriticPolicy, SB3VecEnv, make_sb3_vec_env  # noqa: E402

KW = {"workload": "mixed", "load": (0.3, 0.8), "horizon": 50}


def _dummy(n: int, seed: int, max_steps: int) -> DummyVecEnv:
    envs = DummyVecEnv(
        [lambda: gym.make("mabp_gym/SFMSN-v0", max_episode_steps=max_steps, **KW)] * n
    )
    envs.seed(seed)
    return envs


@pytest.mark.parametrize("vector", ["batched", "sync"])
def test_sb3_vec_env__steps_as_dummy_vec_env_does_through_episode_ends(vector):
    if vector == "batched":
        ours = make_sb3_vec_env("mabp_gym/SFMSN-v0", 3, max_episode_steps=40, seed=5, **KW)
    else:  # any Gymnasium vector env with next-step autoreset
        make = lambda: gym.make("mabp_gym/SFMSN-v0", max_episode_steps=40, **KW)  # noqa: E731
        ours = SB3VecEnv(gym.vector.SyncVectorEnv([make] * 3))
        ours.seed(5)
    theirs = _dummy(3, 5, 40)
    # Attributes as DummyVecEnv reads them, over either vector env (a method is itself).
    assert ours.get_attr("nu") == theirs.get_attr("nu") == [5.0] * 3
    assert ours.has_attr("nu") and ours.get_attr("render_mode") == [None] * 3
    assert all(callable(f) for f in ours.get_attr("render"))
    a, b = ours.reset(), theirs.reset()
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(130):  # three episodes of 40 steps: resets in the middle of the run
        assert all(np.array_equal(a[k], b[k]) for k in b), f"observation differs at step {t}"
        actions = rng.uniform(-1, 1, (3, *theirs.action_space.shape)).astype(np.float32)
        a, ra, da, ia = ours.step(actions)
        b, rb, db, ib = theirs.step(actions)
        assert ra.dtype == rb.dtype == np.float32
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(da, db)
        for i in np.flatnonzero(db):
            ends += 1
            assert ia[i]["TimeLimit.truncated"] is True is ib[i]["TimeLimit.truncated"]
            last_a, last_b = ia[i]["terminal_observation"], ib[i]["terminal_observation"]
            assert all(np.array_equal(last_a[k], last_b[k]) for k in last_b)
    assert ends == 9


def test_sb3_vec_env__ppo_learns_the_same_weights_as_with_dummy_vec_env():
    def learn(envs) -> dict[str, torch.Tensor]:
        envs = VecNormalize(envs, norm_obs=False, norm_reward=True)
        model = PPO(GraphActorCriticPolicy, envs, n_steps=32, batch_size=32, n_epochs=2, seed=3)
        model.learn(192)  # episodes of 50 steps: two resets per env
        return model.policy.state_dict()

    ours = learn(make_sb3_vec_env("mabp_gym/SFMSN-v0", 2, max_episode_steps=50, seed=3, **KW))
    theirs = learn(_dummy(2, 3, 50))
    for key, value in theirs.items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0, msg=key)


def test_sb3_vec_env__refuses_what_it_cannot_wrap():
    with pytest.raises(TypeError, match="gymnasium.vector.VectorEnv"):
        SB3VecEnv(gym.make("mabp_gym/Mixed-v0"))
    sync = gym.make_vec(
        "mabp_gym/Mixed-v0",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    with pytest.raises(ValueError, match="autoresets on the next step"):
        SB3VecEnv(sync)
    envs = make_sb3_vec_env("mabp_gym/Mixed-v0", 2)
    with pytest.raises(IndexError, match=r"\[0, 2\)"):
        envs.get_attr("nu", indices=[2])
    with pytest.raises(AttributeError, match="reads its envs' settings"):
        envs.set_attr("nu", 3.0)
    with pytest.raises(RuntimeError, match="step_async"):
        envs.step_wait()
    assert envs.get_attr("nu", indices=[1]) == [envs.get_attr("nu")[0]]


def test_sb3_vec_env__over_worker_processes_gives_the_same_transitions():
    # make_sb3_vec_env(..., workers=2): the batched env over two processes, with SB3's
    # same-step resets through reset_mask, transition for transition.
    from mabp_gym.envs.sb3 import make_sb3_vec_env

    workers = make_sb3_vec_env("mabp_gym/Mixed-v0", 4, workers=2, seed=0, horizon=20)
    single = make_sb3_vec_env("mabp_gym/Mixed-v0", 4, seed=0, horizon=20)
    got, want = workers.reset(), single.reset()
    rng = np.random.default_rng(0)
    for step in range(45):  # two truncations
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{step} {key}")
        actions = rng.uniform(-1, 1, (4, single.action_space.shape[0])).astype(np.float32)
        got, got_rewards, got_dones, got_infos = workers.step(actions)
        want, want_rewards, want_dones, want_infos = single.step(actions)
        np.testing.assert_array_equal(got_rewards, want_rewards)
        np.testing.assert_array_equal(got_dones, want_dones)
        for got_info, want_info in zip(got_infos, want_infos, strict=True):
            assert set(got_info) == set(want_info)
            if "terminal_observation" in want_info:
                for key, value in want_info["terminal_observation"].items():
                    np.testing.assert_array_equal(got_info["terminal_observation"][key], value)
    workers.close()
