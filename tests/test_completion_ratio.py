"""The completion ratio means what it says: the fraction of the requests that arrived in
the measurement window that completed by the end of the run (never above 1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mabp_gym
from mabp_gym.core.metrics import Trace, completion_ratio, summarize


def test_completion_ratio__completions_of_warm_up_requests_do_not_count():
    # Ten requests arrive during the warm-up (slots 0-1) and all leave in the window, with
    # the two born in the window: completed/arrived in the window would be 12 / 2 = 6.
    trace = Trace(
        backlog=[10, 10, 0, 0],
        arrivals=[5, 5, 2, 0],
        completed=[0, 0, 0, 12],
        delays=[(), (), (), (3,) * 5 + (2,) * 5 + (1, 1)],
    )
    assert completion_ratio(trace, start=2) == pytest.approx(2 / 2)
    assert summarize(trace, warmup=0.5)["completion_ratio"] == pytest.approx(1.0)
    # A request born in the window and still queued at the end counts as not completed.
    trace.arrivals[3] = 2
    assert completion_ratio(trace, start=2) == pytest.approx(2 / 4)


@given(
    st.lists(st.lists(st.integers(0, 30), max_size=4), min_size=1, max_size=30), st.floats(0.0, 0.9)
)
def test_completion_ratio__is_a_fraction_for_any_delays(delays_per_slot, warmup):
    # Build a consistent trace: every completion's birth slot had an arrival.
    n = len(delays_per_slot)
    arrivals = [0] * n
    delays = []
    for t, slot in enumerate(delays_per_slot):
        kept = tuple(d for d in slot if d <= t)
        for d in kept:
            arrivals[t - d] += 1
        delays.append(kept)
    arrivals = [a + 1 for a in arrivals]  # some requests never complete
    trace = Trace(
        backlog=[0] * n, arrivals=arrivals, completed=[len(d) for d in delays], delays=delays
    )
    start = int(n * warmup)
    ratio = completion_ratio(trace, start)
    assert 0.0 <= ratio <= 1.0


def test_completion_ratio__is_a_fraction_of_the_requests_born_in_the_window():
    # BP at a light load used to report 1.028: completions of warm-up requests counted.
    (record,) = mabp_gym.evaluate(
        "bp", "mixed", loads=[0.3], seeds=[0], horizon=400, backend="serial"
    )
    assert 0.9 < record["completion_ratio"] <= 1.0
    (overloaded,) = mabp_gym.evaluate(
        "sp", "mixed", loads=[1.5], seeds=[0], horizon=300, backend="serial"
    )
    assert overloaded["completion_ratio"] < 0.8
