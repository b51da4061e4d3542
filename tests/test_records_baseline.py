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
        assert _same(record[key], value), (key, record[key], value)


def _same(got: object, expected: object) -> bool:
    """Equal, floats to 12 significant digits: the slots are bit for bit the same
    (``test_slot_golden.py``), but a record's fitted slope and summed penalty move in their
    last bits with numpy's version (numpy 2.5, on Python 3.12, differs from 2.4 by a few
    ULP)."""
    if isinstance(got, float) and isinstance(expected, float):
        return got == pytest.approx(expected, rel=1e-12, abs=1e-15)
    if isinstance(got, list) and isinstance(expected, list) and len(got) == len(expected):
        return all(_same(a, b) for a, b in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict) and got.keys() == expected.keys():
        return all(_same(got[k], expected[k]) for k in got)
    return got == expected
