"""``mabp-gym fleet``: the Table II analogue from the command line."""

from __future__ import annotations

import json

import pytest


def test_fleet_cli__prints_the_spec_11_table_and_writes_records(run_cli, tmp_path):
    out, md = tmp_path / "runs.json", tmp_path / "table.md"
    result = run_cli(
        "fleet",
        "--trace",
        "synthetic",
        "--requests",
        "150",
        "--workers",
        "3",
        "--runs",
        "2",
        "--routers",
        "jsq",
        "dynamo-t0,mabp-route",
        "--loads",
        "0.5",
        "1.0",
        "--json",
        str(out),
        "--markdown",
        str(md),
    )
    assert result.returncode == 0, result.stderr
    for label in (
        "Throughput (req/s)",
        "SLO goodput (req/s)",
        "P95 TTFT (s)",
        "P95 E2E latency (s)",
        "GPU seconds/request",
        "KV hit ratio (tokens)",
        "Downstream jobs/request",
        "Drop rate",
        "P95 scheduler time (us)",
    ):
        assert result.stdout.count(label) == 2  # one table a load
    assert "| Metric | jsq | dynamo-t0 | mabp-route |" in result.stdout
    records = json.loads(out.read_text())
    assert len(records) == 2 * 3 * 2 and {r["workers"] for r in records} == {3}
    assert md.read_text() in result.stdout


def test_fleet_cli__unknown_router_or_setting_is_one_line_exit_2(run_cli):
    result = run_cli("fleet", "--requests", "50", "--routers", "jsk")
    assert result.returncode == 2 and "unknown router 'jsk'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("fleet", "--requests", "50", "--set", "cache_blocks=0")
    assert result.returncode == 2 and "cache_blocks must be > 0" in result.stderr


def test_format_table__router_layout_has_one_row_a_router():
    from mabp_gym.fleet.evaluate import format_table

    rows = [
        {
            "router": r,
            "load": 0.5,
            "run": k,
            "throughput": 1.0 + k,
            "slo_goodput": 0.5,
            "p95_ttft_s": 1.0,
            "p95_e2e_s": 2.0,
            "gpu_s_per_request": 1.0,
            "kv_hit_ratio": 0.1 * (r == "b"),
            "downstream_per_request": 0.1,
            "drop_rate": 0.0,
            "p95_scheduler_us": 10.0,
        }
        for r in ("a", "b")
        for k in range(2)
    ]
    table = format_table(rows, ["a", "b"], layout="routers")
    # A tie: both bold; the half-width is t(0.975, 1) * 0.7071 / sqrt(2) = 6.353.
    assert "| a | **1.500±6.353** |" in table
    assert "**0.100±0.000**" in table.splitlines()[-1]


def _one_run(router: str, **metrics: float) -> dict:
    """One fleet record of ``router`` at load 1.0, every metric a plain value unless given."""
    return {
        "router": router,
        "load": 1.0,
        "run": 0,
        "throughput": 1.0,
        "slo_goodput": 0.5,
        "p95_ttft_s": 1.0,
        "p95_tpot_s": 0.1,
        "p95_e2e_s": 2.0,
        "gpu_s_per_request": 1.0,
        "kv_hit_ratio": 0.1,
        "downstream_per_request": 0.1,
        "drop_rate": 0.0,
        "p95_scheduler_us": 10.0,
        **metrics,
    }


def test_format_table__throughput_and_goodput_are_bold_at_their_maximum():
    from mabp_gym.fleet.evaluate import format_table

    # Higher is better for both: "a" has the higher throughput, "b" the higher goodput.
    rows = [
        _one_run("a", throughput=2.0, slo_goodput=0.5),
        _one_run("b", throughput=1.0, slo_goodput=1.5),
    ]
    table = format_table(rows, ["a", "b"], layout="routers")
    a, b = (line.split(" | ")[1:3] for line in table.strip().splitlines()[-2:])
    assert a == ["**2.000**", "0.500"]
    assert b == ["1.000", "**1.500**"]


