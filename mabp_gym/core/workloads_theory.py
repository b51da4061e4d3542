"""The theory workloads: the paper's four small instances with known capacities.

``work_reuse`` (Prop. 1), ``successor`` (Thm. 2 / Cor. 1), ``separation`` (Prop. 3) and
``boundary`` (an enumerable occupation-measure bound). Their parameters are registered in
:mod:`mabp_gym.core.workloads`.
"""

from __future__ import annotations

from typing import Any

from mabp_gym.core.workload import Action, Commodity, Link, Node, Signature, Workload
from mabp_gym.core.workloads_parts import _budgets, _costs, _primitive


def work_reuse(p: dict[str, Any]) -> Workload:
    """Paper Prop. 1: memory that cuts work enlarges capacity.

    One server with ``mu = kappa_w``; a unit needs ``kappa_w`` work on a miss and 1 on a hit;
    one object (size 1) that fits the budget. Capacities: no-memory 1, all-hit
    ``floor(kappa_w)`` requests per slot (defaults: 1 and 4), so ``load = 0.9`` is ``0.9
    floor(kappa_w)``. Prop. 1's ``kappa_w`` holds for whole-number ``kappa_w``: units are
    whole, so at a fractional ``kappa_w`` a slot serves ``floor(kappa_w)`` hits, and every
    capacity LP says so (2 at 2.5).
    """
    kappa = p["kappa_w"]
    p = {**p, "K_w": kappa}
    signatures = [Signature("obj", 1.0, "obj")]
    action = _primitive(p, signature=0, hit_law={}, miss_law={}, node=0, commodity=0)
    budget = _budgets(1, [action], signatures, p["beta"])
    return Workload(
        name="work_reuse",
        nodes=(Node("server", "server", mu=kappa, budget=budget[0]),),
        links=(),
        commodities=(Commodity("job", "job", 0, 0),),
        signatures=tuple(signatures),
        actions=(action,),
        arrival_mix=((0, 0, 1.0),),
        load=p["load"],
        replicas=1,
        horizon=p["horizon"],
        **_costs(p),
    )


def successor(p: dict[str, Any]) -> Workload:
    """Paper Thm. 2 / Cor. 1: memory that changes the successor law enlarges capacity.

    Upstream server ``mu_u`` -> verifier ``mu_v``, work 1 everywhere. An upstream completion
    creates a verifier job with probability ``pi_h`` on a miss and ``pi_l`` on a hit.
    Capacities: ``min(mu_u, mu_v / pi_h)`` without memory and ``min(mu_u, mu_v / pi_l)``
    with (defaults 1 and 2 requests per slot), each ``mu`` from 1 up read as the whole units
    it serves a slot, ``floor(mu)`` (``mu_v = 1.5`` verifies one).
    """
    if p["pi_l"] > p["pi_h"]:
        raise ValueError(
            f"pi_l must be <= pi_h (a hit creates no more verifier jobs than a miss: the "
            f"memory that Thm. 2 credits), got pi_l = {p['pi_l']:g} > pi_h = {p['pi_h']:g}"
        )
    if p["link_capacity"] < p["mu_u"]:
        raise ValueError(
            f"link_capacity must be >= mu_u = {p['mu_u']:g} (Cor. 1 assumes the "
            f"upstream-verifier link carries mu_u), got {p['link_capacity']}"
        )
    p = {**p, "K_w": 1.0}
    signatures = [Signature("obj", 1.0, "obj")]
    upstream = _primitive(
        p, signature=0, hit_law={1: p["pi_l"]}, miss_law={1: p["pi_h"]}, node=0, commodity=0
    )
    verify = _primitive(p, signature=-1, hit_law={}, miss_law={}, node=1, commodity=1)
    budget = _budgets(2, [upstream, verify], signatures, p["beta"])
    return Workload(
        name="successor",
        nodes=(
            Node("up", "server", mu=p["mu_u"], budget=budget[0]),
            Node("ver", "verifier", mu=p["mu_v"], budget=budget[1]),
        ),
        links=(Link(0, 1, capacity=p["link_capacity"], cost=0.0, bandwidth=0.0),),
        commodities=(Commodity("job", "job", 0, 0), Commodity("verify", "job", 1, 0)),
        signatures=tuple(signatures),
        actions=(upstream, verify),
        arrival_mix=((0, 0, 1.0),),
        load=p["load"],
        replicas=1,
        horizon=p["horizon"],
        **_costs(p),
    )


