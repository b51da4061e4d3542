"""The evaluation harness: metric summaries, stable load, backends, resume, Table I."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mabp_gym import evaluate, paper_load, read_records, stable_load, summarize_records
from mabp_gym.harness.runs import TIMING_KEYS


def strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING_KEYS}


def fake(
    policy: str, load: float, seed: int, slope: float, backlog: float, stable: bool = True
) -> dict:
    """A record whose paper window has ``slope`` and ``backlog`` and whose growth verdict is
    ``stable``."""
    return {
        "policy": policy,
        "load": load,
        "seed": seed,
        "slope": slope,
        "mean_backlog": backlog,
        "growth": 0.0 if stable else 0.1,
        "stable": stable,
        "paper_slope": slope,
        "paper_backlog": backlog,
        "penalty": 1.0 + seed,
        "p95_delay": 10.0,
        "hit_ratio": 0.5,
        "churn": 0.1,
        "completion_ratio": 1.0,
        "work_per_request": 1.0,
        "compute_cost": 1.0,
        "transmission_cost": 0.0,
        "memory_cost": 0.0,
        "decision_us_mean": 1.0,
        "decision_us_p95": 2.0,
    }


def test_paper_load__needs_every_smaller_grid_load_to_pass_on_seed_means():
    records = [
        # 0.1 passes, 0.2 fails, 0.3 passes again: the paper load is 0.1.
        fake("a", 0.1, 0, 0.0, 10),
        fake("a", 0.2, 0, 0.5, 10),
        fake("a", 0.3, 0, 0.0, 10),
        # seed-mean rule: one seed over the slope threshold, the mean under it.
        fake("b", 0.1, 0, 0.06, 10),
        fake("b", 0.1, 1, 0.0, 10),
        fake("b", 0.2, 0, 0.0, 130),
        fake("b", 0.2, 1, 0.0, 115),
        # the smallest load already fails: 0.
        fake("c", 0.1, 0, 0.0, 500),
    ]
    assert paper_load(records) == {"a": 0.1, "b": 0.1, "c": 0.0}
    assert stable_load(records, verdict="paper") == paper_load(records)
    # The growth verdict ignores the paper window: every run here does not grow.
    assert stable_load(records) == {"a": 0.3, "b": 0.2, "c": 0.1}


def test_stable_load__pooled_growth_below_the_limit_with_confidence_at_every_smaller_load():
    def runs(policy, load, growths):
        return [
            {**fake(policy, load, seed, 0.0, 10), "growth": g, "stable": g < 0.015}
            for seed, g in enumerate(growths)
        ]

    records = [
        *runs("a", 0.1, [0.0, 0.001, -0.001]),
        *runs("a", 0.2, [0.004, 0.006, 0.005]),  # upper end 0.0075: stable
        # Every run passes on its own, but the pooled upper end is 0.020: not shown stable.
        *runs("a", 0.3, [0.0, 0.012, 0.001]),
        *runs("a", 0.4, [0.0, 0.0, 0.0]),  # 0.3 breaks the chain
    ]
    assert stable_load(records) == {"a": 0.2}
    (row,) = [r for r in summarize_records(records) if r["load"] == 0.3]
    assert row["stable_seeds"] == 3 and row["stable"] is False
    assert row["growth_mean"] == pytest.approx(13 / 3000)
    assert row["growth_mean"] + row["growth_half_width"] > 0.015
    # No trace saved: the pooled rule alone decides.
    assert row["trend"] is None
    # A single run is judged on its point estimate.
    assert stable_load(runs("b", 0.1, [0.014])) == {"b": 0.1}
    assert stable_load(runs("b", 0.1, [0.015])) == {"b": 0.0}
    with pytest.raises(ValueError, match="verdict"):
        stable_load(records, verdict="slope")


def test_summarize_records__mean_and_std_over_seeds():
    rows = summarize_records([fake("a", 0.5, 0, 0.0, 10), fake("a", 0.5, 1, 0.02, 30)])
    (row,) = rows
    assert row["seeds"] == 2 and row["mean_backlog"] == 20 and row["mean_backlog_std"] == 10
    assert row["penalty"] == 1.5 and row["penalty_std"] == 0.5 and row["stable"] is True
    assert row["paper_stable"] is True and row["stable_seeds"] == 2


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("workload", ["mixed", "multihop"]),
        ("horizon", [4000, 8000]),
        ("warmup", [0.2, 0.5]),
        ("memory", [True, False]),
        ("overrides", [{}, {"beta": 0.5}]),
        ("policy_kw", [{}, {"v": 2.0}]),
        ("workload_digest", ["aa", "bb"]),
    ],
)
def test_summarize_records__refuses_to_pool_runs_of_two_settings(key, values):
    # Pooled by (policy, load) alone, two workloads' or horizons' runs became one mean and
    # one growth interval with twice the seeds.
    records = [{**fake("a", 0.5, seed, 0.0, 10), key: value} for seed, value in enumerate(values)]
    with pytest.raises(ValueError, match=f"a at load 0.5 differ in '{key}'"):
        summarize_records(records)
    with pytest.raises(ValueError, match="pass the records of each setting separately") as err:
        stable_load(records, bound=None)
    # Only a horizon difference (eval --until-decided's file) names the helper that keeps
    # each cell's deciding horizon; it leaves one setting.
    assert ("verdicts.longest(records)" in str(err.value)) == (key == "horizon")
    if key == "horizon":
        from mabp_gym.harness.verdicts import longest

        (row,) = summarize_records(longest(records))
        assert row["seeds"] == 1
    # A key one record lacks (records written before it was recorded) agrees with any value.
    (row,) = summarize_records([records[0], fake("a", 0.5, 7, 0.0, 10)])
    assert row["seeds"] == 2


def test_summarize_records__refuses_a_seed_counted_twice():
    records = [fake("a", 0.5, 0, 0.0, 10), fake("a", 0.5, 1, 0.0, 10), fake("a", 0.5, 0, 0.0, 10)]
    with pytest.raises(ValueError, match="a at load 0.5 hold seed 0 twice"):
        summarize_records(records)
    assert summarize_records(records[:2])[0]["seeds"] == 2
    # The same run (one key) read from two results files counts once.
    keyed = [{**r, "key": f"k{r['seed']}"} for r in records]
    assert summarize_records(keyed)[0]["seeds"] == 2


def test_evaluate__records_carry_every_spec_5_key():
    (record,) = evaluate("mabp", "mixed", loads=[0.3], seeds=[0], horizon=100, backend="serial")
    for key in (
        "policy",
        "workload",
        "load",
        "seed",
        "stable",
        "slope",
        "mean_backlog",
        "penalty",
        "p95_delay",
        "hit_ratio",
        "churn",
        "completion_ratio",
        "work_per_request",
        "transmission_cost",
        "memory_cost",
        "decision_us_mean",
        "decision_us_p95",
    ):
        assert key in record
    assert record["workload"] == "mixed" and record["load"] == 0.3
    assert 0 < record["hit_ratio"] < 1 and record["decision_us_p95"] > 0


def test_evaluate__serial_process_pool_and_ray_give_identical_records():
    grid = dict(loads=[0.3, 0.6], seeds=[0, 1], horizon=120)
    serial = evaluate(["bp", "mabp"], "mixed", backend="serial", **grid)
    pool = evaluate(["bp", "mabp"], "mixed", backend="process", workers=2, **grid)
    ray = evaluate(["bp", "mabp"], "mixed", backend="ray", workers=2, **grid)
    assert len(serial) == 8
    assert [strip(r) for r in serial] == [strip(r) for r in pool] == [strip(r) for r in ray]


def test_evaluate__rejects_bad_arguments_before_running():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        evaluate("nope", "mixed", loads=[0.5], seeds=[0])
    with pytest.raises(ValueError, match="warmup must be in"):
        evaluate("bp", "mixed", loads=[0.5], seeds=[0], warmup=1.0)
    with pytest.raises(ValueError, match="backend must be one of"):
        evaluate("bp", "mixed", loads=[0.5], seeds=[0], backend="mpi", horizon=20)
    with pytest.raises(ValueError, match=r"load must be in \[0, 10\]"):
        evaluate("bp", "mixed", loads=[-1], seeds=[0])


def test_evaluate__output_file_is_reused_and_torn_lines_are_dropped(tmp_path):
    out = tmp_path / "runs.jsonl"
    first = evaluate(
        "bp", "mixed", loads=[0.3], seeds=[0, 1], horizon=80, output=out, backend="serial"
    )
    with out.open("a") as handle:
        handle.write('{"policy": "bp", "load"')  # a write cut by a kill
    again = evaluate(
        "bp", "mixed", loads=[0.3], seeds=[0, 1, 2], horizon=80, output=out, backend="serial"
    )
    records = read_records(out)
    assert len(records) == 3 and [r["seed"] for r in again] == [0, 1, 2]
    assert again[:2] == first  # reused from the file, timing fields included
    assert out.read_text().endswith("\n")


def test_cli_eval__killed_midway_then_rerun_equals_an_uninterrupted_run(tmp_path):
    args = [
        "eval",
        "--policy",
        "bp",
        "mabp",
        "--loads",
        "0.2:0.6:0.1",
        "--seeds",
        "0",
        "1",
        "--horizon",
        "150",
        "--workers",
        "1",
        "--no-progress",
    ]
    whole = tmp_path / "whole.jsonl"
    subprocess.run(
        [sys.executable, "-m", "mabp_gym.cli", *args, "--out", str(whole)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    cut = tmp_path / "cut.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "mabp_gym.cli", *args, "--out", str(cut)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(read_records(cut)) < 5:
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    interrupted = len(read_records(cut))
    assert 5 <= interrupted < 20
    subprocess.run(
        [sys.executable, "-m", "mabp_gym.cli", *args, "--out", str(cut)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    key = lambda r: r["key"]  # noqa: E731
    resumed = sorted(map(strip, read_records(cut)), key=key)
    expected = sorted(map(strip, read_records(whole)), key=key)
    assert len(expected) == 20 and resumed == expected
    assert all(json.loads(line) for line in cut.read_text().splitlines())


@pytest.mark.slow
def test_table__reduced_table_i_orders_the_stable_loads():
    policies = ["sp", "jsq", "bp", "mabp", "oracle-sur"]
    records = evaluate(
        policies,
        "mixed",
        loads=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
        seeds=[0, 1],
        horizon=400,
        workers=2,
    )
    # 400 slots are too few for the growth verdict near MABP's boundary (the warm-up rise
    # still counts, SPEC 9.2); the paper's short-horizon rule is what such runs measure.
    stable = paper_load(records)
    assert stable["sp"] <= stable["bp"] and stable["jsq"] <= stable["bp"]
    assert stable["bp"] < stable["mabp"] <= stable["oracle-sur"], stable


def test_run__builds_a_built_in_workload_once_and_rereads_a_file(monkeypatch, tmp_path):
    """Runs of one built-in workload share one build (workloads are frozen); a workload
    file is read anew by every run, so an edit between runs is seen."""
    from mabp_gym import make_workload
    from mabp_gym.core.fileformat import save_workload
    from mabp_gym.harness import runs
    from mabp_gym.harness.runs import RunSpec, run

    built = []
    real = runs.make_workload

    def counting(name, **overrides):
        built.append(name)
        return real(name, **overrides)

    monkeypatch.setattr(runs, "make_workload", counting)
    runs._built_in_workload.cache_clear()
    specs = [
        RunSpec(policy, "mixed", 0.5, seed, horizon=20) for policy, seed in [("bp", 0), ("sp", 1)]
    ]
    records = [run(spec) for spec in specs]
    assert built == ["mixed"]
    # The key a record carries is the spec's own, computed from the same workload.
    assert [r["key"] for r in records] == [
        RunSpec(s.policy, "mixed", 0.5, s.seed, horizon=20).key for s in specs
    ]
    path = tmp_path / "w.json"
    save_workload(make_workload("mixed"), path)
    first = run(RunSpec("bp", str(path), 0.5, 0, horizon=20))
    save_workload(make_workload("separation"), path)
    second = run(RunSpec("bp", str(path), 0.5, 0, horizon=20))
    assert (first["workload"], second["workload"]) == ("mixed", "separation")
    assert first["key"] != second["key"]


def test_table_rows__mark_the_delays_of_a_policy_that_grows_at_the_table_load():
    from mabp_gym.cli.evaluate import TABLE_COLUMNS, UNSTABLE_MARK, table_rows

    records = []
    for seed in (0, 1, 2):
        for policy, stable in (("steady", True), ("grows", False)):
            record = fake(policy, 0.5, seed, 0.0, 10.0, stable=stable)
            record.update(p95_delay=20.0, p95_delay_all=40.0, paper_stable=stable)
            records.append(record)
    rows = {row[0]: row for row in table_rows(records, ["steady", "grows"], [0.5], at=0.5)}
    delay, delay_all = TABLE_COLUMNS.index("P95 delay"), TABLE_COLUMNS.index("P95 delay (all)")
    assert rows["steady"][delay] == "20.0 ± 0.0" and rows["steady"][delay_all] == "40.0 ± 0.0"
    assert rows["grows"][delay] == "20.0 ± 0.0" + UNSTABLE_MARK
    assert rows["grows"][delay_all] == "40.0 ± 0.0" + UNSTABLE_MARK
    assert not rows["grows"][TABLE_COLUMNS.index("Penalty")].endswith(UNSTABLE_MARK)


def test_run__the_first_decision_is_reported_apart_from_the_mean():
    import time

    from mabp_gym.agents.backpressure import make_bp
    from mabp_gym.harness.runs import RunSpec, run
    from mabp_gym.registry import policy_names, register_policy

    def slow_start(workload, **kw):
        policy = make_bp(workload, **kw)
        scores = policy.scores

        def first_slow(obs):
            if policy.t == 0:
                time.sleep(0.05)  # a compilation, say
            return scores(obs)

        policy.scores = first_slow
        return policy

    if "slow-start-bp" not in policy_names():
        register_policy("slow-start-bp", slow_start)
    record = run(RunSpec("slow-start-bp", "mixed", 0.3, 0, horizon=40))
    assert record["decision_us_first"] >= 50_000
    assert record["decision_us_mean"] < 10_000 and record["decision_us_p95"] < 10_000


# -- what the harness takes and what it writes (a review of the Python API) ---------------
def test_evaluate__paths_and_numpy_arrays_in_policy_kw_are_written_as_json(tmp_path):
    """A ``Path`` checkpoint or a numpy weight vector ran, then could not be written: the
    record was lost and the file stayed empty."""
    from mabp_gym.registry import checkpoint_path

    shipped = checkpoint_path("residual-mabp", {}, "mixed")
    assert shipped is not None
    out = tmp_path / "r.jsonl"
    kw = {"policy_kw": {"checkpoint": shipped}, "horizon": 30, "output": out}
    first = evaluate("residual-mabp", "mixed", [0.5], [0], **kw)
    assert first[0]["policy_kw"] == {"checkpoint": str(shipped)}
    second = evaluate(
        "residual-mabp", "mixed", [0.5], [0], **{**kw, "policy_kw": {"weights": np.zeros(8)}}
    )
    assert second[0]["policy_kw"] == {"weights": [0.0] * 8}
    assert len(read_records(out)) == 2
    with pytest.raises(ValueError, match=r"policy_kw\['decay'\] must be a JSON value"):
        evaluate("greedycache-bp", "mixed", [0.5], [0], horizon=30, policy_kw={"decay": {1}})


def test_evaluate__a_warm_up_that_leaves_too_few_slots_is_refused():
    """One slot after the warm-up has slope 0: every load read stable."""
    with pytest.raises(ValueError, match="leaves 1 slot"):
        evaluate("bp", "mixed", [0.9], [0], horizon=600, warmup=0.999)
    with pytest.raises(ValueError, match="leaves 8 slot"):
        evaluate("bp", "mixed", [0.9], [0], horizon=10)
    assert evaluate("bp", "mixed", [0.5], [0], horizon=30, warmup=np.float32(0.2))


def test_make_policy__an_ablation_keeps_its_defining_switch():
    from mabp_gym.agents import make_policy

    with pytest.raises(ValueError, match="'mabp-no-reuse' is defined by reuse=False"):
        make_policy("mabp-no-reuse", "mixed", reuse=True)
    with pytest.raises(ValueError, match="decay must be a number in"):
        evaluate("greedycache-bp", "mixed", [0.5], [0], horizon=30, policy_kw={"decay": 5})


def test_run_key__a_policy_of_your_own_is_keyed_by_what_it_is():
    """Two processes may register one name for two policies: the key tells them apart (and
    the built-in names keep their keys)."""
    from mabp_gym.harness.runs import plan
    from mabp_gym.registry import policy_identity, policy_names, register_policy

    if "own-bp" not in policy_names():
        register_policy("own-bp", "mabp_gym.agents.backpressure:make_bp")
    assert policy_identity("bp") is None
    own = plan(["own-bp"], "mixed", [0.5], [0], horizon=30)[0]
    assert "make_bp" in policy_identity("own-bp")
    elsewhere = subprocess.run(
        [
            sys.executable,
            "-c",
            "from mabp_gym.registry import register_policy; from mabp_gym.harness.runs import "
            "plan; register_policy('own-bp', 'mabp_gym.agents.mabp:MABP'); "
            "print(plan(['own-bp'], 'mixed', [0.5], [0], horizon=30)[0].key)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert elsewhere.stdout.strip() != own.key


def test_occupation_load__a_changed_workload_under_a_built_in_name_gets_no_bound():
    """A ``Workload`` object keeps its name (``mixed``) in the records; its bound is not the
    named workload's (0.27 against 1.0 at beta 0.1)."""
    from mabp_gym import make_workload
    from mabp_gym.harness.summaries import occupation_load

    named = evaluate("bp", "mixed", [0.5], [0], horizon=30, beta=0.1)
    assert occupation_load(named) == pytest.approx(0.2706, abs=1e-3)
    changed = evaluate("bp", make_workload("mixed", beta=0.1), [0.5], [0], horizon=30)
    assert changed[0]["workload"] == "mixed" and changed[0]["overrides"] == {}
    assert occupation_load(changed) is None


