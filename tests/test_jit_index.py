"""The kernels' indexing: this package's compiled functions index arrays as given, without
Python's wrap of a negative index; every other function numba compiles keeps it. CI runs
the kernels' tests once more with numba's bounds checks (``.ci/run``), which fail on a
negative index in this package's kernels."""

from __future__ import annotations

import types

import numpy as np
import pytest

from mabp_gym.core.kernels import jit


def _read(values, k):
    return values[k]


def _named(module: str) -> types.FunctionType:
    """:func:`_read` as a function of ``module`` (numba names the compiled function by it)."""
    function = types.FunctionType(_read.__code__, _read.__globals__, "_read")
    function.__module__ = module
    return function


@pytest.mark.skipif(not jit.COMPILED, reason="plain Python indexes as Python does")
def test_index_as_given__in_this_packages_kernels_only():
    from numba import njit

    values = np.arange(4.0)
    ours, theirs = _named("mabp_gym.core.kernels.probe"), _named("research.kernels")
    assert njit(ours)(values, 2) == 2.0
    with pytest.raises(IndexError):  # no wrap: -1 stays -1, which the check refuses
        njit(ours, boundscheck=True)(values, -1)
    assert njit(theirs)(values, -1) == 3.0  # numba's wrap, as before
    assert njit(theirs, boundscheck=True)(values, -1) == 3.0
