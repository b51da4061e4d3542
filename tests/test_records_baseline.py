"""The evaluation harness gives the records it gave when ``data/records_baseline.json`` was
written (``data/make_baseline_records.py``, the commit is stored in the file).

Speed-ups and restructurings must leave controls, and so records,
unchanged; only a commit that means to change behaviour rewrites the file, and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mabp_gym.harness.runs import RunSpec, run

DATA = Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "records_baseline.json").read_text())


@pytest.mark.parametrize(
    "case", EXPECTED["runs"], ids=lambda c: f"{c['policy']}-{c['workload']}-{c['load']}-{c['seed']}"
)
def test_evaluation__records_identical_to_the_baseline(case):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_baseline", DATA / "make_baseline_records.py"
    )
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    record = run(
        RunSpec(
            case["policy"],
            maker.workload_path(case["workload"]),
            case["load"],
            case["seed"],
            horizon=EXPECTED["horizon"],
        )
    )
    for key, value in case["record"].items():
        assert record[key] == value, key