def test_evaluate__weights_need_no_shipped_checkpoint_and_object_loads_are_bounded():
    """``residual-mabp`` with ``weights=`` reads no file (boundary ships none); a Workload
    object's loads are held to [0, 10] as a name's are."""
    from mabp_gym import make_workload

    runs = evaluate(
        "residual-mabp", "boundary", [0.5], [0], horizon=30, policy_kw={"weights": [0.0] * 8}
    )
    assert runs[0]["policy_kw"] == {"weights": [0.0] * 8}
    for loads in ([1e6], [0.5, 12]):
        with pytest.raises(ValueError, match="load: must be <= 10"):
            evaluate("bp", make_workload("successor"), loads, [0], horizon=30)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # 2.0 passed the check and failed inside multiprocessing, the output already locked.
        ({"workers": 2.0}, "workers must be a positive integer, got 2.0"),
        ({"loads": 0.3}, r"loads must be a list of numbers, e\.g\. \[0\.3\]"),
        ({"seeds": 0}, r"seeds must be a list of numbers, e\.g\. \[0\]"),
        ({"loads": "0.5"}, r"loads must be a list of numbers, e\.g\. \[0\.5\], got '0\.5'"),
        ({"seeds": "3"}, r"seeds must be a list of numbers, e\.g\. \[3\], got '3'"),
        ({"loads": np.ones((2, 2))}, "a list or a 1-d array"),
        ({"policy": None}, r"policy must be a list of names, e\.g\. \[\.\.\.\], got None"),
    ],
)
def test_evaluate__a_bad_grid_or_workers_value_is_named_before_any_file_is_made(
    tmp_path, kwargs, message
):
    grid = {"policy": "sp", "loads": [0.3], "seeds": [0], **kwargs}
    out = tmp_path / "r.jsonl"
    with pytest.raises(ValueError, match=message):
        evaluate(workload="mixed", horizon=30, output=out, **grid)
    assert list(tmp_path.iterdir()) == []


