"""Writes ``records_baseline.json``: the records the evaluation harness gives at this commit.

Run it only when behaviour is *meant* to change (a new rule, a new default), and say so in
the commit; a speed-up or a restructuring must leave the file's records unchanged
(``tests/test_records_baseline.py``). Usage: ``python tests/data/make_baseline_records.py``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import mabp_gym
from mabp_gym.harness.runs import METRIC_KEYS, RunSpec, run

HERE = Path(__file__).parent
HORIZON = 300
CASES = [
    ("mabp", "mixed", 0.85, 0),
    ("bp", "mixed", 0.85, 1),
    ("cost-bp", "mixed", 0.4, 2),
    ("greedycache-bp", "mixed", 0.6, 2),
    ("mabp-no-retention", "mixed", 0.7, 1),
    ("oracle-sur", "mixed", 0.6, 0),
    ("frame-mabp", "mixed", 0.8, 0),
    ("mabp", "separation", 0.5, 0),
    ("bp", "separation", 0.5, 1),
    ("mabp", "multihop14", 0.7, 0),
    ("bp", "multihop14", 0.7, 3),
]
KEYS = (*METRIC_KEYS, "backlog_trace", "residency")


def workload_path(name: str) -> str:
    if name == "multihop14":
        return str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")
    return name


def main() -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
    ).stdout.strip()
    runs = []
    for policy, workload, load, seed in CASES:
        record = run(RunSpec(policy, workload_path(workload), load, seed, horizon=HORIZON))
        runs.append(
            {
                "policy": policy,
                "workload": workload,
                "load": load,
                "seed": seed,
                "record": {key: record[key] for key in KEYS},
            }
        )
    (HERE / "records_baseline.json").write_text(
        json.dumps({"commit": commit, "horizon": HORIZON, "runs": runs}) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
