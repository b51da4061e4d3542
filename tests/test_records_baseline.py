"""The evaluation harness gives the records it gave at commit 90025b2 (issue 13's baseline).

Every speed-up of the slot core must leave controls, and so records, unchanged. The
expected values in ``data/records_90025b2.json`` were computed by running
``evaluation.run`` at commit 90025b2 with the configurations listed there (horizon 300).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mabp_gym
from mabp_gym.evaluation import RunSpec, run

EXPECTED = json.loads((Path(__file__).parent / "data" / "records_90025b2.json").read_text())
MULTIHOP = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")


@pytest.mark.parametrize("case", EXPECTED["runs"],
                         ids=lambda c: f"{c['policy']}-{c['workload']}-{c['load']}-{c['seed']}")
def test_evaluation__records_identical_to_the_baseline_commit(case):
    workload = MULTIHOP if case["workload"] == "multihop14" else case["workload"]
    record = run(RunSpec(case["policy"], workload, case["load"], case["seed"],
                         horizon=EXPECTED["horizon"]))
    for key, value in case["record"].items():
        assert record[key] == value, key
