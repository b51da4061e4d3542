"""The ``mabp-gym`` command line, run as a user would: in this interpreter through its
``main(argv)`` (``run_cli``), and a few real process starts (``run_cli_process``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import mabp_gym
from mabp_gym import evaluate, read_records


def test_cli__capacity_prints_and_writes_both_capacities(run_cli, tmp_path):
    out = tmp_path / "cap.json"
    result = run_cli(
        "capacity", "--workload", "work_reuse", "--set", "kappa_w=3", "--json", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert "no-memory capacity 1.0000" in result.stdout
    assert "all-hit capacity (lambda_ref) 3.0000" in result.stdout
    data = json.loads(out.read_text())
    assert data["nomem"] == pytest.approx(1.0) and data["full"] == pytest.approx(3.0)


def test_cli__simulate_reports_metrics_per_seed(run_cli, tmp_path):
    out = tmp_path / "sim.json"
    result = run_cli(
        "simulate",
        "--workload",
        "work_reuse",
        "--load",
        "0.5",
        "--horizon",
        "200",
        "--seeds",
        "0",
        "1",
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    records = json.loads(out.read_text())
    assert [r["seed"] for r in records] == [0, 1]
    for record in records:
        assert record["stable"] is True and record["hit_ratio"] > 0.9


def test_cli__eval_prints_a_summary_and_streams_records(run_cli, tmp_path):
    out = tmp_path / "eval.jsonl"
    result = run_cli(
        "eval",
        "--policy",
        "bp",
        "mabp",
        "--loads",
        "0.2,0.4",
        "--seeds",
        "0",
        "--horizon",
        "120",
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    assert "stable load: bp" in result.stdout and "mabp" in result.stdout
    records = read_records(out)
    assert sorted((r["policy"], r["load"]) for r in records) == [
        ("bp", 0.2),
        ("bp", 0.4),
        ("mabp", 0.2),
        ("mabp", 0.4),
    ]


def test_cli__eval_sets_a_workload_parameter_named_like_an_option(run_cli, tmp_path):
    out = tmp_path / "eval.jsonl"
    args = ["eval", "--policy", "bp", "--workload", "multihop", "--set", "nodes=20"]
    args += ["--set", "memory=0", "--loads", "0.3", "--seeds", "0", "--horizon", "60"]
    result = run_cli(*args, "--out", str(out), "--workers", "1", "--no-progress")
    assert result.returncode == 0, result.stderr
    (record,) = read_records(out)
    assert record["memory"] is True and record["overrides"] == {"memory": 0, "nodes": 20}


def test_cli__table_writes_markdown_and_csv_in_table_i_layout(run_cli, tmp_path):
    md, table_csv = tmp_path / "t.md", tmp_path / "t.csv"
    result = run_cli(
        "table",
        "--policies",
        "bp,mabp",
        "--loads",
        "0.2:0.4:0.2",
        "--seeds",
        "0",
        "--horizon",
        "100",
        "--at",
        "0.4",
        "--out",
        str(tmp_path / "t.jsonl"),
        "--markdown",
        str(md),
        "--csv",
        str(table_csv),
        "--workers",
        "1",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    lines = md.read_text().splitlines()
    assert lines[0].startswith("| Policy | Stable load | Paper load | Penalty | P95 delay |")
    assert len(lines) == 4 and lines[2].startswith("| bp |")
    rows = list(csv.reader(table_csv.open()))
    assert rows[0][0] == "Policy" and [r[0] for r in rows[1:]] == ["bp", "mabp"]


def test_cli__sweep_and_plot(run_cli, tmp_path):
    out = tmp_path / "k.jsonl"
    result = run_cli(
        "sweep",
        "--workload",
        "separation",
        "--param",
        "K",
        "--values",
        "1",
        "4",
        "--policies",
        "bp",
        "mabp",
        "--seeds",
        "0",
        "1",
        "--horizon",
        "100",
        "--at",
        "0.5",
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    records = read_records(out)
    assert sorted({r["overrides"]["K"] for r in records}) == [1, 4]
    assert {r["load"] for r in records} == {0.5}  # the --at load
    # What its 'stable' column cannot say, as eval says it: a 100-slot screen, two seeds.
    assert "100 slots: read 'stable' as a screen" in result.stdout
    assert "two seeds: the 95% interval" in result.stdout
    figures = tmp_path / "fig"
    result = run_cli("plot", "--results", str(out), "--out-dir", str(figures))
    assert result.returncode == 0, result.stderr
    assert (figures / "fig3_separation_gap.png").stat().st_size > 1000
    assert "skipped fig2_backlog_traces.png" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("simulate", "--set", "K=-1"),
        ("simulate", "--set", "nonsense"),
        ("simulate", "--warmup", "1.5"),
        ("capacity", "--workload", "nope"),
        ("eval", "--policy", "nope", "--loads", "0.5"),
        ("eval", "--loads", "0.x"),
        ("eval", "--loads", "0.5", "--workers", "0"),
        ("table", "--loads", "1:0:0.1"),
        ("sweep", "--param", "gamma", "--values", "1", "--out", "x.jsonl"),
        ("plot", "--results", "missing.jsonl", "--out-dir", "figs"),
        ("train", "gnn", "--bogus"),
        ("train", "learn-mabp", "--device", "tpu"),
        ("frobnicate",),
    ],
)
def test_cli__bad_arguments_exit_2_with_one_line_reason(run_cli, args, tmp_path):
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], result.stderr


def test_cli__help_on_each_subcommand(run_cli, run_cli_process):
    # One real process start: the console module runs and exits as a user's shell sees it.
    assert run_cli_process("eval", "--help").returncode == 0
    for sub in ("eval", "table", "sweep", "plot", "capacity", "simulate"):
        result = run_cli(sub, "--help")
        assert result.returncode == 0 and "usage:" in result.stdout


def test_table__search_stops_a_policy_at_its_first_growing_load_and_from_results_reuses(
    tmp_path, run_cli
):
    out = tmp_path / "t.jsonl"
    common = [
        "table",
        "--policies",
        "bp",
        "--loads",
        "0.3",
        "0.6",
        "0.9",
        "--seeds",
        "0",
        "--horizon",
        "400",
        "--at",
        "0.6",
        "--out",
        str(out),
        "--no-progress",
    ]
    result = run_cli(*common, "--search")
    assert result.returncode == 0, result.stderr
    loads = sorted({r["load"] for r in read_records(out)})
    assert loads == [0.3, 0.6]  # 0.6 grows for BP, so 0.9 never ran
    assert "| bp | 0.30 |" in result.stdout
    again = run_cli(*common, "--from-results")
    assert again.returncode == 0, again.stderr
    assert again.stdout == result.stdout
    # Without --loads the file's own grid is read, not the default 0.1-1.0 it never ran:
    # the default grid printed "<0.30 (partial: 0.1 not run)" for a policy stable at 0.3.
    at = common.index("--loads")
    without = common[:at] + common[at + 4 :]  # --loads 0.3 0.6 0.9 left out
    own = run_cli(*without, "--from-results")
    assert own.returncode == 0, own.stderr
    row = next(line for line in own.stdout.splitlines() if line.startswith("| bp |"))
    assert row.startswith("| bp | 0.30 |") and "partial" not in row
    assert "400 slots: read 'stable' as a screen" in own.stdout


def test_verdicts__prints_stable_loads_per_seed_set_and_rejects_long_horizons(tmp_path, run_cli):
    out = tmp_path / "v.jsonl"
    evaluate(
        "bp", "mixed", loads=[0.3, 0.6], seeds=[0, 1], horizon=500, backend="serial", output=out
    )
    ok = run_cli(
        "verdicts",
        "--results",
        str(out),
        "--horizons",
        "300",
        "500",
        "--seed-sets",
        "0",
        "1:2",
    )
    assert ok.returncode == 0, ok.stderr
    assert "| bp | 0.30 / 0.30 | 0.30 / 0.30 |" in ok.stdout
    from mabp_gym.cli.evaluate import VERDICTS_LEGEND

    assert VERDICTS_LEGEND in ok.stdout
    bad = run_cli(
        "verdicts",
        "--results",
        str(out),
        "--horizons",
        "600",
        "--seed-sets",
        "0",
    )
    assert bad.returncode == 2 and "shortest saved run has 500 slots" in bad.stderr


def test_table__long_runs_decide_the_loads_they_cover_in_their_own_column(tmp_path, run_cli):
    short, long = tmp_path / "t.jsonl", tmp_path / "long.jsonl"
    evaluate(
        "bp", "mixed", loads=[0.3, 0.6], seeds=[0], horizon=300, backend="serial", output=short
    )
    evaluate("bp", "mixed", loads=[0.3], seeds=[0], horizon=500, backend="serial", output=long)
    common = ["table", "--policies", "bp", "--loads"]
    common += ["0.3", "0.6", "--seeds", "0", "--at", "0.6", "--out", str(short)]
    common += ["--from-results", "--long", str(long)]
    ok = run_cli(*common, "--long-horizon", "400")
    assert ok.returncode == 0, ok.stderr
    header = ok.stdout.splitlines()[0]
    assert header.startswith(
        "| Policy | Stable load (--long runs, 400 slots) | Stable load (300 slots) |"
    )
    assert "| bp | 0.30 | 0.30 | 0.30 |" in ok.stdout
    # 'longest': each load's own longest runs (what eval --until-decided leaves); a load
    # the grid lacks caps this column as it caps the others.
    evaluate("bp", "mixed", loads=[0.6], seeds=[0], horizon=300, backend="serial", output=long)
    each = run_cli(*common, "--long-horizon", "longest")
    assert each.returncode == 0, each.stderr
    assert "| Policy | Stable load (--long runs, decided, up to 500 slots) |" in each.stdout
    for extra, message in (
        (["--long-horizon", "600"], "must be in 1..300"),
        (["--long-horizon", "soon"], "a whole number of slots or 'longest'"),
        (["--workload", "rag"], "the runs are of ['mixed'], the table of 'rag'"),
    ):
        bad = run_cli(*common, *extra)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr


def test_table__a_load_never_run_caps_the_long_column_too(tmp_path, run_cli):
    # MABP is stable at 0.2 and 0.3 on mixed; the grid's 0.25 was run by neither file, so
    # no column may credit 0.3 (the long column did before: Oracle-Sur's Table I row).
    short, long = tmp_path / "t.jsonl", tmp_path / "long.jsonl"
    for path, horizon in ((short, 600), (long, 800)):
        evaluate(
            "mabp",
            "mixed",
            loads=[0.2, 0.3],
            seeds=[0, 1, 2],
            horizon=horizon,
            backend="serial",
            output=path,
        )
    done = run_cli(
        "table",
        "--policies",
        "mabp",
        "--loads",
        "0.2",
        "0.25",
        "0.3",
        "--seeds",
        "0",
        "1",
        "2",
        "--horizon",
        "600",
        "--at",
        "0.3",
        "--out",
        str(short),
        "--from-results",
        "--long",
        str(long),
        "--long-horizon",
        "longest",
    )
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| mabp |"))
    cells = row.split(" | ")
    assert cells[1] == cells[2] == "0.20 (partial: 0.25 not run)", row


def test_cli__eval_never_credits_the_occupation_bound_and_says_why(run_cli):
    # MABP's backlog at load 1.0 on mixed rises like a queue at capacity: over a short run its
    # slope may pass; the stable-load line must not credit the bound.
    result = run_cli(
        "eval",
        "--policy",
        "mabp",
        "--loads",
        "0.5,1.0",
        "--seeds",
        "0",
        "--horizon",
        "300",
        "--workers",
        "1",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    assert "stable load: mabp 0.5" in result.stdout
    assert "occupation bound is load 1" in result.stdout
    assert "300 slots: read 'stable' as a screen" in result.stdout
    assert "one seed: 'stable' compares that run's growth with the limit" in result.stdout
    from mabp_gym.cli.evaluate import SUMMARY_LEGEND

    assert SUMMARY_LEGEND in result.stdout  # every column of the table is defined
    below = run_cli(
        "eval",
        "--policy",
        "bp",
        "--loads",
        "0.3",
        "--seeds",
        "0",
        "--horizon",
        "60",
        "--workers",
        "1",
        "--no-progress",
    )
    assert "occupation bound" not in below.stdout
    decided = run_cli(
        "eval",
        "--policy",
        "bp",
        "--loads",
        "0.3",
        "--seeds",
        "0",
        "--horizon",
        "4000",
        "--workers",
        "1",
        "--no-progress",
    )
    assert decided.returncode == 0 and "as a screen" not in decided.stdout


def test_cli__version_prints_the_package_version(run_cli_process):
    from mabp_gym.version import __version__

    result = run_cli_process("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"mabp-gym {__version__}"


@pytest.mark.parametrize("out", [None, "runs.jsonl"])
def test_cli__ctrl_c_ends_with_one_line_saying_what_was_kept(monkeypatch, capsys, out):
    from mabp_gym.cli import commands as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "eval", interrupted)
    argv = ["eval", "--policy", "bp", *(["--out", out] if out else [])]
    assert cli.main(argv) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0]
    assert ("resumes" in lines[0]) == bool(out) and ("--out PATH" in lines[0]) == (not out)


def test_verdicts__meaningless_horizons_seed_sets_and_traces_are_refused(run_cli, tmp_path):
    out = tmp_path / "v.jsonl"
    evaluate("bp", "mixed", loads=[0.3], seeds=[0, 1], horizon=200, backend="serial", output=out)
    base = ["verdicts", "--results", str(out)]
    cases = [
        (["--horizons", "0", "200", "--seed-sets", "0"], "keep fewer than 10 stored backlog"),
        (["--horizons", "-5", "--seed-sets", "0"], "keep fewer than 10 stored backlog"),
        (["--horizons", "1", "--seed-sets", "0"], "use 61 or more"),
        (["--horizons", "100", "100", "--seed-sets", "0"], "100 is given twice"),
        (["--horizons", "100", "--seed-sets", "0,1", "1"], "seed 1 is in set 1 and set 2"),
        (["--horizons", "100", "--seed-sets", "0", "7:9"], "set 2 (7..8) has no record"),
    ]
    for args, message in cases:
        result = run_cli(*base, *args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
    ok = run_cli(*base, "--horizons", "61", "200", "--seed-sets", "0", "1")
    assert ok.returncode == 0, ok.stderr
    # A record whose saved trace is null is refused by name, not a TypeError later.
    lines = out.read_text().splitlines()
    broken = json.loads(lines[0])
    broken["backlog_trace"] = None
    out.write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    result = run_cli(*base, "--horizons", "100", "--seed-sets", "0", "1")
    assert result.returncode == 2 and "backlog_trace is NoneType" in result.stderr
    assert "Traceback" not in result.stderr


def test_table_rows__a_partial_grid_is_marked_and_not_credited():
    from test_evaluation import fake

    from mabp_gym.cli.evaluate import table_rows

    # Runs at 0.1, 0.2 and 0.4, all stable; 0.3 was never run.
    records = [fake("a", load, seed, 0.0, 10) for load in (0.1, 0.2, 0.4) for seed in (0, 1)]
    for record in records:
        record.update(workload=None, p95_delay_all=10.0, penalty_per_arrival=1.0)
    (row,) = table_rows(records, ["a"], [0.1, 0.2, 0.3, 0.4], at=0.2)
    assert row[1] == "0.20 (partial: 0.3 not run)"
    # A complete grid is credited as before.
    (row,) = table_rows(records, ["a"], [0.1, 0.2, 0.4], at=0.2)
    assert row[1] == "0.40"


def test_cli__plot_draws_a_users_own_workload_and_exits_2_when_it_can_draw_nothing(
    run_cli, tmp_path
):
    pytest.importorskip("matplotlib")
    out = tmp_path / "wr.jsonl"
    common = ["--workload", "work_reuse", "--seeds", "0", "--horizon", "120", "--no-progress"]
    assert (
        run_cli("eval", "--policy", "bp", "--loads", "0.5", "--out", str(out), *common).returncode
        == 0
    )
    nothing = run_cli("plot", "--results", str(out), "--out-dir", str(tmp_path / "a"))
    assert nothing.returncode == 2 and "no figure can be drawn" in nothing.stderr
    assert "needs mabp on work_reuse at two or more loads" in nothing.stdout
    run_cli("eval", "--policy", "mabp", "--loads", "0.5", "0.9", "--out", str(out), *common)
    drawn = run_cli("plot", "--results", str(out), "--out-dir", str(tmp_path / "b"))
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "b" / "fig2_backlog_traces.png").stat().st_size > 0


def test_cli__one_name_per_concept_with_the_old_spellings_kept():
    from mabp_gym.cli.parser import _build_parser

    parser = _build_parser()
    for flag in ("--policies", "--policy"):
        assert parser.parse_args(["eval", flag, "bp", "mabp"]).policy == ["bp", "mabp"]
        assert parser.parse_args(["table", flag, "bp"]).policies == ["bp"]
        sweep = ["sweep", flag, "bp", "--param", "K", "--values", "1", "--out", "x.jsonl"]
        assert parser.parse_args(sweep).policies == ["bp"]
    for flag in ("--fleet-size", "--workers"):
        assert parser.parse_args(["fleet", flag, "8"]).workers == 8


def test_cli__a_run_states_its_size_before_it_starts(run_cli, tmp_path):
    out = tmp_path / "size.jsonl"
    args = ["eval", "--policies", "bp", "--loads", "0.3", "0.5", "--seeds", "0", "--horizon"]
    first = run_cli(*args, "100", "--out", str(out))
    assert first.returncode == 0 and "2 runs to do (200 slots, 0 already in" in first.stderr
    again = run_cli(*args, "100", "--seeds", "0", "1", "--out", str(out))
    assert "2 runs to do (200 slots, 2 already in" in again.stderr


def test_cli__table_and_fleet_print_a_column_legend(run_cli, tmp_path):
    from mabp_gym.cli.evaluate import TABLE_LEGEND
    from mabp_gym.cli.fleet import FLEET_LEGEND

    table = run_cli(
        "table", "--policies", "bp", "--loads", "0.3", "--seeds", "0", "--horizon", "100",
        "--at", "0.3", "--out", str(tmp_path / "t.jsonl"), "--no-progress",
    )  # fmt: skip
    assert table.returncode == 0 and TABLE_LEGEND in table.stdout
    fleet = run_cli(
        "fleet", "--trace", "synthetic", "--requests", "40", "--fleet-size", "2", "--loads",
        "0.5", "--runs", "1", "--routers", "jsq",
    )  # fmt: skip
    assert fleet.returncode == 0 and FLEET_LEGEND in fleet.stdout


def test_table__an_until_decided_file_counts_each_seed_once(tmp_path):
    # The same seeds at 300 and 600 slots in one --long file: cut at 300, each seed counts
    # once (its longest run, cut), not twice.
    from mabp_gym.harness.verdicts import long_run_stable_load

    short = evaluate("bp", "mixed", loads=[0.3], seeds=[0, 1], horizon=300, backend="serial")
    long = evaluate("bp", "mixed", loads=[0.3], seeds=[0, 1], horizon=600, backend="serial")
    from mabp_gym.harness.verdicts import _longest_per_seed

    assert len(_longest_per_seed(short + long)) == 2
    assert {r["horizon"] for r in _longest_per_seed(short + long)} == {600}
    assert long_run_stable_load(short, short + long, 300) == long_run_stable_load(short, long, 300)


def test_train_arguments__each_option_is_documented_by_the_docstring_under_its_field():
    import argparse
    import dataclasses

    from mabp_gym.training.arguments import add_dataclass_arguments, field_docs
    from mabp_gym.training.gnn import GNNArgs
    from mabp_gym.training.learn_mabp import LearnMABPArgs
    from mabp_gym.training.residual_mabp import ResidualArgs

    for cls in (GNNArgs, LearnMABPArgs, ResidualArgs):
        docs = field_docs(cls)
        assert set(docs) == {f.name for f in dataclasses.fields(cls)}, cls.__name__
        assert all(doc and not doc.startswith('"') for doc in docs.values())
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, GNNArgs)
    assert "Message-passing rounds. (default: 3)" in " ".join(parser.format_help().split())


@pytest.mark.parametrize(
    ("token", "values"),
    [
        ("0.5:1.25:0.5", [0.5, 1.0]),  # was [0.5, 1.0, 1.5]: a partial step rounded up
        ("0:1.1:0.2", [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),  # was ... 1.0, 1.2
        ("0.1:0.45:0.1", [0.1, 0.2, 0.3, 0.4]),
        ("0.1:0.3:0.1", [0.1, 0.2, 0.3]),  # stop reached up to float error: included
        ("0:1:0.25", [0.0, 0.25, 0.5, 0.75, 1.0]),
        ("0.5:0.5:0.1", [0.5]),
    ],
)
def test_parse_grid__a_range_never_passes_its_stop(token, values):
    from mabp_gym.cli.common import _parse_grid

    assert _parse_grid([token], "--loads") == values


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("0:nan:0.1", "finite numbers"),
        ("0:1:inf", "finite numbers"),
        ("0:1e9:1e-3", "at most 10,000"),
        ("a:1:1", "not a number in the range 'a:1:1'"),
    ],
)
def test_parse_grid__a_bad_range_names_itself(token, message):
    from mabp_gym.cli.common import _parse_grid

    with pytest.raises(ValueError, match=message):
        _parse_grid([token], "--loads")


def test_table__from_results_tabulates_the_runs_the_options_given_name(run_cli, tmp_path):
    # The run options were ignored: --horizon 4000 tabulated a file of 200-slot runs, and a
    # file of two horizons ended in a traceback naming the workload's digest.
    out = tmp_path / "t.jsonl"
    for horizon in (200, 300):
        evaluate(
            "bp", "mixed", loads=[0.3], seeds=[0, 1], horizon=horizon, backend="serial", output=out
        )
    table = ("table", "--policies", "bp", "--loads", "0.3", "--at", "0.3", "--out", str(out))
    mixed = run_cli(*table, "--from-results")
    assert mixed.returncode == 2, mixed.stderr
    assert len(mixed.stderr.strip().splitlines()) == 1
    assert "holds runs of the horizons [200, 300]" in mixed.stderr
    for extra, message in (
        (("--horizon", "4000"), "--horizon: "),
        (("--seeds", "7"), "--seeds: "),
        (("--nu", "2"), "--nu: "),
        (("--workload", "rag"), "--workload: "),
        (("--no-memory",), "--no-memory: "),
        (("--set", "K=3"), "--set K=3: "),
    ):
        bad = run_cli(*table, "--from-results", "--horizon", "300", *extra)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr)
        assert "holds no run" in bad.stderr
    picked = {}
    for horizon in ("200", "300"):
        done = run_cli(*table, "--from-results", "--horizon", horizon, "--seeds", "1")
        assert done.returncode == 0, done.stderr
        picked[horizon] = next(x for x in done.stdout.splitlines() if x.startswith("| bp |"))
    assert picked["200"] != picked["300"]  # each horizon's own runs


def test_table__from_results_an_option_at_its_default_value_still_selects(run_cli, tmp_path):
    # --workload mixed on a mixed + rag file was refused as "differ in 'workload'", and
    # --horizon 600 (the default) on 100-slot runs was ignored: a value equal to the
    # default was read as "not given".
    out = tmp_path / "t.jsonl"
    for workload in ("mixed", "rag"):
        evaluate("bp", workload, loads=[0.3], seeds=[0], horizon=100, backend="serial", output=out)
    table = ("table", "--policies", "bp", "--loads", "0.3", "--at", "0.3", "--out", str(out))
    both = run_cli(*table, "--from-results")
    assert both.returncode == 2 and "differ in 'workload'" in both.stderr, both.stderr
    mixed = run_cli(*table, "--from-results", "--workload", "mixed")
    assert mixed.returncode == 0, mixed.stderr
    default = run_cli(*table, "--from-results", "--workload", "mixed", "--horizon", "600")
    assert default.returncode == 2 and "--horizon: " in default.stderr, default.stderr
    assert "holds no run" in default.stderr


def test_table__long_runs_of_a_workload_file_are_its_runs(run_cli, tmp_path):
    # Records carry the file's own workload name: --long compared it with the path and
    # refused every workload file's long runs.
    example = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")
    short, long = tmp_path / "t.jsonl", tmp_path / "long.jsonl"
    for path, horizon in ((short, 200), (long, 300)):
        evaluate(
            "bp", example, loads=[0.3], seeds=[0], horizon=horizon, backend="serial", output=path
        )
    done = run_cli(
        "table", "--workload", example, "--policies", "bp", "--loads", "0.3", "--at", "0.3",
        "--out", str(short), "--from-results", "--long", str(long),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Stable load (--long runs, 300 slots)" in done.stdout


def test_table__a_failing_lowest_load_of_a_user_grid_reads_below_it(run_cli, tmp_path):
    # BP grows at 0.8: its stable load over a grid starting there is "<0.80", not 0.00.
    out = tmp_path / "t.jsonl"
    done = run_cli(
        "table", "--policies", "bp", "--loads", "0.8", "--at", "0.8", "--seeds", "0", "1",
        "--horizon", "400", "--out", str(out), "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    row = next(x for x in done.stdout.splitlines() if x.startswith("| bp |"))
    assert row.split("|")[2].strip() == "<0.80", row


def test_eval_summary__a_metric_added_to_the_records_is_a_column_without_editing_eval(
    monkeypatch, capsys
):
    from mabp_gym.cli import evaluate
    from mabp_gym.harness import runs

    monkeypatch.setattr(runs, "METRIC_KEYS", (*runs.METRIC_KEYS, "queue_imbalance"))
    row = {"policy": "bp", "load": 0.5, "decision_us_mean": 12.0, "horizon": 600}
    row.update({key: 0.25 for key, _ in runs.summary_columns()})
    row["stable"] = True
    evaluate._print_summary([row])
    header, line = capsys.readouterr().out.splitlines()
    assert header.split()[-4:] == ["queue_imbalance", "dec", "us", "slots"]
    assert line.split()[-3:] == ["0.250", "12", "600"]
    # What the table leaves out is named in one place, and the shown columns exclude it.
    shown = {key for key, _ in runs.summary_columns()}
    assert shown.isdisjoint(runs.RECORD_ONLY_METRICS)
    assert {"stable", "penalty", "p95_delay", "hit_ratio", "churn", "completion_ratio"} <= shown


def test_cli__the_two_seed_note_only_where_no_rerun_decided_the_cells(capsys):
    # eval --until-decided reruns every undecided cell: a 'no' left is a confirmed growth,
    # so "'no' mostly says 'not shown stable'" would mislead there (the README's command).
    from mabp_gym.cli.evaluate import _verdict_caveats

    records = evaluate("bp", "mixed", loads=[0.9], seeds=[0, 1], horizon=300, backend="serial")
    _verdict_caveats([records], 300, screened=True)
    assert "two seeds: the 95% interval" in capsys.readouterr().out
    _verdict_caveats([records], 300, screened=False)
    assert "two seeds" not in capsys.readouterr().out


def test_cli__eval_runs_a_learned_policy_with_your_checkpoint(run_cli, tmp_path):
    import numpy as np

    from mabp_gym.agents.residual_mabp import FEATURES, save

    # A checkpoint of your own (zero weights over frame-MABP: frame-MABP's own controls).
    mine = tmp_path / "mine.pt"
    save(mine, np.zeros(len(FEATURES)), None, base="frame-mabp")
    out = tmp_path / "eval.jsonl"
    common = ["--loads", "0.5", "--seeds", "0", "--horizon", "200", "--workers", "1"]
    result = run_cli(
        "eval", "--policies", "frame-mabp", "residual-frame-mabp",
        "--checkpoint", f"residual-frame-mabp={mine}", *common, "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"residual-frame-mabp: checkpoint {mine}" in result.stdout
    records = {r["policy"]: r for r in read_records(out)}
    assert records["residual-frame-mabp"]["policy_kw"] == {"checkpoint": str(mine)}
    for key in ("p95_delay_all", "penalty", "mean_backlog"):
        assert records["residual-frame-mabp"][key] == records["frame-mabp"][key]
    for argv, message in (
        (["--checkpoint", "mabp=x.pt"], "mabp is not one of --policies"),
        (["--policies", "mabp", "--checkpoint", "mabp=x.pt"], "mabp reads no checkpoint"),
        (["--policies", "gnn", "--checkpoint", "gnn"], "give POLICY=PATH"),
        (["--policies", "gnn", "--checkpoint", f"gnn={tmp_path / 'no.pt'}"], "no such file"),
        (
            ["--policies", "residual-mabp", "--checkpoint", f"residual-mabp={mine}"],
            "a correction learned over frame-mabp",
        ),
    ):
        if "--policies" not in argv:
            argv = ["--policies", "frame-mabp", *argv]
        refused = run_cli("eval", *argv, *common)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