def separation(p: dict[str, Any]) -> Workload:
    """Paper Prop. 3, the paired instance: memory-oblivious decisions pay ``(K + 1) / 2``.

    One node, one commodity, two actions with equal work. The node holds one of two objects
    for the whole episode (no generation); the action compatible with it has penalty 1, the
    other ``K`` (unit penalty scale, no reuse credit, no memory costs). Which object is held
    flips with the seed's parity, so a rule that ignores memory pays ``(K + 1) / 2`` per
    request on average over a pair and a memory-aware rule pays 1. Capacity: ``mu`` (1).
    """
    p = {**p, "K_w": 1.0, "penalty_scale": 1.0, "credit": 0.0, "loss": 1.0, "eps": 0.0}
    signatures = [Signature("obj0", 1.0, "obj"), Signature("obj1", 1.0, "obj")]
    actions = [
        _primitive(p, signature=s, hit_law={}, miss_law={}, node=0, commodity=0) for s in (0, 1)
    ]
    actions = [Action(**{**vars(a), "gen_prob": 0.0}) for a in actions]
    return Workload(
        name="separation",
        nodes=(Node("server", "server", mu=p["mu"], budget=1.0),),
        links=(),
        commodities=(Commodity("job", "job", 0, 0),),
        signatures=tuple(signatures),
        actions=tuple(actions),
        arrival_mix=((0, 0, 1.0),),
        load=p["load"],
        replicas=1,
        horizon=p["horizon"],
        eta=0.0,
        initial_memory=(((0, 0),), ((0, 1),)),
        fixed_memory=True,
    )


def boundary(p: dict[str, Any]) -> Workload:
    """A small synthetic network whose occupation-measure bound can be enumerated.

    Ingress ``gw`` feeds two servers ``s0``, ``s1`` (linked both ways); two commodities, two
    signatures with two replicas each (four object identities). Each server fits one object,
    so the all-hit capacity (``2 * mu``, 4) needs the servers to specialize; without
    memory the capacity is ``2 * mu / K_w`` (2). Both for whole ``mu / w``; units are whole,
    so otherwise a slot serves fewer (``mu = 2.5``: 4 all-hit, not 5).
    """
    signatures = [Signature("o0", 1.0, "obj"), Signature("o1", 1.0, "obj")]
    actions = [
        _primitive(p, signature=c, hit_law={}, miss_law={}, node=node, commodity=c)
        for node in (1, 2)
        for c in (0, 1)
    ]
    budget = _budgets(3, actions, signatures, p["beta"])
    link = dict(
        capacity=p["link_capacity"],
        cost=p["link_cost"] * p["penalty_scale"],
        bandwidth=p["bandwidth"],
    )
    return Workload(
        name="boundary",
        nodes=(
            Node("gw", "ingress", mu=0.0),
            Node("s0", "server", p["mu"], budget[1]),
            Node("s1", "server", p["mu"], budget[2]),
        ),
        links=(Link(0, 1, **link), Link(0, 2, **link), Link(1, 2, **link), Link(2, 1, **link)),
        commodities=(Commodity("c0", "c0", 0, 0), Commodity("c1", "c1", 0, 1)),
        signatures=tuple(signatures),
        actions=tuple(actions),
        arrival_mix=((0, 0, p["share0"]), (0, 1, 1.0 - p["share0"])),
        load=p["load"],
        replicas=2,
        horizon=p["horizon"],
        **_costs(p),
    )
