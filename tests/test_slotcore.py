"""The compiled slot core gives exactly the reference projection's controls and records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from compiled_cases import MULTIHOP14
from compiled_cases import WORKLOADS as COMPILED_WORKLOADS

from mabp_gym import Simulator, make_workload
from mabp_gym.agents import make_policy
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import slotcore
from mabp_gym.core.projection import project_checked

pytestmark = pytest.mark.skipif(
    not slotcore.AVAILABLE, reason="numba is not installed (or MABP_GYM_PURE is set)"
)

WORKLOADS = COMPILED_WORKLOADS


def _same(compiled, reference) -> None:
    (control, checked), (control_ref, checked_ref) = compiled, reference
    for key, value in control.as_dict().items():
        assert np.array_equal(value, control_ref.as_dict()[key]), key
    assert checked == checked_ref


@pytest.mark.parametrize("name, overrides", WORKLOADS, ids=lambda v: str(v)[-20:])
def test_slotcore__projection_identical_to_the_reference(name, overrides):
    """Random scores (about half of all candidates positive: the most transfers and drops)
    and bp scores, slot by slot on the same states, for 300 slots per workload."""
    wl = make_workload(name, **overrides)
    for memory in (True, False):
        sim = Simulator(wl, memory=memory)
        sim.reset(1)
        rng = np.random.default_rng(2)
        encoder = ObservationEncoder(wl, memory=memory)
        policy = make_policy("bp", wl, memory=memory)
        for t in range(300 if memory else 100):
            if t % 2:
                scores = rng.uniform(-1, 1, wl.index.num_scores)
            else:
                scores = policy.scores(encoder.encode(sim.state))
            compiled = project_checked(wl, sim.state, scores, memory=memory, compiled=True)
            reference = project_checked(wl, sim.state, scores, memory=memory, compiled=False)
            _same(compiled, reference)
            sim.step(compiled[0])  # the check accepts the compiled control


def _records(wl, policy_name: str, slots: int) -> list[tuple]:
    sim = Simulator(wl, check_invariants=True)
    sim.reset(3)
    encoder = ObservationEncoder(wl)
    policy = make_policy(policy_name, wl)
    policy.reset(3)
    rows = []
    for _ in range(slots):
        control, out = sim.step_scores(policy.scores(encoder.encode(sim.state)))
        rows.append(
            (
                out.arrivals,
                out.served,
                out.hits,
                out.delays,
                out.generated,
                out.evicted,
                out.penalty,
                out.backlog,
                control.route.tobytes(),
                control.transfers.tobytes(),
                sim.state.holder.tobytes(),
            )
        )
    return rows


@pytest.mark.parametrize("name", ["mixed", "separation", MULTIHOP14], ids=lambda v: Path(v).stem)
def test_slotcore__records_identical_with_and_without_the_compiled_core(name, monkeypatch):
    wl = make_workload(name)
    compiled = _records(wl, "mabp", 300)
    monkeypatch.setattr(slotcore, "AVAILABLE", False)
    assert _records(wl, "mabp", 300) == compiled


def test_slotcore__compiled_request_without_numba_is_a_clear_error(monkeypatch):
    wl = make_workload("successor")
    sim = Simulator(wl)
    sim.reset(0)
    monkeypatch.setattr(slotcore, "AVAILABLE", False)
    with pytest.raises(RuntimeError, match="needs numba"):
        project_checked(wl, sim.state, np.zeros(wl.index.num_scores), compiled=True)


@pytest.mark.parametrize("name, overrides", WORKLOADS, ids=lambda v: str(v)[-20:])
def test_slotcore__observation_identical_to_the_reference_encoding(name, overrides):
    wl = make_workload(name, **overrides)
    for memory in (True, False):
        sim = Simulator(wl, memory=memory)
        sim.reset(4)
        encoder = ObservationEncoder(wl, memory=memory)
        rng = np.random.default_rng(5)
        for _ in range(120 if memory else 40):
            obs = encoder.encode(sim.state)
            reference = encoder.encode_reference(sim.state)
            assert obs.keys() == reference.keys()
            for key, value in obs.items():
                assert value.dtype == reference[key].dtype, key
                assert np.array_equal(value, reference[key]), key
            sim.step_scores(rng.uniform(-1, 1, wl.index.num_scores))


_TRAJECTORY = """
import sys
{block}
from mabp_gym import Simulator, make_workload
from mabp_gym.core.kernels import slotcore
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.agents import make_policy
wl = make_workload("mixed")
sim = Simulator(wl)
sim.reset(6)
encoder, policy = ObservationEncoder(wl), make_policy("mabp", wl)
rows = []
for _ in range(150):
    control, out = sim.step_scores(policy.scores(encoder.encode(sim.state)))
    rows.append((out.backlog, out.delays, out.generated, control.route.tolist()))
print(slotcore.AVAILABLE, hash(repr(rows)))
"""


def test_slotcore__without_numba_the_reference_path_gives_the_same_run():
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parent.parent)

    def run(block: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-c", _TRAJECTORY.format(block=block)],
            capture_output=True,
            text=True,
            cwd=root,
            check=True,
            env={"PYTHONPATH": root, "PYTHONHASHSEED": "0", "PATH": ""},
        )
        return result.stdout.split()

    # sys.modules["numba"] = None makes "import numba" fail as if it were not installed.
    without = run('sys.modules["numba"] = None')
    with_numba = run("")
    assert without[0] == "False" and with_numba[0] == "True"
    assert without[1] == with_numba[1]


@pytest.mark.skipif(
    not slotcore.AVAILABLE, reason="needs the compiled core (numba, MABP_GYM_PURE unset)"
)
def test_descending__is_numpys_stable_argsort_of_the_negated_scores():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        block = np.round(rng.uniform(-1, 1, int(rng.integers(1, 70))), 1)  # many ties
        wanted = np.flatnonzero(block > 0)
        expected = wanted[np.argsort(-block[wanted], kind="mergesort")]
        assert np.array_equal(slotcore._descending(block, wanted), expected)
