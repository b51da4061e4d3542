"""The Python API's wrong inputs get a clear error and change nothing (a notebook user's
mistakes): another workload's observation or state, wrong types, paths where records go,
options that are not a dict, and the learning adapters' arguments."""

from __future__ import annotations

import numpy as np
import pytest

import mabp_gym
from mabp_gym import SFMSNEnv, Simulator, make_policy, make_workload, project
from mabp_gym.core.control import Control, check_control


@pytest.mark.parametrize("name", ["mabp", "bp", "frame-mabp", "oracle-sur", "residual-mabp-any"])
def test_policy__another_workloads_observation_is_refused_not_read_past_its_end(name, monkeypatch):
    # rag and agentic have the same queues (8, 24): the compiled rules read past the
    # candidate arrays of agentic's observation, and the process died (segfault).
    from mabp_gym.agents.mabp import MABP

    if name == "residual-mabp-any":
        pytest.importorskip("torch")
    monkeypatch.setattr(MABP, "compile_after", 0)
    obs, _ = SFMSNEnv("agentic").reset(seed=0)
    policy = make_policy(name, "rag")
    policy.reset(seed=0)
    with pytest.raises(ValueError, match="was made for 'rag' .*another workload's"):
        policy.scores(obs)
    own, _ = SFMSNEnv("rag").reset(seed=0)
    assert policy.scores(own).shape == (make_workload("rag").index.num_scores,)


def test_project_and_check_control__a_state_of_another_workload_is_refused():
    mixed, rag = make_workload("mixed"), make_workload("rag")
    state = Simulator(rag).reset(seed=0)
    with pytest.raises(ValueError, match="the state is not one of 'mixed'"):
        project(mixed, state, np.ones(mixed.index.num_scores))
    with pytest.raises(ValueError, match="the state is not one of 'mixed'"):
        check_control(mixed, state, Control.idle(mixed))
    with pytest.raises(TypeError, match="state must be a SimState"):
        project(mixed, {"queue_len": []}, np.ones(mixed.index.num_scores))
    own = Simulator(mixed).reset(seed=0)
    assert check_control(mixed, own, project(mixed, own, np.ones(mixed.index.num_scores)))


def test_simulator__wrong_types_are_refused():
    mixed = make_workload("mixed")
    with pytest.raises(TypeError, match="memory must be True or False, got 'no'"):
        Simulator(mixed, memory="no")  # bool("no") ran with memory on
    with pytest.raises(TypeError, match="workload must be a Workload"):
        Simulator("mixed")
    sim = Simulator(mixed)
    with pytest.raises(ValueError, match="seed must be None or an integer >= 0"):
        sim.reset(-1)
    sim.reset(np.random.SeedSequence(3))  # numpy's own seeds still work


def test_evaluate__address_backend_seeds_and_paths_are_checked_before_any_run(tmp_path):
    grid = ("bp", "work_reuse", [0.5])
    with pytest.raises(ValueError, match="address is for backend='ray'"):
        mabp_gym.evaluate(*grid, [0], horizon=50, address="10.0.0.5:6379")  # ran locally
    with pytest.raises(ValueError, match="no Ray cluster answers there"):
        mabp_gym.evaluate(*grid, [0], horizon=50, backend="ray", address="127.0.0.1:1")
    with pytest.raises(ValueError, match="at most 100,000 in one grid"):
        mabp_gym.evaluate(*grid, range(10**9), horizon=50)  # ran out of memory first
    with pytest.raises(ValueError, match="policy_kw must be a dict"):
        mabp_gym.evaluate(*grid, [0], horizon=50, policy_kw=[1])
    with pytest.raises(ValueError, match="must be a file path"):
        mabp_gym.evaluate(*grid, [0], horizon=50, output=5)
    with pytest.raises(TypeError, match="must be a file path"):
        mabp_gym.read_records(5)


