"""The ``mabp-gym`` console script, run as a user would, through a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mabp_gym.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli__capacity_prints_and_writes_both_capacities(tmp_path):
    out = tmp_path / "cap.json"
    result = run("capacity", "--workload", "work_reuse", "--set", "kappa_w=3",
                 "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "no-memory capacity 1.0000" in result.stdout
    assert "all-hit capacity (lambda_ref) 3.0000" in result.stdout
    data = json.loads(out.read_text())
    assert data["nomem"] == pytest.approx(1.0) and data["full"] == pytest.approx(3.0)


def test_cli__simulate_reports_metrics_per_seed(tmp_path):
    out = tmp_path / "sim.json"
    result = run("simulate", "--workload", "work_reuse", "--load", "0.5", "--horizon", "200",
                 "--seeds", "0", "1", "--json", str(out))
    assert result.returncode == 0, result.stderr
    records = json.loads(out.read_text())
    assert [r["seed"] for r in records] == [0, 1]
    for record in records:
        assert record["stable"] is True and record["hit_ratio"] > 0.9
        assert 0.9 < record["completion_ratio"] <= 1.1


@pytest.mark.parametrize("args", [
    ("simulate", "--set", "K=-1"),
    ("simulate", "--set", "nonsense"),
    ("simulate", "--warmup", "1.5"),
    ("capacity", "--workload", "nope"),
    ("frobnicate",),
])
def test_cli__bad_arguments_exit_2_with_one_line_reason(args):
    result = run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0]


def test_cli__help_on_each_subcommand():
    for sub in ("capacity", "simulate"):
        result = run(sub, "--help")
        assert result.returncode == 0 and "--workload" in result.stdout
