"""How the kernels run: compiled by numba, or as the plain Python they are written in.

Every rule of a slot is written once, as a kernel function in this package. Where numba is
importable and ``MABP_GYM_PURE`` is unset, :func:`kernel` compiles it on first use (cached
on disk); otherwise it returns the function itself, which runs the same loops as plain
Python: slower, and giving the same controls, states, draws and records
(``tests/test_slot_golden.py`` holds both runs to one set of golden digests).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable)

try:
    if os.environ.get("MABP_GYM_PURE", "") not in ("", "0"):
        raise ImportError("MABP_GYM_PURE is set")
    from numba import njit
except ImportError:  # pragma: no cover - exercised on machines without numba
    njit = None  # type: ignore[assignment]

COMPILED = njit is not None
"""Whether the kernels are compiled (numba importable and ``MABP_GYM_PURE`` unset)."""


def kernel(function: F) -> F:
    """``function`` compiled by numba (cached on disk) where :data:`COMPILED`, else itself."""
    if njit is None:
        return function
    return njit(cache=True)(function)  # type: ignore[return-value]


def part(function: F) -> F:
    """A piece of a kernel, inlined into the kernels that call it where :data:`COMPILED`
    (the eight pieces on the env's path cost 0.45 s of a cold start inlined, 1.6 s compiled
    on their own, even without their Python wrappers: ``benchmarks/RESULTS.md``), itself
    otherwise."""
    if njit is None:
        return function
    return njit(cache=True, inline="always")(function)  # type: ignore[return-value]


def is_cached(function: Any) -> bool:
    """Whether numba's disk cache holds the compiled ``function`` (a :func:`kernel`): its
    index file exists. ``False`` where it cannot tell or nothing compiles."""
    cache = getattr(function, "_cache", None)
    path = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return isinstance(path, str) and os.path.exists(path)
