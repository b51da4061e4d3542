"""SPEC 5 metric definitions on hand-made traces."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mabp_gym.core.metrics import Trace, backlog_slope, is_stable, summarize


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
    # Each kind of penalty per completed request, apart (each slot pays 1.0, 0.5, 0.25).
    assert summary["compute_cost"] == pytest.approx(8 * 1.0 / 15)
    assert summary["transmission_cost"] == pytest.approx(8 * 0.5 / 15)
    assert summary["memory_cost"] == pytest.approx(8 * 0.25 / 15)
    assert summary["work_per_request"] == pytest.approx(8 / 15)
    # 15 delays: seven 1s, seven 2s, one 20; the 95th percentile interpolates 2 -> 20.
    assert summary["p95_delay"] == pytest.approx(2 + 0.3 * 18)


def test_metrics__empty_window_gives_nan_not_zero_division():
    summary = summarize(make_trace([0, 0, 0]), warmup=0.0)
    assert math.isnan(summary["penalty"]) and math.isnan(summary["p95_delay"])
    with pytest.raises(ValueError, match="warmup"):
        summarize(make_trace([0]), warmup=1.0)


def _hand_trace() -> Trace:
    # Slot k's arrivals are born in slot k; slot k's delays belong to requests leaving in k.
    trace = Trace()
    trace.arrivals = [1, 2, 0, 1, 0]
    trace.delays = [(), (), (2, 1), (), (3,)]
    trace.backlog = [1, 3, 1, 2, 1]
    return trace


def test_metrics__window_delays_count_unfinished_requests_at_their_age():
    from mabp_gym.core.metrics import window_delays

    trace = _hand_trace()
    # Born 0 left at 2 (delay 2); born 1 left at 2 and 4 (1, 3); born 3 never left: its age
    # at the end of the 5-slot run is 5 - 3 = 2.
    assert sorted(window_delays(trace, 0).tolist()) == [1, 2, 2, 3]
    # From slot 2 on only the request born at 3 counts (the others were born before).
    assert window_delays(trace, 2).tolist() == [2]


def test_metrics__every_request_born_in_the_window_is_counted_once_in_a_real_run():
    import numpy as np

    from mabp_gym import Simulator, make_workload
    from mabp_gym.agents import make_policy
    from mabp_gym.core.encoding import ObservationEncoder
    from mabp_gym.core.metrics import window_delays

    for name, load in (("bp", 0.85), ("mabp", 0.5)):  # one unstable run, one stable
        workload = make_workload("mixed", load=load)
        sim, encoder = Simulator(workload), ObservationEncoder(workload)
        policy = make_policy(name, workload)
        sim.reset(3)
        policy.reset(3)
        trace = Trace()
        for _ in range(400):
            _, outcome = sim.step_scores(policy.scores(encoder.encode(sim.state)))
            trace.record(outcome)
        start = 80
        everyone = window_delays(trace, start)
        assert everyone.size == sum(trace.arrivals[start:])
        summary = summarize(trace, 0.2)
        completed = [d for slot in trace.delays[start:] for d in slot]
        assert summary["p95_delay_all"] == float(np.percentile(everyone, 95))
        assert summary["p95_delay"] == float(np.percentile(completed, 95))
        penalty = sum(trace.penalty_compute[start:]) + sum(trace.penalty_transmission[start:])
        penalty += sum(trace.penalty_memory[start:])
        assert summary["penalty_per_arrival"] == pytest.approx(
            penalty / sum(trace.arrivals[start:])
        )
        if name == "bp":  # unstable: requests left in the network dominate the tail
            assert summary["p95_delay_all"] > summary["p95_delay"]


def test_geometric_mean__of_ratios_and_its_refusals():
    from mabp_gym.core.metrics import geometric_mean

    assert geometric_mean([0.5, 2.0]) == pytest.approx(1.0)
    assert geometric_mean(np.array([0.25, 1.0, 4.0])) == pytest.approx(1.0)
    assert geometric_mean([0.9]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="no values"):
        geometric_mean([])
    with pytest.raises(ValueError, match="positive values"):
        geometric_mean([1.0, 0.0])
