"""Oracle-Sur's compiled slot program (``mabp_gym.agents.oracle_core``) against its numpy
reference: slot by slot, the same model reaches HiGHS, bit for bit, and the same control
and the same ``last_info`` come back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mabp_gym.agents.oracle as oracle_module
from mabp_gym import Simulator, make_workload
from mabp_gym.agents.oracle import OracleSur
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.kernels import slotcore

pytestmark = pytest.mark.skipif(
    not slotcore.AVAILABLE, reason="numba is not installed (or MABP_GYM_PURE is set)"
)
CASES = [
    ("mixed", {"load": 0.3}, True, 0),
    ("mixed", {"load": 0.85}, True, 1),
    ("mixed", {"load": 1.3}, True, 2),  # past the bound: queues and hard nodes grow
    ("mixed", {"load": 2.0}, False, 3),  # memory off (the solver is rarely needed)
    ("separation", {"load": 1.2}, True, 0),
    ("boundary", {"load": 1.2, "K": 2.0}, True, 4),  # multi-slot starts
    ("rag", {"load": 0.6}, True, 0),
    ("moe", {"load": 1.2}, True, 1),
    ("agentic", {"load": 0.6}, True, 2),
    ("multihop", {"load": 0.6}, True, 0),
]
SEVERAL_STARTS = ("mixed", "rag", "moe", "agentic")  # nodes with several start candidates
BRANCH_AND_BOUND = [CASES[1], CASES[5], CASES[7]]


def _record_models(monkeypatch) -> list[tuple]:
    """The list every model Oracle-Sur hands HiGHS is appended to, from now on."""
    models: list[tuple] = []
    real = oracle_module.solve

    def recording(*args, **kwargs):
        models.append(_model(args))
        return real(*args, **kwargs)

    monkeypatch.setattr(oracle_module, "solve", recording)
    return models


def _model(args: tuple) -> tuple:
    """What HiGHS is handed, as bytes (so ``-0.0`` and ``0.0`` differ)."""
    c, matrix, upper, lb, ub, integrality = args[:6]
    options = args[6] if len(args) > 6 else None
    arrays = (c, matrix.indptr, matrix.indices, matrix.data, matrix.by_row, upper, lb, ub)
    return (
        *(np.asarray(a).dtype.str + np.asarray(a).tobytes().hex() for a in arrays),
        np.asarray(integrality, dtype=np.float64).tobytes().hex(),
        matrix.shape,
        sorted((options or {}).items()),
    )


def _case_id(case: tuple) -> str:
    return f"{Path(case[0]).stem}-{case[1]}-{'memory' if case[2] else 'no memory'}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_compiled_slot_program__same_models_controls_and_info_as_the_reference(case, monkeypatch):
    _compare(case, monkeypatch, lp_first=True)


@pytest.mark.parametrize("case", BRANCH_AND_BOUND, ids=_case_id)
def test_compiled_slot_program__same_branch_and_bound_as_the_reference(case, monkeypatch):
    """With the LP vertex refused every slot, both paths hand HiGHS the same MILP."""
    monkeypatch.setattr(oracle_module, "integral_fix", lambda *args: False)
    monkeypatch.setattr(OracleSur, "_integral_fix", staticmethod(lambda *args: False))
    _compare(case, monkeypatch, lp_first=False)


def _compare(case: tuple, monkeypatch, *, lp_first: bool) -> None:
    name, overrides, memory, seed = case
    wl = make_workload(name, **overrides)
    models = _record_models(monkeypatch)
    sim = Simulator(wl, memory=memory, check_invariants=True)
    sim.reset(seed)
    encoder = ObservationEncoder(wl, memory=memory)
    compiled, reference = OracleSur(wl, memory=memory), OracleSur(wl, memory=memory)
    reference.compiled = False
    assert compiled.compiled
    seen = {"milp": 0, "lp": 0, "hard": 0, "several starts": 0}
    for _ in range(150):
        obs = encoder.encode(sim.state)
        models.clear()
        control = compiled.control(sim.state, obs)
        compiled_models = list(models)
        models.clear()
        expected = reference.control(sim.state, obs)
        assert compiled_models == models
        for key, value in expected.as_dict().items():
            np.testing.assert_array_equal(control.as_dict()[key], value, err_msg=key)
        assert compiled.last_info == reference.last_info
        statuses = reference.last_info["milp_status"]
        seen["milp"] += sum(s not in ("lp", "trivial") for s in statuses)
        seen["lp"] += statuses.count("lp")
        seen["hard"] += any(s != "trivial" for s in statuses)
        seen["several starts"] += _several_starts_at_a_hard_node(reference, sim, obs, control)
        sim.step(control)
    # The slots reached the solver: its integral LP vertex, or branch and bound where the
    # vertex is refused; and nodes with several start candidates where the workload has.
    assert seen["hard"] > 0, seen
    assert (seen["lp"] > 0) if lp_first else (seen["milp"] > 0 and seen["lp"] == 0), seen
    if name in SEVERAL_STARTS and memory:
        assert seen["several starts"] > 0, seen


def _several_starts_at_a_hard_node(oracle, sim, obs, control) -> bool:
    """Whether the slot's program has a hard node with two start candidates or more (so
    its one-start row binds two binaries)."""
    weight = oracle.weights(np.asarray(obs["queues"], dtype=np.float64))
    no_routes = np.full(sim.workload.index.num_routes, -1.0)
    program = oracle._program(sim.state, control.transfers, weight, no_routes)
    _, hard = oracle._hard_nodes(program)
    nodes = program.start_node[hard[program.start_node]].tolist()
    return len(nodes) != len(set(nodes))


@pytest.mark.parametrize("name", ["mixed", "boundary"])
def test_compiled_slot_program__same_as_the_reference_on_random_programs(name, monkeypatch):
    """Random gains, work, compute left and queues, with compute left set on the EPS
    boundaries of the reference's comparisons (a unit that just fits, a row that binds by
    less than EPS): the same models and controls."""
    from types import SimpleNamespace

    from mabp_gym.core.control import EPS

    wl = make_workload(name, load=0.8, **({"K": 2.5} if name == "boundary" else {}))
    ix = wl.index
    rng = np.random.default_rng(5)
    models = _record_models(monkeypatch)
    no_transfers = np.zeros(0, dtype=np.int64)
    solved = 0
    for trial in range(300):
        gain = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, 3.5], ix.num_actions)
        gain[rng.random(ix.num_actions) < 0.5] = rng.uniform(0.1, 5.0)
        work = rng.choice([0.25, 0.5, 1.0, 2.0, 2.5, 3.0], ix.num_actions)
        avail = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], ix.num_nodes)
        near = rng.random(ix.num_nodes) < 0.3  # on a boundary, either side of EPS
        avail[near] += rng.choice([-0.5, 0.5, -2.0, 2.0], int(near.sum())) * EPS
        avail = np.maximum(avail, 0.0)
        queue = rng.integers(0, 4, ix.num_pairs)
        state = SimpleNamespace(queue_len=queue)
        results = []
        for compiled in (True, False):
            oracle = OracleSur(wl)
            oracle.compiled = compiled
            monkeypatch.setattr(oracle, "_gain_work", lambda *args, g=gain, w=work: (g, w))
            monkeypatch.setattr(oracle, "_available", lambda *args, a=avail: a)
            models.clear()
            control, status = oracle._solve(
                state, no_transfers, np.zeros((2, ix.num_actions)), np.full(ix.num_routes, -1.0)
            )
            results.append((control, status, list(models)))
        (control, status, got), (expected, expected_status, wanted) = results
        assert got == wanted and status == expected_status, trial
        for key, value in expected.as_dict().items():
            np.testing.assert_array_equal(control.as_dict()[key], value, err_msg=f"{trial} {key}")
        solved += status != "trivial"
    assert solved > 50
