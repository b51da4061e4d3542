"""Results files never lose or duplicate a run: in-place repair, rejected lines set aside,
run keys that cover everything, one writer at a time, failures that keep finished runs,
no orphaned workers, and kills at random moments (during repair too)."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import mabp_gym
from mabp_gym import read_records
from mabp_gym.harness import dispatch, runs
from mabp_gym.harness.evaluation import RunsFailedError, evaluate, execute
from mabp_gym.harness.results_file import ResultsFileBusyError, _ResultsFile
from mabp_gym.harness.runs import METRIC_KEYS, plan

GRID = dict(loads=[0.3], seeds=[0, 1], horizon=30, backend="serial")


def complete_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


def test_repair__cuts_only_the_torn_tail_in_place(tmp_path):
    out = tmp_path / "runs.jsonl"
    evaluate("bp", "work_reuse", output=out, **GRID)
    before = out.read_bytes()
    with out.open("ab") as handle:
        handle.write(b'{"policy": "bp", "lo')  # a write cut by a kill
    inode = out.stat().st_ino
    again = evaluate("bp", "work_reuse", output=out, **GRID)
    assert out.read_bytes() == before and out.stat().st_ino == inode  # truncated, not rewritten
    assert [r["seed"] for r in again] == [0, 1]
    assert b'"lo' in (tmp_path / "runs.jsonl.rejected").read_bytes()


def test_evaluate__a_file_that_is_not_a_results_file_is_refused_untouched(tmp_path):
    # Its lines used to be moved into a .rejected sidecar and the file rewritten with runs.
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\nsecond line\n")
    with pytest.raises(ValueError, match="no line of it is a run's record"):
        evaluate("bp", "work_reuse", output=notes, **GRID)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert notes.read_text() == "my notes\nsecond line\n"
    # One line without a final newline is content too: a workload that json.dump wrote, or
    # notes; it was read as a torn first record, cut to nothing and written over.
    for name, text in (("w.json", '{"name": "mine", "nodes": []}'), ("n.txt", "my notes")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match="no line of it is a run's record"):
            evaluate("bp", "work_reuse", output=tmp_path / name, **GRID)
        assert (tmp_path / name).read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.txt", "notes.txt", "w.json"]
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b'{"policy": "bp", "lo')  # only a first write cut by a kill: repaired
    assert [r["seed"] for r in evaluate("bp", "work_reuse", output=torn, **GRID)] == [0, 1]


@pytest.mark.parametrize(
    "line",
    [
        b"42",
        b'"x"',
        b"null",
        b'{"key": [1]}',
        b"[1, 2]",
        b'{"key": "abc", "policy": "bp"}',
        b"{not json",
        b"\xff\xfe not utf-8",
    ],
)
def test_read_records__a_line_that_is_not_a_record_is_set_aside_and_recomputed(line, tmp_path):
    out = tmp_path / "runs.jsonl"
    first = evaluate("bp", "work_reuse", output=out, **GRID)
    lines = complete_lines(out)
    out.write_bytes(lines[0] + line + b"\n")  # seed 1's record replaced by junk
    with pytest.warns(UserWarning, match="not records"):
        assert len(read_records(out)) == 1
    with pytest.warns(UserWarning, match=r"set aside 1 line\(s\)"):
        again = evaluate("bp", "work_reuse", output=out, **GRID)
    assert [r["seed"] for r in again] == [0, 1]
    assert again[0] == first[0]  # the good record was reused, not recomputed
    assert line in (tmp_path / "runs.jsonl.rejected").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file is clean now: no more warnings
        assert sorted(r["seed"] for r in read_records(out)) == [0, 1]


def test_evaluate__refuses_a_fleet_results_file_and_leaves_it_as_it_was(tmp_path):
    """A fleet replay's results are not an evaluation's: read as such, every line would be
    set aside as 'not a record' and its runs said to be recomputed."""
    path = tmp_path / "fleet.jsonl"
    text = '{"trace": "synthetic", "router": "jsq", "load": 1.0, "run": 0, "key": "f"}\n'
    path.write_text(text + text[:20])  # a torn last line too: nothing is cut before refusing
    with pytest.raises(ValueError, match="holds fleet replays"):
        evaluate("bp", "mixed", loads=[0.5], seeds=[0], horizon=50, output=path)
    assert path.read_text() == text + text[:20]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.jsonl"]  # not even a lock


def test_read_records__a_duplicated_run_counts_once(tmp_path):
    out = tmp_path / "runs.jsonl"
    evaluate("bp", "work_reuse", output=out, **GRID)
    lines = complete_lines(out)
    out.write_bytes(b"".join(lines + lines))  # what two concurrent writers used to leave
    with pytest.warns(UserWarning):
        assert len(read_records(out)) == 2
    with pytest.warns(UserWarning, match="set aside 2"):
        evaluate("bp", "work_reuse", output=out, **GRID)
    assert complete_lines(out) == lines


def keys(**changes) -> list[str]:
    args = {
        "policies": ["bp"],
        "workload": "mixed",
        "loads": [0.5],
        "seeds": [0],
        "horizon": 50,
        **changes,
    }
    return [
        spec.key
        for spec in plan(
            args.pop("policies"), args.pop("workload"), args.pop("loads"), args.pop("seeds"), **args
        )
    ]


def test_run_key__covers_everything_that_determines_the_record(monkeypatch):
    base = keys()
    assert keys() == base  # stable
    assert keys(loads=[0.5000000001]) != base  # no rounding collisions
    for change in (
        dict(seeds=[1]),
        dict(horizon=51),
        dict(warmup=0.25),
        dict(nu=4.0),
        dict(memory=False),
        dict(policies=["cost-bp"]),
        dict(K=5.0),
        dict(eps=0.2),
        dict(workload="rag"),
    ):
        assert keys(**change) != base, change
    # An integer for a real-valued parameter builds the same network: one run, one key
    # (--set K=2 and sweep --values 2 computed it twice, and a table refused to mix them).
    assert keys(K=2) == keys(K=2.0) != base
    monkeypatch.setattr(runs, "__version__", "9.9.9")
    assert keys() != base


def test_run_key__a_checkpoint_counts_by_content_not_path(tmp_path):
    from mabp_gym.agents.learn_mabp import PrimitiveEstimate

    wl = mabp_gym.make_workload("mixed")
    ix = wl.index
    estimate = PrimitiveEstimate(
        ix.work.copy(),
        ix.penalty.copy(),
        ix.successor_law[:, :, :-1].copy(),
        ix.work > -1,
        ix.work * 0 + 1,
    )
    path = tmp_path / "lm.pt"
    estimate.save(path, wl)
    first = keys(policies=["learn-mabp"], policy_kw={"checkpoint": str(path)})
    copy = tmp_path / "elsewhere.pt"
    shutil.copy(path, copy)
    assert keys(policies=["learn-mabp"], policy_kw={"checkpoint": str(copy)}) == first
    estimate.work[0, 0] += 1.0  # a retrained checkpoint replaces the old one at one path
    estimate.save(path, wl)
    assert keys(policies=["learn-mabp"], policy_kw={"checkpoint": str(path)}) != first


def test_results_file__a_second_writer_is_refused_with_a_clear_message(tmp_path):
    out = tmp_path / "runs.jsonl"
    with (
        _ResultsFile(out),
        pytest.raises(
            ResultsFileBusyError,
            match=rf"is being written by another process "
            rf"\(pid {os.getpid()}\)",
        ),
    ):
        evaluate("bp", "work_reuse", output=out, **GRID)
    assert not out.exists()  # refused before anything ran
    # Through the command line: one line, exit status 2, nothing written.
    with _ResultsFile(out):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mabp_gym.cli",
                "eval",
                "--policy",
                "bp",
                "--workload",
                "work_reuse",
                "--loads",
                "0.3",
                "--seeds",
                "0",
                "--horizon",
                "30",
                "--out",
                str(out),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "being written by another process" in result.stderr and not out.exists()
    evaluate("bp", "work_reuse", output=out, **GRID)  # the lock is released afterwards
    assert len(read_records(out)) == 2


@pytest.mark.parametrize("bad", ["dir", "device", "no-parent"])
def test_execute__output_path_is_checked_before_any_run(bad, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(dispatch, "run", lambda spec: calls.append(spec))
    output = {
        "dir": tmp_path,
        "device": Path(os.devnull),
        "no-parent": tmp_path / "missing" / "runs.jsonl",
    }[bad]
    with pytest.raises(ValueError, match="is a directory|not a regular file|does not exist"):
        evaluate("bp", "work_reuse", output=output, **GRID)
    assert calls == []


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ([-1], "seeds must be integers >= 0"),
        ([1.5], "seeds must be integers"),
        ([True], "seeds must be integers"),
        ([], "must not be empty"),
    ],
)
def test_plan__bad_seeds_are_refused(seeds, message):
    with pytest.raises(ValueError, match=message):
        plan(["bp"], "work_reuse", [0.3], seeds)


def test_plan__a_missing_checkpoint_or_bad_policy_keyword_fails_before_running(tmp_path):
    with pytest.raises(ValueError, match="no Learn-MABP checkpoint"):
        plan(["learn-mabp"], "mixed", [0.3], [0], policy_kw={"checkpoint": str(tmp_path / "x")})
    with pytest.raises(ValueError, match="policy 'bp'.*unexpected keyword"):
        plan(["bp"], "mixed", [0.3], [0], policy_kw={"frobnicate": 1})


def test_plan__a_workload_parameter_named_like_an_argument_goes_in_the_mapping():
    # multihop's ``memory`` is a workload parameter, not plan's no-memory switch.
    spec = plan(
        ["bp"], "multihop", [0.3], [0], horizon=30, workload_overrides={"memory": 0, "nodes": 20}
    )[0]
    assert spec.memory is True and dict(spec.overrides) == {"memory": 0, "nodes": 20}
    assert spec.build_workload().signatures == ()
    with_memory = plan(["bp"], "multihop", [0.3], [0], horizon=30, nodes=20)[0]
    assert with_memory.build_workload().signatures != ()
    with pytest.raises(ValueError, match=r"\['nodes'\] given both"):
        plan(["bp"], "multihop", [0.3], [0], nodes=20, workload_overrides={"nodes": 30})
    with pytest.raises(ValueError, match="multihop's.*goes in workload_overrides"):
        plan(["bp"], "multihop", [0.3], [0], memory=0)
    with pytest.raises(ValueError, match="workload_overrides must be a mapping"):
        plan(["bp"], "multihop", [0.3], [0], workload_overrides=[("nodes", 20)])


def _failing_run(spec):
    if spec.seed == 1:
        raise ZeroDivisionError("a bug in one run")
    return _real_run(spec)


_real_run = dispatch.run


@pytest.fixture
def forked_workers():
    """Process-pool workers forked for the test's length, whatever an earlier import set
    (torchrl switches the start method to spawn): a forked worker sees the test's patches."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("fork", force=True)
    yield
    multiprocessing.set_start_method(previous, force=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_execute__a_failing_run_keeps_the_finished_ones(
    workers, tmp_path, monkeypatch, forked_workers
):
    # Workers are forked (the fixture), so they see the patched module attribute too.
    monkeypatch.setattr(dispatch, "run", _failing_run)
    out = tmp_path / "runs.jsonl"
    specs = plan(["bp"], "work_reuse", [0.3], [0, 1, 2, 3, 4, 5], horizon=30)
    with pytest.raises(
        RunsFailedError,
        match=r"1 of 6 runs failed.*seed 1: ZeroDivisionError"
        r": a bug in one run",
    ) as caught:
        execute(specs, output=out, workers=workers, backend="process", progress=False)
    assert "Traceback" in caught.value.details[0]
    kept = read_records(out)
    assert 1 not in {r["seed"] for r in kept} and 0 in {r["seed"] for r in kept}
    monkeypatch.setattr(dispatch, "run", _real_run)
    records = execute(specs, output=out, workers=1, progress=False)  # resume
    assert [r["seed"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert len(complete_lines(out)) == 6


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_execute__killing_the_parent_leaves_no_orphaned_workers(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mabp_gym.cli",
            "eval",
            "--policy",
            "mabp",
            "--loads",
            "0.5",
            "--seeds",
            "0",
            "1",
            "2",
            "3",
            "--horizon",
            "100000",
            "--workers",
            "2",
            "--no-progress",
            "--out",
            str(tmp_path / "runs.jsonl"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 90
    workers: list[int] = []
    while time.time() < deadline and len(workers) < 2:
        time.sleep(0.2)
        workers = _children(process.pid)
    assert len(workers) >= 2, "the pool never started"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.time() + 15
    while time.time() < deadline and any(map(_alive, workers)):
        time.sleep(0.1)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


# -- kills at random moments -------------------------------------------------------------------
SWEEP = textwrap.dedent("""
    import sys
    from mabp_gym.harness.evaluation import evaluate
    evaluate(["sp", "bp"], "work_reuse", loads=[0.3, 0.6], seeds=range(25), horizon=30,
             backend="serial", output=sys.argv[1])
""")


def _padding(count: int) -> bytes:
    """Complete records of other runs, so that reading and repairing the file takes time."""
    lines = []
    for k in range(count):
        record = {
            "key": f"padding{k:08d}",
            "policy": "pad",
            "workload": "pad",
            "load": 0.5,
            "seed": k,
            "horizon": 1,
            **{name: 0.0 for name in METRIC_KEYS},
            "stable": False,
            "backlog_trace": list(range(40)),
        }
        lines.append(json.dumps(record).encode() + b"\n")
    return b"".join(lines)


def _complete_records(path: Path) -> dict[str, bytes]:
    """Key -> line of every complete, valid record; asserts no key appears twice."""
    found: dict[str, bytes] = {}
    for line in complete_lines(path):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(value, dict)
            and isinstance(value.get("key"), str)
            and all(k in value for k in METRIC_KEYS)
        ):
            assert value["key"] not in found, f"run {value['key']} written twice"
            found[value["key"]] = line
    return found


@pytest.mark.slow
def test_results_file__kills_at_random_moments_never_lose_or_duplicate_a_record(tmp_path):
    out = tmp_path / "runs.jsonl"
    out.write_bytes(_padding(12_000))
    rng = random.Random(11)
    seen: dict[str, bytes] = _complete_records(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    during_repair = 0
    for attempt in range(14):
        # Junk in the middle and a torn tail: the next start must truncate, set aside and
        # rewrite (temporary file + rename), the moments a kill used to empty the file.
        with out.open("ab") as handle:
            handle.write(b"42\n" + b'{"key": "torn", "pol')
        process = subprocess.Popen(
            [sys.executable, "-c", SWEEP, str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if attempt % 2 == 0:  # kill as soon as the rewrite of the repair has begun
            repair = out.with_name(out.name + ".repair")
            deadline = time.time() + 30
            while time.time() < deadline and not repair.exists() and process.poll() is None:
                time.sleep(0.0005)
            during_repair += repair.exists()
        else:
            time.sleep(rng.uniform(0.5, 4.0))
        process.send_signal(signal.SIGKILL)
        process.wait()
        now = _complete_records(out)
        lost = [key for key in seen if now.get(key) != seen[key]]
        assert lost == [], f"attempt {attempt}: {len(lost)} complete records lost or altered"
        seen = now
    assert during_repair >= 3, "no kill landed inside a repair"
    subprocess.run(
        [sys.executable, "-c", SWEEP, str(out)],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
    )
    final = _complete_records(out)
    assert all(final.get(key) == line for key, line in seen.items())
    assert sum(not key.startswith("padding") for key in final) == 100
    assert sum(key.startswith("padding") for key in final) == 12_000


def test_read_records__a_record_written_before_the_later_metrics_still_reads(tmp_path):
    import json

    from mabp_gym.harness.results_file import read_records
    from mabp_gym.harness.runs import LATER_METRIC_KEYS, RunSpec, run

    record = run(RunSpec("bp", "mixed", 0.3, 0, horizon=30))
    older = {k: v for k, v in record.items() if k not in LATER_METRIC_KEYS}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(older) + "\n")
    (read,) = read_records(path)
    assert read["key"] == record["key"] and "p95_delay_all" not in read


def test_read_records__a_torn_last_record_is_left_out_with_a_warning(tmp_path):
    from mabp_gym.harness.results_file import read_records

    path = tmp_path / "r.jsonl"
    evaluate("bp", "work_reuse", output=path, **GRID)
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[0][:30])  # a write cut short
    with pytest.warns(UserWarning, match="left out its torn last line"):
        assert len(read_records(path)) == 2
    path.write_bytes(whole)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole file reads without a warning
        assert len(read_records(path)) == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [("p95_delay_all", "abc"), ("stable", "yes"), ("slope", True), ("backlog_trace", [1, "x"])],
)
def test_read_records__a_record_with_a_value_of_the_wrong_kind_is_set_aside(field, value, tmp_path):
    # It was reused, then crashed every summary of the file with a traceback.
    out = tmp_path / "runs.jsonl"
    first = evaluate("bp", "work_reuse", output=out, **GRID)
    lines = complete_lines(out)
    edited = {**json.loads(lines[1]), field: value}
    out.write_bytes(lines[0] + json.dumps(edited).encode() + b"\n")
    with pytest.warns(UserWarning, match=rf"set aside 1 line\(s\) .*field '{field}'"):
        again = evaluate("bp", "work_reuse", output=out, **GRID)
    assert again[1]["slope"] == first[1]["slope"] and again[0] == first[0]


def test_execute__a_record_edited_to_another_run_is_refused_not_reused(tmp_path):
    out = tmp_path / "runs.jsonl"
    evaluate("bp", "work_reuse", output=out, **GRID)
    lines = complete_lines(out)
    edited = {**json.loads(lines[1]), "policy": "mabp", "load": 0.9}  # its key kept
    out.write_bytes(lines[0] + json.dumps(edited).encode() + b"\n")
    with pytest.raises(ValueError, match=r"says policy mabp, load 0.9, .* the line was edited"):
        evaluate("bp", "work_reuse", output=out, **GRID)
    assert out.read_bytes() == lines[0] + json.dumps(edited).encode() + b"\n"  # untouched


def test_results_file__a_link_and_its_file_are_one_file(tmp_path):
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    real.touch()
    link.symlink_to(real.name)
    with _ResultsFile(real), pytest.raises(ResultsFileBusyError):
        evaluate("bp", "work_reuse", output=link, **GRID)  # one writer, whichever name
    evaluate("bp", "work_reuse", output=link, **GRID)
    real.write_bytes(real.read_bytes() + b"42\n")  # a line a repair sets aside
    with pytest.warns(UserWarning, match="set aside"):
        evaluate("bp", "work_reuse", output=link, **GRID)
    assert link.is_symlink() and len(read_records(real)) == 2  # the repair kept the link


def test_repair__a_last_record_missing_only_its_newline_is_kept(tmp_path, monkeypatch):
    # A file edited by hand can lose its final newline; the record is whole, so it is
    # reused (it was set aside as torn and its run made again).
    import mabp_gym.harness.evaluation as evaluation

    out = tmp_path / "runs.jsonl"
    first = evaluate("bp", "work_reuse", output=out, **GRID)
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_records(out) == first
    ran: list = []

    def counted(todo, *args):
        ran.extend(todo)
        return dispatch.dispatch(todo, *args)

    monkeypatch.setattr(evaluation, "dispatch", counted)
    assert evaluate("bp", "work_reuse", output=out, **GRID) == first and ran == []
    assert out.read_bytes().endswith(b"\n") and len(complete_lines(out)) == 2
    assert not (tmp_path / "runs.jsonl.rejected").exists()


def test_results_file__a_write_the_disk_refuses_leaves_whole_records_and_resumes(
    tmp_path, monkeypatch
):
    """A full disk mid-record: the part written is cut off again (no torn line), the error
    says what is kept and how to resume, and the next run goes on from the file."""
    import errno

    import mabp_gym.harness.results_file as results_file
    from mabp_gym.harness.results_file import ResultsWriteError

    out = tmp_path / "runs.jsonl"
    grid = {**GRID, "seeds": [0, 1, 2]}
    real_write, writes = os.write, []

    def full_after_one(fd, data):
        writes.append(len(data))
        if len(writes) == 1:
            return real_write(fd, data)
        real_write(fd, bytes(data[:25]))  # part of the record lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results_file.os, "write", full_after_one)
    with pytest.raises(ResultsWriteError, match="every run written before it is kept there"):
        evaluate("bp", "work_reuse", output=out, **grid)
    monkeypatch.setattr(results_file.os, "write", real_write)
    data = out.read_bytes()
    assert data.endswith(b"\n") and len(complete_lines(out)) == 1 == len(read_records(out))
    again = evaluate("bp", "work_reuse", output=out, **grid)
    assert [r["seed"] for r in again] == [0, 1, 2] and len(read_records(out)) == 3
    assert not (tmp_path / "runs.jsonl.rejected").exists()


def test_cli__a_full_disk_is_one_line_and_status_1(run_cli, tmp_path, monkeypatch):
    import errno

    import mabp_gym.harness.results_file as results_file

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results_file.os, "write", full)
    out = tmp_path / "runs.jsonl"
    done = run_cli(
        "eval", "--policies", "bp", "--workload", "work_reuse", "--loads", "0.3",
        "--seeds", "0", "--horizon", "30", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "could not be written to" in done.stderr and "No space left on device" in done.stderr
    assert out.read_bytes() == b""


def test_run__a_checkpoint_rewritten_after_planning_is_refused_and_records_say_what_made_them(
    tmp_path,
):
    """The key holds the checkpoint's content as planned; a run that read a file rewritten
    since (a training run writing it mid-sweep) was filed under the old key and reused."""
    pytest.importorskip("torch")
    from mabp_gym.registry import checkpoint_path

    shipped = checkpoint_path("residual-mabp-any", {}, "mixed")
    mine = tmp_path / "ck.pt"
    shutil.copy(shipped, mine)
    (spec,) = plan(
        ["residual-mabp-any"], "mixed", [0.5], [0], horizon=30, policy_kw={"checkpoint": mine}
    )
    record = runs.run(spec)
    assert record["checkpoint_digest"] == spec.checkpoint_digest is not None
    assert record["versions"]["mabp_gym"] == mabp_gym.__version__ and "scipy" in record["versions"]
    assert record["key_version"] == runs.KEY_VERSION
    mine.write_bytes(mine.read_bytes() + b"changed")  # no longer the planned content
    with pytest.raises(ValueError, match="its checkpoint .* changed while the sweep ran"):
        runs.run(spec)
