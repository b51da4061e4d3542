"""Capacity LPs against the paper's closed forms (Prop. 1, Thm. 2 / Cor. 1) and SPEC 2."""

from __future__ import annotations

import math

import pytest

from mabp_gym import capacity, make_workload
from mabp_gym.core import workloads as builders


@pytest.mark.parametrize("kappa_w", [2.0, 3.0, 4.0, 7.0, 16.0])
def test_capacity__work_reuse_is_1_without_memory_and_kappa_w_with(kappa_w):
    # Prop. 1's closed form, at whole-number kappa_w: where the simulator, which serves whole
    # units, can reach it (fractional kappa_w: the next test).
    wl = make_workload("work_reuse", kappa_w=kappa_w)
    assert capacity(wl, reference="nomem") == pytest.approx(1.0, abs=1e-9)
    assert capacity(wl, reference="full") == pytest.approx(kappa_w, abs=1e-9)
    assert wl.lambda_ref == pytest.approx(kappa_w)
    # load = 0.9 means 0.9 * kappa_w requests per slot.
    assert make_workload("work_reuse", kappa_w=kappa_w, load=0.9).total_rate == pytest.approx(
        0.9 * kappa_w
    )


def whole_units(mu: float) -> float:
    """The units of work 1 a node of compute ``mu`` serves a slot, on average: whole units
    where one fits (SPEC 1 step 5), ``mu`` where it does not (multi-slot service)."""
    return float(math.floor(mu)) if mu >= 1 else mu


@pytest.mark.parametrize(
    ("mu_u", "mu_v", "pi_h", "pi_l"),
    [
        (2.0, 1.0, 1.0, 0.0),
        (2.0, 1.0, 0.8, 0.2),
        (3.0, 1.0, 0.9, 0.5),
        (1.0, 2.0, 1.0, 0.5),
        (4.0, 0.5, 0.25, 0.1),
        (2.5, 1.5, 1.0, 0.6),
        (2.5, 1.5, 0.7, 0.3),
    ],
)
def test_capacity__successor_matches_corollary_1(mu_u, mu_v, pi_h, pi_l):
    wl = make_workload("successor", mu_u=mu_u, mu_v=mu_v, pi_h=pi_h, pi_l=pi_l)
    mu_u, mu_v = whole_units(mu_u), whole_units(mu_v)
    no_memory = min(mu_u, mu_v / pi_h)
    with_memory = min(mu_u, mu_v / pi_l if pi_l > 0 else math.inf)
    assert capacity(wl, "nomem") == pytest.approx(no_memory, rel=1e-9)
    assert capacity(wl, "full") == pytest.approx(with_memory, rel=1e-9)


def _noisy(p: float, eps: float) -> float:
    """A two-outcome law (verify / exit) mixed with the uniform law."""
    return (1 - eps) * p + eps / 2


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_capacity__mixed_matches_the_generator_bottleneck_by_hand(eps):
    wl = make_workload("mixed", eps=eps)
    # Generators (2 nodes, mu 2) carry RAG generate (0.4) and agentic plan, whose rate
    # includes rethinks: x = 0.3 / (1 - P(verify | tool) P(rethink)).
    plan_hit = 0.3 / (1 - _noisy(0.15, eps) * _noisy(0.1, eps))
    plan_miss = 0.3 / (1 - _noisy(0.6, eps) * _noisy(0.1, eps))
    assert capacity(wl, "full") == pytest.approx(4.0 / (0.4 + plan_hit), rel=1e-9)
    assert capacity(wl, "nomem") == pytest.approx(4.0 / (4.0 * (0.4 + plan_miss)), rel=1e-9)


def test_capacity__mixed_defaults_are_stated_in_the_docstring():
    wl = make_workload("mixed")
    full, nomem = capacity(wl, "full"), capacity(wl, "nomem")
    assert full == pytest.approx(5.65, abs=0.01) and nomem == pytest.approx(1.376, abs=0.01)
    assert f"{full:.3f}" in builders.mixed.__doc__
    assert f"{nomem:.3f}" in builders.mixed.__doc__


@pytest.mark.parametrize("name", ["rag", "moe", "agentic", "boundary", "separation"])
def test_capacity__docstrings_state_the_computed_capacities(name):
    wl = make_workload(name)
    doc = getattr(builders, name).__doc__
    for reference in ("full", "nomem"):
        value = capacity(wl, reference)
        assert f"{value:.3f}" in doc or f"{value:g}" in doc, (name, reference, value)


def test_capacity__memory_never_lowers_capacity_and_rejects_unknown_reference():
    for name in ("work_reuse", "successor", "boundary", "mixed", "rag", "moe", "agentic"):
        wl = make_workload(name)
        assert capacity(wl, "full") >= capacity(wl, "nomem") - 1e-9
    with pytest.raises(ValueError, match="reference must be one of"):
        capacity(make_workload("mixed"), reference="half")


