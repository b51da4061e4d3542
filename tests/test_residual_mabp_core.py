"""Residual-MABP's compiled correction (mabp_gym.agents.residual_mabp_core) against its
numpy path, bit for bit: the corrected scores and the executed controls."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from mabp_gym import Simulator, make_workload  # noqa: E402
from mabp_gym.agents import make_policy  # noqa: E402
from mabp_gym.agents import residual_mabp as module  # noqa: E402
from mabp_gym.agents.residual_mabp import FEATURES, correct  # noqa: E402
from mabp_gym.core.encoding import ObservationEncoder  # noqa: E402
from mabp_gym.core.kernels import jit  # noqa: E402
from mabp_gym.core.workloads import WORKLOADS  # noqa: E402

pytestmark = pytest.mark.skipif(not jit.COMPILED, reason="the kernels run as plain Python here")


def _path(monkeypatch, compiled: bool) -> None:
    monkeypatch.setattr(module.WARMUP, "on_disk", compiled)
    monkeypatch.setattr(module.WARMUP, "calls", 0)
    monkeypatch.setattr(module, "COMPILE_AFTER", 0 if compiled else 10**9)


def _corrected(monkeypatch, compiled: bool, weights, obs, slices, base, live_only):
    _path(monkeypatch, compiled)
    out = base.copy()
    correct(weights, obs, slices, out, live_only=live_only)
    return out


@pytest.mark.parametrize("name", WORKLOADS)
def test_residual_mabp_core__the_kernel_corrects_as_numpy_does(monkeypatch, name):
    workload = make_workload(name, load=0.95)
    sim = Simulator(workload)
    sim.reset(4)
    encoder = ObservationEncoder(workload)
    base_policy = make_policy("frame-mabp", workload)
    base_policy.reset(4)
    rng = np.random.default_rng(7)
    for _ in range(150):
        obs = encoder.encode(sim.state)
        base = base_policy.scores(obs)
        scores = base.copy()
        scores[base_policy.slices[0].start :: 5] = 0.0  # the edge of "held back"
        weights = rng.normal(0.0, 3.0, len(FEATURES))
        for live_only in (True, False):
            args = (weights, obs, base_policy.slices, scores, live_only)
            want = _corrected(monkeypatch, False, *args)
            got = _corrected(monkeypatch, True, *args)
            assert got.tobytes() == want.tobytes()
        sim.step_scores(base)


@pytest.mark.parametrize("policy", ["residual-mabp", "residual-frame-mabp"])
def test_residual_mabp_core__both_paths_execute_the_same_controls(monkeypatch, policy):
    workload = make_workload("mixed", load=0.9)
    weights = np.linspace(-2.0, 3.0, len(FEATURES))
    runs = []
    for compiled in (False, True):
        _path(monkeypatch, compiled)
        sim = Simulator(workload)
        sim.reset(2)
        encoder = ObservationEncoder(workload)
        agent = make_policy(policy, workload, weights=weights)
        agent.reset(2)
        executed = []
        for _ in range(300):
            control, outcome = sim.step_scores(agent.scores(encoder.encode(sim.state)))
            executed.append((control.service.tobytes(), control.route.tobytes(), outcome.delays))
        runs.append(executed)
    assert runs[0] == runs[1]


def test_residual_mabp_core__a_process_corrects_with_numpy_until_the_kernel_is_due(monkeypatch):
    calls = []
    monkeypatch.setattr(module, "correct_scores", lambda *a: calls.append(a))
    monkeypatch.setattr(module.WARMUP, "on_disk", False)
    monkeypatch.setattr(module.WARMUP, "calls", 0)
    monkeypatch.setattr(module, "COMPILE_AFTER", 3)
    workload = make_workload("rag")
    obs = ObservationEncoder(workload).encode(Simulator(workload).reset(0))
    out = np.zeros(workload.index.num_scores)
    for _ in range(5):
        correct(np.ones(len(FEATURES)), obs, workload.index.score_slices, out, live_only=False)
    assert len(calls) == 2