def test_occupation_load__a_workload_files_runs_have_its_bound(tmp_path):
    # Records name a file's workload by the name inside it, which rebuilds nothing: a
    # file's runs had no bound, and loads above it could be credited.
    import shutil

    import mabp_gym
    from mabp_gym.harness.summaries import occupation_load

    path = tmp_path / "mh.json"
    shutil.copy(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json", path)
    records = evaluate("bp", path, [0.5], [0], horizon=30, progress=False)
    assert records[0]["workload_file"] == str(path.resolve())
    assert occupation_load(records) == pytest.approx(1.0)
    changed = json.loads(path.read_text())
    node = next(n for n in changed["nodes"] if n["mu"] > 0)
    node["mu"] *= 1.5
    path.write_text(json.dumps(changed))
    assert occupation_load(records) is None  # the file no longer describes those runs


def test_stable_load__walks_one_settings_grid_of_loads():
    # A bench file's mixed at 0.9 (grows) and mixed with beta=0.125 at 0.8 (does not) read
    # as one grid gave 0.8; each load's own horizon stays allowed (--until-decided).
    low = {**fake("a", 0.8, 0, 0.0, 10), "overrides": {"beta": 0.125}}
    high = {**fake("a", 0.9, 0, 5.0, 10), "overrides": {}}
    with pytest.raises(ValueError, match="a differ in 'overrides'.* across loads"):
        stable_load([low, high], bound=None)
    decided = [{**fake("a", 0.8, 0, 0.0, 10), "horizon": 1200}, fake("a", 0.9, 0, 0.0, 10)]
    assert stable_load(decided, bound=None) == {"a": 0.9}
