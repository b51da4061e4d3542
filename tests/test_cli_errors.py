"""The command line's errors: user errors on one line with status 2 before any work,
internal errors with their traceback, a sweep's failures summarized, honest wording."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import mabp_gym
from mabp_gym.cli import commands as cli
from mabp_gym.cli import tools
from mabp_gym.harness import dispatch

EXAMPLE = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("eval", "--set", "load=0.3", "--loads", "0.5"), "--set load=0.3: eval sets the loads"),
        (("eval", "--workload", EXAMPLE, "--set", "horizon=50"), "--set horizon=50: eval sets it"),
        (("table", "--set", "load=0.3"), "--set load=0.3: table sets the loads"),
        (
            ("sweep", "--param", "K", "--values", "1", "--set", "K=2", "--out", "k.jsonl"),
            "--set K=2: sweep sweeps it",
        ),
        (
            ("sweep", "--param", "load", "--values", "0.5", "--at", "0.7", "--out", "l.jsonl"),
            "--param load sweeps the load over --values, so drop --at",
        ),
        (
            ("sweep", "--param", "nu", "--values", "1", "--nu", "3", "--out", "n.jsonl"),
            "--nu: sweep --param nu sets nu with --values, so drop --nu",
        ),
        (("capacity", "--set", "load=0.3"), "capacity does not depend on the load"),
        (("simulate", "--load", "0.3", "--set", "load=0.4"), "give --load or --set load"),
        (("simulate", "--workload", EXAMPLE, "--set", "K=3"), "accepts the overrides load and"),
        (("eval", "--loads", "0.5", "--seeds", "-1"), "seeds must be integers >= 0"),
        (("simulate", "--seeds", "-1"), "--seeds must be integers >= 0"),
        (("eval", "--loads", "0.5", "--out", "."), "--out '.' is a directory"),
        (("eval", "--loads", "0.5", "--out", "/dev/null"), "not a regular file"),
        (("eval", "--loads", "0.5", "--out", "missing/r.jsonl"), "does not exist"),
        # ray.init waited minutes on an address nothing answers at, then a traceback:
        (("eval", "--backend", "ray", "--address", "127.0.0.1:1"), "no Ray cluster answers"),
        (("eval", "--backend", "ray", "--address", "nohost"), "give host:port (or 'auto')"),
        (("table", "--loads", "0.5", "--markdown", "missing/t.md"), "--markdown 'missing/t.md'"),
        (("table", "--loads", "0.5", "--csv", "."), "--csv '.' is a directory"),
        (("capacity", "--json", "."), "--json '.' is a directory"),
        (("simulate", "--json", "missing/s.json"), "does not exist"),
        (("plot", "--results", "r.jsonl", "--out-dir", "r.jsonl"), "exists and is not a directory"),
        (("train", "gnn", "--workload", "nope"), "unknown workload 'nope'"),
        (("table", "--loads", "0.5", "--at", "nan"), "--at: must be finite, got nan"),
        (("sweep", "--param", "K", "--values", "2", "--at", "0", "--out", "s.jsonl"), "--at: "),
    ],
)
def test_cli__a_bad_argument_is_one_line_with_status_2_before_any_work(
    run_cli, args, message, tmp_path
):
    (tmp_path / "r.jsonl").write_text("")
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # nothing written


EVAL_LINE = '{"policy": "bp", "workload": "mixed", "load": 0.5, "seed": 0, "key": "k"}\n'  # a stub
FLEET_LINE = '{"trace": "synthetic", "router": "jsq", "load": 1.0, "run": 0, "key": "f"}\n'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("table", "--from-results", "--out", "e.jsonl", "--markdown", "e.jsonl"),
            "--markdown 'e.jsonl' names the file of --out",
        ),
        (
            ("table", "--from-results", "--out", "e.jsonl", "--markdown", "t.md", "--csv", "t.md"),
            "--csv 't.md' names the file of --markdown",
        ),
        (
            ("table", "--long", "missing.jsonl", "--from-results", "--out", "e.jsonl"),
            "--long: no such file 'missing.jsonl'",
        ),
        (
            ("verdicts", "--results", "e.jsonl", "--markdown", "./e.jsonl", "--horizons", "100")
            + ("--seed-sets", "0"),
            "--markdown './e.jsonl' names the file of --results",
        ),
        (("capacity", "--workload", "w.json", "--json", "w.json"), "names the file of --workload"),
        (("simulate", "--workload", "w.json", "--json", "w.json"), "names the file of --workload"),
        (("eval", "--workload", "w.json", "--out", "w.json"), "names the file of --workload"),
        (("eval", "--loads", "0.5", "--out", "f.jsonl"), "holds fleet replays"),
        (("sweep", "--param", "K", "--values", "1", "--out", "f.jsonl"), "holds fleet replays"),
        (("fleet", "--out", "e.jsonl"), "holds policy evaluations"),
        (("capacity", "--workload", "work_reuse", "--json", "e.jsonl"), "is a results file"),
        (("fleet", "--markdown", "f.jsonl"), "--markdown 'f.jsonl' is a results file"),
        (("sweep", "--param", "K", "--values", "2", "2.0", "--out", "n.jsonl"), "given twice"),
        (("eval", "--loads", "0.5", "--out", "t.jsonl"), "no line of it is a run's record"),
        (("fleet", "--out", "w.json"), "no line of it is a run's record"),
        (("fleet", "--out", "f2.jsonl", "--json", "f2.jsonl"), "--json 'f2.jsonl' names the file"),
        (("fleet", "--trace", "t.jsonl", "--markdown", "t.jsonl"), "names the file of --trace"),
        (("fleet", "--set", "num_workers=3"), "give the fleet's size with --fleet-size"),
        (("fleet", "--fleet-size", "99999999999"), "--fleet-size must be at most 100,000"),
        (
            ("fleet", "--trace", "conversation", "--requests", "10", "--loads", "0.5"),
            "--loads 0.5 on trace conversation[:10]: a trace needs at least two distinct",
        ),
        (("fleet", "--loads", "1e-310"), "--loads 1e-310 on trace synthetic"),
        (("fleet", "--set", "block_tokens=16"), "hashes 512-token blocks"),
        (("fleet", "--set", "scrape_interval_s=1e-12"), "0 (exact) or at least 0.001 s"),
        (("fleet", "--set", "cache_blocks=1", "--set", "cache_blocks=4"), "given twice"),
        (("fleet", "--trace", "Synthetic"), "(the shipped traces: conversation, synthetic)"),
        (("fleet", "--requests", "100000"), "at most the trace's 3993 requests"),
        (("eval", "--policy", "nope"), "mabp-gym eval: error: unknown policy 'nope'"),
    ],
)
def test_cli__an_output_never_overwrites_an_input_or_another_commands_results(
    run_cli, args, message, tmp_path
):
    """Two options naming one file, or an output on a file the command reads or on another
    command's results file, are refused before anything is written: every file is as it was."""
    files = {
        "e.jsonl": EVAL_LINE,
        "f.jsonl": FLEET_LINE,
        "w.json": Path(EXAMPLE).read_text(),
        "t.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == files


def test_cli__train_help_lists_the_learners(run_cli):
    result = run_cli("train", "--help")
    assert result.returncode == 0 and "usage:" in result.stdout
    assert "gnn" in result.stdout and "learn-mabp" in result.stdout
    for learner in ("gnn", "learn-mabp", "residual-mabp"):
        result = run_cli("train", learner, "--help")
        assert result.returncode == 0 and "--out" in result.stdout, (learner, result.stderr)
    assert "20%" in run_cli("train", "residual-mabp", "--help").stdout


def test_cli__an_internal_error_keeps_its_traceback(monkeypatch):
    def broken(*args, **kw):
        raise ValueError("a bug, not a usage error")

    monkeypatch.setattr(tools, "capacity", broken)  # where _capacity looks it up
    with pytest.raises(ValueError, match="a bug, not a usage error"):
        cli.main(["capacity", "--workload", "work_reuse"])


def test_cli__failing_runs_exit_1_with_the_traceback_and_a_summary(monkeypatch, capsys, tmp_path):
    real = dispatch.run

    def flaky(spec):
        if spec.seed == 1:
            raise RuntimeError("run exploded")
        return real(spec)

    monkeypatch.setattr(dispatch, "run", flaky)
    out = tmp_path / "r.jsonl"
    status = cli.main(
        [
            "eval",
            "--policy",
            "bp",
            "--workload",
            "work_reuse",
            "--loads",
            "0.3",
            "--seeds",
            "0",
            "1",
            "--horizon",
            "30",
            "--workers",
            "1",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert status == 1
    assert "Traceback" in err and "RuntimeError: run exploded" in err
    assert "1 of 2 runs failed" in err and f"1 finished runs are in {out}" in err
    assert [r["seed"] for r in mabp_gym.read_records(out)] == [0]


def test_cli__eval_says_none_of_the_tested_loads_when_nothing_is_stable(run_cli, tmp_path):
    result = run_cli(
        "eval",
        "--policy",
        "sp",
        "--workload",
        "work_reuse",
        "--loads",
        "4",
        "--seeds",
        "0",
        "--horizon",
        "200",
        "--workers",
        "1",
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    assert "stable load: sp none of the tested loads (lowest 4)" in result.stdout
    assert "sp 0" not in result.stdout and "walked up" not in result.stdout


def test_the_eval_table_tells_close_loads_apart_and_says_where_a_walk_started():
    from mabp_gym.cli.evaluate import _stable_load_line, _verdict_cell, load_text

    # Two decimals printed 0.2525 as 0.25 beside 0.25, and 0.225 as 0.23.
    assert [load_text(x) for x in (0.25, 0.2525, 0.225, 0.5, 1.0)] == [
        "0.25", "0.2525", "0.225", "0.50", "1.00",
    ]  # fmt: skip
    assert _verdict_cell(0.0, 0.255) == "<0.255" and _verdict_cell(0.3, 0.3) == "0.30"
    # The table's columns stay in line with a longer load.
    import contextlib
    import io

    from mabp_gym.cli.evaluate import _print_summary
    from mabp_gym.harness.summaries import summarize_records

    records = [
        {**mabp_gym.evaluate("bp", "work_reuse", loads=[load], seeds=[0], horizon=200,
                             progress=False)[0]}
        for load in (0.25, 0.2525)
    ]  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _print_summary(summarize_records(records))
    lines = printed.getvalue().splitlines()
    assert len({len(line) for line in lines}) == 1, lines
    # A stable load says nothing of the loads below the lowest one run.
    line = _stable_load_line({"bp": 0.5, "mabp": 0.85}, [0.5, 0.85])
    assert line == "stable load: bp 0.5, mabp 0.85 (walked up from 0.5, the lowest load run)"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.zip", b"not a zip", "not a zip archive"),
        ("empty.pt", b"", "the checkpoint file is empty"),
        ("junk.pt", b"\x80\x04junk", "not a readable checkpoint"),
    ],
)
def test_train_gnn__a_refused_resume_file_is_one_line_and_exit_2(
    tmp_path, name, content, message, run_cli
):
    pytest.importorskip("torch")
    path = tmp_path / name
    path.write_bytes(content)
    result = run_cli("train", "gnn", "--resume", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_train_gnn__a_zip_that_is_not_an_sb3_archive_is_refused(tmp_path, run_cli):
    pytest.importorskip("torch")
    import zipfile

    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    result = run_cli("train", "gnn", "--resume", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "not a Stable-Baselines3 archive" in result.stderr


class _Evil:
    """Unpickling it would run a shell command (what weights_only exists to refuse)."""

    def __reduce__(self):
        import os

        return (os.system, ("echo the archive ran code",))


def _archive(path: Path, **members: bytes) -> Path:
    """A zip with the members an SB3 archive of `train gnn` has, ``members`` replacing."""
    import io
    import zipfile

    torch = pytest.importorskip("torch")
    tensors = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, tensors)
    base = {
        "data": json.dumps({"policy_class": {":serialized:": "gAR="}, "n_envs": 2}).encode(),
        "policy.pth": tensors.getvalue(),
        "mabp_gym.json": b"{}",
        **members,
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, raw in base.items():
            archive.writestr(name, raw)
    return path


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"data": b"[1, 2]"}, "its data is a JSON list, not an object"),
        ({"data": b"3"}, "its data is a JSON int, not an object"),
        ({"data": b"\xff\xfe not json"}, "not a Stable-Baselines3 archive"),
        ({"data": b'{"policy_class": "MlpPolicy"}'}, "fields ['policy_class'] are not as PPO"),
        ({"data": b'{"hook": {":serialized:": "gAR="}}'}, "pickled fields ['hook']"),
        ({"policy.pth": "evil"}, "holds objects other than tensors"),
        ({"policy.optimizer.pth": "evil"}, "'policy.optimizer.pth' holds objects other than"),
        ({"policy.pth": b"junk"}, "'policy.pth' is not a torch file"),
    ],
)
def test_train_gnn__a_malformed_archive_is_one_line_and_exit_2(tmp_path, capsys, members, message):
    import pickle

    members = {k: pickle.dumps(_Evil()) if v == "evil" else v for k, v in members.items()}
    path = _archive(tmp_path / "bad.zip", **members)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "gnn", "--resume", str(path), "--out", str(out), "--ppo-steps", "64"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err and "ran code" not in err and not out.exists()


