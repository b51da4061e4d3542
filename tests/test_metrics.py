"""SPEC 5 metric definitions on hand-made traces."""

from __future__ import annotations

import math

import pytest

from mabp_gym.metrics import Trace, backlog_slope, is_stable, summarize


def make_trace(backlog, delays=None, **series) -> Trace:
    n = len(backlog)
    trace = Trace(backlog=list(backlog))
    for name in (
        "arrivals",
        "completed",
        "served",
        "hits",
        "churn",
        "work",
        "penalty_compute",
        "penalty_transmission",
        "penalty_memory",
    ):
        setattr(trace, name, list(series.get(name, [0] * n)))
    trace.delays = list(delays or [()] * n)
    return trace


def test_metrics__slope_is_least_squares_units_per_slot():
    assert backlog_slope([5, 7, 9, 11]) == pytest.approx(2.0)
    assert backlog_slope([3, 3, 3]) == pytest.approx(0.0)
    assert backlog_slope([1, 0, 1, 0]) == pytest.approx(-0.2)
    assert backlog_slope([4]) == 0.0


def test_metrics__stable_needs_small_slope_and_backlog():
    assert is_stable(0.0, 50.0)
    assert not is_stable(0.035, 50.0)
    assert not is_stable(0.0, 120.0)


def test_metrics__summary_uses_only_the_window_after_warmup():
    n = 10
    trace = make_trace(
        backlog=[100] * 2 + [10] * 8,
        delays=[(50,)] * 2 + [(1, 2)] * 7 + [(20,)],
        arrivals=[9] * 2 + [2] * 8,
        completed=[1] * 2 + [2] * 7 + [1],
        served=[3] * n,
        hits=[0] * 2 + [2] * 8,
        churn=[5] * 2 + [1] * 8,
        work=[1.0] * n,
        penalty_compute=[1.0] * n,
        penalty_transmission=[0.5] * n,
        penalty_memory=[0.25] * n,
    )
    summary = summarize(trace, warmup=0.2)
    assert summary["mean_backlog"] == 10 and summary["slope"] == pytest.approx(0.0)
    assert summary["stable"] is True
    # Only requests born in the window (slot >= 2) count: slot 3 finishes one born in 2,
    # slots 4-8 two each; slot 2's and slot 9's completions were born before the window.
    assert summary["completion_ratio"] == pytest.approx(11 / 16)
    assert summary["hit_ratio"] == pytest.approx(16 / 24)
    assert summary["churn"] == pytest.approx(8 / 24)
    assert summary["penalty"] == pytest.approx(8 * 1.75 / 15)
    assert summary["transmission_cost"] == pytest.approx(8 * 0.5 / 15)
    assert summary["work_per_request"] == pytest.approx(8 / 15)
    # 15 delays: seven 1s, seven 2s, one 20; the 95th percentile interpolates 2 -> 20.
    delays = sorted([1] * 7 + [2] * 7 + [20])
    assert summary["p95_delay"] == pytest.approx(2 + 0.3 * 18)
    assert delays[-1] == 20


def test_metrics__empty_window_gives_nan_not_zero_division():
    summary = summarize(make_trace([0, 0, 0]), warmup=0.0)
    assert math.isnan(summary["penalty"]) and math.isnan(summary["p95_delay"])
    with pytest.raises(ValueError, match="warmup"):
        summarize(make_trace([0]), warmup=1.0)
