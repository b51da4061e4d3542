"""mabp_gym.agents.highs.solve gives exactly what scipy.optimize.milp gives."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from mabp_gym.agents import highs


def _program(rng: np.random.Generator, n: int, m: int):
    dense = rng.integers(0, 3, (m, n)) * (rng.random((m, n)) < 0.4)
    matrix = sparse.csr_array(dense.astype(np.float64))
    upper = rng.integers(0, 12, m).astype(np.float64)
    # Ties on purpose: many equal costs, so which optimal vertex comes back matters.
    cost = -rng.integers(0, 4, n).astype(np.float64)
    lb, ub = np.zeros(n), rng.integers(0, 6, n).astype(np.float64)
    return cost, matrix, upper, lb, ub


@pytest.mark.skipif(not highs.DIRECT, reason="scipy lays out its HiGHS bindings differently")
def test_highs__direct_solve_identical_to_milp():
    rng = np.random.default_rng(0)
    for trial in range(150):
        n, m = int(rng.integers(1, 25)), int(rng.integers(1, 15))
        cost, matrix, upper, lb, ub = _program(rng, n, m)
        integrality = (rng.random(n) < 0.5).astype(np.int64) if trial % 2 else np.zeros(n)
        options = {"node_limit": 200, "mip_rel_gap": 0.0} if trial % 3 else None
        direct = highs.solve(cost, matrix, upper, lb, ub, integrality, options, direct=True)
        wrapped = highs.solve(cost, matrix, upper, lb, ub, integrality, options, direct=False)
        assert direct[0] == wrapped[0], trial
        if wrapped[1] is None:
            assert direct[1] is None, trial
        else:
            assert direct[1] is not None and np.array_equal(direct[1], wrapped[1]), trial


@pytest.mark.parametrize("direct", [True, False])
def test_highs__infeasible_and_bad_objectives_as_milp(direct):
    if direct and not highs.DIRECT:
        pytest.skip("scipy lays out its HiGHS bindings differently")
    matrix = sparse.csr_array(np.array([[-1.0]]))
    status, x = highs.solve(  # x >= 1 within [0, 0.5]: infeasible
        np.array([1.0]),
        matrix,
        np.array([-1.0]),
        np.zeros(1),
        np.array([0.5]),
        np.ones(1),
        direct=direct,
    )
    assert status == 2 and x is None
    with pytest.raises(ValueError, match="finite"):
        highs.solve(
            np.array([np.nan]),
            matrix,
            np.zeros(1),
            np.zeros(1),
            np.ones(1),
            np.zeros(1),
            direct=direct,
        )


def test_columns__two_per_column_is_scipys_canonical_csc():
    rng = np.random.default_rng(2)
    for _ in range(50):
        n, rows = int(rng.integers(1, 15)), int(rng.integers(2, 20))
        first = rng.integers(0, rows - 1, n)
        second = first + rng.integers(1, rows - first)
        built = highs.Columns.two_per_column(first, second, rows)
        reference = sparse.csc_array(
            (np.ones(2 * n), (np.concatenate([first, second]), np.tile(np.arange(n), 2))),
            shape=(rows, n),
        )
        for name in ("indptr", "indices", "data"):
            value, expected = getattr(built, name), getattr(reference, name)
            assert np.array_equal(value, expected), name
        assert built.indptr.dtype == built.indices.dtype == np.int32
        assert built.shape == reference.shape
        assert np.array_equal(built.to_scipy().toarray(), reference.toarray())
