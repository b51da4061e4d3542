"""Verdict v3 (SPEC 9.2): growth pooled over seeds with a confidence interval and
a trend check from the saved trace, on the near-boundary cases that fooled v2."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym import evaluate, stable_load, summarize_records
from mabp_gym.core.metrics import (
    GROWTH_LIMIT,
    TRACE_STRIDE,
    backlog_slope,
    growth,
    growth_at,
    growth_verdict,
    pooled,
    t_975,
)

RATE = 10.0  # arrivals per slot of the hand-built runs


def run_of(backlog: np.ndarray, seed: int, horizon: int) -> dict:
    """A record of a run whose per-slot backlog is ``backlog``, as the harness writes it."""
    window = backlog[int(horizon * 0.2) :]
    fraction = growth(backlog_slope(window), RATE)
    return {
        "policy": "p",
        "load": 0.5,
        "seed": seed,
        "horizon": horizon,
        "arrival_rate": RATE,
        "growth": fraction,
        "stable": fraction < GROWTH_LIMIT,
        "backlog_trace": backlog[::TRACE_STRIDE].tolist(),
        "slope": 0.0,
        "mean_backlog": float(window.mean()),
        "paper_slope": 0.0,
        "paper_backlog": 0.0,
    }


def runs(shape, seeds=5, horizon=4000, noise=3.0):
    t = np.arange(horizon, dtype=np.float64)
    return [
        run_of(shape(t) + np.random.default_rng(seed).normal(0, noise, horizon), seed, horizon)
        for seed in range(seeds)
    ]


def test_pooled__mean_and_student_t_half_width():
    mean, half = pooled([0.0, 0.01, 0.02])
    assert mean == pytest.approx(0.01)
    assert half == pytest.approx(t_975(2) * 0.01 / np.sqrt(3))
    assert pooled([0.3]) == (0.3, 0.0)
    assert t_975(4) == pytest.approx(2.776, abs=1e-3) and t_975(1000) == pytest.approx(
        1.96, abs=3e-3
    )
    with pytest.raises(ValueError, match="no values"):
        pooled([])


def test_a_queue_at_capacity_is_not_credited_although_every_run_passes_the_limit():
    # Backlog like c sqrt(t) (a critically loaded queue): each run's growth is under the
    # limit, the pooled one too, but it does not halve when the run doubles.
    members = runs(lambda t: 4.0 * np.sqrt(t))
    assert all(m["stable"] for m in members)
    verdict = growth_verdict(members)
    assert verdict["growth_mean"] + verdict["growth_half_width"] < GROWTH_LIMIT
    assert verdict["growth_mean"] > 0.5 * verdict["growth_half"]
    assert verdict["trend"] is False and verdict["stable"] is False


def test_a_queue_that_drains_then_settles_is_credited():
    # Growth negative at both horizons, more so at half: d = g(H) - g(H/2) / 2 is
    # significantly positive, which failed it before the trend test also asked for a
    # growth significantly above zero (Table I under v3: residual-MABP at 0.75 and
    # Cost-BP at 0.30, growths 0.0005 +- 0.0008 and 0.0002 +- 0.0003, failed so).
    members = runs(lambda t: np.where(t < 2000, 60 - 0.01 * t, 40.0))
    pairs = [(growth_at(m, 4000), growth_at(m, 2000)) for m in members]
    excess, spread = pooled([full - 0.5 * half for full, half in pairs])
    assert excess - spread > 0  # the paired excess alone would fail it
    verdict = growth_verdict(members)
    assert verdict["growth_mean"] < 0
    assert verdict["trend"] is True and verdict["stable"] is True


def test_a_slow_linear_rise_under_the_limit_is_not_credited():
    members = runs(lambda t: 0.1 * t)  # growth 0.01: under the limit, never falling
    verdict = growth_verdict(members)
    assert all(m["stable"] for m in members)
    assert verdict["trend"] is False and verdict["stable"] is False


def test_a_settled_queue_is_credited_and_so_is_one_that_settles_fast():
    flat = growth_verdict(runs(lambda t: 50.0 + 0.0 * t))
    assert flat["trend"] is True and flat["stable"] is True
    settling = growth_verdict(runs(lambda t: 80.0 * (1 - np.exp(-t / 150.0))))
    assert settling["stable"] is True


def test_near_the_limit_the_spread_decides_not_a_majority_of_seeds():
    # GreedyCache-BP at 0.60, 12,000 slots: most seeds under 0.015, median 0.0138.
    growths = [0.0138, 0.0120, 0.0145, 0.0162, 0.0171]
    members = [
        {"policy": "g", "load": 0.6, "seed": s, "growth": g, "stable": g < GROWTH_LIMIT}
        for s, g in enumerate(growths)
    ]
    assert sum(m["stable"] for m in members) == 3  # v2's majority would call it stable
    verdict = growth_verdict(members)
    assert verdict["growth_mean"] + verdict["growth_half_width"] > GROWTH_LIMIT
    assert verdict["stable"] is False


def test_one_run_is_judged_on_its_point_estimate_and_not_on_its_trend():
    (member,) = runs(lambda t: 4.0 * np.sqrt(t), seeds=1)
    verdict = growth_verdict([member])
    assert verdict["growth_half_width"] == 0.0 and verdict["trend"] is None
    assert verdict["stable"] is True


def test_mabp_at_the_bound_of_mixed_is_not_credited_even_without_the_bound_rule():
    # Load 1.0 is mixed's occupation bound: v2's growth rule passed MABP there on 5 of 5
    # seeds at 8,000 slots. v3 does not, with the bound rule switched off.
    records = evaluate(
        "mabp", "mixed", loads=[0.9, 1.0], seeds=range(200, 205), horizon=4000, progress=False
    )
    assert stable_load(records, bound=None) == {"mabp": 0.9}
    (row,) = [r for r in summarize_records(records) if r["load"] == 1.0]
    assert row["stable"] is False


def test_undecided__settling_queues_are_rerun_growing_and_stable_ones_are_not():
    from mabp_gym.harness.summaries import undecided

    # Settling with a relaxation time near the run length: its growth (0.006) still falls
    # but not to half, which one horizon cannot tell from a queue at capacity: rerun.
    settling = runs(lambda t: 400.0 * (1 - np.exp(-t / 3000.0)), horizon=4000)
    rising = runs(lambda t: 0.5 * t)  # growth constant: decided, it grows
    flat = runs(lambda t: 50.0 + 0.0 * t)  # stable: decided
    for group, name in ((settling, "s"), (rising, "r"), (flat, "f")):
        for record in group:
            record["policy"] = name
    assert growth_verdict(settling)["stable"] is False
    assert undecided([*settling, *rising, *flat]) == [("s", 0.5)]


def test_decide_horizons__reruns_only_the_undecided_cells_longer():
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import decide_horizons

    specs = plan(["mabp", "bp"], "mixed", [0.85], [0, 1], horizon=600)
    calls = []

    def run(batch):
        calls.append(sorted({(s.policy, s.horizon) for s in batch}))
        return execute(batch, progress=False, workers=1)

    records, used = decide_horizons(specs, 9600, run)
    # BP grows at 0.85 (decided at once); MABP's queues settle: rerun until stable.
    assert used[("bp", 0.85)] == 600 and used[("mabp", 0.85)] > 600
    assert calls[0] == [("bp", 600), ("mabp", 600)]
    assert all(policy == "mabp" for call in calls[1:] for policy, _ in call)
    assert stable_load(records) == {"bp": 0.0, "mabp": 0.85}
    assert {r["horizon"] for r in records if r["policy"] == "mabp"} == {used[("mabp", 0.85)]}
    # A rerun is keyed as the same run planned at its horizon, so that one reuses it (it was
    # keyed with the first horizon's digest and ran, and was stored, twice).
    longest = plan(["mabp"], "mixed", [0.85], [0, 1], horizon=used[("mabp", 0.85)])
    assert {r["key"] for r in records if r["policy"] == "mabp"} == {s.key for s in longest}
    with pytest.raises(ValueError, match="max_horizon"):
        decide_horizons(specs, 300, run)


def test_cli__until_decided_below_twice_the_horizon_exits_2():
    import subprocess
    import sys

    for value in ("100", "1199"):  # the default horizon is 600: 1,200 is the first rerun
        result = subprocess.run(
            [sys.executable, "-m", "mabp_gym.cli", "eval", "--until-decided", value],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2, result.stderr
        assert "--until-decided must be at least twice --horizon (1200" in result.stderr


def test_cli__until_decided_says_decided_only_of_cells_it_decided(run_cli, tmp_path):
    # BP at 0.5 over 200 slots on three seeds stays undecided up to 800: it was said to be
    # both "decided at 800 slots" and "still undecided at 800 slots".
    out = tmp_path / "ud.jsonl"
    args = ("eval", "--policies", "bp", "--loads", "0.5", "--seeds", "0", "1", "2")
    result = run_cli(*args, "--horizon", "200", "--until-decided", "800", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "bp at load 0.5: still undecided at 800 slots" in result.stdout
    assert "decided at" not in result.stdout.replace("undecided at", "")
    # The same runs planned at 800 slots are found in the file, not run again.
    again = run_cli(*args, "--horizon", "800", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "0 runs to do (0 slots, 3 already in" in again.stderr, again.stderr


# -- verdict v4: the trend test fails material growth only ------------------------------
def test_rise_at__a_queue_at_capacity_rises_by_seven_tenths_of_its_level_at_any_scale():
    from mabp_gym.core.metrics import rise_at

    for scale, horizon in ((4.0, 4000), (0.5, 4000), (4.0, 16000)):
        (member,) = runs(lambda t, c=scale: c * np.sqrt(t), seeds=1, horizon=horizon, noise=0.0)
        assert rise_at(member, horizon) == pytest.approx(0.708, abs=0.01)
    (flat,) = runs(lambda t: 0.0 * t, seeds=1, noise=0.0)
    assert rise_at(flat, 4000) == 0.0  # an empty network rises by nothing


def test_a_tiny_growth_that_fails_to_halve_by_chance_is_credited_by_v4_not_v3():
    # The PPO seed-761 case: a backlog near 17 whose growth is significantly
    # above 0 at a size 1/55 of the limit, and negative at half the run.
    def shape(t):
        return np.where(t < 2000, 20.0 - 0.002 * t, 16.0 + 0.001 * (t - 2000))

    members = runs(shape, noise=0.3)
    v3 = growth_verdict(members, material=0.0)
    assert v3["growth_mean"] - v3["growth_half_width"] > 0 and v3["growth_half"] < 0
    assert v3["growth_mean"] < GROWTH_LIMIT / 20
    assert v3["trend"] is False and v3["stable"] is False
    v4 = growth_verdict(members)
    assert v4["rise"] < 0.25 and v4["trend"] is True and v4["stable"] is True


def test_v4_still_fails_capacity_and_slow_rises_that_v3_fails():
    for shape in (lambda t: 4.0 * np.sqrt(t), lambda t: 0.1 * t, lambda t: 0.02 * np.sqrt(t) * 40):
        verdict = growth_verdict(runs(shape))
        assert verdict["rise"] > 0.5 and verdict["stable"] is False


def test_undecided__a_trend_failure_not_seen_at_half_the_run_is_rerun():
    from mabp_gym.harness.summaries import undecided

    # Flat for the first half, then rising: the trend fails at 1,200 slots, but the same
    # runs cut at 600 show nothing yet (BP at 0.41 on mixed, seeds 975-979, was decided
    # "grows" so at 1,200 slots and is stable at 4,800 and 9,600).
    late = runs(lambda t: 50.0 + np.where(t < 600, 0.0, 0.05 * (t - 600)), horizon=1200)
    early = runs(lambda t: 50.0 + 0.05 * t, horizon=1200)  # rising from the start
    for group, name in ((late, "late"), (early, "early")):
        for record in group:
            record["policy"] = name
    assert growth_verdict(late)["trend"] is False
    assert growth_verdict(early)["stable"] is False
    assert undecided([*late, *early]) == [("late", 0.5)]


@pytest.mark.slow
def test_until_decided__bp_near_its_boundary_is_not_decided_grows_at_1200_slots():
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import decide_horizons

    specs = plan(["bp"], "mixed", [0.41], range(975, 980), horizon=600)
    records, used = decide_horizons(specs, 9600, lambda s: execute(s, progress=False, workers=1))
    assert used[("bp", 0.41)] >= 2400
    assert stable_load(records) == {"bp": 0.41}


@pytest.mark.slow
def test_until_decided__decides_grows_only_where_the_long_fixed_runs_grow_too():
    # BP on mixed at 0.41-0.44, seeds 975-979: a cell --until-decided 9600 decides "grows"
    # (early, at 1,200 slots where it can) must not be stable in fixed 9,600-slot runs of
    # the same seeds; every cell it credits is stable there too.
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import decide_horizons, undecided

    loads = [0.41, 0.42, 0.43, 0.44]
    specs = plan(["bp"], "mixed", loads, range(975, 980), horizon=600)
    records, _ = decide_horizons(specs, 9600, lambda s: execute(s, progress=False, workers=1))
    still = set(undecided(records))
    decided = {row["load"]: row["stable"] for row in summarize_records(records)}
    long = plan(["bp"], "mixed", loads, range(975, 980), horizon=9600)
    fixed = {
        row["load"]: row["stable"]
        for row in summarize_records(execute(long, progress=False, workers=1))
    }
    for load in loads:
        if ("bp", load) in still:
            continue
        assert decided[load] == fixed[load], f"load {load}: decided {decided[load]}"
    assert decided[0.41] and decided[0.42]  # both refused at 1,200 slots before
