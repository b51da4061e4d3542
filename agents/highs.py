"""Small linear and integer programs solved by HiGHS as :func:`scipy.optimize.milp` solves
them, without the wrapper's per-call overhead.

Oracle-Sur solves one or two small programs per slot. For programs of that size scipy's
``milp`` spends about three times the HiGHS solve itself around it: input checks, each
option validated one by one, the duals and the basis read back and converted
(``benchmarks/RESULTS.md``). :func:`solve` hands HiGHS the same model and the
same options through the HiGHS bindings bundled with scipy, so the same HiGHS build
finds the same vertex, and reads back the primal solution only. Where those bindings are
not there (a scipy that lays them out differently), it calls ``milp``.
``tests/test_highs.py`` holds the two identical on random programs, and the records of
Oracle-Sur identical to the baseline.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

try:  # scipy's own HiGHS bindings: private, so only used when they look as expected
    import scipy.optimize._highspy._core as _core  # type: ignore[import-not-found]
    from scipy.optimize._linprog_highs import (  # type: ignore[attr-defined]
        _highs_to_scipy_status_message,
    )

    _SOLVED = {
        _core.HighsModelStatus.kOptimal,
        _core.HighsModelStatus.kTimeLimit,
        _core.HighsModelStatus.kIterationLimit,
        _core.HighsModelStatus.kSolutionLimit,
    }
    _COLWISE = int(_core.MatrixFormat.kColwise)
    _MINIMIZE = int(_core.ObjSense.kMinimize)
    DIRECT = all(
        hasattr(_core, name) for name in ("HighsLp", "_Highs", "HighsOptions", "HighsVarType")
    )
except (ImportError, AttributeError):  # pragma: no cover - other scipy layouts
    DIRECT = False
"""Whether :func:`solve` calls HiGHS directly (else through ``milp``)."""


@dataclass(frozen=True, eq=False)
class Columns:
    """A sparse ``(rows, cols)`` matrix in the canonical compressed-column form scipy's
    ``csc_array`` gives (row indices sorted within each column), built with numpy alone:
    building a scipy array costs more than solving these small programs."""

    indptr: np.ndarray  # (cols + 1,) int32
    indices: np.ndarray  # (nnz,) int32, row of each entry
    data: np.ndarray  # (nnz,) float64
    shape: tuple[int, int]

    @classmethod
    def two_per_column(cls, first: np.ndarray, second: np.ndarray, rows: int) -> Columns:
        """The 0/1 matrix with ones at ``(first[j], j)`` and ``(second[j], j)``, where
        ``first[j] < second[j]`` (so already in canonical order)."""
        n = first.size
        indices = np.empty(2 * n, dtype=np.int32)
        indices[0::2], indices[1::2] = first, second
        return cls(np.arange(0, 2 * n + 1, 2, dtype=np.int32), indices, np.ones(2 * n), (rows, n))

    def to_scipy(self) -> sparse.csc_array:
        return sparse.csc_array((self.data, self.indices, self.indptr), shape=self.shape)


def solve(
    c: np.ndarray,
    matrix: Columns | sparse.sparray,
    upper: np.ndarray,
    lb: np.ndarray,
    ub: np.ndarray,
    integrality: np.ndarray,
    options: dict[str, Any] | None = None,
    *,
    direct: bool | None = None,
) -> tuple[int, np.ndarray | None]:
    """Minimize ``c @ x`` subject to ``matrix @ x <= upper`` and ``lb <= x <= ub``.

    Args:
        matrix: :class:`Columns` or a scipy sparse array (converted to columns once per
            call unless it is already ``csc``).
        integrality: per variable, 1 integer, 0 continuous (``milp``'s meaning).
        options: ``milp``'s options (``node_limit``, ``mip_rel_gap``, ``time_limit``).
        direct: call HiGHS directly (default: where :data:`DIRECT`) or through ``milp``.

    Returns:
        ``(status, x)``: ``milp``'s status code (0 optimal, 1 a limit reached, 2
        infeasible, 3 unbounded, 4 other) and its solution, ``None`` where it has none.
    """
    options = dict(options or {})
    if c.size == 0 or not np.all(np.isfinite(c)):  # what milp refuses, refused alike
        raise ValueError("the objective must be a nonempty vector of finite numbers")
    if not (DIRECT if direct is None else direct):
        result = milp(
            c,
            integrality=integrality,
            bounds=Bounds(lb, ub),
            constraints=LinearConstraint(
                matrix.to_scipy() if isinstance(matrix, Columns) else matrix, -np.inf, upper
            ),
            options=options,
        )
        return int(result.status), result.x
    # The model exactly as milp builds it (columns compressed, float64 everywhere), passed
    # as arrays: the same HighsLp inside HiGHS without building one attribute at a time.
    if isinstance(matrix, Columns) or matrix.format == "csc":
        columns = matrix
    else:
        columns = sparse.csc_array(matrix)
    n, m = int(c.shape[0]), int(upper.shape[0])
    kinds = np.asarray(integrality, dtype=np.int32)
    # milp's options: no log, its node limit under HiGHS's name, the rest verbatim.
    settings = {"log_to_console": False, "mip_max_nodes": options.pop("node_limit", None)}
    settings.update(options)
    highs = _solver()
    highs.passOptions(_options(tuple(settings.items())))
    passed = highs.passModel(
        n,
        m,
        int(columns.indptr[-1]),
        _COLWISE,
        _MINIMIZE,
        0.0,
        np.asarray(c, dtype=np.float64),
        np.asarray(lb, dtype=np.float64),
        np.asarray(ub, dtype=np.float64),
        np.full(m, -np.inf),
        np.asarray(upper, dtype=np.float64),
        np.asarray(columns.indptr, dtype=np.int32),
        np.asarray(columns.indices, dtype=np.int32),
        np.asarray(columns.data, dtype=np.float64),
        kinds,
    )
    if passed == _core.HighsStatus.kError:
        return _status(_core.HighsModelStatus.kModelError), None
    if highs.run() == _core.HighsStatus.kError:
        return _status(highs.getModelStatus()), None
    status = highs.getModelStatus()
    if status == _core.HighsModelStatus.kOptimal:
        failed = False
    elif kinds.any():
        failed = status not in _SOLVED or (
            highs.getInfo().objective_function_value == _core.kHighsInf
        )
    else:
        failed = True
    if failed:
        return _status(status), None
    return _status(status), np.array(highs.getSolution().col_value)


def _status(model_status: Any) -> int:
    """``milp``'s status code of a HiGHS model status (remembered per status)."""
    code = _STATUS.get(model_status)
    if code is None:
        code = _STATUS[model_status] = int(_highs_to_scipy_status_message(model_status, "")[0])
    return code


_STATUS: dict[Any, int] = {}


_LOCAL = threading.local()
_OPTIONS: dict[tuple, Any] = {}


def _solver() -> Any:
    """This thread's HiGHS instance (building one costs more than a small solve; a new
    model clears what the last solve left)."""
    highs = getattr(_LOCAL, "highs", None)
    if highs is None:
        highs = _LOCAL.highs = _core._Highs()
    return highs


def _options(settings: tuple[tuple[str, Any], ...]) -> Any:
    """HiGHS options with ``settings`` (``None`` values left at HiGHS's default), built
    once per distinct settings."""
    options = _OPTIONS.get(settings)
    if options is None:
        options = _OPTIONS[settings] = _core.HighsOptions()
        for key, value in settings:
            if value is not None:
                setattr(options, key, value)
    return options