def test_cli__an_out_whose_lock_file_cannot_be_created_is_one_line(tmp_path, capsys):
    # os.access says yes for root in /proc, where no file can be created (it was a traceback).
    if not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc: a directory where no file can be created")
    for argv in (
        ["eval", "--policy", "bp", "--loads", "0.3", "--seeds", "1", "--horizon", "100"],
        ["fleet", "--routers", "jsq", "--loads", "0.6", "--runs", "1", "--requests", "50"],
    ):
        with pytest.raises(SystemExit) as stop:
            cli.main([*argv, "--out", "/proc/mabp-gym-test.jsonl"])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert "its lock file /proc/mabp-gym-test.jsonl.lock cannot be created" in err


def test_simulate__a_run_too_short_to_judge_is_refused_and_nan_is_written_as_null(
    run_cli, monkeypatch, tmp_path
):
    # A 1-slot run read "stable yes" (eval refuses it); a metric without data (NaN) was
    # written as NaN, which is no JSON.
    short = run_cli("simulate", "--horizon", "1")
    assert short.returncode == 2 and "leaves 1 slot(s) after the warm-up" in short.stderr
    from mabp_gym.core import metrics

    real = metrics.summarize
    monkeypatch.setattr(metrics, "summarize", lambda *a: {**real(*a), "penalty": float("nan")})
    out = tmp_path / "s.json"
    cli.main(["simulate", "--horizon", "20", "--json", str(out)])

    def no_constants(name):
        raise AssertionError(f"{name} in the JSON")

    records = json.loads(out.read_text(), parse_constant=no_constants)
    assert records[0]["penalty"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Training on seeds a result is read on: the choice's 100-101, the final evaluation's
        # 200-..., the benchmark's 9000-9999 (the GNN's imitation seeds are --seed + k).
        (("gnn", "--seed", "97"), "seeds [100, 101], the checkpoint choice's"),
        (("gnn", "--seed", "9000"), "the benchmark's"),
        (("learn-mabp", "--seed", "198"), "seeds [200, 201], the final evaluation's"),
        (("learn-mabp", "--seed", "9000"), "the benchmark's"),
        # Tracebacks after minutes of work, or silently dropped, before:
        (("gnn", "--ppo-load", "-1"), "--ppo-load: must be >= 0"),
        (("gnn", "--imitation-noise", "-1"), "--imitation-noise: must be >= 0"),
        (("gnn", "--ppo-learning-rate", "-1"), "--ppo-learning-rate: must be > 0"),
        (("gnn", "--learning-rate", "nan"), "--learning-rate: must be finite"),
        (("learn-mabp", "--explore-slots", "1"), "--explore-slots must be >= 50"),
    ],
)
def test_train__seeds_held_out_and_bad_numbers_are_refused_before_any_work(
    tmp_path, args, message, run_cli
):
    pytest.importorskip("torch")
    result = run_cli("train", *args, "--out", str(tmp_path / "o"))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_train__a_bad_argument_is_refused_before_torch_loads():
    # Each of the 14 error tests of `train` spent 9 s importing torch and PyG first.
    code = """
import sys
from mabp_gym.training import gnn, learn_mabp, residual_mabp
cases = ((gnn, ["--learning-rate", "-1"]), (learn_mabp, ["--explore-slots", "1"]),
         (residual_mabp, ["--loads", "0"]))
for learner, argv in cases:
    try:
        learner.parse(argv)
    except ValueError:
        pass
    else:
        raise SystemExit("accepted " + repr(argv))
print(sorted({"torch", "torch_geometric", "stable_baselines3"} & set(sys.modules)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_train_gnn__the_teacher_is_one_the_help_names():
    pytest.importorskip("torch")
    from mabp_gym.training import gnn

    # "mabp or oracle-sur", the help says; any registered policy was taken, gnn itself too.
    for teacher in ("gnn", "random", "bp"):
        with pytest.raises(ValueError, match=r"--teacher must be one of \('mabp', 'oracle-sur'\)"):
            gnn.parse(["--teacher", teacher])
    assert gnn.parse(["--teacher", "oracle-sur"]).teacher == "oracle-sur"


def test_a_seed_range_too_large_is_refused_in_a_line(run_cli):
    # list(range(0, 99999999999)) ran out of memory with a traceback.
    result = run_cli("bench", "--seeds", "9000:99999999999")
    assert result.returncode == 2
    assert "holds 99,999,990,999 seeds; at most 100,000" in result.stderr
    from mabp_gym.cli.common import _parse_seeds

    assert _parse_seeds("3:6", "--seeds") == [3, 4, 5]
    with pytest.raises(ValueError, match="is not 'a:b' or comma-separated"):
        _parse_seeds("3:x", "--seeds")


def test_table_from_results_at_a_load_the_file_does_not_hold_is_refused(run_cli, tmp_path):
    # It printed a table of '-' cells and exited 0.
    out = tmp_path / "runs.jsonl"
    mabp_gym.evaluate("bp", "work_reuse", loads=[0.5], seeds=[0], horizon=200, output=out,
                      progress=False)  # fmt: skip
    common = ["table", "--from-results", "--out", str(out), "--workload", "work_reuse"]
    refused = run_cli(*common, "--policies", "bp", "--at", "0.35", "--horizon", "200")
    assert refused.returncode == 2
    assert "--at 0.35: " in refused.stderr and "holds no run at that load; its loads: 0.5" in (
        refused.stderr
    )
    shown = run_cli(*common, "--policies", "bp", "--at", "0.5", "--horizon", "200")
    assert shown.returncode == 0, shown.stderr
