"""Benchmark v3's task suite and leaderboard: tasks, seeds, scores, and
``mabp-gym bench`` from a run and from saved results."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import mabp_gym
from mabp_gym.harness import bench


def record(policy: str, task: bench.Task, seed: int, delay: float, growth: float = 0.0):
    return {
        "policy": policy,
        "workload": task.network,
        "load": task.load,
        "overrides": dict(task.overrides),
        "seed": seed,
        "horizon": 4000,
        "growth": growth,
        "stable": growth < 0.015,
        "p95_delay_all": delay,
        "mean_backlog": delay,
        "penalty_per_arrival": 0.1,
    }


def test_tasks_and_seeds_are_checked_by_name():
    assert [t.name for t in bench.tasks_named(None)] == list(bench.TASK_NAMES)
    assert [t.name for t in bench.tasks_named(["rag-0.90", "mixed-0.90"])] == [
        "mixed-0.90",
        "rag-0.90",
    ]  # the suite's order
    with pytest.raises(ValueError, match="unknown task 'nope'; choose from mixed-0.90"):
        bench.tasks_named(["nope"])
    with pytest.raises(ValueError, match="not evaluation seeds"):
        bench.check_seeds([0, 9000])
    with pytest.raises(ValueError, match="at least one seed"):
        bench.check_seeds([])


def test_scores_are_relative_to_mabp_and_zero_where_the_backlog_grows():
    task, other = bench.TASKS[0], bench.TASKS[5]
    records = [
        *(record("mabp", task, s, 200.0 + s) for s in range(3)),
        *(record("frame-mabp", task, s, 100.0 + s / 2) for s in range(3)),
        *(record("bp", task, s, 900.0, growth=0.3) for s in range(3)),
        *(record("mabp", other, s, 300.0) for s in range(3)),
        *(record("frame-mabp", other, s, 150.0) for s in range(3)),
    ]
    rows = bench.leaderboard(records, [task, other])
    by = {(r["task"], r["policy"]): r for r in rows}
    assert [r["policy"] for r in rows if r["task"] == task.name] == ["bp", "mabp", "frame-mabp"]
    assert by[(task.name, "frame-mabp")]["score"] == pytest.approx(201.0 / 100.5)
    assert by[(task.name, "mabp")]["score"] == 1.0
    assert by[(task.name, "bp")]["score"] == 0.0 and by[(task.name, "bp")]["stable"] is False
    assert by[(other.name, "frame-mabp")]["score"] == 2.0
    # The workload's own records give the bound (mixed and its tight variant: 1.0).
    assert by[(other.name, "mabp")]["bound"] == pytest.approx(1.0)
    standings = bench.standings(rows)
    assert [s["policy"] for s in standings] == ["frame-mabp", "mabp", "bp"]
    assert standings[0]["score"] == pytest.approx((201.0 / 100.5 * 2.0) ** 0.5)
    assert standings[-1]["score"] is None and standings[-1]["stable"] == 0
    # A policy stable on some tasks only: ranked after those stable on more, its score
    # the mean over the tasks where it is stable.
    partial = bench.standings([*rows, {**by[(other.name, "frame-mabp")], "policy": "p"}])
    assert [s["policy"] for s in partial][:3] == ["frame-mabp", "mabp", "p"]
    text = bench.markdown(rows, [], [task, other])
    assert "| frame-mabp | 2 of 2 | 2.00 |" in text and "| bp | 0 of 1 | - |" in text
    # mixed's delay floor is 4 slots at P95 (test_floor checks it): 900 slots sit 225x over it.
    assert by[(task.name, "bp")]["floor_p95"] == 4.0
    assert "| bp | 3 | 900.0 ± 0.0 | 225.0x | 900.0 | 0.1000 | no | 0.00 |" in text
    assert "delay floor P95 4 slots" in text


def test_learned_policies_without_a_checkpoint_for_a_task_are_left_out_and_said_so():
    pytest.importorskip("torch")
    tasks = bench.tasks_named(["rag-0.90", "mixed-tight-0.80"])
    specs, skipped = bench.plan_bench(tasks, ["mabp", "gnn"], [9000], horizon=4000)
    assert {(s.workload, s.policy) for s in specs} == {("rag", "mabp"), ("mixed", "mabp")}
    assert [(task, policy) for task, policy, _ in skipped] == [
        ("rag-0.90", "gnn"),
        ("mixed-tight-0.80", "gnn"),
    ]
    assert "no shipped checkpoint for rag" in skipped[0][2]
    assert "the shipped checkpoints in agents/checkpoints/ only" in skipped[0][2]  # said it could
    assert "made without beta=0.125" in skipped[1][2]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mabp_gym.cli", "bench", *argv], capture_output=True, text=True
    )


def test_cli__runs_the_suite_resumes_and_prints_the_board_from_saved_results(tmp_path):
    out, board = tmp_path / "bench.jsonl", tmp_path / "board.json"
    common = ["--tasks", "mixed-0.90", "--policies", "bp", "mabp", "--seeds", "9000:9002"]
    first = cli(*common, "--out", str(out), "--no-progress", "--json", str(board))
    assert first.returncode == 0, first.stderr
    assert len(out.read_text().splitlines()) == 4
    assert "**mixed-0.90** (mixed at load 0.9, bound 1.00, delay floor P95 4 slots;" in first.stdout
    rows = json.loads(board.read_text())["rows"]
    assert {r["policy"] for r in rows} == {"bp", "mabp"}
    assert all(r["p95_delay_all"] >= r["floor_p95"] == 4.0 for r in rows)
    again = cli(*common, "--out", str(out), "--from-results")
    assert again.returncode == 0 and again.stdout == first.stdout
    assert len(out.read_text().splitlines()) == 4  # nothing ran again
    # Asked at other seeds, the error says where the file's runs are.
    elsewhere = cli(*common[:-1], "9003:9005", "--out", str(out), "--from-results")
    assert elsewhere.returncode == 2 and "it holds them at seeds 9000-9001" in elsewhere.stderr
    # Runs of a policy the board does not name are not dropped in silence.
    line = json.loads(out.read_text().splitlines()[0])
    with out.open("a") as handle:
        handle.write(json.dumps({**line, "policy": "mine:Thing", "key": "mine"}) + "\n")
    suite = cli(*common[:2], *common[5:], "--out", str(out), "--from-results")
    assert suite.returncode == 0 and "also holds runs of mine:Thing" in suite.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0:3"], "not evaluation seeds"),
        (["--horizon", "600"], "--horizon must be at least 4000"),
        (["--tasks", "nope"], "unknown task 'nope'"),
        (["--policies", "nope"], "unknown policy 'nope'"),
        (["--seeds", "a:b"], "--seeds: 'a:b' is not"),
        (["--from-results"], "--from-results needs --out"),
    ],
)
def test_cli__bad_arguments_exit_2_with_one_line(argv, message):
    result = cli(*argv)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_leaderboard__only_the_benchmarks_own_setting_and_each_run_once():
    # A results file may hold the same workload and load without memory, at another nu or
    # with the policy's own arguments: none of them is the task's run (pooled, the
    # no-memory run flipped MABP to "not stable" and every score on the task to 0).
    task = bench.TASKS[3]
    mine = [{**record("mabp", task, s, 200.0), "key": f"k{s}"} for s in range(2)]
    others = [
        {**record("mabp", task, 0, 5000.0, growth=0.5), "key": "nomem", "memory": False},
        {**record("mabp", task, 0, 5000.0, growth=0.5), "key": "nu", "nu": 0.0},
        {**record("mabp", task, 0, 5000.0, growth=0.5), "key": "kw", "policy_kw": {"v": 2}},
    ]
    (row,) = bench.leaderboard(mine + others + mine[:1], [task])
    assert row["seeds"] == 2 and row["stable"] and row["p95_delay_all"] == 200.0
    twice = {**record("mabp", task, 0, 210.0), "key": "again"}  # seed 0 under another key
    with pytest.raises(ValueError, match="hold seed 0 twice: two different runs"):
        bench.leaderboard(mine + [twice], [task])  # as from a policy edited between them
    with pytest.raises(ValueError, match="seed 9000 is given twice"):
        bench.check_seeds([9000, 9001, 9000])


def test_cli__from_results_refuses_a_file_of_no_policy_runs(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_text(json.dumps({"router": "jsq", "trace": "synthetic"}) + "\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a results file\n")
    for path in (fleet, notes):
        result = cli("--out", str(path), "--from-results")
        assert result.returncode == 2 and "holds no policy runs" in result.stderr


def test_cli__from_results_of_an_evaluation_off_the_boards_seeds_says_so(tmp_path):
    out = tmp_path / "eval.jsonl"
    mabp_gym.evaluate("bp", "mixed", loads=[0.9], seeds=[0], horizon=200, output=out,
                      progress=False)  # fmt: skip
    result = cli("--out", str(out), "--from-results", "--tasks", "mixed-0.90")
    # A usage error (exit 2), and no advice to pass seeds the board refuses.
    assert result.returncode == 2, result.stderr
    assert "holds them at seeds 0-0, horizon 200: not the benchmark's evaluation" in result.stderr
    assert "give those with --seeds" not in result.stderr


def test_cli__every_requested_pair_left_out_says_why_not_none():
    # It printed "no runs of these tasks and policies in None".
    result = cli("--tasks", "multihop-0.50", "--policies", "gnn", "--seeds", "9000:9002")
    assert result.returncode != 0
    assert "every requested pair was left out (gnn on multihop-0.50:" in result.stderr
    assert "None" not in result.stderr


def test_the_generalisation_track_is_listed_with_its_rule_and_held_out_of_training():
    from mabp_gym.core.held_out import held_out_reason
    from mabp_gym.core.workloads import make_workload

    text = bench.list_text()
    main, held = text.split("Generalisation track")
    assert "mixed-0.90" in main and "moe-0.85" in held and "file-multihop14-0.90" in held
    assert "file-codeassist-0.80" in held and "codeassist" not in main
    assert "Rule: training never sees" in held and "9000-9999" in held
    for name, overrides in (
        ("moe", {}),
        ("moe", {"Z": 4}),
        ("multihop", {"nodes": 100}),
        ("multihop", {"nodes": 300, "seed": 4}),
        (bench.EXAMPLE_FILE, {"load": 0.3}),
        (bench.CODEASSIST_FILE, {"load": 0.5, "horizon": 300}),
    ):
        assert held_out_reason(make_workload(name, **overrides)) is not None, name
    for name, overrides in (("mixed", {}), ("multihop", {"nodes": 99}), ("rag", {"Z": 4})):
        assert held_out_reason(make_workload(name, **overrides)) is None, name
    # A copy of an example file under another name is the same network: held out too.
    import dataclasses

    renamed = dataclasses.replace(make_workload(bench.CODEASSIST_FILE), name="mine")
    assert "codeassist.json" in held_out_reason(renamed)


def test_a_workload_file_task_matches_its_records_and_the_tracks_get_their_own_standings():
    held = bench.tasks_named(["file-multihop14-0.90"])[0]
    main = bench.TASKS[0]
    assert held.network == "multihop14" and held.track == "held-out"
    records = [
        record(policy, task, seed, delay)
        for task in (main, held)
        for seed in (9000, 9001)
        for policy, delay in (("mabp", 100.0), ("bp", 50.0))
    ]
    assert all(held.matches(r) for r in records[4:]) and not any(
        held.matches(r) for r in records[:4]
    )
    text = bench.markdown(bench.leaderboard(records, [main, held]), (), [main, held])
    first, second = text.split("Generalisation track")
    assert "Main track:" in first and "| bp | 1 of 1 | 2.00 |" in first
    assert "| bp | 1 of 1 | 2.00 |" in second and "**file-multihop14-0.90**" in second
    # The JSON's standings are the board's: one list a track, never pooled over both.
    by_track = bench.track_standings(bench.leaderboard(records, [main, held]), [main, held])
    assert set(by_track) == {"main", "held-out"}
    assert [(s["policy"], s["tasks"]) for s in by_track["held-out"]] == [("bp", 1), ("mabp", 1)]


def test_current_runs_set_aside_an_earlier_checkpoints_run_of_the_same_seed():
    task = bench.tasks_named(["mixed-0.90"])
    specs, _ = bench.plan_bench(task, ["mabp"], [9000])
    base = {"policy": "mabp", "workload": "mixed", "load": 0.9, "overrides": {}}
    now = {**base, "seed": 9000, "key": specs[0].key}
    earlier = {**base, "seed": 9000, "key": "an-earlier-checkpoint"}
    elsewhere = {**base, "seed": 9001, "key": "made-elsewhere"}  # no current twin: kept
    kept = bench.current_runs([earlier, now, elsewhere], specs, task)
    assert kept == [now, elsewhere]
    assert bench.current_runs([earlier], specs, task) == [earlier]


PARETO = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_pareto.py"


def _pareto_script():
    sys.path.insert(0, str(PARETO.parent))  # its own helpers
    try:
        spec = importlib.util.spec_from_file_location("bench_pareto", PARETO)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(PARETO.parent))
    return module


def test_bench_pareto__never_pairs_runs_of_two_horizons():
    pareto = _pareto_script()
    task = bench.tasks_named(["mixed-0.90"])[0]
    records = [
        {**record("mabp", task, 9000, 300.0), "horizon": 8000},  # not the board's run
        record("frame-mabp", task, 9000, 100.0),
        record("mabp", task, 9001, 200.0),
        record("frame-mabp", task, 9001, 100.0),
    ]
    row = pareto.paired(records, "mabp", task)
    assert row is not None and row["seeds"] == 1 and row["delay_ratio"] == 2.0
    assert pareto.paired(records, "mabp", task, horizon=8000) is None  # no frame-MABP twin


def test_bench_pareto__a_missing_file_or_an_unknown_policy_is_one_line(tmp_path):
    for argv, message in (
        (["--out", str(tmp_path / "none.jsonl")], "no such results file"),
        (["--out", str(PARETO), "--policy", "nope"], "--policy 'nope': unknown policy"),
    ):
        result = subprocess.run(
            [sys.executable, str(PARETO), *argv], capture_output=True, text=True, check=False
        )
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
