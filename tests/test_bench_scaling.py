"""``benchmarks/bench_scaling.py`` runs end to end at a tiny size: its measuring worker
imports this tree, and its JSON carries a row per network and policy, ``env.step`` and
Table I. (The figures themselves are the benchmark's business, not a test's.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_scaling__tiny_run_reports_every_row(tmp_path):
    out = tmp_path / "scaling.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_scaling.py"),
            "--slots",
            "5",
            "--repeats",
            "1",
            "--only",
            "mixed x1",
            "--table",
            "--table-horizon",
            "5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    current = report["results"]["current"]
    assert set(current["cases"]) == {"mixed x1|bp", "mixed x1|mabp"}
    for row in current["cases"].values():
        assert row["us_per_slot"] > row["decision_us"] > 0
    assert current["env_step"]["us_per_slot"] > current["env_step"]["env_step_us"] > 0
    assert "oracle-sur" in current["table"] and min(current["table"].values()) > 0
    assert report["baseline"] is None and "baseline" not in report["results"]
