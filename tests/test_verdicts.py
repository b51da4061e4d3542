"""Verdicts recomputed from saved runs (mabp_gym.harness.verdicts): cutting a run at a shorter
horizon, per seed set, and whether the sets agree."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym.core.metrics import TRACE_STRIDE
from mabp_gym.harness.verdicts import cut, growth_at, horizon_sensitivity, long_run_stable_load


def _record(policy: str, load: float, seed: int, slope: float, horizon: int = 4000) -> dict:
    """A saved run whose backlog grows by ``slope`` units per slot after slot 1,000."""
    slots = np.arange(0, horizon, TRACE_STRIDE)
    trace = (np.maximum(slots - 1000, 0) * slope).tolist()
    return {
        "policy": policy,
        "workload": "mixed",
        "overrides": {},
        "memory": True,
        "load": load,
        "seed": seed,
        "horizon": horizon,
        "backlog_trace": trace,
        "arrival_rate": 5.0,
        "stable": True,
        "paper_stable": True,
        "mean_backlog": 1.0,
        "slope": slope,
        "growth": slope / 5.0,
    }


def test_growth_at__reads_the_trace_up_to_the_horizon():
    record = _record("p", 0.5, 0, slope=0.5)
    assert growth_at(record, 800) == pytest.approx(0.0, abs=1e-9)  # flat before slot 1,000
    assert growth_at(record, 4000) > 0.05
    with pytest.raises(ValueError, match="longer than the run"):
        growth_at(record, 8000)


def test_cut__recomputes_the_verdict_at_the_shorter_horizon():
    (short,) = cut([_record("p", 0.5, 0, slope=0.5)], 800)
    (full,) = cut([_record("p", 0.5, 0, slope=0.5)], 4000)
    assert short["stable"] and not full["stable"]


def test_horizon_sensitivity__flags_seed_sets_that_disagree():
    records = [_record("p", load, seed, 0.0) for load in (0.4, 0.5) for seed in range(6)]
    # Set B grows at 0.5: its stable load is 0.4, set A's 0.5.
    records += [_record("p", 0.6, seed, 1.0) for seed in range(6)]
    records = [
        r if not (r["load"] == 0.5 and r["seed"] >= 3) else _record("p", 0.5, r["seed"], 1.0)
        for r in records
    ]
    (row,) = horizon_sensitivity(records, [4000], [[0, 1, 2], [3, 4, 5]])
    assert row["stable_loads"] == [0.5, 0.4] and not row["agree"]
    (row,) = horizon_sensitivity(records, [900], [[0, 1, 2], [3, 4, 5]])
    assert row["agree"]  # cut before the growth starts, every set is stable everywhere


def test_long_run_stable_load__longer_runs_decide_the_loads_they_cover():
    # A 4,000-slot grid says 0.5; a longer run at 0.5 grows after slot 1,000 only when it is
    # cut late enough, and a longer run at 0.6 settles (flat) where the short grid said
    # "grows".
    short = [_record("p", 0.4, s, 0.0) for s in range(3)]
    short += [_record("p", 0.5, s, 0.0, horizon=900) for s in range(3)]
    short += [_record("p", 0.6, s, 1.0) for s in range(3)]
    short = [{**r, "stable": r["slope"] == 0.0} for r in short]  # their own verdicts
    growing = [_record("p", 0.5, s, 1.0, horizon=8000) for s in range(3)]
    flat = [_record("p", 0.5, s, 0.0, horizon=8000) for s in range(3)]
    flat += [_record("p", 0.6, s, 0.0, horizon=8000) for s in range(3)]
    assert long_run_stable_load(short, growing, 8000) == {"p": 0.4}
    assert long_run_stable_load(short, growing, 900) == {"p": 0.5}  # not grown yet; 0.6 grows
    assert long_run_stable_load(short, flat, 8000) == {"p": 0.6}
    assert long_run_stable_load(short, flat, 8000, bound=0.6) == {"p": 0.5}
    with pytest.raises(ValueError, match="longer than the run"):
        long_run_stable_load(short, flat, 9000)


def test_horizon_sensitivity__a_seed_saved_at_two_horizons_counts_once():
    # Two results files with the same seeds at 4,000 and 8,000 slots: cut at 4,000, each
    # seed stood twice and narrowed the interval; the summary now refuses that, so the
    # sensitivity keeps each seed's longest run (as the --long path does).
    records = [_record("p", load, seed, 0.0) for load in (0.4, 0.5) for seed in range(3)]
    longer = [
        _record("p", load, seed, 0.0, horizon=8000) for load in (0.4, 0.5) for seed in range(3)
    ]
    alone = horizon_sensitivity(longer, [2000, 4000], [[0, 1, 2]])
    assert horizon_sensitivity(records + longer, [2000, 4000], [[0, 1, 2]]) == alone
    # Runs of another workload are not mistaken for the same seed's other horizon.
    other = [{**r, "workload": "rag"} for r in longer]
    with pytest.raises(ValueError, match="differ in 'workload'"):
        horizon_sensitivity(longer + other, [4000], [[0, 1, 2]])
