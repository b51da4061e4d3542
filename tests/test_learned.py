"""Learned schedulers: the GNN (imitation + PPO) and Learn-MABP, through their real entry
points with tiny budgets, plus the properties that make them trustworthy."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

LEARNING = "needs the learning stack: pip install torch==2.13.0 && pip install -e '.[dev]'"
torch = pytest.importorskip("torch", reason=LEARNING)

import mabp_gym  # noqa: E402, F401  (registers the ids)
from mabp_gym import Simulator, make_workload  # noqa: E402
from mabp_gym.agents import make_policy  # noqa: E402
from mabp_gym.agents.gnn import GNNScheduler, load_checkpoint, observation_dims, resolve_device  # noqa: E402
from mabp_gym.agents.learn_mabp import LearnMABP, PrimitiveEstimate  # noqa: E402
from mabp_gym.agents.mabp import MABP  # noqa: E402
from mabp_gym.core.encoding import ObservationEncoder  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def observation(workload, slots: int = 30, seed: int = 0) -> dict[str, np.ndarray]:
    sim = Simulator(workload)
    sim.reset(seed)
    encoder = ObservationEncoder(workload)
    mabp = make_policy("mabp", workload)
    for _ in range(slots):
        sim.step_scores(mabp.scores(encoder.encode(sim.state)))
    return encoder.encode(sim.state)


@pytest.mark.examples
def test_gnn__training_smoke_resume_and_evaluation(tmp_path):
    from mabp_gym.training.gnn import main

    tiny = [
        "--imitation-loads",
        "0.5",
        "--imitation-slots",
        "40",
        "--imitation-epochs",
        "1",
        "--ppo-envs",
        "2",
        "--ppo-rollout",
        "64",
        "--checkpoint-every",
        "128",
        "--select-loads",
        "0.4",
        "--eval-loads",
        "0.3",
        "--eval-seeds",
        "1",
        "--hidden",
        "16",
        "--layers",
        "2",
        "--no-progress",
        "--device",
        "auto",
    ]
    first = main([*tiny, "--out", str(tmp_path), "--ppo-steps", "256"])
    assert first["ppo_steps"] == 256 and first["device"] == "cpu"
    archive = tmp_path / "ppo_checkpoint.zip"
    assert archive.exists() and not list(tmp_path.glob("*.partial.zip"))
    # The archive fixes the workload and its PPO settings: others are refused before any
    # work (SB3 kept the archive's rollout size, and a same-shape workload went unnoticed).
    from mabp_gym.training.gnn import GNNArgs, check_resume

    settings = {"ppo_envs": 2, "ppo_rollout": 64, "hidden": 16, "layers": 2}
    check_resume(archive, GNNArgs(**settings))
    for changed, message in (
        ({"ppo_rollout": 32}, "made with --ppo-rollout 64, given 32"),
        ({"workload": "mixed", "hidden": 32}, "made with --hidden 16, given 32"),
    ):
        with pytest.raises(ValueError, match=message):
            check_resume(archive, GNNArgs(**{**settings, **changed}))
    with pytest.raises(ValueError, match="K=4.0 in the checkpoint, 8.0 here|differs"):
        check_resume(archive, GNNArgs(**settings, workload=_mixed_file(tmp_path, K=8)))
    # Resume from the PPO archive into another --out: training continues from its step
    # count, logs under this --out, and has no imitation candidate (untrained weights were
    # saved as one, and could be chosen).
    second = tmp_path / "second"
    resumed = main([*tiny, "--out", str(second), "--ppo-steps", "512", "--resume", str(archive)])
    assert resumed["ppo_steps"] == 512 and resumed["selected"] == "ppo"
    assert not (second / "gnn_imitation.pt").exists() and (second / "tensorboard").exists()
    # From gnn_ppo.pt too: its steps count (they restarted from 0, and its PPO weights were
    # relabelled imitation).
    # Asked for the 512 steps it has, it trains none: its weights come back unchanged.
    third = tmp_path / "third"
    done_pt = second / "gnn_ppo.pt"
    again = main([*tiny, "--out", str(third), "--ppo-steps", "512", "--resume", str(done_pt)])
    assert again["ppo_steps"] == 512 and not (third / "gnn_imitation.pt").exists()
    before, after = (
        load_checkpoint(p, make_workload("mixed"))[0] for p in (done_pt, third / "gnn_ppo.pt")
    )
    pairs = zip(before.state_dict().values(), after.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    wl = make_workload("mixed")
    model, info = load_checkpoint(resumed["checkpoint"], wl)
    assert info["selected"] in ("imitation", "ppo") and "command" in info
    policy = make_policy("gnn", wl, checkpoint=resumed["checkpoint"])
    scores = policy.scores(observation(wl, slots=5))
    assert scores.shape == (wl.index.num_scores,) and np.all(np.abs(scores) < 1)
    assert (tmp_path / "eval.jsonl").exists() and (tmp_path / "tensorboard").exists()


def _mixed_file(folder, **params) -> str:
    """``mixed`` with other parameters, as a workload file (same shape, other network)."""
    from mabp_gym.core.fileformat import workload_to_dict

    path = folder / "mixed_other.json"
    path.write_text(json.dumps(workload_to_dict(make_workload("mixed", **params))))
    return str(path)


def test_gnn__checkpoint_for_another_shape_is_refused(tmp_path):
    from mabp_gym.agents.gnn import save_checkpoint

    wl = make_workload("mixed")
    model = GNNScheduler(observation_dims(ObservationEncoder(wl).layout), hidden=8, layers=1)
    path = tmp_path / "g.pt"
    save_checkpoint(path, model, wl)
    with pytest.raises(ValueError, match=r"trained on workload 'mixed'.*'rag' has shape"):
        make_policy("gnn", make_workload("rag"), checkpoint=path)
    with pytest.raises(ValueError, match="no GNN checkpoint"):
        make_policy("gnn", wl, checkpoint=tmp_path / "missing.pt")


def test_gnn__relabelling_nodes_permutes_its_scores():
    wl = make_workload("mixed", load=0.7)
    obs = observation(wl, slots=40)
    torch.manual_seed(0)
    model = GNNScheduler(observation_dims(ObservationEncoder(wl).layout), hidden=16, layers=2)
    model.eval()
    n = obs["node_features"].shape[0]
    perm = np.random.default_rng(1).permutation(n)  # new node k is old node perm[k]
    inverse = np.argsort(perm)
    relabelled = dict(obs)
    for key in ("node_features", "queues", "memory"):
        relabelled[key] = obs[key][perm]
    relabelled["edge_index"] = inverse[obs["edge_index"]]
    relabelled["service_index"] = obs["service_index"].copy()
    relabelled["service_index"][0] = inverse[obs["service_index"][0]]
    relabelled["retain_index"] = obs["retain_index"].copy()
    relabelled["retain_index"][0] = inverse[obs["retain_index"][0]]
    # Candidates also listed in another order: the scores follow them.
    order = np.random.default_rng(2).permutation(obs["service"].shape[0])
    relabelled["service"] = obs["service"][order]
    relabelled["service_index"] = relabelled["service_index"][:, order]
    with torch.no_grad():
        a = model.scores({k: torch.as_tensor(v) for k, v in obs.items()})[0]
        b = model.scores({k: torch.as_tensor(v) for k, v in relabelled.items()})[0]
    a_service, b_service = a[: len(order)], b[: len(order)]
    assert torch.allclose(a_service[order], b_service, atol=1e-5)
    assert torch.allclose(a[len(order) :], b[len(order) :], atol=1e-5)


def test_gnn__scores_a_batch_of_vector_env_observations_in_one_pass(tmp_path):
    from mabp_gym.agents.gnn import save_checkpoint

    wl = make_workload("mixed")
    model = GNNScheduler(observation_dims(ObservationEncoder(wl).layout), hidden=8, layers=1)
    save_checkpoint(tmp_path / "g.pt", model, wl)
    policy = make_policy("gnn", wl, checkpoint=tmp_path / "g.pt")
    envs = gym.make_vec("mabp_gym/Mixed-v0", num_envs=3, vectorization_mode="sync")
    obs, _ = envs.reset(seed=0)
    batch = policy.scores_batch(obs)
    assert batch.shape == (3, wl.index.num_scores)
    single = policy.scores({k: v[1] for k, v in obs.items()})
    assert np.allclose(batch[1], single, atol=1e-6)
    envs.step(batch)
    envs.close()


def test_learn_mabp__exact_primitives_reproduce_mabp():
    wl = make_workload("mixed", load=0.6)
    ix = wl.index
    exact = PrimitiveEstimate(
        ix.work.copy(),
        ix.penalty.copy(),
        ix.successor_law[:, :, :-1].copy(),
        np.ones((2, ix.num_actions), bool),
        np.ones((2, ix.num_actions)),
    )
    learned, mabp = LearnMABP(wl, exact), make_policy("mabp", wl)
    sim = Simulator(wl)
    sim.reset(4)
    encoder = ObservationEncoder(wl)
    for _ in range(60):
        obs = encoder.encode(sim.state)
        a, b = learned.scores(obs), mabp.scores(obs)
        assert np.allclose(a, b)
        sim.step_scores(b)


def test_learn_mabp__scores_with_the_estimate_passed_as_mabps_primitives():
    wl = make_workload("mixed", load=0.6)
    ix = wl.index
    # An estimate that differs from the truth: every work doubled.
    estimate = PrimitiveEstimate(
        2.0 * ix.work,
        ix.penalty.copy(),
        ix.successor_law[:, :, :-1].copy(),
        np.ones((2, ix.num_actions), bool),
        np.ones((2, ix.num_actions)),
    )
    learned = LearnMABP(wl, estimate)
    assert learned.primitives.work is estimate.work and learned.primitives.law is estimate.law
    explicit = MABP(wl, primitives=estimate.primitives())
    # The estimated penalty is what was observed: the reuse switch does not replace it.
    no_reuse = LearnMABP(wl, estimate, reuse=False)
    assert no_reuse.primitives.penalty is estimate.penalty
    truth = MABP(wl)
    sim = Simulator(wl)
    sim.reset(5)
    encoder = ObservationEncoder(wl)
    differs = False
    for _ in range(30):
        obs = encoder.encode(sim.state)
        a = learned.scores(obs)
        assert np.array_equal(a, explicit.scores(obs))
        assert np.array_equal(a, no_reuse.scores(obs))
        b = truth.scores(obs)
        differs |= not np.array_equal(a, b)
        sim.step_scores(b)
    assert differs
    with pytest.raises(TypeError, match="from estimate"):
        LearnMABP(wl, estimate, primitives=estimate.primitives())


def test_learn_mabp__fit_recovers_seen_pairs_and_uses_miss_primitives_for_unseen():
    wl = make_workload("mixed")
    ix = wl.index
    assisted = np.flatnonzero(ix.action_signature >= 0)
    a, b = int(assisted[0]), int(assisted[1])
    c = int(np.flatnonzero(ix.successor_law[0, a, :-1])[0])
    units = (
        [(a, 0, c, ix.work[0, a], ix.penalty[0, a])] * 3
        + [(a, 0, -1, ix.work[0, a], ix.penalty[0, a])]
        + [(b, 1, -1, ix.work[1, b], ix.penalty[1, b])] * 2
    )
    estimate = PrimitiveEstimate.fit(wl, units)
    assert estimate.seen[0, a] and not estimate.seen[1, a]
    assert estimate.law[0, a, c] == pytest.approx(0.75)
    assert estimate.work[0, a] == ix.work[0, a] and estimate.penalty[0, a] == ix.penalty[0, a]
    # (a, hit) was never seen: it falls back to a's miss primitives.
    assert estimate.work[1, a] == estimate.work[0, a]
    assert np.array_equal(estimate.law[1, a], estimate.law[0, a])
    errors = estimate.errors(wl)
    assert errors["work_abs_error"] == 0.0 and errors["pairs_seen"] == 2


@pytest.mark.examples
def test_learn_mabp__training_entry_point_fits_and_reports_errors(tmp_path):
    from mabp_gym.training.learn_mabp import main

    report = main(
        [
            "--explore-loads",
            "0.5",
            "--explore-slots",
            "150",
            "--eval-loads",
            "0.3",
            "--eval-seeds",
            "1",
            "--no-progress",
            "--out",
            str(tmp_path),
        ]
    )
    assert report["errors"]["work_abs_error"] < 1e-9
    assert report["errors"]["successor_tv_mean"] < 0.3
    assert set(report["stable_load"]) == {"mabp", "learn-mabp"}
    policy = make_policy("learn-mabp", make_workload("mixed"), checkpoint=report["checkpoint"])
    assert policy.estimate.seen.sum() == report["errors"]["pairs_seen"]
    with pytest.raises(ValueError, match="has shape"):
        make_policy("learn-mabp", make_workload("moe"), checkpoint=report["checkpoint"])


def test_shipped_checkpoints__load_right_after_install():
    env = gym.make("mabp_gym/Mixed-v0")
    obs, _ = env.reset(seed=0)
    for name in ("gnn", "learn-mabp"):
        policy = make_policy(name, env)
        scores = policy.scores(obs)
        assert scores.shape == env.action_space.shape and np.all(np.isfinite(scores))


def test_resolve_device__auto_and_bad_values():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    assert resolve_device(torch.device("cpu")) == "cpu"  # was an AttributeError (startswith)
    with pytest.raises(ValueError, match="device must be"):
        resolve_device(0)


def test_learned_policies__a_batch_a_bad_checkpoint_and_a_file_workloads_hint(tmp_path):
    from pathlib import Path

    from mabp_gym.agents.decentralized import local_policies

    env = gym.make("mabp_gym/SFMSN-v0")
    vec = gym.make_vec("mabp_gym/SFMSN-v0", num_envs=2)
    batch, _ = vec.reset(seed=0)
    # GNN's scores() scored env 0 of a batch and dropped the rest without a word.
    with pytest.raises(ValueError, match="scores one env's observation, got a batch of 2"):
        make_policy("gnn", env).scores(batch)
    with pytest.raises(ValueError, match="checkpoint must be a file path, got 123"):
        make_policy("gnn", env, checkpoint=123)
    with pytest.raises(ValueError, match="local_policies takes the decentralized view"):
        local_policies("mabp", env)
    # A workload file's name field is no workload name: the hint names the file instead.
    import dataclasses

    from mabp_gym.core.fileformat import save_workload

    path = tmp_path / "relay.json"
    relay = dataclasses.replace(mabp_gym.make_workload("multihop", nodes=12), name="relay12")
    save_workload(relay, path)
    env = gym.make("mabp_gym/SFMSN-v0", workload=str(path))
    with pytest.raises(ValueError, match="--workload <its workload file>"):
        make_policy("residual-mabp", env)
    # A shipped example file is held out of training: no command is suggested for it.
    example = Path(mabp_gym.__file__).parent / "examples" / "codeassist.json"
    env = gym.make("mabp_gym/SFMSN-v0", workload=str(example))
    with pytest.raises(ValueError, match="none is trained for it: the shipped example file"):
        make_policy("residual-mabp", env)
    # On a network that cannot hold memory the correction does not act: none is needed.
    example = Path(mabp_gym.__file__).parent / "examples" / "multihop14.json"
    env = gym.make("mabp_gym/SFMSN-v0", workload=str(example))
    with pytest.raises(ValueError, match="none is needed: multihop14 cannot hold memory"):
        make_policy("residual-mabp", env)
    # A network with a checkpoint of its name but other parameters: the refusal names
    # them, why none is trained where the benchmark holds it out, and what runs anywhere.
    for workload, why in (
        (mabp_gym.make_workload("mixed", beta=0.125), r"0\.125 here \(use `residual-mabp-any`"),
        (mabp_gym.make_workload("multihop", nodes=100), r"held out by .* `residual-mabp-any`"),
    ):
        for name in ("gnn", "residual-mabp"):
            if name == "gnn" and workload.name == "multihop":
                continue  # no GNN checkpoint for multihop: the missing-file refusal
            with pytest.raises(ValueError, match=why):
                make_policy(name, workload)
    # A frame-MABP correction made for one network points at frame-MABP's own family
    # policy, not at the correction over MABP.
    from mabp_gym.agents.residual_mabp import FEATURES, save

    one = tmp_path / "frame_mixed.pt"
    save(one, np.zeros(len(FEATURES)), mabp_gym.make_workload("mixed"), base="frame-mabp")
    with pytest.raises(ValueError, match=r"'rag' .*\(use `residual-frame-mabp` with its shipped"):
        make_policy("residual-frame-mabp", mabp_gym.make_workload("rag"), checkpoint=one)
    # The family policies' missing file points at a family training, over their base.
    missing = tmp_path / "none.pt"
    for name, command in (
        ("residual-mabp-any", "train residual-mabp --family"),
        ("residual-frame-mabp", "train residual-mabp --base frame-mabp --family"),
    ):
        with pytest.raises(ValueError, match=f"no {name} checkpoint at .*`mabp-gym {command}"):
            make_policy(name, mabp_gym.make_workload("mixed"), checkpoint=missing)
