"""``benchmarks/bench_pareto.py``: runs paired seed by seed at one horizon, and bad input
refused before anything is read."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from mabp_gym.harness import bench

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_pareto.py"


def _script():
    sys.path.insert(0, str(SCRIPT.parent))  # its own helpers
    try:
        spec = importlib.util.spec_from_file_location("bench_pareto", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def _record(policy, task, seed, horizon, delay):
    return {
        "policy": policy,
        "workload": task.network,
        "load": task.load,
        "overrides": dict(task.overrides),
        "seed": seed,
        "horizon": horizon,
        "growth": 0.0,
        "stable": True,
        "p95_delay_all": delay,
        "penalty_per_arrival": 0.1,
        "mean_backlog": delay,
    }


def test_paired__never_pairs_runs_of_two_horizons():
    pareto = _script()
    task = bench.tasks_named(["mixed-0.90"])[0]
    records = [
        _record("mabp", task, 9000, 8000, 300.0),  # twice the board's run: not its twin
        _record("frame-mabp", task, 9000, 4000, 100.0),
        _record("mabp", task, 9001, 4000, 200.0),
        _record("frame-mabp", task, 9001, 4000, 100.0),
    ]
    row = pareto.paired(records, "mabp", task)
    assert row is not None and row["seeds"] == 1 and row["delay_ratio"] == 2.0
    assert pareto.paired(records, "mabp", task, horizon=8000) is None  # no frame-MABP twin


def test_cli__a_missing_file_or_an_unknown_policy_is_one_line(tmp_path):
    for argv, message in (
        (["--out", str(tmp_path / "none.jsonl")], "no such results file"),
        (["--out", str(SCRIPT), "--policy", "nope"], "--policy 'nope': unknown policy"),
    ):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, check=False
        )
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
