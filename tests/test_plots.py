"""The figures' v3 measures: delays that count queued requests, growing policies marked."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from mabp_gym import evaluate  # noqa: E402
from mabp_gym.harness.plots import _delay, _grows, _per_arrival, make_figures  # noqa: E402


@pytest.fixture(scope="module")
def records():
    # BP grows at 0.85 on mixed and MABP does not; 3 seeds of 2,000 slots.
    return evaluate(["mabp", "bp"], "mixed", loads=[0.85], seeds=[0, 1, 2], horizon=2000, workers=1)


def test_figures__a_growing_policy_is_marked_and_its_queued_requests_count(records):
    bp = [r for r in records if r["policy"] == "bp"]
    mabp = [r for r in records if r["policy"] == "mabp"]
    assert _grows(bp) and not _grows(mabp)
    # BP's queued requests are older than its completed ones: the v3 delay is larger.
    assert _delay(bp) > sum(r["p95_delay"] for r in bp) / len(bp)
    assert _per_arrival(bp) == pytest.approx(sum(r["penalty_per_arrival"] for r in bp) / len(bp))
    old = [{k: v for k, v in r.items() if k != "p95_delay_all"} for r in bp]
    assert _delay(old) == pytest.approx(sum(r["p95_delay"] for r in bp) / len(bp))


def test_figures__the_ablation_figure_is_drawn_with_bp_absent(records, tmp_path):
    made, skipped = make_figures(records, tmp_path)
    assert "fig6_ablations.png" in skipped  # needs the ablations, which are not there
    assert (tmp_path / "fig4_cost_composition.png") in made


def _run(key, load, horizon, nu=5.0, penalty=1.0, workload="mixed", seed=0):
    return {
        "key": key,
        "policy": "mabp",
        "workload": workload,
        "load": load,
        "seed": seed,
        "horizon": horizon,
        "nu": nu,
        "overrides": {},
        "penalty": penalty,
        "mean_backlog": 10.0 * penalty,
    }


def test_figures__a_sweep_is_drawn_from_its_own_runs_alone():
    # Fig. 3's nu = 5 point averaged Table I's runs (every load, 4,000 slots) and other
    # workloads' into the sweep's runs at one load: the point sat far off the curve.
    from mabp_gym.harness.plots import _one_horizon, nu_points

    sweep = [
        _run(f"s{nu}", 0.5, 600, nu=nu, penalty=p)
        for nu, p in ((0.0, 1.0), (5.0, 2.0), (20.0, 3.0))
    ]
    table = [_run(f"t{x}", x, 4000, penalty=100.0) for x in (0.3, 0.5, 0.9)]
    other = [_run("rag", 0.5, 600, penalty=50.0, workload="rag")]
    records = table + sweep + other + [dict(sweep[1])]  # the same run from a second file
    assert nu_points(records, "mabp") == [(0.0, 1.0, 10.0), (5.0, 2.0, 20.0), (20.0, 3.0, 30.0)]
    # The backlog traces read one horizon's grid (Table I's), each run once.
    assert sorted(r["key"] for r in _one_horizon(records)) == ["t0.3", "t0.5", "t0.9"]