def test_capacity__link_capacity_binds_when_it_is_the_bottleneck():
    wl = make_workload("successor", mu_u=2.0, mu_v=1.0, pi_h=1.0, pi_l=1.0, link_capacity=2)
    assert capacity(wl, "full") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="link_capacity must be >= mu_u"):
        make_workload("successor", mu_u=3.0, link_capacity=2)


@pytest.mark.parametrize(("kappa_w", "whole"), [(2.5, 2.0), (12.25, 12.0)])
def test_capacity__at_fractional_kappa_w_the_exact_bound_is_whole_units(kappa_w, whole):
    """Units are whole, so a slot serves floor(kappa_w) hits: the all-hit capacity (the
    load scale) and both occupation LPs give floor(kappa_w) (the fluid rows alone said
    kappa_w), and the simulator follows that bound."""
    from mabp_gym.core.metrics import GROWTH_LIMIT
    from mabp_gym.core.occupation import occupation_bound
    from mabp_gym.harness.evaluation import evaluate

    wl = make_workload("work_reuse", kappa_w=kappa_w)
    assert capacity(wl, "full") == pytest.approx(whole, abs=1e-9)
    assert occupation_bound(wl) == pytest.approx(whole, abs=1e-9)
    assert occupation_bound(wl, exact=True) == pytest.approx(whole, abs=1e-9)
    # Loads of that capacity: under it, and halfway between it and the fluid kappa_w.
    below, above = 0.95, (whole + kappa_w) / 2 / whole
    excess = (above * whole - whole) / (above * whole)  # arrivals left behind
    records = evaluate(
        ["mabp"],
        "work_reuse",
        [below, above],
        [0, 1],
        horizon=6000,
        backend="serial",
        kappa_w=kappa_w,
    )
    settled = max(r["mean_backlog"] for r in records if r["load"] == below)
    for record in records:
        if record["load"] == below:
            assert record["growth"] < GROWTH_LIMIT, record["growth"]
        else:  # over the whole-unit capacity: the backlog grows. Only 1% over at 12.25, the
            # slope is noisy (Poisson arrivals' random walk), so the queue's level decides too.
            assert record["growth"] > 0.1 * excess, (record["growth"], excess)
            assert record["mean_backlog"] > 5 * settled, (record["mean_backlog"], settled)


def test_builders__memory_that_adds_work_is_refused_so_nomem_never_exceeds_full():
    # pi_l > pi_h made a hit create more verifier jobs than a miss: nomem 5 > full 2, and
    # every load (normalized by full) meant something else.
    with pytest.raises(ValueError, match="pi_l must be <= pi_h"):
        make_workload("successor", mu_u=5, mu_v=1, pi_h=0.2, pi_l=0.5)
    with pytest.raises(ValueError, match="verify_rag_hit must be <= verify_rag_miss"):
        make_workload("mixed", verify_rag_hit=1.0, verify_rag_miss=0.0)
    wl = make_workload("successor", pi_h=0.5, pi_l=0.5)  # equal: memory is neutral
    assert capacity(wl, "nomem") == pytest.approx(capacity(wl, "full"))


def test_capacity__accurate_down_to_the_smallest_compute_and_refused_below():
    # HiGHS's absolute tolerances made full/mu 3.33 (not 2.825) at mu = 1e-6 and occ < full.
    per_mu = capacity(make_workload("mixed"), "full") / 2.0  # 2.82495 at the default mu = 2
    for mu in (2.0, 1e-3):
        wl = make_workload("mixed", mu=mu)
        assert capacity(wl, "full") / mu == pytest.approx(per_mu, rel=1e-6)
        assert capacity(wl, "occ") == pytest.approx(capacity(wl, "full"), rel=1e-6)
    with pytest.raises(ValueError, match=r"mu must be in \[0.001, 1e\+06\]"):
        make_workload("mixed", mu=1e-6)


def test_capacity_and_occupation_bound__arguments_are_checked_by_name():
    from mabp_gym.core.occupation import occupation_bound

    assert capacity("work_reuse", "full") == capacity(make_workload("work_reuse"), "full")
    with pytest.raises(ValueError, match="workload must be a Workload or a workload's name"):
        capacity(3, "full")
    wl = make_workload("boundary")
    with pytest.raises(ValueError, match="exact must be True or False, got 'no'"):
        occupation_bound(wl, exact="no")  # a truthy string ran the exact LP
    with pytest.raises(ValueError, match="'boundary' has no fixed memory"):
        occupation_bound(wl, initial=7)  # ignored before
    for bad in (None, float("nan"), 1.5, True):
        with pytest.raises(ValueError, match="initial must be an integer >= 0"):
            occupation_bound(wl, initial=bad)
