"""Every slot the core gives, on every compiled-case workload, memory on and off, and
Oracle-Sur's controls, digest for digest as ``data/slot_golden.json`` holds them.

The file was written by the numpy reference that the kernels replaced (commit
781e551 with ``MABP_GYM_PURE=1``, Oracle-Sur's reference program included); the kernels,
compiled or run as plain Python (``MABP_GYM_PURE=1``: CI runs this module both ways), give
the same digests. ``data/make_slot_golden.py`` says when to rewrite it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
GOLDEN = json.loads((DATA / "slot_golden.json").read_text())
_spec = importlib.util.spec_from_file_location("make_slot_golden", DATA / "make_slot_golden.py")
maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(maker)

TRAJECTORIES = [
    (name, overrides, memory) for name, overrides in maker.CASES for memory in (True, False)
]


@pytest.mark.parametrize(
    "name, overrides, memory",
    TRAJECTORIES,
    ids=lambda v: str(v)[-20:] if isinstance(v, str) else None,
)
def test_slots__digests_identical_to_the_golden_file(name, overrides, memory):
    expected = GOLDEN["trajectories"][maker.key(name, overrides, memory)]
    got = maker.trajectory(name, overrides, memory)
    first = next((k for k, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b), None)
    assert first is None, f"slots {first * maker.EVERY}-{(first + 1) * maker.EVERY} differ"


@pytest.mark.parametrize("name, overrides", maker.ORACLE_CASES, ids=lambda v: str(v))
def test_oracle_sur__controls_identical_to_the_golden_file(name, overrides):
    assert maker.oracle(name, overrides) == GOLDEN["oracle"][maker.key(name, overrides)]


@pytest.mark.parametrize("name, overrides", maker.PROGRAM_CASES, ids=lambda v: str(v))
def test_oracle_sur__slot_programs_identical_to_the_golden_file(name, overrides):
    """Random programs with compute left on the EPS boundaries of the program's comparisons:
    every status and objective on any scipy, and the controls themselves on the scipy that
    wrote the file (HiGHS's version decides between equally good controls)."""
    key = maker.key(name, overrides)
    assert maker.programs(name, overrides, values=True) == GOLDEN["program_values"][key]
    if maker.scipy_version() != GOLDEN["programs_scipy"]:
        pytest.skip(
            f"the controls are pinned to scipy {GOLDEN['programs_scipy']}'s HiGHS, which "
            f"breaks ties between equally good programs; this is scipy "
            f"{maker.scipy_version()}, whose statuses and objectives were checked"
        )
    assert maker.programs(name, overrides) == GOLDEN["programs"][key]


LARGE = ("multihop", {"nodes": 600, "load": 0.3})
"""A network large enough for the paths that only size takes: thousands of candidates a slot
(sorted node by node, none by radix: no node has 512) and many generations a slot."""


@pytest.mark.slow  # 3 s compiled, 25 s as plain Python (MABP_GYM_PURE=1)
@pytest.mark.parametrize("memory", [True, False])
def test_slots__a_large_network_gives_the_digests_it_gave_before_the_linear_kernels(memory):
    expected = json.loads((DATA / "slot_golden_large.json").read_text())["trajectories"]
    got = maker.trajectory(*LARGE, memory)
    assert got == expected[maker.key(*LARGE, memory)]
