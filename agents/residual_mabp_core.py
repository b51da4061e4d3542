"""Residual-MABP's correction as one kernel (compiled by numba where it is there:
:mod:`mabp_gym.core.kernels.jit`).

:func:`correct_scores` adds ``w . features`` to the base's scores exactly as
:func:`mabp_gym.agents.residual_mabp.correct` does with numpy, in the same order of
floating-point operations. The logarithms come in computed by numpy: its ``log1p`` may
differ from the C library's in the last bit (it does on a machine with AVX-512), so a
kernel computing them would change scores. ``tests/test_residual_mabp_core.py`` compares the
two paths' scores and controls slot by slot.
"""

from __future__ import annotations

from mabp_gym.core.kernels import jit


def correct_scores(w, candidates, logs, starts, live_only, out):  # pragma: no cover - compiled
    """``out`` plus the correction in place. ``candidates`` are the observation's
    ``(service, route, retain)`` arrays in float64, ``logs`` their ``log1p`` columns
    ``(service[:, 4], max(service[:, 3], 0), route[:, 3], retain[:, 2])``, ``starts`` the
    first score of the service, route and retain blocks. A service candidate with an empty
    queue keeps its score, and with ``live_only`` so does one whose score is not
    positive."""
    service, route, retain = candidates
    log_queue, log_pressure, log_route, log_demand = logs
    first = starts[0]
    for a in range(service.shape[0]):
        score = out[first + a]
        if service[a, 4] > 0 and (score > 0 or not live_only):
            hit = service[a, 2]
            queue = log_queue[a]
            delta = w[0] * hit + w[1] * hit * queue + w[2] * (1.0 - hit) * queue
            out[first + a] = score + (delta + w[3] * log_pressure[a])
    first = starts[1]
    for r in range(route.shape[0]):
        out[first + r] = out[first + r] + (w[4] * route[r, 2] + w[5] * log_route[r])
    first = starts[2]
    for k in range(retain.shape[0]):
        out[first + k] = out[first + k] + (w[6] * retain[k, 0] + w[7] * log_demand[k])


correct_scores = jit.leaf(correct_scores)
