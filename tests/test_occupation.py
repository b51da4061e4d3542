"""The occupation-measure bound (paper Thm. 1, SPEC 9.1): exact LP, relaxation, closed forms."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import mabp_gym
from mabp_gym import Simulator, capacity, make_workload
from mabp_gym.core.capacity import REFERENCES
from mabp_gym.core.occupation import (
    EXACT_LIMITS,
    _ExactModel,
    _most_that_fit,
    exact_size,
    occupation_bound,
)
from mabp_gym.core.workload import Action, Commodity, Link, Node, Signature, Workload
from mabp_gym.core.workloads import WORKLOADS, workload_params

EXAMPLES = Path(mabp_gym.__file__).parent / "examples"


def _two_servers(
    *,
    gen_prob: float = 1.0,
    replicas: int = 1,
    budget: float = 1.0,
    mu: float = 2.0,
    work_hit: float = 1.0,
    work_miss: float = 2.0,
) -> Workload:
    """Ingress -> two linked servers sharing one signature (replicas may bind)."""
    actions = tuple(
        Action(
            node=n,
            commodity=0,
            signature=0,
            work_hit=work_hit,
            work_miss=work_miss,
            gen_prob=gen_prob,
        )
        for n in (1, 2)
    )
    return Workload(
        name="two_servers",
        nodes=(
            Node("gw", "ingress", 0.0),
            Node("s0", "server", mu, budget),
            Node("s1", "server", mu, budget),
        ),
        links=(
            Link(0, 1, 10),
            Link(0, 2, 10),
            Link(1, 2, 10, bandwidth=1.0),
            Link(2, 1, 10, bandwidth=1.0),
        ),
        commodities=(Commodity("c"),),
        signatures=(Signature("o", 1.0),),
        actions=actions,
        arrival_mix=((0, 0, 1.0),),
        replicas=replicas,
    )


def _one_server(
    *, mu: float, work_hit: float, work_miss: float, sizes=(1.0,), budget: float = 1.0
) -> Workload:
    """One server, one commodity per signature, equal arrival shares."""
    n = len(sizes)
    actions = tuple(
        Action(node=0, commodity=c, signature=c, work_hit=work_hit, work_miss=work_miss)
        for c in range(n)
    )
    return Workload(
        name="one_server",
        nodes=(Node("s", "server", mu, budget),),
        links=(),
        commodities=tuple(Commodity(f"c{c}") for c in range(n)),
        signatures=tuple(Signature(f"o{c}", size) for c, size in enumerate(sizes)),
        actions=actions,
        arrival_mix=tuple((0, c, 1.0 / n) for c in range(n)),
    )


SMALL = {
    "work_reuse": lambda: make_workload("work_reuse"),
    "work_reuse_k2_half_budget": lambda: make_workload("work_reuse", kappa_w=2.0, beta=0.5),
    "successor": lambda: make_workload("successor"),
    "successor_soft": lambda: make_workload("successor", pi_h=0.8, pi_l=0.2, mu_v=0.5),
    "boundary": lambda: make_workload("boundary"),
    "boundary_full_budget": lambda: make_workload("boundary", beta=1.0, share0=0.8),
    "boundary_small_budget": lambda: make_workload("boundary", beta=0.25),
    "boundary_mu3": lambda: make_workload("boundary", mu=3.0, K=1.5, share0=0.7),
    "separation": lambda: make_workload("separation"),
    "two_servers_one_replica": lambda: _two_servers(),
    "two_servers_random_generation": lambda: _two_servers(gen_prob=0.3, replicas=2),
    "integer_service": lambda: _one_server(mu=3.0, work_hit=2.0, work_miss=3.0),
    "unequal_sizes": lambda: _one_server(
        mu=2.0, work_hit=1.0, work_miss=2.0, sizes=(1.0, 2.0), budget=2.5
    ),
    "successor_object_does_not_fit": lambda: make_workload("successor", beta=0.5),
    "multihop14_file": lambda: make_workload(str(EXAMPLES / "multihop14.json")),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_occupation__relaxation_bounds_the_exact_lp(name):
    wl = SMALL[name]()
    exact = occupation_bound(wl, exact=True)
    relaxed = occupation_bound(wl)
    literal = occupation_bound(wl, budget_hull=False)
    assert capacity(wl, "nomem") - 1e-7 <= exact <= relaxed + 1e-7
    # The budget-hull inequalities only tighten SPEC 9.1's literal relaxation.
    assert relaxed <= literal + 1e-7
    assert relaxed <= capacity(wl, "full") + 1e-7


def test_occupation__whole_unit_service_bounds_every_lp():
    # mu = 3 and a hit needs 2: one hit per slot whole (the paper's per-slot integer
    # service, the simulator's rule), not 1.5. The fluid rows alone said 1.5 for the
    # relaxation and the all-hit capacity, above what the exact LP and the simulator carry.
    wl = _one_server(mu=3.0, work_hit=2.0, work_miss=3.0)
    assert occupation_bound(wl, exact=True) == pytest.approx(1.0, abs=1e-7)
    assert occupation_bound(wl) == pytest.approx(1.0, abs=1e-7)
    assert capacity(wl, "full") == pytest.approx(1.0, abs=1e-7)
    assert capacity(wl, "nomem") == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize(
    ("mu", "works", "vectors"),
    [
        (3.0, [2.0, 3.0], {(1, 0), (0, 1)}),
        (1.5, [1.0, 1.0], {(1,)}),
        (2.5, [1.0, 1.5], {(2, 0), (1, 1)}),
        (5.0, [2.0, 2.5], {(2, 0), (1, 1), (0, 2)}),
    ],
)
def test_whole_unit_hull__groups_equal_works_and_keeps_the_maximal_vectors(mu, works, vectors):
    from mabp_gym.core.fluid import whole_unit_hull

    hull = whole_unit_hull(mu, works)
    assert hull is not None and set(hull.vectors) == vectors
    assert sorted(k for group in hull.groups for k in group) == list(range(len(works)))
    # Where every mu / w is whole (or w > mu: multi-slot service) the fluid row is exact.
    assert whole_unit_hull(4.0, [1.0, 2.0, 4.0]) is None
    assert whole_unit_hull(1.0, [2.5]) is None
    # Too many vectors to visit: the fluid row alone (it recursed once per distinct work
    # and raised RecursionError at about 350 of them).
    assert whole_unit_hull(100.5, [1 + 0.001 * k for k in range(400)]) is None


def test_occupation__replicas_bind_in_both_lps():
    # One replica for two servers: one server hits (2 / slot), the other misses (1 / slot).
    wl = _two_servers(replicas=1)
    assert capacity(wl, "full") == pytest.approx(4.0)
    assert occupation_bound(wl, exact=True) == pytest.approx(3.0, abs=1e-7)
    assert occupation_bound(wl) == pytest.approx(3.0, abs=1e-7)
    assert occupation_bound(_two_servers(replicas=2), exact=True) == pytest.approx(4.0)


def test_occupation__budget_hull_drops_objects_that_do_not_fit():
    # Half the object fits: no hit is ever possible, yet SPEC 9.1's literal budget row lets
    # it be "half resident" (kappa_w = 4: 1 + 3 * 0.5).
    wl = make_workload("work_reuse", beta=0.5)
    assert occupation_bound(wl, exact=True) == pytest.approx(1.0, abs=1e-7)
    assert occupation_bound(wl) == pytest.approx(1.0, abs=1e-7)
    assert occupation_bound(wl, budget_hull=False) == pytest.approx(2.5, abs=1e-6)


def test_occupation__most_that_fit_counts_the_smallest_objects_first():
    # Budget 3 holds both size-1 objects together (2 objects), but the size-3 one only
    # alone: the most objects that fit is 2, reached by filling smallest first.
    wl = _one_server(mu=2.0, work_hit=1.0, work_miss=2.0, sizes=(1.0, 1.0, 3.0), budget=3.0)
    assert _most_that_fit(wl, 0) == 2


def _beta_grid(name: str) -> list[dict]:
    if "beta" not in workload_params(name):
        return [{}]
    return [{"beta": beta} for beta in (0.05, 0.1, 0.125, 0.25, 0.5, 1.0)]


@pytest.mark.parametrize("name", WORKLOADS)
def test_occupation__lies_between_no_memory_and_all_hit_on_every_builtin(name):
    for overrides in _beta_grid(name):
        wl = make_workload(name, **overrides)
        nomem, occ, full = capacity(wl, "nomem"), capacity(wl, "occ"), capacity(wl, "full")
        assert nomem - 1e-7 <= occ <= full + 1e-7, (name, overrides, nomem, occ, full)
        assert occ == occupation_bound(wl)


def test_occupation__lies_between_no_memory_and_all_hit_on_the_example_file():
    wl = make_workload(str(EXAMPLES / "multihop14.json"))
    nomem, occ, full = capacity(wl, "nomem"), capacity(wl, "occ"), capacity(wl, "full")
    assert nomem - 1e-7 <= occ <= full + 1e-7


@pytest.mark.parametrize("name", ["mixed", "rag", "moe", "agentic", "boundary", "work_reuse"])
@pytest.mark.parametrize("budget_hull", [True, False])
def test_occupation__is_nondecreasing_in_beta(name, budget_hull):
    betas = np.linspace(0.02, 1.0, 25)
    values = [
        occupation_bound(make_workload(name, beta=float(b)), budget_hull=budget_hull) for b in betas
    ]
    assert all(later >= earlier - 1e-7 for earlier, later in zip(values, values[1:], strict=False))
    assert values[-1] > values[0]


@pytest.mark.parametrize("kappa_w", [1.5, 2.0, 3.5, 4.0, 7.0])
def test_occupation__work_reuse_is_kappa_w_with_memory(kappa_w):
    wl = make_workload("work_reuse", kappa_w=kappa_w)
    assert capacity(wl, "nomem") == pytest.approx(1.0)
    # Whole units per slot (the paper's integer quanta, and the simulator's rule for
    # work <= mu): floor(kappa_w) hits of work 1 fit mu = kappa_w, in both LPs and in the
    # all-hit capacity (the fluid rows alone said kappa_w).
    for value in (occupation_bound(wl), occupation_bound(wl, exact=True), capacity(wl, "full")):
        assert value == pytest.approx(math.floor(kappa_w), rel=1e-7)


@pytest.mark.parametrize(
    ("mu_u", "mu_v", "pi_h", "pi_l"),
    [
        (2.0, 1.0, 1.0, 0.0),
        (2.0, 1.0, 0.8, 0.2),
        (3.0, 1.0, 0.9, 0.5),
        (1.0, 2.0, 1.0, 0.5),
        (4.0, 0.5, 0.25, 0.1),
        (2.5, 1.5, 0.7, 0.3),
    ],
)
@pytest.mark.parametrize("exact", [False, True])
def test_occupation__successor_matches_corollary_1(mu_u, mu_v, pi_h, pi_l, exact):
    wl = make_workload("successor", mu_u=mu_u, mu_v=mu_v, pi_h=pi_h, pi_l=pi_l)
    # Whole units of work 1 a slot where one fits (mu = 2.5 serves 2), mu where none does.
    mu_u, mu_v = (float(math.floor(mu)) if mu >= 1 else mu for mu in (mu_u, mu_v))
    with_memory = min(mu_u, mu_v / pi_l if pi_l > 0 else math.inf)
    assert capacity(wl, "nomem") == pytest.approx(min(mu_u, mu_v / pi_h), rel=1e-7)
    assert occupation_bound(wl, exact=exact) == pytest.approx(with_memory, rel=1e-7)


@pytest.mark.parametrize(
    ("beta", "literal", "hull"),
    [
        (0.05, 3.515, 1.3755),
        (0.1, 5.501, 1.5290),
        (0.125, 5.650, 5.650),
        (0.2, 5.650, 5.650),
        (0.25, 5.650, 5.650),
        (0.5, 5.650, 5.650),
        (1.0, 5.650, 5.650),
    ],
)
def test_occupation__mixed_reproduces_the_spec_prototype_and_the_hull_corrects_it(
    beta, literal, hull
):
    wl = make_workload("mixed", beta=beta)
    # SPEC 9.1's constraints as written give the prototype's figures ...
    assert occupation_bound(wl, budget_hull=False) == pytest.approx(literal, abs=1e-3)
    # ... but below beta = 0.125 retrievers, tools and the expert cannot hold one object;
    # the hull (an object that does not fit is never resident) removes their phantom hits.
    assert occupation_bound(wl) == pytest.approx(hull, abs=1e-3)


def test_occupation__mixed_bound_ignores_the_zipf_skew():
    for beta in (0.05, 0.1, 0.25):
        values = {
            round(occupation_bound(make_workload("mixed", beta=beta, skew=s)), 9)
            for s in (0.0, 1.0, 2.5)
        }
        assert len(values) == 1


def test_occupation__exact_refuses_large_or_multislot_instances_with_the_size():
    with pytest.raises(ValueError, match=r"64 \(node, signature\) pairs.*at most 12 pairs"):
        occupation_bound(make_workload("mixed"), exact=True)
    with pytest.raises(ValueError, match="0 < work <= mu"):
        occupation_bound(make_workload("boundary", K=4.0), exact=True)
    with pytest.raises(ValueError, match="initial must be"):
        occupation_bound(make_workload("separation"), exact=True, initial=5)
    assert EXACT_LIMITS["memory_pairs"] == 12


def test_occupation__exact_size_counts_reachable_states():
    assert exact_size(make_workload("work_reuse"))["states"] == 2
    # Each server of boundary holds one of two objects or none: 3 x 3 states.
    assert exact_size(make_workload("boundary"))["states"] == 9
    # Nothing fits: only the empty memory is reachable.
    assert exact_size(make_workload("boundary", beta=0.25))["states"] == 1


def _held(sim: Simulator) -> frozenset:
    nodes, sigs = np.nonzero(sim.state.holder >= 0)
    return frozenset(zip(nodes.tolist(), sigs.tolist(), strict=True))


@pytest.mark.parametrize(
    "name",
    [
        "boundary",
        "boundary_full_budget",
        "two_servers_random_generation",
        "two_servers_one_replica",
    ],
)
def test_occupation__exact_kernel_contains_every_simulated_memory_transition(name):
    wl = SMALL[name]().with_load(1.2)
    model = _ExactModel(wl, 0)
    ix = wl.index
    sim = Simulator(wl, check_invariants=True)
    sim.reset(seed=3)
    rng = np.random.default_rng(7)
    moved = predicted = 0
    for _ in range(300):
        before = _held(sim)
        control = sim.project(rng.normal(size=ix.num_scores))
        resident = set(before)
        for k in control.transfers.tolist():
            e, s = int(ix.transfer_link[k]), int(ix.transfer_signature[k])
            resident.discard((int(ix.link_src[e]), s))
            resident.add((int(ix.link_dst[e]), s))
        moved += len(control.transfers)
        sim.step(control)
        after = _held(sim)
        matching = [b for b in model.branches(before) if b.resident == frozenset(resident)]
        assert matching, "the simulator reached a resident set the model does not enumerate"
        served = control.service.tolist()
        ok = any(
            all(
                tuple(served[a] for a in model.node_actions[i]) in vectors
                for i, vectors in b.service
            )
            and any(prob > 0 and nxt == after for law in b.laws for nxt, prob in law)
            for b in matching
        )
        assert ok, (before, resident, served, after)
        law = model._generated(frozenset(resident), dict(enumerate(served)))
        if len(law) == 1:  # deterministic generation: predict the next memory exactly
            assert _greedy_retention(wl, frozenset(resident) | law[0][0], control.retain) == after
            predicted += 1
    assert predicted > 0
    if name != "two_servers_one_replica":
        assert moved > 0  # transfers were exercised


def _greedy_retention(wl: Workload, candidates: frozenset, retain: np.ndarray) -> frozenset:
    """SPEC 3.2 step 3 written independently: per node, descending priority (ties by
    signature), keep while it fits, drop negative priorities."""
    ix = wl.index
    kept = set()
    for node in {i for i, _ in candidates}:
        ranked = sorted((-retain[ix.retain_of[i, s]], s) for i, s in candidates if i == node)
        used = 0.0
        for negative, s in ranked:
            size = float(ix.signature_size[s])
            if negative <= 0 and used + size <= ix.budget[node] + 1e-9:
                kept.add((node, s))
                used += size
    return frozenset(kept)


def test_capacity__occ_is_a_reference_choice():
    assert "occ" in REFERENCES and {"full", "nomem"} <= set(REFERENCES)
    wl = make_workload("separation")
    assert capacity(wl, "occ") == pytest.approx(1.0)


def test_occupation__module_imports_neither_gymnasium_nor_torch():
    package = Path(mabp_gym.__file__).parent
    for module in ("core/occupation", "harness/plots_occupation"):
        tree = ast.parse((package / f"{module}.py").read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module.split(".")[0])
        assert not names & {"gymnasium", "torch", "torch_geometric"}, module


def test_plot_occupation__writes_fig2b_from_computed_values(tmp_path):
    from mabp_gym.harness.plots_occupation import plot_occupation

    path = tmp_path / "fig2b.png"
    values = plot_occupation(path, betas=(0.05, 0.1, 0.125, 0.5), skews=(0.0, 1.0))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mixed = {
        r["beta"]: r["occ_ratio"] for r in values if r["workload"] == "mixed" and r["skew"] == 1.0
    }
    assert mixed[0.5] == pytest.approx(1.0) and mixed[0.1] < 0.3
    boundary = [r for r in values if r["workload"] == "boundary"]
    assert all(r["exact"] <= r["occ"] + 1e-7 for r in boundary)


def test_cli__capacity_reports_the_occupation_bound(tmp_path, capsys):
    import json

    from mabp_gym.cli import main

    out = tmp_path / "cap.json"
    assert (
        main(
            [
                "capacity",
                "--workload",
                "work_reuse",
                "--set",
                "beta=0.5",
                "--reference",
                "occ",
                "--exact",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "occupation bound (relaxation, SPEC 9.1) 1.0000" in printed
    assert "occupation bound (exact LP, paper (6)-(9)) 1.0000" in printed
    data = json.loads(out.read_text())
    assert data["occ"] == pytest.approx(1.0) and data["full"] == pytest.approx(4.0)
    with pytest.raises(SystemExit):
        main(["capacity", "--workload", "mixed", "--exact"])
    err = capsys.readouterr().err
    assert "at most 12 pairs" in err and "Drop --exact" in err and "exact=False" not in err