@pytest.mark.parametrize("summary", ["stable_load", "paper_load", "summarize_records"])
def test_summaries__a_path_where_records_go_names_read_records(summary):
    from mabp_gym.harness import summaries

    with pytest.raises(ValueError, match=r"read them with mabp_gym.read_records\(path\)"):
        getattr(summaries, summary)("results.jsonl")


def test_envs__options_that_are_not_a_dict_are_a_type_error_and_change_nothing():
    import gymnasium as gym

    env = SFMSNEnv("mixed")
    first, _ = env.reset(seed=0)
    vec = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2)
    fleet = gym.make("mabp_gym/Fleet-v1")
    for target in (env, vec, fleet.unwrapped):
        for options in (5, "abc"):  # "abc" was read as the keys a, b, c
            with pytest.raises(TypeError, match="options must be a dict or None"):
                target.reset(options=options)
    np.testing.assert_array_equal(env.reset(seed=0)[0]["queues"], first["queues"])


def test_env__a_torch_tensor_with_a_gradient_is_an_action_and_a_ragged_list_is_refused():
    torch = pytest.importorskip("torch")
    env, twin = SFMSNEnv("mixed"), SFMSNEnv("mixed")
    env.reset(seed=0)
    twin.reset(seed=0)
    size = env.action_space.shape[0]
    with pytest.raises(ValueError, match="not a ragged list"):
        env.step([[1.0, 2.0], [3.0]])
    scores = torch.full((size,), 0.5, requires_grad=True)  # torch's RuntimeError before
    assert env.step(scores)[1] == twin.step(np.full(size, 0.5))[1]
    # Half-precision scores (a mixed-precision policy's output): bfloat16 has no numpy
    # dtype and was torch's TypeError; both halves are widened exactly.
    for half in (torch.bfloat16, torch.float16):
        assert env.step(torch.full((size,), 0.5, dtype=half))[1] == twin.step(np.full(size, 0.5))[1]


def test_parallel_env__diagnostics_and_another_agents_view_are_refused():
    pytest.importorskip("pettingzoo")
    from mabp_gym.agents.decentralized import local_policies

    with pytest.raises(ValueError, match="diagnostics=True is the single env's"):
        mabp_gym.parallel_env("mixed", diagnostics=True)  # accepted, and showed nothing
    env = mabp_gym.parallel_env("mixed")
    rules = local_policies("mabp", env)
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="the local rule of 'gw' got another agent's view"):
        rules["gw"].scores(obs["gen0"])
    assert rules["gw"].scores(obs["gw"]).shape == env.action_space("gw").shape
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    wrapped = BaseParallelWrapper(mabp_gym.parallel_env("mixed"))  # hides private names
    assert set(local_policies("bp", wrapped)) == set(env.possible_agents)
    from mabp_gym.core.ego import ego_graph

    with pytest.raises(ValueError, match="one agent's observation of the parallel env"):
        ego_graph(obs)  # the all-agents dict: a KeyError 'node'


def test_sb3__net_arch_is_refused_by_name_and_a_bad_seed_before_any_env():
    pytest.importorskip("stable_baselines3")
    import gymnasium as gym
    from stable_baselines3 import PPO

    from mabp_gym.envs.sb3 import GraphActorCriticPolicy, make_sb3_vec_env

    default = {"pi": [64, 64], "vf": [64, 64]}  # what files saved before held: loads
    PPO(GraphActorCriticPolicy, gym.make("mabp_gym/SFMSN-v0"), policy_kwargs={"net_arch": default})
    with pytest.raises(ValueError, match="takes no net_arch"):  # it was dropped silently
        PPO(
            GraphActorCriticPolicy,
            gym.make("mabp_gym/SFMSN-v0"),
            policy_kwargs={"net_arch": {"pi": [256], "vf": [256]}},
        )
    for seed in (-1, 1.5, "3"):
        with pytest.raises(ValueError, match="seed must be None or an integer >= 0"):
            make_sb3_vec_env("mabp_gym/Mixed-v0", 2, seed=seed)
