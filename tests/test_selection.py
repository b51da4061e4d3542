"""`mabp-gym train select`: the choice among training seeds' checkpoints on validation seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from mabp_gym import make_workload, read_records  # noqa: E402
from mabp_gym.agents.residual_mabp import FEATURES, load, save  # noqa: E402
from mabp_gym.harness.pareto import compare  # noqa: E402
from mabp_gym.training import selection  # noqa: E402


def test_the_pick_is_the_most_wins_then_the_lower_delay():
    rows = [
        {"checkpoint": "a", "wins": 3, "delay_geomean": 0.60},
        {"checkpoint": "b", "wins": 4, "delay_geomean": 0.70},
        {"checkpoint": "c", "wins": 4, "delay_geomean": 0.65},
        {"checkpoint": "d", "wins": 4, "delay_geomean": 0.65},
    ]
    assert selection.pick(rows)["checkpoint"] == "c"  # d ties c: the first given


def test_the_any_network_pick_is_the_lowest_worst_delay_then_the_geomean():
    rows = [
        {"checkpoint": "a", "wins": 5, "worst_delay": 1.12, "delay_geomean": 0.40},
        {"checkpoint": "b", "wins": 0, "worst_delay": 1.04, "delay_geomean": 0.70},
        {"checkpoint": "c", "wins": 0, "worst_delay": 1.04, "delay_geomean": 0.60},
        {"checkpoint": "d", "wins": 9, "worst_delay": float("inf"), "delay_geomean": 0.1},
    ]
    assert selection.pick(rows, "worst")["checkpoint"] == "c"
    assert selection.pick(rows)["checkpoint"] == "d"  # the Pareto rule reads wins alone


def test_a_growing_backlog_costs_infinity_where_the_reference_is_stable():
    theirs = [_run(s, 100.0, 1.0) for s in range(3)]
    growing = [_run(s, 50.0, 0.9) for s in range(3)]
    for run in growing:
        run.update(growth=0.5, backlog_trace=[10.0 + 2.0 * t for t in range(40)])
    assert selection._compared(growing, theirs)["cost"] == float("inf")
    assert selection._compared(theirs, growing)["cost"] == 2.0  # the reference grows: a ratio
    assert selection._compared(growing, growing)["cost"] == 1.0  # both grow: a ratio too
    empty = [{**run, "p95_delay_all": None} for run in theirs]
    with pytest.raises(ValueError, match="has no P95 delay or no penalty to compare with"):
        selection._compared(growing, empty)


def _run(seed, delay, penalty, backlog=10.0):
    return {
        "seed": seed,
        "p95_delay_all": delay,
        "penalty_per_arrival": penalty,
        "growth": 0.0,
        "backlog_trace": [backlog] * 40,
        "horizon": 40,
        "warmup": 0.2,
    }


def test_a_pareto_win_needs_both_ratios_and_the_interval_apart():
    theirs = [_run(s, 100.0, 1.0) for s in range(3)]
    faster = [_run(s, d, 0.99) for s, d in zip(range(3), (80.0, 85.0, 82.0), strict=True)]
    assert compare(faster, theirs)["pareto_win"]
    dearer = [_run(s, d, 1.01) for s, d in zip(range(3), (80.0, 85.0, 82.0), strict=True)]
    assert not compare(dearer, theirs)["pareto_win"]  # penalty over 1.0
    spread = [_run(s, d, 0.9) for s, d in zip(range(3), (40.0, 130.0, 95.0), strict=True)]
    row = compare(spread, theirs)
    assert row["delay_ratio"] <= 0.9 and not row["pareto_win"]  # its interval reaches 1
    with pytest.raises(ValueError, match="same seeds"):
        compare(faster[:2], theirs)


def test_a_pareto_win_needs_both_policies_stable():
    # Delay and penalty as in a win, but its runs leave half the arrivals behind (growth
    # 0.5, far above GROWTH_LIMIT, the backlog rising): an unstable policy wins nothing.
    theirs = [_run(s, 100.0, 1.0) for s in range(3)]
    growing = [_run(s, d, 0.99) for s, d in zip(range(3), (80.0, 85.0, 82.0), strict=True)]
    for run in growing:
        run.update(growth=0.5, backlog_trace=[10.0 + 2.0 * t for t in range(40)])
    row = compare(growing, theirs)
    assert row["delay_ratio"] <= 0.9 and row["penalty_ratio"] <= 1.0
    assert not row["both_stable"] and not row["pareto_win"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "100", "9003"], r"--seeds \[9003\] are the benchmark's evaluation seeds"),
        (["--checkpoints"], "--checkpoints needs at least one checkpoint file"),
        (["--checkpoints", "nowhere.pt"], "--checkpoints nowhere.pt: no such checkpoint file"),
        (["--policy", "mabp"], "--policy must be one of residual-mabp-any, residual-frame-mabp"),
        (["--seeds", "100", "100"], "each given once"),
        (["--copy-to", "."], "--copy-to .: give a file's path in an existing folder"),
        (["--out", "."], "--out .: give a file's path in an existing folder"),
        # A checkpoint of another kind failed in the first run, with a traceback.
        (["--policy", "residual-mabp-any"], r"not a residual-mabp-any checkpoint: .*over frame"),
        (["--checkpoints", "RAG"], r"RAG: not a residual-frame-mabp checkpoint: .*'rag'"),
        (["--checkpoints", "MIXED"], r"MIXED: trained for one workload; .* --family"),
        # The copy wrote a checkpoint over results files, its own --out by another name.
        (["--copy-to", "RESULTS"], r"RESULTS is a results file: the copy would write"),
        (["--out", "OUT", "--copy-to", "./OUT"], r"--copy-to \./OUT is the --out results"),
        (["--copy-to", "NOTES"], r"NOTES is not a checkpoint"),
        (["--soup", "SOUP"], "--soup averages the checkpoints' weights: give at least two"),
        (["--checkpoints", "A", "B", "--soup", "B"], r"--soup .*B is a checkpoint file"),
        (["--checkpoints", "A", "B", "--soup", "RESULTS"], "RESULTS is a results file: the soup"),
        (["--checkpoints", "A", "B", "--soup", "SOUP", "--copy-to", "./SOUP"], "is also --copy-to"),
        (["--checkpoints", "A", "B", "--soup", "OUT", "--out", "OUT"], "OUT is the --out results"),
        (["--checkpoints", "A", "B", "--soup", "RAG"], "RAG is a file but not an earlier soup"),
        (["--checkpoints", "A", "./a.pt"], "--checkpoints repeats a file"),
        (["--seeds", "-1"], "seeds must be"),
        (["--horizon", "99999999999"], "horizon"),
        (["--out", "RESULTS_FLEET"], "holds fleet replays"),
        (
            ["--networks", "moe@0.85"],
            r"--networks 'moe@0.85': moe: moe is a held-out .*; validate on another network",
        ),
        (["--networks", "rag@0.9", "rag@0.90"], r"--networks 'rag@0.90' repeats 'rag@0.9'"),
        (["--networks", "mixed@0.8,beta=0.125,K=3", "mixed@0.8,K=3.0,beta=0.125"], "repeats"),
        (["--networks", "rag@0.9,horizon=500"], r"'rag@0.9,horizon=500': horizon is not a"),
        (["--networks", "rag@0.9,load=0.5"], r"'rag@0.9,load=0.5': load is not a network"),
        (["--networks", "rag@0"], r"--networks 'rag@0': the load must be above 0"),
        (["--networks", "rag@0.9", "rag@11"], r"--networks 'rag@11': load must be"),
        (["--networks", "rag@0.9,bogus=1"], r"--networks 'rag@0.9,bogus=1': unknown parameter"),
        (["--networks", "rag"], r"--networks 'rag' must read WORKLOAD@LOAD"),
        (
            ["--networks", "rag@0.9", "multihop@0.5,nodes=12,memory=0"],
            r"'multihop@0.5,nodes=12,memory=0': the network cannot hold memory .*every checkpoint",
        ),
    ],
)
def test_bad_arguments_are_refused_before_any_run(argv, message, tmp_path, monkeypatch):
    shipped = str(tmp_path / "a.pt")
    save(shipped, np.zeros(len(FEATURES)), None, base="frame-mabp")  # for any network
    rag = tmp_path / "RAG"  # one workload's
    save(rag, np.zeros(len(FEATURES)), make_workload("rag"), base="frame-mabp")
    mixed = tmp_path / "MIXED"  # loads on mixed, but the choice runs rag too
    save(mixed, np.zeros(len(FEATURES)), make_workload("mixed"), base="frame-mabp")
    results = tmp_path / "RESULTS"
    results.write_text('{"policy": "bp", "workload": "mixed"}\n')
    fleet = tmp_path / "RESULTS_FLEET"
    fleet.write_text('{"router": "sglang", "trace": "t"}\n')
    (tmp_path / "NOTES").write_text("my notes\n")
    other = tmp_path / "B"
    save(other, np.ones(len(FEATURES)), None, base="frame-mabp")
    named = {"RAG": rag, "MIXED": mixed, "RESULTS": results, "RESULTS_FLEET": fleet}
    named |= {"NOTES": tmp_path / "NOTES", "OUT": tmp_path / "OUT", "A": shipped, "B": other}
    named |= {"SOUP": tmp_path / "SOUP"}
    monkeypatch.chdir(tmp_path)
    argv = [str(named[a]) if a in named else a for a in argv]  # ./X stays relative
    if "--checkpoints" not in argv:
        argv = ["--checkpoints", shipped, *argv]
    with pytest.raises(ValueError, match=message):
        selection.parse(argv)


def test_select_compares_each_checkpoint_with_frame_mabp_and_copies_the_pick(tmp_path, capsys):
    zero, tilted = tmp_path / "zero.pt", tmp_path / "tilted.pt"
    made = {
        name: f"mabp-gym train residual-mabp --seed {k}" for k, name in enumerate(("zero", "t"))
    }
    save(zero, np.zeros(len(FEATURES)), None, base="frame-mabp", command=made["zero"])
    weights = np.zeros(len(FEATURES))
    weights[FEATURES.index("route.dst_compatible_memory")] = 5.0
    save(tilted, weights, None, base="frame-mabp", command=made["t"])
    out, soup = tmp_path / "chosen.pt", tmp_path / "soup.pt"
    args = selection.parse(
        ["--checkpoints", str(zero), str(tilted), "--seeds", "100", "101"]
        + ["--horizon", "300", "--copy-to", str(out), "--soup", str(soup)]
    )
    result = selection.train(args)
    rows = {row["checkpoint"]: row for row in result["checkpoints"]}
    # The soup: the two checkpoints' mean weights, a third candidate run like them.
    averaged, meta = load(soup, None, base="frame-mabp", policy="residual-frame-mabp")
    assert np.array_equal(averaged, weights / 2) and meta["networks"] == "any"
    assert sorted(source["file"] for source in meta["soup_of"]) == ["tilted.pt", "zero.pt"]
    # How each was made, as its own checkpoint says: the soup can be made again.
    assert {s["file"]: s["command"] for s in meta["soup_of"]} == {
        "zero.pt": made["zero"],
        "tilted.pt": made["t"],
    }
    first = soup.read_bytes()  # the same files by other paths, in another order: one soup
    selection.write_soup([f"{tmp_path}/./tilted.pt", str(zero)], str(soup), args.policy)
    assert soup.read_bytes() == first
    assert list(rows) == [str(zero), str(tilted), str(soup)] and result["soup"] == str(soup)
    assert rows[str(soup)]["tasks"] != rows[str(tilted)]["tasks"]
    # All-zero weights execute frame-MABP's own controls: every ratio is exactly 1, no win.
    assert all(
        t["delay_ratio"] == 1.0 and t["penalty_ratio"] == 1.0 for t in rows[str(zero)]["tasks"]
    )
    assert rows[str(zero)]["wins"] == 0 and len(rows[str(zero)]["tasks"]) == 6
    chosen = selection.pick(result["checkpoints"])["checkpoint"]
    assert result["chosen"] == chosen and out.read_bytes() == Path(chosen).read_bytes()
    assert result["env_steps"] == 6 * 4 * 2 * 300
    selection.report(result)
    printed = capsys.readouterr().out
    assert f"Chosen: {chosen}" in printed
    assert json.loads(printed.strip().splitlines()[-1])["chosen"] == chosen


def test_select_for_any_network_runs_mabp_on_the_networks_and_picks_by_the_worst(tmp_path):
    zero, tilted = tmp_path / "zero.pt", tmp_path / "tilted.pt"
    save(zero, np.zeros(len(FEATURES)), None)  # over MABP: executes MABP's own controls
    weights = np.zeros(len(FEATURES))
    weights[FEATURES.index("route.dst_compatible_memory")] = 5.0
    save(tilted, weights, None)
    networks = ["rag@0.9", "multihop@0.3,nodes=20"]
    args = selection.parse(
        ["--policy", "residual-mabp-any", "--checkpoints", str(tilted), str(zero)]
        + ["--networks", *networks, "--seeds", "100", "101", "--horizon", "300"]
    )
    with pytest.raises(ValueError, match="--networks: residual-mabp-any has no default"):
        selection.parse(["--policy", "residual-mabp-any", "--checkpoints", str(zero)])
    result = selection.train(args)
    assert result["reference"] == "mabp" and result["rule"] == "worst"
    rows = {row["checkpoint"]: row for row in result["checkpoints"]}
    assert [t["task"] for t in rows[str(zero)]["tasks"]] == networks
    assert rows[str(zero)]["worst_delay"] == 1.0  # MABP against itself, run for run
    tilted_row = rows[str(tilted)]
    assert tilted_row["worst_delay"] == max(t["delay_ratio"] for t in tilted_row["tasks"])
    assert result["chosen"] == selection.pick(result["checkpoints"], "worst")["checkpoint"]
    assert result["env_steps"] == 2 * 3 * 2 * 300


def test_the_cli_runs_select_and_refuses_evaluation_seeds_in_one_line(run_cli):
    done = run_cli("train", "select", "--help")
    assert done.returncode == 0 and "--copy-to" in done.stdout
    refused = run_cli("train", "select", "--checkpoints", "x.pt", "--seeds", "9000")
    assert refused.returncode == 2 and "no such checkpoint file" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_select_reuses_the_runs_in_its_results_file_but_not_a_retrained_checkpoints(tmp_path):
    checkpoint, results = tmp_path / "c.pt", tmp_path / "runs.jsonl"
    save(checkpoint, np.zeros(len(FEATURES)), None, base="frame-mabp")
    argv = ["--checkpoints", str(checkpoint), "--seeds", "100", "101", "--horizon", "200"]
    first = selection.train(selection.parse([*argv, "--out", str(results)]))
    assert len(read_records(results)) == 6 * 2 * 2  # frame-MABP's and the checkpoint's runs
    again = selection.train(selection.parse([*argv, "--out", str(results)]))
    assert again["checkpoints"] == first["checkpoints"] and len(read_records(results)) == 24
    weights = np.zeros(len(FEATURES))
    weights[FEATURES.index("route.dst_compatible_memory")] = 5.0
    save(checkpoint, weights, None, base="frame-mabp")  # retrained in place: new content
    retrained = selection.train(selection.parse([*argv, "--out", str(results)]))
    assert len(read_records(results)) == 24 + 6 * 2  # only the new checkpoint's runs are added
    fresh = selection.train(selection.parse(argv))  # no results file: everything runs anew
    assert retrained["checkpoints"] == fresh["checkpoints"] != first["checkpoints"]
    with pytest.raises(ValueError, match="is also a checkpoint file"):
        selection.parse([*argv, "--out", str(checkpoint)])
