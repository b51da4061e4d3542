"""Residual-MABP: zero correction is MABP exactly, the checkpoint round
trip and its refusals, the training entry point, and the shipped checkpoints' verdict."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from mabp_gym import Simulator, make_workload  # noqa: E402
from mabp_gym.agents import make_policy  # noqa: E402
from mabp_gym.agents.residual_mabp import FEATURES, ResidualMABP, load, save  # noqa: E402
from mabp_gym.core.encoding import ObservationEncoder  # noqa: E402
from mabp_gym.core.workloads import WORKLOADS  # noqa: E402


def controls(policy, workload, seed: int, slots: int):
    """The scores and the executed controls of ``slots`` slots, in order."""
    sim = Simulator(workload, check_invariants=True)
    sim.reset(seed)
    encoder = ObservationEncoder(workload)
    policy.reset(seed)
    out = []
    for _ in range(slots):
        scores = policy.scores(encoder.encode(sim.state))
        control, _ = sim.step_scores(scores)
        out.append((scores, control))
    return out


@pytest.mark.parametrize("name", WORKLOADS)
def test_zero_correction_is_mabp_slot_for_slot(name):
    workload = make_workload(name, load=0.9)
    mabp = controls(make_policy("mabp", workload), workload, seed=3, slots=120)
    residual = controls(
        make_policy("residual-mabp", workload, weights=[0.0] * len(FEATURES)), workload, 3, 120
    )
    for (s_a, c_a), (s_b, c_b) in zip(mabp, residual, strict=True):
        np.testing.assert_array_equal(s_a, s_b)
        for field in ("transfers", "route", "service", "start", "retain"):
            np.testing.assert_array_equal(getattr(c_a, field), getattr(c_b, field))


def test_a_correction_changes_the_scores_of_the_candidates_it_reads():
    workload = make_workload("mixed", load=0.9)
    weights = np.zeros(len(FEATURES))
    weights[FEATURES.index("service.hit")] = 5.0
    zero, hit = ResidualMABP(workload), ResidualMABP(workload, weights=weights)
    sim = Simulator(workload)
    sim.reset(0)
    encoder = ObservationEncoder(workload)
    for _ in range(50):  # queues and a resident object
        sim.step_scores(zero.scores(encoder.encode(sim.state)))
    obs = encoder.encode(sim.state)
    zero.reset(0), hit.reset(0)
    delta = hit.scores(obs) - zero.scores(obs)
    service = delta[workload.index.score_slices[0]]
    bonus = (obs["service"][:, 2] > 0.5) & (obs["service"][:, 4] > 0)
    assert bonus.any()
    np.testing.assert_allclose(service[bonus], 5.0)
    np.testing.assert_allclose(service[~bonus], 0.0)
    assert not delta[workload.index.score_slices[0].stop :].any()


@pytest.mark.parametrize(
    "weights", [[1.0], [np.nan] * len(FEATURES), ["a"] * len(FEATURES), [[1.0, 2.0]]]
)
def test_bad_weights_are_refused_with_the_features_named(weights):
    with pytest.raises(ValueError, match="service.hit"):
        ResidualMABP(make_workload("mixed"), weights=weights)


def test_checkpoint_round_trip_and_refusals(tmp_path):
    mixed = make_workload("mixed")
    weights = np.arange(len(FEATURES), dtype=np.float64) / 10
    path = tmp_path / "residual.pt"
    save(path, weights, mixed, env_steps=123)
    loaded, meta = load(path, mixed)
    np.testing.assert_array_equal(loaded, weights)
    assert meta["env_steps"] == 123 and meta["features"] == list(FEATURES)
    policy = make_policy("residual-mabp", mixed, checkpoint=str(path))
    np.testing.assert_array_equal(policy.weights, weights)
    with pytest.raises(ValueError, match="made for workload 'mixed'"):
        load(path, make_workload("mixed", K=5))
    with pytest.raises(ValueError, match="no residual-mabp checkpoint"):
        load(tmp_path / "missing.pt", mixed)
    with pytest.raises(ValueError, match="not both"):
        make_policy("residual-mabp", mixed, checkpoint=str(path), weights=weights)


def test_training_entry_point_searches_saves_and_refuses_evaluation_seeds(tmp_path):
    from mabp_gym.training import residual_mabp as learner

    args = learner.parse(
        [
            "--slots", "150", "--rounds", "1", "--population", "3", "--elite", "2",
            "--train-seeds", "20", "--out", str(tmp_path), "--no-progress",
        ]
    )  # fmt: skip
    report = learner.train(args)
    assert report["env_steps"] == (1 + 1 * 3) * 1 * 150
    weights, meta = load(report["checkpoint"], make_workload("mixed"))
    assert weights.shape == (len(FEATURES),) and meta["command"].startswith("mabp-gym train")
    # The search keeps the best candidate, and the mean (zero: MABP) is one of them.
    assert report["train"]["p95_delay_all"] <= report["base_train"]["p95_delay_all"]
    for argv, message in (
        (["--train-seeds", "9000"], "evaluation seeds"),
        (["--elite", "5", "--population", "4"], "--elite"),
        (["--init-std", "0"], "--init-std"),
        (["--rounds", "0"], "--rounds"),
        (["--slots", "5"], "--slots 5: .* after the warm-up"),
        (["--loads", "0"], "--loads must be > 0"),
        (["--train-seeds", "1", "2", "1"], r"--train-seeds repeats \[1\]"),
    ):
        with pytest.raises(ValueError, match=message):
            learner.parse([*argv, "--out", str(tmp_path)])


def test_example_evaluation_table_runs_on_a_checkpoint(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "residual_mabp_mixed.pt"
    save(path, np.eye(len(FEATURES))[0] * 4.0, make_workload("mixed"))
    result = subprocess.run(
        [
            sys.executable, "examples/residual_mabp_eval.py", "--checkpoints", str(path),
            "--loads", "0.9", "--seeds", "9000", "--horizon", "300",
            "--out", str(tmp_path / "r.jsonl"),
        ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in lines[2:]] == [
        "| mabp",
        "| frame-mabp",
        f"| residual-mabp ({tmp_path.name})",
    ]
    assert "| 1.00x |" in lines[2]


def test_a_family_checkpoint_runs_on_every_network_and_a_single_one_does_not(tmp_path):
    weights = np.arange(len(FEATURES), dtype=np.float64) / 10
    family, single = tmp_path / "family.pt", tmp_path / "single.pt"
    save(family, weights, None, family=["mixed@0.9"])
    save(single, weights, make_workload("mixed"))
    for name in ("moe", "multihop", "rag"):
        workload = make_workload(name)
        policy = make_policy("residual-mabp-any", workload, checkpoint=str(family))
        np.testing.assert_array_equal(policy.weights, weights)
        # The per-workload name reads a family checkpoint too, given as a file.
        policy = make_policy("residual-mabp", workload, checkpoint=str(family))
        np.testing.assert_array_equal(policy.weights, weights)
    with pytest.raises(ValueError, match="trained for one workload; residual-mabp-any"):
        make_policy("residual-mabp-any", make_workload("mixed"), checkpoint=str(single))
    with pytest.raises(ValueError, match="made for workload 'mixed'"):
        make_policy("residual-mabp", make_workload("rag"), checkpoint=str(single))


def test_the_shipped_family_checkpoint_loads_on_a_held_out_network():
    from mabp_gym.harness.bench import EXAMPLE_FILE

    for workload, acting in ((make_workload("moe"), True), (make_workload(EXAMPLE_FILE), False)):
        policy = make_policy("residual-mabp-any", workload)
        assert policy.weights.shape == (len(FEATURES),) and policy.weights.any()
        assert policy.acting == acting  # the file's network has no memory: MABP there
    _, meta = load(_shipped("residual_mabp_any.pt"), make_workload("moe"))
    assert meta["networks"] == "any" and meta["family"] and meta["env_steps"] > 0


def _shipped(name: str):
    from mabp_gym.registry import checkpoint_path

    path = checkpoint_path("residual-mabp-any", {}, "any")
    assert path is not None and path.name == name
    return path


def test_family_training_saves_one_checkpoint_for_every_network(tmp_path):
    from mabp_gym.training import residual_mabp as learner

    args = learner.parse(
        [
            "--family", "mixed@0.9", "multihop@0.3,nodes=12", "--slots", "150",
            "--rounds", "1", "--population", "2", "--elite", "1", "--train-seeds", "20",
            "--out", str(tmp_path), "--no-progress",
        ]
    )  # fmt: skip
    report = learner.train(args)
    assert report["env_steps"] == (1 + 1 * 2) * 2 * 150
    assert report["checkpoint"].endswith("residual_mabp_any.pt")
    _, meta = load(report["checkpoint"], make_workload("rag"))
    assert meta["networks"] == "any"
    assert meta["family"] == ["mixed@0.9", "multihop@0.3,nodes=12"]
    assert "--family mixed@0.9 multihop@0.3,nodes=12" in meta["command"]
    # MABP is the start of the search, scored against itself: cost 1 where nothing grows.
    assert report["train"]["cost"] <= 1.0 + report["train"]["grows"]
    for member, message in (
        ("moe@0.8", "moe is a held-out network"),
        ("multihop@0.3,nodes=100", "100 nodes or more are held out"),
        ("mixed0.9", "must read WORKLOAD@LOAD"),
        ("mixed@0.9,K", "'K' is not key=value"),
        ("mixed@0.9,K=big", "'big' is not a number"),
        ("mixed@0.9,zzz=1", "unknown parameter"),
    ):
        with pytest.raises(ValueError, match=message):
            learner.parse(["--family", member, "--out", str(tmp_path)])
    variants = ["--family", "mixed@0.9", "mixed@0.8,beta=0.125", "--base", "frame-mabp"]
    one_workload = learner.parse([*variants, "--out", str(tmp_path)])
    assert learner.checkpoint_name(one_workload) == "residual_frame_mabp_mixed.pt"
    import dataclasses

    from mabp_gym.core.fileformat import save_workload

    relay = dataclasses.replace(make_workload("multihop", nodes=12), name="relay12")
    save_workload(relay, tmp_path / "relay.json")  # a file workload: named by its own name
    from_file = learner.parse(["--workload", str(tmp_path / "relay.json"), "--out", str(tmp_path)])
    assert learner.checkpoint_name(from_file) == "residual_mabp_relay12.pt"


@pytest.mark.parametrize("learner_name", ["residual_mabp", "learn_mabp", "gnn"])
def test_every_trainer_refuses_the_held_out_networks(tmp_path, learner_name):
    import importlib

    from mabp_gym.core.held_out import CODEASSIST_FILE
    from mabp_gym.harness.bench import EXAMPLE_FILE

    learner = importlib.import_module(f"mabp_gym.training.{learner_name}")
    for workload, message in (
        ("moe", "held-out network"),
        (EXAMPLE_FILE, "example file multihop14.json"),
        (CODEASSIST_FILE, "example file codeassist.json"),
    ):
        with pytest.raises(ValueError, match=message):
            learner.parse(["--workload", workload, "--out", str(tmp_path)])


def test_example_evaluation_runs_a_family_checkpoint_on_an_overridden_network(tmp_path):
    import subprocess
    import sys

    path, zero = tmp_path / "residual_mabp_any.pt", tmp_path / "zero.pt"
    save(path, np.eye(len(FEATURES))[4] * 5.0, None, family=["mixed@0.9"])
    save(zero, np.zeros(len(FEATURES)), None, family=["mixed@0.9"])
    result = subprocess.run(
        [
            sys.executable, "examples/residual_mabp_eval.py", "--workload", "multihop",
            "--set", "nodes=12", "--checkpoints", str(path), str(zero), "--loads", "0.3",
            "--seeds", "9000", "--horizon", "300", "--out", str(tmp_path / "r.jsonl"),
        ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert result.stdout.startswith("multihop nodes=12, seeds 9000-9000, 300 slots")
    # Two checkpoints of one folder: each row named by its path, not both by the folder.
    for checkpoint in (path, zero):
        assert f"| residual-mabp ({checkpoint}) | 0.30 |" in result.stdout
    assert f"| residual-mabp ({tmp_path.name}) |" not in result.stdout
    bad = subprocess.run(
        [
            sys.executable, "examples/residual_mabp_eval.py", "--checkpoints", str(path),
            "--set", "nodes",
        ],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "give KEY=VALUE" in bad.stderr


def executed_controls(policy, workload, seed: int, slots: int):
    from mabp_gym.rollout import episode

    sim = Simulator(workload, check_invariants=True)
    sim.reset(seed)
    policy.reset(seed)
    return [slot.decision for slot in episode(sim, policy, slots)]


@pytest.mark.parametrize("name", ["mixed", "multihop"])
def test_residual_frame_mabp_with_zero_weights_is_frame_mabp_and_weights_change_it(name):
    workload = make_workload(name, load=0.9, **({"nodes": 12} if name == "multihop" else {}))
    frame = executed_controls(make_policy("frame-mabp", workload), workload, 5, 150)
    zero = make_policy("residual-frame-mabp", workload, weights=[0.0] * len(FEATURES))
    assert zero.name == "residual-frame-mabp"
    for a, b in zip(frame, executed_controls(zero, workload, 5, 150), strict=True):
        for field in ("transfers", "route", "service", "start", "retain"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    routed = make_policy("residual-frame-mabp", workload, weights=np.eye(len(FEATURES))[5] * -20)
    changed = executed_controls(routed, workload, 5, 150)
    assert any(not np.array_equal(a.route, b.route) for a, b in zip(frame, changed, strict=True))


def test_residual_frame_mabp_keeps_what_frame_mabp_holds_back():
    from mabp_gym.agents.residual_mabp import correct
    from mabp_gym.core.projection import project

    workload = make_workload("mixed", load=0.9)
    sim = Simulator(workload)
    sim.reset(2)
    encoder = ObservationEncoder(workload)
    frame = make_policy("frame-mabp", workload)
    frame.reset(2)
    weights = np.full(len(FEATURES), 50.0)
    service = frame.slices[0]
    held_back_seen = 0
    for _ in range(200):
        obs = encoder.encode(sim.state)
        base = frame.scores(obs)
        corrected = base.copy()
        correct(weights, obs, frame.slices, corrected, live_only=True)
        held_back = base[service] <= 0
        held_back_seen += int(held_back.sum())
        np.testing.assert_array_equal(corrected[service][held_back], base[service][held_back])
        live = ~held_back & (np.asarray(obs["service"])[:, 4] > 0)
        assert (corrected[service][live] != base[service][live]).all()
        sim.step(project(workload, sim.state, base))
    assert held_back_seen > 0


def test_a_checkpoint_names_its_base_and_the_other_policy_refuses_it(tmp_path):
    weights = np.arange(len(FEATURES), dtype=np.float64) / 10
    over_frame, over_mabp = tmp_path / "frame.pt", tmp_path / "mabp.pt"
    save(over_frame, weights, None, base="frame-mabp")
    save(over_mabp, weights, None)
    rag = make_workload("rag")
    policy = make_policy("residual-frame-mabp", rag, checkpoint=str(over_frame))
    np.testing.assert_array_equal(policy.weights, weights)
    with pytest.raises(ValueError, match=r"learned over frame-mabp; .*\(use residual-frame-mabp\)"):
        make_policy("residual-mabp-any", rag, checkpoint=str(over_frame))
    with pytest.raises(ValueError, match="learned over mabp; this policy corrects frame-mabp"):
        make_policy("residual-frame-mabp", rag, checkpoint=str(over_mabp))


def test_training_over_frame_mabp_saves_a_frame_checkpoint(tmp_path):
    from mabp_gym.training import residual_mabp as learner

    args = learner.parse(
        [
            "--base", "frame-mabp", "--slots", "150", "--rounds", "1", "--population", "2",
            "--elite", "1", "--train-seeds", "20", "--out", str(tmp_path), "--no-progress",
        ]
    )  # fmt: skip
    report = learner.train(args)
    assert report["checkpoint"].endswith("residual_frame_mabp_mixed.pt")
    weights, meta = load(report["checkpoint"], make_workload("mixed"), base="frame-mabp")
    assert meta["base"] == "frame-mabp" and "--base frame-mabp" in meta["command"]
    # The recorded command can be typed again: it parses back to the same arguments (an
    # unset --init is left out, not written as an option with no value).
    assert learner.parse(meta["command"].split()[3:]) == args
    with pytest.raises(ValueError, match="--base must be one of mabp, frame-mabp"):
        learner.parse(["--base", "bp", "--out", str(tmp_path)])


def test_the_penalty_ceiling_binds_the_mean_or_every_network():
    from mabp_gym.training.residual_mabp import PENALTY_MARGIN, ResidualArgs, objective

    def run(delay, penalty):
        return {"p95_delay_all": delay, "penalty_per_arrival": penalty, "growth": 0.0}

    runs = [run(50.0, 1.2), run(100.0, 0.6)]  # two networks, one training seed each
    reference = [run(100.0, 1.0), run(100.0, 1.0)]
    mean = ResidualArgs(family=["a@1", "b@1"], train_seeds=[20])
    each = ResidualArgs(family=["a@1", "b@1"], train_seeds=[20], penalty_each=True)
    geo = np.sqrt(0.5 * 1.0)
    assert objective(mean, runs, reference)["cost"] == pytest.approx(geo)  # mean ratio 0.9
    over = 1.2 / PENALTY_MARGIN - 1.0
    assert objective(each, runs, reference)["cost"] == pytest.approx(geo * (1 + 100 * over))
    assert objective(each, reference, None)["cost"] == pytest.approx(1.0)  # the base itself
    floored = ResidualArgs(family=["a@1", "b@1"], train_seeds=[20], delay_floor=0.8)
    assert objective(floored, runs, reference)["cost"] == pytest.approx(np.sqrt(0.8 * 1.0))
    slower = [run(50.0, 0.6), run(110.0, 0.6)]  # faster on one network, slower on the other
    capped = ResidualArgs(family=["a@1", "b@1"], train_seeds=[20], delay_ceiling=1.0)
    geo = np.sqrt(0.5 * 1.1)
    assert objective(mean, slower, reference)["cost"] == pytest.approx(geo)
    assert objective(capped, slower, reference)["cost"] == pytest.approx(geo * (1 + 100 * 0.1))
    assert objective(capped, runs, reference)["cost"] == objective(mean, runs, reference)["cost"]
    tight = ResidualArgs(family=["a@1", "b@1"], train_seeds=[20], delay_ceiling=0.8)
    over = 1.0 / 0.8 - 1.0  # the slower network of `runs` is at 1.0
    expected = np.sqrt(0.5) * (1 + 100 * over)
    assert objective(tight, runs, reference)["cost"] == pytest.approx(expected)
    # The base pays the ceiling too: kept as the best, it would hide every candidate that
    # cuts the delay but not below the ceiling on every network.
    assert objective(tight, reference, None)["cost"] == pytest.approx(1 + 100 * over)
    assert objective(capped, reference, None)["cost"] == pytest.approx(1.0)
    from mabp_gym.training import residual_mabp as learner

    # Held as a filter, the penalty ceiling is not traded for delay: a candidate over it
    # ranks after one within it however slow, the more over the later.
    filtered = ResidualArgs(
        family=["a@1", "b@1"], train_seeds=[20], penalty_each=True, penalty_filter=True,
        delay_ceiling=0.8,
    )  # fmt: skip
    fast_over = [run(10.0, 1.2), run(10.0, 1.0)]  # 10x faster, 21% over the ceiling
    slow_within = [run(300.0, 0.9), run(300.0, 0.9)]  # 3x slower, within it
    further_over = [run(10.0, 1.5), run(10.0, 1.0)]
    costs = [objective(filtered, r, reference)["cost"] for r in (slow_within, fast_over)]
    assert costs[0] < costs[1] < objective(filtered, further_over, reference)["cost"]
    within = objective(filtered, slow_within, reference)["cost"]
    assert within == pytest.approx(3.0 * (1 + 100 * (3.0 / 0.8 - 1.0)))  # the ceiling's term
    assert objective(filtered, reference, None)["cost"] == pytest.approx(1 + 100 * 0.25)
    assert learner.parse(["--penalty-filter", "--out", "unused"]).penalty_filter

    with pytest.raises(ValueError, match=r"--delay-floor must be in \[0, 1\)"):
        learner.parse(["--delay-floor", "1", "--out", "unused"])
    with pytest.raises(ValueError, match="--delay-ceiling must be a number >= 0"):
        learner.parse(["--delay-ceiling", "-1", "--out", "unused"])


def test_the_objective_doubles_the_cost_for_a_run_that_grows():
    from mabp_gym.core.metrics import GROWTH_LIMIT
    from mabp_gym.training.residual_mabp import ResidualArgs, objective

    def run(delay, growth, penalty=0.9):
        return {"p95_delay_all": delay, "penalty_per_arrival": penalty, "growth": growth}

    # Two networks, one seed each, delay ratios 0.5 and 1 (geometric mean sqrt(0.5)), the
    # penalty within its ceiling; one run at the growth limit counts as growing: the cost
    # is then (1 + 1) times the ratios' geometric mean.
    args = ResidualArgs(family=["a@1", "b@1"], train_seeds=[20])
    reference = [run(100.0, 0.0, 1.0), run(100.0, 0.0, 1.0)]
    stable = objective(args, [run(50.0, 0.0), run(100.0, 0.0)], reference)
    grows = objective(args, [run(50.0, 0.0), run(100.0, GROWTH_LIMIT)], reference)
    assert stable["cost"] == pytest.approx(np.sqrt(0.5)) and stable["grows"] == 0
    assert grows["cost"] == pytest.approx(2 * np.sqrt(0.5)) and grows["grows"] == 1


def test_the_shipped_frame_checkpoint_is_over_frame_mabp_and_runs_anywhere():
    from mabp_gym.registry import checkpoint_path

    path = checkpoint_path("residual-frame-mabp", {}, "any")
    assert path is not None and path.name == "residual_frame_mabp_any.pt"
    weights, meta = load(path, make_workload("moe"), base="frame-mabp")
    assert meta["networks"] == "any" and meta["base"] == "frame-mabp" and weights.any()
    assert "--base frame-mabp" in meta["command"] and meta["env_steps"] > 0
    for name in ("moe", "agentic"):
        policy = make_policy("residual-frame-mabp", make_workload(name))
        np.testing.assert_array_equal(policy.weights, weights)
    # One checkpoint serves every network, mixed's tight budget included; it was trained
    # with the penalty held at frame-MABP's on each network of its family.
    assert meta["args"]["penalty_each"] and "--penalty-each" in meta["command"]
    for overrides in ({}, {"beta": 0.125}):
        policy = make_policy("residual-frame-mabp", make_workload("mixed", **overrides))
        np.testing.assert_array_equal(policy.weights, weights)
    assert checkpoint_path("residual-frame-mabp", {}, "mixed") == path


def test_init_starts_the_search_at_a_checkpoint_of_the_same_base(tmp_path):
    from mabp_gym.registry import checkpoint_path
    from mabp_gym.training import residual_mabp as learner

    start = np.linspace(-1.0, 1.0, len(FEATURES))
    path = tmp_path / "start.pt"
    save(path, start, make_workload("rag"), base="frame-mabp")  # another workload's: allowed
    common = ["--slots", "150", "--rounds", "1", "--population", "1", "--elite", "1"]
    common += ["--train-seeds", "20", "--no-progress", "--base", "frame-mabp"]
    args = learner.parse([*common, "--init", str(path), "--out", str(tmp_path / "run")])
    report = learner.train(args)
    assert report["history"][0]["weights"] == start.round(4).tolist()  # the first centre
    assert f"--init {path}" in report["command"]
    shipped = checkpoint_path("residual-frame-mabp", {}, "any")
    expected = load(shipped, None, base="frame-mabp")[0]
    from_any = learner.initial_weights(learner.parse([*common, "--init", "any"]))
    assert np.array_equal(from_any, expected)
    with pytest.raises(ValueError, match="--init .*none.pt: no such file"):
        learner.parse([*common, "--init", str(tmp_path / "none.pt")])
    with pytest.raises(ValueError, match="learned over frame-mabp; this policy corrects mabp"):
        learner.parse([*common[:-2], "--init", str(path)])


def trajectory(policy, workload, seed: int, slots: int):
    """What each slot did (routed, served, backlog, delays): equal runs from one seed."""
    from mabp_gym.rollout import episode

    sim = Simulator(workload, check_invariants=True)
    sim.reset(seed)
    policy.reset(seed)
    return [
        (s.outcome.routed, s.outcome.served, s.outcome.backlog, s.outcome.delays)
        for s in episode(sim, policy, slots)
    ]


@pytest.mark.parametrize(
    "policy, base", [("residual-mabp", "mabp"), ("residual-frame-mabp", "frame-mabp")]
)
def test_on_a_network_without_memory_the_correction_is_off_and_the_policy_is_its_base(policy, base):
    from mabp_gym.agents.residual_mabp import holds_memory

    # A route-queue weight that does change a memoryless network's run when it acts.
    weights = np.eye(len(FEATURES))[FEATURES.index("route.log_queue")] * -20
    memoryless = make_workload("multihop", nodes=12, memory=0, load=0.9)
    assert not holds_memory(memoryless) and holds_memory(make_workload("multihop", nodes=12))
    corrected = make_policy(policy, memoryless, weights=weights)
    assert not corrected.acting
    base_run = trajectory(make_policy(base, memoryless), memoryless, 5, 200)
    assert trajectory(corrected, memoryless, 5, 200) == base_run
    corrected.acting = True  # the same weights, forced on: the check above can fail
    assert trajectory(corrected, memoryless, 5, 200) != base_run


def test_training_refuses_a_network_without_memory(tmp_path):
    from mabp_gym.training import residual_mabp as learner

    member = "multihop@0.5,memory=0,nodes=12"
    with pytest.raises(
        ValueError, match=f"--family member '{member}': the network cannot hold memory"
    ):
        learner.parse(["--family", "mixed@0.9", member, "--out", str(tmp_path)])
    path = _relay_file(tmp_path)
    with pytest.raises(ValueError, match="--workload .*relay.json: .*nothing to train"):
        learner.parse(["--workload", str(path), "--out", str(tmp_path)])
    learner.parse(["--family", "mixed@0.9", "multihop@0.5,nodes=12", "--out", str(tmp_path)])


def test_the_correction_is_off_with_memory_off_or_where_no_object_fits():
    from mabp_gym.agents.residual_mabp import holds_memory

    weights = np.eye(len(FEATURES))[FEATURES.index("route.log_queue")] * -20
    mixed = make_workload("mixed", load=0.9)
    assert make_policy("residual-mabp", mixed, weights=weights).acting
    # The no-memory ablation: the harness builds the policy with memory=False.
    ablation = make_policy("residual-mabp", mixed, weights=weights, memory=False)
    frame = make_policy("residual-frame-mabp", mixed, weights=weights, memory=False)
    assert not ablation.acting and not frame.acting

    def scores_run(policy):
        sim = Simulator(mixed, memory=False)
        sim.reset(4)
        policy.reset(4)
        encoder = ObservationEncoder(mixed)
        out = []
        for _ in range(80):
            out.append(policy.scores(encoder.encode(sim.state)))
            sim.step_scores(out[-1])
        return out

    base = scores_run(make_policy("mabp", mixed, memory=False))
    for a, b in zip(base, scores_run(ablation), strict=True):
        np.testing.assert_array_equal(a, b)
    ablation.acting = True  # forced on, the same weights change the scores
    assert any(not np.array_equal(a, b) for a, b in zip(base, scores_run(ablation), strict=True))
    # Budgets below every object's size: nothing can ever be held.
    assert holds_memory(mixed) and not holds_memory(make_workload("mixed", beta=0.03))
    assert not make_policy("residual-mabp-any", make_workload("mixed", beta=0.03)).acting


def test_a_missing_checkpoint_for_a_network_without_memory_says_none_is_needed(tmp_path):
    path = _relay_file(tmp_path)
    with pytest.raises(
        ValueError,
        match=r"none is needed: relay.* cannot hold memory, so residual-mabp is mabp there",
    ):
        make_policy("residual-mabp", str(path))


def _relay_file(tmp_path):
    """A workload file of a 12-node packet network without memory, named ``relay``."""
    import dataclasses

    from mabp_gym.core.fileformat import save_workload

    path = tmp_path / "relay.json"
    relay = dataclasses.replace(make_workload("multihop", nodes=12, memory=0), name="relay")
    save_workload(relay, path)
    return path


@pytest.mark.slow
def test_the_shipped_frame_checkpoint_wins_the_boards_tasks_on_the_evaluation_seeds():
    """Issue 39's target, as docs/benchmark.md reports it: paired with frame-MABP on the
    evaluation seeds 9000-9009 (4,000 slots), the shipped checkpoint is a Pareto win on
    at least four of the six main tasks; five, every task but mixed-0.95, as shipped."""
    from mabp_gym.registry import checkpoint_path
    from mabp_gym.training import selection

    path = str(checkpoint_path("residual-frame-mabp", {}, "any"))
    # selection.train compares like `train select`, whose arguments refuse these seeds:
    # evaluating on them here picks nothing.
    args = selection.SelectArgs(checkpoints=[path], seeds=list(range(9000, 9010)), workers=2)
    (row,) = selection.train(args)["checkpoints"]
    won = {task["task"] for task in row["tasks"] if task["pareto_win"]}
    assert row["wins"] >= 4
    assert won == {"mixed-0.90", "rag-0.90", "agentic-0.90", "multihop-0.50", "mixed-tight-0.80"}