def test_format_table__a_router_that_drops_work_is_never_marked_best():
    from mabp_gym.fleet.evaluate import format_table

    def row(router, gpu, drops):
        return _one_run(router, gpu_s_per_request=gpu, drop_rate=drops)

    table = format_table(
        [row("frugal", 0.5, 0.3), row("fair", 0.9, 0.0)], ["frugal", "fair"], layout="routers"
    )
    frugal, fair = table.strip().splitlines()[-2:]
    assert "**0.500" not in frugal and "| **0.900** |" in fair
    # One run has no interval: no "±0.000", which read as exact.
    assert "±" not in frugal + fair and "(1 runs, one run: no interval;" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--loads", "-1"], "each load must be a finite number > 0"),
        (["--loads", "0"], "each load must be a finite number > 0"),
        (["--loads", "nan"], "each load must be a finite number > 0"),
        (["--loads", "inf"], "each load must be a finite number > 0"),
        (["--loads", "0.6", "0.6"], "0.6 is given twice"),
        (["--runs", "0"], "--runs must be a positive integer"),
        (["--seed", "-1"], "--seed must be an integer >= 0"),
        (["--routers", "jsq", "jsq"], "'jsq' is given twice"),
        (["--routers", ","], "name at least one router"),
        (["--engine", "step", "--set", "decode_base_s=1"], "is the simple engine's step time"),
    ],
    ids=[
        "negative",
        "zero",
        "nan",
        "inf",
        "repeated-load",
        "runs",
        "seed",
        "repeated-router",
        "no-router",
        "step-engine-speed",
    ],
)
def test_fleet_cli__bad_arguments_are_one_line_exit_2(run_cli, args, message):
    result = run_cli("fleet", "--trace", "synthetic", "--requests", "20", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_fleet_cli__json_has_no_nan(run_cli, tmp_path):
    out = tmp_path / "runs.json"
    result = run_cli(
        "fleet",
        "--trace",
        "synthetic",
        "--requests",
        "20",
        "--routers",
        "jsq",
        "--runs",
        "1",
        "--loads",
        "0.5",
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr

    def refuse(name):
        raise AssertionError(f"{name} in the JSON")

    json.loads(out.read_text(), parse_constant=refuse)  # strict JSON: no NaN or Infinity


def test_finite__non_finite_floats_become_null_at_any_depth():
    from mabp_gym.cli.common import _finite

    value = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": "x"}
    assert _finite(value) == {"a": None, "b": [1.0, None, {"c": None}], "d": "x"}


def test_fleet_cli__streams_records_to_out_and_a_rerun_resumes(run_cli, tmp_path):
    out = tmp_path / "fleet.jsonl"
    common = ["fleet", "--trace", "synthetic", "--requests", "60", "--fleet-size", "2"]
    common += ["--loads", "0.5", "--routers", "jsq", "bp", "--out", str(out)]
    first = run_cli(*common, "--runs", "2")
    assert first.returncode == 0, first.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["key"] for line in lines)
    # An interrupted write leaves a truncated line: that run is made again, the rest kept.
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    again = run_cli(*common, "--runs", "3")
    assert again.returncode == 0, again.stderr
    assert "jsq: 3 runs (2 from the results file)" in again.stderr
    assert "bp: 3 runs (1 from the results file)" in again.stderr
    # The torn line was cut off (and set aside), not kept as a line of junk.
    keys = [json.loads(line)["key"] for line in out.read_text().splitlines()[3:]]
    assert len(keys) == 3 and len(set(keys)) == 3
    assert lines[3][:20] in (tmp_path / "fleet.jsonl.rejected").read_text()
    # Another engine is another run.
    step = run_cli(*common, "--runs", "1", "--engine", "step")
    assert "jsq: 1 runs" in step.stderr and "from the results file" not in step.stderr
    # A damaged line (a byte not UTF-8, a field gone, a value of the wrong kind) is made
    # again, not a traceback on every later run.
    records = [json.loads(line) for line in lines]
    damaged = [
        b"\xff\xfe" + lines[0].encode(),
        json.dumps({k: v for k, v in records[1].items() if k != "load"}).encode(),
        json.dumps({**records[2], "drop_rate": "abc"}).encode(),
    ]
    out.write_bytes(b"\n".join([*damaged, lines[3].encode()]) + b"\n")
    mended = run_cli(*common, "--runs", "2")
    assert mended.returncode == 0, mended.stderr
    assert "jsq: 2 runs" in mended.stderr and "jsq: 2 runs (" not in mended.stderr
    assert "bp: 2 runs (1 from the results file)" in mended.stderr
    # ... and set aside as the evaluations' files do: the file holds whole records only.
    kept = out.read_bytes().splitlines()
    assert not any(line in kept for line in damaged) and len(kept) == 4
    assert all(json.loads(line)["router"] in ("jsq", "bp") for line in kept)
    assert b"'drop_rate' is 'abc'" in (tmp_path / "fleet.jsonl.rejected").read_bytes()
    # A last record that lacks only its final newline (an edited file) is a record.
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    again = run_cli(*common, "--runs", "2")
    assert "jsq: 2 runs (2 from the results file)" in again.stderr
    assert "bp: 2 runs (2 from the results file)" in again.stderr
    assert out.read_bytes().endswith(b"\n") and len(out.read_bytes().splitlines()) == 4


def test_fleet_cli__a_second_writer_of_out_is_refused(run_cli, tmp_path):
    """Two replays appending to one ``--out`` would both run and write the same runs: the
    second is refused while the first holds the file (the evaluations' lock)."""
    from mabp_gym.harness.results_file import _ResultsFile

    out = tmp_path / "fleet.jsonl"
    args = [
        "fleet",
        "--trace",
        "synthetic",
        "--requests",
        "60",
        "--routers",
        "jsq",
        "--loads",
        "0.5",
    ]
    with _ResultsFile(out):
        busy = run_cli(*args, "--out", str(out))
    assert busy.returncode == 2 and "being written by another process" in busy.stderr
    assert not out.exists() or out.read_text() == ""
    done = run_cli(*args, "--out", str(out), "--runs", "1")
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == 1


def test_fleet_cli__runs_a_router_given_as_module_colon_class(run_cli, tmp_path, monkeypatch):
    from mabp_gym.fleet import ROUTERS
    from mabp_gym.fleet.simulator import METRICS

    (tmp_path / "my_routers.py").write_text(
        "class Turns:\n"
        "    def reset(self, num_workers, rng):\n"
        "        self.n, self.k = num_workers, -1\n"
        "    def choose(self, request, telemetry):\n"
        "        self.k = (self.k + 1) % self.n\n"
        "        return self.k\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "runs.json"
    common = ("fleet", "--trace", "synthetic", "--requests", "60", "--runs", "1")
    try:
        mine = run_cli(*common, "--routers", "my_routers:Turns", "round-robin", "--json", str(out))
        assert mine.returncode == 0, mine.stderr
        assert "| Metric | my_routers:Turns | round-robin |" in mine.stdout
        by_router = {r["router"]: r for r in json.loads(out.read_text())}
        ours, theirs = by_router["my_routers:Turns"], by_router["round-robin"]
        same = [m for m in METRICS if m != "p95_scheduler_us"]  # wall-clock time differs
        assert [ours[m] for m in same] == [theirs[m] for m in same]
    finally:
        ROUTERS.pop("my_routers:Turns", None)
    for entry in ("my_routers:Nope", "no_such_mod:X"):
        bad = run_cli(*common, "--routers", entry)
        assert bad.returncode == 2 and "cannot import" in bad.stderr and entry not in ROUTERS


def test_fleet_cli__a_full_disk_writing_markdown_is_one_line(run_cli, tmp_path, monkeypatch):
    import errno
    import pathlib

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    out, table = tmp_path / "fleet.jsonl", tmp_path / "table.md"
    monkeypatch.setattr(pathlib.Path, "write_text", full)
    done = run_cli(
        "fleet", "--trace", "synthetic", "--requests", "20", "--routers", "jsq",
        "--runs", "1", "--loads", "0.5", "--out", str(out), "--markdown", str(table),
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"could not write {table} (No space left on device)" in done.stderr
    assert f"every run that finished is kept in {out}" in done.stderr
    assert len(out.read_bytes().splitlines()) == 1


def test_fleet_run_key__changes_with_the_revision_of_the_built_in_routers(monkeypatch):
    # A fix to a built-in router bumps REVISION, so a results file made before runs again.
    from mabp_gym.fleet import FleetConfig
    from mabp_gym.fleet import evaluate as fleet_evaluate

    def key() -> str:
        return fleet_evaluate.run_key("digest", "sglang", 0.6, 0, FleetConfig(), "simple")

    before = key()
    assert key() == before  # the same run, the same key
    monkeypatch.setattr(fleet_evaluate, "REVISION", fleet_evaluate.REVISION + 1)
    assert key() != before
