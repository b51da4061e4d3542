"""The RL-library examples (run through their real entry points) and the env options they
rely on: the flat observation, load intervals, vector autoreset, the module-qualified id."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import mabp_gym  # noqa: F401
from mabp_gym.envs.env import FLAT_KEYS, symlog

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


# -- env options -------------------------------------------------------------------------
def test_flat_obs__is_the_symlog_of_the_dynamic_arrays_in_layout_order():
    flat_env = gym.make("mabp_gym/SFMSN-v0", obs_mode="flat")
    dict_env = gym.make("mabp_gym/SFMSN-v0")
    flat, _ = flat_env.reset(seed=3)
    obs, _ = dict_env.reset(seed=3)
    for _ in range(15):
        action = dict_env.action_space.sample()
        flat, *_ = flat_env.step(action)
        obs, *_ = dict_env.step(action)
    assert flat_env.observation_space.contains(flat) and flat.ndim == 1
    layout = flat_env.unwrapped.flat_layout
    assert list(layout) == list(FLAT_KEYS)
    assert not {"edge_index", "service_index", "route_index"} & set(layout)
    for key, (where, shape) in layout.items():
        expected = obs[key].astype(np.float32)
        expected = expected if key == "action_mask" else symlog(expected)
        np.testing.assert_allclose(flat[where].reshape(shape), expected, rtol=1e-6)
    assert flat.size == layout["action_mask"][0].stop
    assert flat[layout["queues"][0]].max() > 0  # there is backlog to see


def test_flat_obs__unknown_mode_is_refused():
    with pytest.raises(ValueError, match="obs_mode must be one of"):
        gym.make("mabp_gym/SFMSN-v0", obs_mode="graph")


def test_load_interval__drawn_per_episode_from_the_seeded_generator():
    env = gym.make("mabp_gym/SFMSN-v0", load=(0.2, 0.9))
    _, first = env.reset(seed=11)
    loads = [env.reset()[1]["load"] for _ in range(20)]
    assert all(0.2 <= load <= 0.9 for load in [first["load"], *loads])
    assert len(set(loads)) == 20
    assert env.unwrapped.workload.load == loads[-1]  # the simulator runs the drawn load
    again = gym.make("mabp_gym/SFMSN-v0", load=(0.2, 0.9))
    assert again.reset(seed=11)[1]["load"] == first["load"]
    assert [again.reset()[1]["load"] for _ in range(20)] == loads


def test_load_interval__fixed_load_keeps_the_episode_stream_unchanged():
    fixed = gym.make("mabp_gym/SFMSN-v0", load=0.5)
    point = gym.make("mabp_gym/SFMSN-v0", load=(0.5, 0.5))
    for env in (fixed, point):
        env.reset(seed=4)
    assert "load" not in fixed.reset(seed=4)[1]
    a, _ = fixed.reset(seed=4)
    b, _ = point.reset(seed=4)
    for _ in range(10):
        action = fixed.action_space.sample()
        a, ra, *_ = fixed.step(action)
        b, rb, *_ = point.step(action)
    assert ra == rb and np.array_equal(a["queues"], b["queues"])


@pytest.mark.parametrize(
    "load, match",
    [
        ((0.9, 0.2), "low <= high"),
        ((0.1,), "interval"),
        ((0.1, "x"), "high end"),
        ((-1, 0.5), "low end"),
        ((0.1, 50.0), "load"),
    ],
)
def test_load_interval__bad_intervals_are_refused(load, match):
    with pytest.raises(ValueError, match=match):
        gym.make("mabp_gym/SFMSN-v0", load=load)


@pytest.mark.parametrize("mode", ["sync", "async", "vector_entry_point"])
def test_vector_env__declares_its_autoreset_mode(mode):
    envs = gym.make_vec(
        "mabp_gym/SFMSN-v0",
        num_envs=2,
        vectorization_mode=mode,
        horizon=3,
        max_episode_steps=3,
        obs_mode="flat",
    )
    try:
        assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        envs.reset(seed=0)
        dones = [np.logical_or(*envs.step(envs.action_space.sample())[2:4]) for _ in range(4)]
        assert dones[2].all() and not dones[3].any()  # step 4 is the reset step
    finally:
        envs.close()


def test_vector_env__same_step_autoreset_is_supported():
    mode = gym.vector.AutoresetMode.SAME_STEP
    envs = gym.make_vec(
        "mabp_gym/SFMSN-v0",
        num_envs=2,
        vectorization_mode="sync",  # the default, the batched env, autoresets on the next step
        horizon=3,
        max_episode_steps=3,
        vector_kwargs={"autoreset_mode": mode},
    )
    assert envs.metadata["autoreset_mode"] == mode
    envs.reset(seed=0)
    for _ in range(3):
        *_, truncated, info = envs.step(envs.action_space.sample())
    assert truncated.all() and "final_obs" in info


def test_module_qualified_id__makes_the_env_in_a_process_that_never_imported_it():
    code = (
        "import sys, gymnasium as gym\n"
        "assert 'mabp_gym' not in sys.modules\n"
        "env = gym.make('mabp_gym:mabp_gym/SFMSN-v0', obs_mode='flat', load=(0.2, 0.4))\n"
        "obs, info = env.reset(seed=0)\n"
        "vec = gym.make_vec('mabp_gym:mabp_gym/Rag-v0', num_envs=2)\n"
        "print(obs.shape[0], round(info['load'], 3), vec.num_envs)\n"
    )
    out = _run(["-c", code]).stdout.split()
    assert int(out[0]) > 0 and 0.2 <= float(out[1]) <= 0.4 and out[2] == "2"


# -- examples, through their command lines ------------------------------------------------
@pytest.mark.examples
def test_ppo_sb3_example__trains_and_writes_a_curve(tmp_path):
    path = tmp_path / "curve.json"
    _run(
        [
            "examples/ppo_sb3.py",
            "--workload",
            "rag",
            "--load",
            "0.2",
            "0.6",
            "--steps",
            "128",
            "--n-envs",
            "2",
            "--n-steps",
            "32",
            "--eval-every",
            "64",
            "--horizon",
            "30",
            "--eval-seeds",
            "100",
            "--references",
            "bp",
            "random",
            "--json",
            str(path),
        ]
    )
    result = json.loads(path.read_text())
    assert result["steps"] >= 128 and result["eval_load"] == pytest.approx(0.4)
    assert set(result["references"]) == {"bp", "random"}
    assert [p["steps"] for p in result["curve"]][0] == 0 and len(result["curve"]) >= 2
    assert all(np.isfinite(p["return_stochastic"]) for p in result["curve"])


@pytest.mark.examples
def test_ppo_from_scratch_example__chooses_on_held_out_growth_and_evaluates_on_other_seeds(
    tmp_path,
):
    path = tmp_path / "run.json"
    _run(
        [
            "examples/ppo_from_scratch.py",
            "--steps",
            "128",
            "--n-envs",
            "2",
            "--n-steps",
            "32",
            "--batch-size",
            "64",
            "--horizon",
            "30",
            "--select-every",
            "64",
            "--select-horizon",
            "30",
            "--select-seeds",
            "100",
            "--walk-seeds",
            "101",
            "--walk-horizon",
            "40",
            "--shortlist",
            "1",
            "--n-epochs",
            "3",
            "--eval-seeds",
            "300",
            "--eval-horizon",
            "40",
            "--eval-loads",
            "0.3",
            "0.35",
            "--eval-policies",
            "bp",
            "--json",
            str(path),
        ]
    )
    result = json.loads(path.read_text())
    curve = result["curve"]
    assert [p["steps"] for p in curve] == [0, 64, 128]
    assert sum(bool(p.get("best")) for p in curve) >= 1
    for point in curve:
        assert {"backlog", "growth", "stable", "log_std"} <= set(point)
        assert len(point["log_std"]) == 4  # one per kind of candidate
    assert "explained_variance" in curve[-1]
    assert [p["epochs_scheduled"] for p in curve] == [0, 3 * 1, 3 * 2]  # 64 steps a rollout
    assert all(0 < p["epochs"] <= p["epochs_scheduled"] for p in curve[1:])
    # The walk on the choice's own seeds covers the best screened checkpoint and the last.
    walked = {c["steps"] for c in result["choice"]["candidates"]}
    assert 128 in walked and 1 <= len(walked) <= 2
    assert result["choice"]["chosen_steps"] in walked
    # The last checkpoint is judged on the held-out seeds too where it was not chosen.
    last = set() if result["choice"]["chosen_steps"] == 128 else {"ppo-last"}
    assert set(result["held_out"]["stable_load"]) == {"ppo-scratch", "ppo-untrained", "bp"} | last
    assert {p.name for p in tmp_path.glob("run*.zip")} == {"run.zip", "run.best.zip"}
    from stable_baselines3 import PPO

    model = PPO.load(str(tmp_path / "run.zip"), device="cpu")
    bias = model.policy.net.node_head[-1].bias[0].item()  # the service scores' alpha
    assert abs(bias - 0.5) < 0.05  # two updates of 64 steps move it by far less
    # The held-out seeds must differ from the selection seeds.
    failed = subprocess.run(
        [
            sys.executable,
            "examples/ppo_from_scratch.py",
            "--select-seeds",
            "300",
            "--eval-seeds",
            "300",
            "301",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode == 2 and "must not include selection seeds" in failed.stderr
    # Several checkpoints and the seed's untrained policy in one held-out walk.
    again = tmp_path / "again.json"
    scratch = _example("ppo_from_scratch")
    scratch.main(
        [
            "--checkpoint",
            str(tmp_path / "run.best.zip"),
            str(tmp_path / "run.zip"),
            "--untrained",
            "--n-envs",
            "2",
            "--horizon",
            "30",
            "--eval-seeds",
            "300",
            "--eval-horizon",
            "40",
            "--eval-loads",
            "0.3",
            "--eval-policies",
            "--json",
            str(again),
        ]
    )
    names = set(json.loads(again.read_text())["held_out"]["stable_load"])
    assert names == {"ppo-run.best", "ppo-run", "ppo-untrained"}


def test_ppo_from_scratch_recipe__checkpoints_must_have_their_own_names(capsys):
    scratch = _example("ppo_from_scratch")
    for argv, match in (
        (["--checkpoint", "a/s0.zip", "b/s0.zip"], "names each file once"),
        (["--untrained"], "--untrained goes with --checkpoint"),
    ):
        with pytest.raises(SystemExit):
            scratch.parse(argv)
        assert match in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--eval-policies", "bp", "nosuch"], "unknown policy 'nosuch'"),
        (["--eval-loads", "20"], "--eval-loads must each be in (0, 10]"),
        (["--eval-horizon", "0"], "--eval-horizon: horizon 0"),
        (["--steps", "-1000"], "--steps must be >= 1"),
        (["--n-epochs", "0"], "--n-epochs must be >= 1"),
        (["--load-low", "0.8", "--load-high", "0.3"], "0 <= low <= high <= 10"),
        (["--seed", "300"], "a seed the training envs reset with"),
        (["--checkpoint", "missing.zip"], "no such file 'missing.zip'"),
    ],
)
def test_ppo_from_scratch_recipe__refuses_what_would_fail_after_training(argv, match, capsys):
    with pytest.raises(SystemExit):
        _example("ppo_from_scratch").parse(argv)
    assert match in capsys.readouterr().err


def test_ppo_from_scratch_recipe__anneals_the_rate_and_stops_an_update_at_its_kl(tmp_path):
    scratch = _example("ppo_from_scratch")
    args = scratch.parse([])
    assert (args.learning_rate, args.n_epochs, args.target_kl) == (6e-4, 2, 0.02)
    model = scratch.make_model(args)
    assert model.n_epochs == 2
    # SB3's progress runs from 1 (start) to 0 (end of the budget).
    assert model.lr_schedule(1.0) == pytest.approx(6e-4) and model.lr_schedule(0.0) == 0.0
    assert model.lr_schedule(0.25) == pytest.approx(1.5e-4) and model.target_kl == 0.02
    small = ["--n-envs", "1", "--n-steps", "64", "--batch-size", "16", "--horizon", "64"]
    # A step size 3,000x the default moves the policy far past the KL limit in one minibatch.
    wild = scratch.make_model(scratch.parse([*small, "--learning-rate", "1.0"]))
    wild.learn(128)
    assert wild._n_updates < 2 * args.n_epochs  # the epochs of at least one update were cut
    free = scratch.make_model(scratch.parse([*small, "--learning-rate", "1.0", "--target-kl", "0"]))
    assert free.target_kl is None
    free.learn(128)
    assert free._n_updates == 2 * args.n_epochs  # without the stop every epoch runs


def test_ppo_from_scratch_recipe__sampled_acting_is_reseeded_by_each_episode():
    from mabp_gym.harness.evaluation import evaluate

    scratch = _example("ppo_from_scratch")
    args = scratch.parse(["--n-envs", "1", "--horizon", "30"])
    assert args.act == "sampled"  # the stochastic policy PPO trained, by default
    policy = scratch.make_model(args).policy
    scratch.register_acting("ppo-test-sampled", policy, "sampled")
    scratch.register_acting("ppo-test-mean", policy, "mean")
    names = ["ppo-test-sampled", "ppo-test-mean"]

    def run():
        records = evaluate(names, "mixed", [0.4], [5, 6], horizon=60, backend="serial")
        return {(r["policy"], r["seed"]): r["mean_backlog"] for r in records}

    first, again = run(), run()
    assert first == again  # each episode's draws come from its own seed
    assert first[("ppo-test-sampled", 5)] != first[("ppo-test-mean", 5)]


@pytest.mark.parametrize(
    "flag, value, match",
    [
        ("--target-kl", "-0.1", "--target-kl must be at least 0"),
        ("--learning-rate", "0", "--learning-rate must be above 0"),
        ("--act", "noisy", "--act must be one of"),
        ("--update-threads", "-1", "--update-threads must be 0 or more"),
    ],
)
def test_ppo_from_scratch_recipe__bad_knobs_are_refused(flag, value, match, capsys):
    scratch = _example("ppo_from_scratch")
    with pytest.raises(SystemExit):
        scratch.parse([flag, value])
    assert match in capsys.readouterr().err


@pytest.mark.examples
def test_ppo_router_example__trains_on_fleet_v1_and_compares_on_the_held_out_half(tmp_path):
    path = tmp_path / "router.json"
    out = _run(
        [
            "examples/ppo_router.py",
            "--steps",
            "600",
            "--window",
            "150",
            "--episodes",
            "2",
            "--eval-runs",
            "1",
            "--baselines",
            "mabp-route",
            "--json",
            str(path),
        ]
    ).stdout
    assert "update   1" in out and "held-out: conversation[6015:]" in out
    rows = json.loads(path.read_text())["held_out"]
    assert set(rows) == {"ppo-router", "mabp-route"}
    assert all(len(row["slo_goodput"]) == 1 and row["slo_goodput"][0] > 0 for row in rows.values())


@pytest.mark.examples
@pytest.mark.parametrize("agent", ["candidate", "mlp"])
def test_cleanrl_example__runs_ppo_on_make_vec(agent):
    out = _run(
        [
            "examples/cleanrl_ppo.py",
            "--agent",
            agent,
            "--total-timesteps",
            "256",
            "--num-envs",
            "2",
            "--num-steps",
            "64",
            "--horizon",
            "40",
            "--eval-episodes",
            "1",
        ]
    ).stdout
    lines = [line for line in out.splitlines() if line.startswith("step")]
    assert len(lines) == 2 and "episodes    6" in lines[-1]
    # The held-out comparison names every baseline and says whether the agent beats them.
    shown = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert shown == {"trained", "untrained", "constant", "bp", "mabp", "random"}
    assert "the constant action and BP" in out.splitlines()[-1]


def test_cleanrl_candidate_agent__scores_are_candidate_net_means_and_masked_ones_sit_still():
    torch = pytest.importorskip("torch")
    import gymnasium as gym

    cleanrl = _example("cleanrl_ppo")
    args = cleanrl.Args(agent="candidate", log_std_init=0.0)
    envs = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2)
    obs, _ = envs.reset(seed=0)
    agent = cleanrl.make_agent(args, envs)
    assert isinstance(agent, cleanrl.CandidateAgent)
    assert agent.log_std.shape == (4,)  # one per kind: no parameter has the candidate count
    batch = cleanrl.as_tensor(obs, torch.device("cpu"))
    batch["action_mask"][:, :10] = 0.0
    with torch.no_grad():
        action, logp, entropy, value = agent.act(batch)
        means = agent.means(batch)
    assert torch.equal(means, agent.net(batch)[0])
    assert torch.equal(action[:, :10], means[:, :10])  # masked: at the mean
    assert not torch.equal(action[:, 10:], means[:, 10:])
    # log-probability and entropy count the active candidates only
    moved = action.clone()
    moved[:, :10] += 5.0
    _, logp_moved, entropy_moved, _ = agent.act(batch, moved)
    torch.testing.assert_close(logp_moved, logp)
    active = batch["action_mask"].sum(1)
    torch.testing.assert_close(entropy, active * (0.5 + 0.5 * np.log(2 * np.pi)))
    assert value.shape == (2, 1)


def test_cleanrl_example__an_unknown_agent_is_refused_by_name(capsys):
    cleanrl = _example("cleanrl_ppo")
    with pytest.raises(SystemExit):
        cleanrl.parse_args(["--agent", "transformer"])
    defaults = cleanrl.parse_args([])
    assert (defaults.agent, defaults.total_timesteps) == ("candidate", 200_000)
    assert (
        "--agent must be one of ['candidate', 'mlp'], got 'transformer'" in capsys.readouterr().err
    )
    for argv, match in (
        (["--total-timesteps", "-1000"], "--total-timesteps must be >= 1"),
        (["--eval-episodes", "-3"], "--eval-episodes must be >= 1"),
        (["--num-minibatches", "8", "--num-envs", "1", "--num-steps", "4"], "at least 2 samples"),
    ):
        with pytest.raises(SystemExit):
            cleanrl.parse_args(argv)
        assert match in capsys.readouterr().err


@pytest.mark.examples
def test_marl_ppo_example__trains_per_role_and_reports_stable_loads_per_staleness(tmp_path):
    path = tmp_path / "marl.json"
    _run(
        [
            "examples/marl_ppo.py",
            "--slots",
            "400",
            "--rollout",
            "200",
            "--horizon",
            "100",
            "--eval-loads",
            "0.3",
            "--eval-seeds",
            "300",
            "--eval-horizon",
            "60",
            "--eval-staleness",
            "0",
            "5",
            "--select-horizon",
            "30",
            "--select-seeds",
            "100",
            "--json",
            str(path),
            "--save",
            str(tmp_path / "marl.pt"),
        ]
    )
    result = json.loads(path.read_text())
    import torch

    saved = torch.load(tmp_path / "marl.pt", weights_only=False)
    assert saved["args"]["seed"] == 0 and "log_std" in saved["state_dict"]
    assert [p["slots"] for p in result["curve"]] == [200, 400]
    assert all("select_backlog" in p for p in result["curve"])
    assert sum(bool(p.get("best")) for p in result["curve"]) >= 1
    learned = ("ppo", "ppo-untrained", "bp", "mabp")
    assert set(result["stable_load"]) == {f"{p}@{s}" for p in learned for s in (0, 5)}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--eval-policies", "greedycache-bp"], "are not local rules"),
        (["--eval-staleness", "100000"], "--eval-staleness 100000"),
        (["--minibatches", "300", "--rollout", "400"], "--minibatches must be in"),
        (["--json", "no/such/folder/x.json"], "its folder does not exist"),
    ],
)
def test_marl_ppo__refuses_bad_arguments_before_training(args, message, capsys):
    marl = _load_marl_ppo()
    marl.train = None  # reaching the training would be a TypeError, not this SystemExit
    with pytest.raises(SystemExit) as stop:
        marl.main(args)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def _load_marl_ppo():
    import importlib.util

    spec = importlib.util.spec_from_file_location("marl_ppo", ROOT / "examples" / "marl_ppo.py")
    assert spec is not None and spec.loader is not None
    marl = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = marl  # dataclasses look their module up there
    spec.loader.exec_module(marl)
    return marl


def test_marl_ppo__log_probability_ignores_masked_candidates():
    marl = _load_marl_ppo()
    import torch

    env = mabp_gym.parallel_env("mixed", load=0.6, horizon=50)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
    torch.manual_seed(0)
    policy = marl.RolePolicy(env, 16, 0.5, -1.5)
    tensors = marl.stack(obs, env.possible_agents)
    mask = tensors["candidate_mask"] > 0
    assert mask.any() and (~mask).any()
    action, logp, entropy, _ = policy.act(tensors)
    moved = action.clone()
    moved[~mask] = 7.0
    _, logp_moved, entropy_moved, _ = policy.act(tensors, moved)
    assert torch.equal(logp, logp_moved) and torch.equal(entropy, entropy_moved)
    means = policy(tensors)[0]
    assert torch.equal(action[~mask], means[~mask])


@pytest.mark.examples
@pytest.mark.parametrize("flat", [False, True], ids=["dict", "flat"])
def test_torchrl_example__builds_from_the_id_and_rolls_out(flat):
    out = _run(
        [
            "examples/torchrl_gymenv.py",
            "--steps",
            "10",
            "--horizon",
            "50",
            *(["--flat"] if flat else []),
        ]
    ).stdout
    assert "rolled out 10 steps" in out
    assert ("['observation']" in out) == flat


@pytest.mark.examples
@pytest.mark.slow
def test_rllib_example__trains_one_iteration_with_a_remote_env_runner():
    # ray[rllib] pins gymnasium 1.2.2 and lives in its own environment. Where it is absent
    # this test skips with that reason, unless MABP_GYM_RLLIB=1 asks for it: then it fails.
    if importlib.util.find_spec("tree") is None or importlib.util.find_spec("ray") is None:
        message = (
            "ray[rllib] is not installed (pip install 'ray[rllib]' in its own "
            "environment; see examples/rllib_ppo.py)"
        )
        if os.environ.get("MABP_GYM_RLLIB") == "1":
            pytest.fail(message + "; MABP_GYM_RLLIB=1 asked for this test")
        pytest.skip(message)
    out = _run(
        ["examples/rllib_ppo.py", "--iterations", "1", "--horizon", "50", "--env-runners", "1"],
        timeout=600,
    ).stdout
    assert "iteration 0: env steps" in out and "episode return mean None" not in out


@pytest.mark.examples
def test_plot_ppo_curve__draws_the_seeds_curve_with_references_and_held_out_bars(tmp_path):
    settings = {
        "workload": "mixed",
        "select_load": 0.6,
        "select_horizon": 30,
        "select_seeds": [100],
        "eval_seeds": [300],
        "eval_horizon": 40,
    }
    for seed, (a, b) in enumerate(((900.0, 60.0), (800.0, 90.0))):
        run = {
            "args": {**settings, "seed": seed},
            "curve": [{"steps": 0, "backlog": a}, {"steps": 64, "backlog": b}],
            "held_out": {"stable_load": {"ppo-scratch": 0.5 + 0.1 * seed, "bp": 0.4}},
        }
        (tmp_path / f"s{seed}.json").write_text(json.dumps(run))
    out, numbers = tmp_path / "curve.png", tmp_path / "curve.json"
    runs = [str(tmp_path / "s0.json"), str(tmp_path / "s1.json")]
    _run(["examples/plot_ppo_curve.py", "--runs", *runs, "--out", str(out), "--json", str(numbers)])
    assert out.stat().st_size > 10_000
    curve = json.loads(numbers.read_text())
    assert curve["backlog_mean"] == [850.0, 75.0]
    assert curve["backlog_min"] == [800.0, 60.0] and curve["backlog_max"] == [900.0, 90.0]
    assert set(curve["references"]) == {"random", "bp", "mabp"}
    assert curve["references"]["random"] > curve["references"]["mabp"]
    # One line a run with --labels; the labels must name every run.
    labelled = tmp_path / "labelled.png"
    _run(
        [
            "examples/plot_ppo_curve.py",
            "--runs",
            *runs,
            "--out",
            str(labelled),
            "--labels",
            "a",
            "b",
        ]
    )
    assert labelled.stat().st_size > 10_000
    short = subprocess.run(
        [sys.executable, "examples/plot_ppo_curve.py", "--runs", *runs, "--out", str(labelled)]
        + ["--labels", "a"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert short.returncode == 2 and "2 runs, 1 labels" in short.stderr


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_cleanrl_gae__a_truncated_episode_bootstraps_and_a_terminated_one_does_not():
    torch = pytest.importorskip("torch")
    cleanrl = _example("cleanrl_ppo")
    args = cleanrl.Args(gamma=0.9, gae_lambda=0.95)
    steady = -1.0 / (1 - args.gamma)  # the exact value of a reward of -1 forever
    rewards = torch.full((6, 1), -1.0)
    rewards[3] = 0.0  # NEXT_STEP: step 3 only resets (its transition is masked out)
    values = torch.full((6, 1), steady)
    dones = torch.zeros((6, 1))
    dones[3] = 1.0  # the episode ended after step 2, cut at its horizon
    last = (torch.full((1,), steady), torch.zeros(1), torch.zeros(1))
    truncated = cleanrl.gae(rewards, values, dones, torch.zeros((6, 1)), *last, args)
    real = [0, 1, 2, 4, 5]
    assert torch.allclose(truncated[real], torch.zeros((5, 1)), atol=1e-4)
    terminated = cleanrl.gae(rewards, values, dones, dones.clone(), *last, args)
    # Treated as an end (v3 did so for truncation too): the last step's target is -1.
    assert terminated[2].item() == pytest.approx(-1.0 - steady)
    # Within the episode the trace carries it back; the next episode's steps see none of it.
    assert terminated[1].item() == pytest.approx(args.gamma * args.gae_lambda * (-1.0 - steady))
    assert torch.allclose(terminated[[4, 5]], torch.zeros((2, 1)), atol=1e-4)


def test_marl_gae__a_truncation_bootstraps_from_the_last_observations_value():
    torch = pytest.importorskip("torch")
    marl = _example("marl_ppo")
    args = marl.Args()
    steady = -1.0 / (1 - args.gamma)
    rewards = torch.full((4, 2), -1.0)
    values = torch.full((4, 2), steady)
    dones = [0.0, 1.0, 0.0, 0.0]  # truncated at step 1; a new episode from step 2
    boots = torch.zeros((4, 2))
    boots[1] = steady
    advantages = marl.gae(rewards, values, dones, boots, torch.full((2,), steady), args)
    assert torch.allclose(advantages, torch.zeros((4, 2)), atol=1e-4)
    unbooted = marl.gae(rewards, values, dones, torch.zeros((4, 2)), torch.full((2,), steady), args)
    assert unbooted[1, 0].item() == pytest.approx(-1.0 - steady)


def test_ppo_sb3_example__each_point_is_the_policy_trained_on_its_steps(monkeypatch):
    # A rollout's end comes before its update: points taken there were one update late,
    # and the trained model itself was never evaluated.
    torch = pytest.importorskip("torch")
    example = _example("ppo_sb3")
    marks: list[tuple[object, list]] = []

    def weights(model) -> list:
        return [p.detach().clone() for p in model.policy.parameters()]

    evaluate = example.Curve.evaluate

    def recorded(self):
        marks.append((int(self.num_timesteps), weights(self.model)))
        evaluate(self)

    class Recorded(example.PPO):
        def learn(self, *args, **kwargs):
            out = super().learn(*args, **kwargs)
            marks.append(("trained", weights(self)))
            return out

    monkeypatch.setattr(example.Curve, "evaluate", recorded)
    monkeypatch.setattr(example, "PPO", Recorded)
    small = ["--steps", "128", "--n-envs", "2", "--n-steps", "32", "--horizon", "30"]
    result = example.main(
        [*small, "--eval-every", "64", "--eval-seeds", "100", "--references", "bp"]
        + ["--update-threads", "2"]
    )
    assert [p["steps"] for p in result["curve"]] == [0, 64, 128]
    (_, initial), (at_64, after_one), (label, trained), (at_128, last) = marks
    assert (at_64, label, at_128) == (64, "trained", 128)
    assert not all(torch.equal(a, b) for a, b in zip(initial, after_one, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(trained, last, strict=True))
    assert torch.get_num_threads() == 1  # the updates' threads given back


def test_ppo_sb3_example__evaluating_changes_neither_torchs_generator_nor_the_training():
    # It seeded torch's global generator, PPO's own: every --seed then sampled alike, and
    # --eval-every changed what was trained.
    torch = pytest.importorskip("torch")
    small = ["--steps", "128", "--n-envs", "2", "--n-steps", "32", "--horizon", "30"]
    small += ["--eval-seeds", "100", "--references", "bp"]
    often = _example("ppo_sb3").main([*small, "--eval-every", "32"])
    seldom = _example("ppo_sb3").main([*small, "--eval-every", "1000"])
    assert [p["steps"] for p in often["curve"]] == [0, 64, 128]  # a point a rollout
    assert [p["steps"] for p in seldom["curve"]] == [0, 128]
    assert often["curve"][-1] == seldom["curve"][-1]  # the same training either way
    example = _example("ppo_sb3")
    args = example._parser().parse_args([*small, "--eval-every", "32"])
    args.eval_load = 0.3
    curve = example.Curve(args)
    curve.model = example.PPO(example.GraphActorCriticPolicy, example.make_env("mixed", 0.3, 30))
    curve.num_timesteps = 0
    torch.manual_seed(7)
    state = torch.random.get_rng_state()
    curve.evaluate()
    assert torch.equal(torch.random.get_rng_state(), state)  # untouched


@pytest.mark.parametrize(
    "flag, value, match",
    [
        ("--n-envs", "0", "--n-envs must be >= 1"),
        ("--steps", "-1000", "--steps must be >= 1"),
        ("--n-steps", "1", "--n-steps must be >= 2"),
        ("--update-threads", "-1", "--update-threads must be 0 or more"),
    ],
)
def test_ppo_sb3_example__bad_knobs_are_refused_before_anything_runs(flag, value, match, capsys):
    with pytest.raises(SystemExit):
        _example("ppo_sb3").main([flag, value])
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("example", ["rllib_ppo", "marl_rllib"])
def test_rllib_examples__without_rllib_say_which_extra_instead_of_a_traceback(example):
    from mabp_gym.extras import exit_without

    with pytest.raises(SystemExit, match=r"needs the rllib extra \(no tree\): pip install x \("):
        exit_without("rllib", ImportError("no tree"), "pip install x")
    path = str(ROOT / "examples" / f"{example}.py")
    result = subprocess.run(
        [sys.executable, path, "--help"], capture_output=True, text=True, check=False, cwd=ROOT
    )
    if importlib.util.find_spec("tree") is not None and importlib.util.find_spec("ray"):
        assert result.returncode == 0, result.stderr  # RLlib imports here: its --help
    else:
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert "needs the rllib extra" in result.stderr
        assert "pip install -e '.[rllib" in result.stderr
