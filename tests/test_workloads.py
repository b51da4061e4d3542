"""Workload builders: SPEC defaults, budgets, validated overrides, hand-built validation."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym import (
    WORKLOADS,
    Action,
    Commodity,
    Link,
    Node,
    Signature,
    Workload,
    make_workload,
    workload_params,
)


def test_make_workload__every_builtin_builds_with_its_defaults():
    # The paper's and the spec's workloads are there; a new one is not a failure.
    spec = {"work_reuse", "successor", "separation", "boundary", "mixed", "rag", "moe"}
    assert spec | {"agentic", "multihop"} <= set(WORKLOADS)
    for name in WORKLOADS:
        wl = make_workload(name)
        assert wl.name == name and wl.lambda_ref > 0 and wl.horizon == 600
        assert dict(wl.params) == {k: p.default for k, p in workload_params(name).items()}


def test_mixed__graph_and_defaults_follow_spec_section_2():
    wl = make_workload("mixed")
    ix = wl.index
    assert [n.name for n in wl.nodes] == [
        "gw",
        "ret0",
        "ret1",
        "gen0",
        "gen1",
        "moe0",
        "tool0",
        "ver0",
    ]
    assert ix.mu.tolist() == [0, 2, 2, 2, 2, 2, 2, 2]
    links = {(wl.nodes[x.src].name, wl.nodes[x.dst].name) for x in wl.links}
    assert ("ver0", "gen0") in links and ("gen1", "gen0") in links and len(links) == 21
    assert {x.capacity for x in wl.links} == {10} and {x.bandwidth for x in wl.links} == {4.0}
    # 3 + 2 + 3 stages, Z = 8 state types each.
    assert ix.num_commodities == 64 and wl.replicas == 2
    sizes = {s.kind: s.size for s in wl.signatures}
    assert sizes == {"ctx": 1, "kv_rag": 2, "expert": 3, "kv_agent": 2, "tool": 1}
    # Budgets are beta * B_i^max with beta = 0.25: ret 8 * 1, gen 8 * (2 + 2), moe 8 * 3,
    # tool 8 * 1; the ingress and the verifier hold nothing.
    assert ix.max_budget.tolist() == [0, 8, 8, 32, 32, 24, 8, 0]
    assert ix.budget.tolist() == [0, 2, 2, 8, 8, 6, 2, 0]
    # Family shares 0.4 / 0.3 / 0.3 times Zipf(1.0) over 8 state types.
    zipf = 1 / np.arange(1, 9)
    zipf /= zipf.sum()
    shares = dict(
        zip([wl.commodities[c].name for _, c, _ in wl.arrival_mix], ix.arrival_share, strict=True)
    )
    assert shares["rag/retrieve/z0"] == pytest.approx(0.4 * zipf[0])
    assert shares["agentic/plan/z7"] == pytest.approx(0.3 * zipf[7])
    # Penalties in units of penalty_scale = 0.02: p(hit) = l - eta v = 1 - 0.5, p(miss) = K.
    generate = next(
        a
        for a, act in enumerate(wl.actions)
        if wl.commodities[act.commodity].name == "rag/generate/z0"
    )
    assert ix.penalty[1, generate] == pytest.approx(0.04 * 0.5)
    assert ix.penalty[0, generate] == pytest.approx(0.04 * 4)
    assert ix.work[:, generate].tolist() == [4.0, 1.0]
    # Transition noise eps = 0.1 mixes the verify law with the uniform law on {verify, exit}.
    verify = wl.commodity_id("rag/verify/z0")
    assert ix.successor_law[1, generate, verify] == pytest.approx(0.9 * 0.1 + 0.05)
    assert ix.successor_law[0, generate, verify] == pytest.approx(0.9 * 0.5 + 0.05)
    assert wl.migration_cost == pytest.approx(0.08) and wl.theta == pytest.approx(4e-4)


def test_mixed__admissibility_routes_only_toward_servers():
    wl = make_workload("mixed")
    ix = wl.index
    for r in range(ix.num_routes):
        dst = ix.link_dst[ix.route_link[r]]
        assert ix.serves[dst, ix.route_commodity[r]]
    gen0, gen1, ver0 = (wl.node_id(n) for n in ("gen0", "gen1", "ver0"))
    verify = wl.commodity_id("rag/verify/z0")
    # A verify unit appears at a generator and may only travel to the verifier.
    assert ix.pair_of[gen0, verify] >= 0 and not ix.serves[gen0, verify]
    assert ix.pair_of[ver0, verify] >= 0
    plan = wl.commodity_id("agentic/plan/z0")
    assert ix.pair_of[ver0, plan] >= 0  # rethink appears at the verifier
    assert ix.pair_of[gen1, plan] >= 0


@pytest.mark.parametrize(
    ("name", "field", "value", "message"),
    [
        ("mixed", "load", -0.1, r"load must be in \[0, 10\], got -0.1"),
        ("mixed", "beta", 0.0, r"beta must be in \(0, 1\], got 0"),
        ("mixed", "Z", 2.5, r"Z must be an integer in \[1, 256\], got 2.5"),
        ("mixed", "eps", float("nan"), r"eps must be finite"),
        ("mixed", "K", "4", r"K must be a number in \[1, 1e\+06\], got '4'"),
        ("work_reuse", "kappa_w", 0.5, r"kappa_w must be in \[1, 1e\+06\], got 0.5"),
        ("successor", "pi_h", 1.5, r"pi_h must be in \[0, 1\], got 1.5"),
    ],
)
def test_make_workload__out_of_range_override_names_field_and_range(name, field, value, message):
    with pytest.raises(ValueError, match=message):
        make_workload(name, **{field: value})


def test_make_workload__unknown_names_list_what_is_allowed():
    with pytest.raises(ValueError, match=r"unknown workload 'nope'; choose one of"):
        make_workload("nope")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['kappa'\].*allowed:.*kappa_w"):
        make_workload("work_reuse", kappa=2)


def test_make_workload__overrides_reach_the_network():
    wl = make_workload("mixed", beta=0.5, K=8, mu=3, link_capacity=4, skew=0.0, Z=4)
    ix = wl.index
    assert ix.budget.tolist() == [0, 2, 2, 8, 8, 6, 2, 0]  # 0.5 * B^max with Z = 4
    assert set(ix.mu.tolist()) == {0.0, 3.0} and set(ix.link_capacity.tolist()) == {4}
    assert ix.work[0].max() == 8.0
    assert np.allclose(ix.arrival_share[:4], 0.4 / 4)  # skew 0: uniform state types
    single = make_workload("moe")
    assert {single.commodities[c].family for _, c, _ in single.arrival_mix} == {"moe"}


def test_workload__is_frozen():
    wl = make_workload("work_reuse")
    with pytest.raises(AttributeError):
        wl.load = 0.3  # type: ignore[misc]
    with pytest.raises(ValueError):
        wl.index.mu[0] = 3.0


def _tiny(**changes) -> dict:
    spec = dict(
        name="tiny",
        nodes=(Node("a", "server", mu=1.0, budget=1.0), Node("b", "server", mu=1.0)),
        links=(Link(0, 1, capacity=2),),
        commodities=(Commodity("c0"), Commodity("c1")),
        signatures=(Signature("s", 1.0),),
        actions=(
            Action(
                node=0,
                commodity=0,
                signature=0,
                successors_hit=((1, 0.5),),
                successors_miss=((1, 1.0),),
            ),
            Action(node=1, commodity=1),
        ),
        arrival_mix=((0, 0, 1.0),),
    )
    spec.update(changes)
    return spec


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"links": (Link(0, 1, capacity=-1),)}, r"links\[0\].capacity: must be >= 0"),
        ({"links": (Link(0, 5, capacity=1),)}, r"links\[0\].dst: must be <= 1"),
        ({"links": ()}, r"commodity 'c1' appears at node 'a'.*no link"),
        (
            {
                "actions": (
                    Action(node=0, commodity=0, successors_hit=((1, 0.7), (0, 0.6))),
                    Action(node=1, commodity=1),
                )
            },
            r"actions\[0\].successors_hit: .*sum to at most 1",
        ),
        (
            {"actions": (Action(node=0, commodity=0, work_hit=-1.0), Action(node=1, commodity=1))},
            r"actions\[0\].work_hit: must be >= 0",
        ),
        ({"arrival_mix": ((0, 0, 0.5),)}, r"arrival_mix: shares must sum to 1"),
        (
            {"nodes": (Node("a", "gpu", mu=1.0), Node("b", "server", mu=1.0))},
            r"nodes\[0\].role: must be one of",
        ),
        ({"signatures": (Signature("s", 0.0),)}, r"signatures\[0\].size: must be > 0"),
        ({"initial_memory": (((1, 0),),)}, r"initial_memory\[0\]\[0\]: no action of the node"),
    ],
)
def test_workload__invalid_description_raises_with_its_path(changes, message):
    with pytest.raises(ValueError, match=message):
        Workload(**_tiny(**changes))


def test_workload__hand_built_network_builds_and_normalizes_load():
    wl = Workload(**_tiny(load=0.5))
    # Node b serves c1 (work 1, mu 1): with all hits half the requests need b -> 2.
    assert wl.lambda_ref == pytest.approx(1.0)  # node a: one unit per slot
    assert wl.total_rate == pytest.approx(0.5)
    assert wl.with_load(0.8).total_rate == pytest.approx(0.8)
