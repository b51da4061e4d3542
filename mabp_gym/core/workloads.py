"""Workload builders (SPEC section 2): one generator per workload, with validated overrides.

``make_workload(name, **overrides)`` builds a frozen :class:`~mabp_gym.core.workload.Workload`.
Each builder declares its parameters (default and allowed range); an unknown or
out-of-range override raises ``ValueError`` naming the field and what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import Action, Commodity, Link, Node, Signature, Workload

Law = dict[int, float]  # successor commodity -> nominal probability (the rest exits)


@dataclass(frozen=True)
class Param:
    """A builder parameter: default, allowed range and meaning."""

    default: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    optional: bool = False  # None allowed (means "derived", see doc)
    doc: str = ""

    def check(self, name: str, value: Any) -> Any:
        if value is None and self.optional:
            return None
        try:
            return check_number(
                value,
                name,
                low=self.low,
                high=self.high,
                low_open=self.low_open,
                integer=self.integer,
            )
        except ValueError as error:
            # Same check, worded with the parameter's whole allowed range.
            what = next(
                (w for w in ("a number", "finite", "an integer") if f"must be {w}" in str(error)),
                "",
            )
            raise ValueError(
                f"{name} must be {what + ' ' if what else ''}{self.describe()}, got {value!r}"
            ) from None

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        right = ")" if self.high is None else "]"
        return f"in {left}{low}, {high}{right}" + (" or None" if self.optional else "")


_COMMON = {
    "load": Param(0.85, 0.0, 10.0, doc="normalized load rho: lambda = rho * lambda_ref * mix"),
    "horizon": Param(600, 1, 10_000_000, integer=True, doc="episode length in slots"),
    "eps": Param(0.0, 0.0, 1.0, doc="transition noise mixed into every successor law"),
    "K": Param(4.0, 1.0, 1e6, doc="noncached factor on quality loss (and work, see K_w)"),
    "K_w": Param(None, 1.0, 1e6, optional=True, doc="noncached factor on work; None: K"),
    "penalty_scale": Param(1.0, 0.0, 1e6, doc="unit of every penalty"),
    "eta": Param(1.0, 0.0, 1e6, doc="weight of the reuse credit"),
    "loss": Param(1.0, 0.0, 1e6, doc="quality loss per unit on a hit"),
    "credit": Param(0.0, 0.0, 1e6, doc="reuse credit v per unit on a hit"),
    "migration_cost": Param(0.0, 0.0, 1e6, doc="penalty per size unit moved"),
    "theta": Param(0.0, 0.0, 1e6, doc="holding penalty per size unit per slot"),
    "omega": Param(0.0, 0.0, 1e6, doc="write penalty per retained generated object"),
}

_SERVICE_GRAPH = {
    **_COMMON,
    "eps": Param(0.10, 0.0, 1.0, doc="transition noise mixed into every successor law"),
    "beta": Param(0.25, 0.0, 1.0, low_open=True, doc="budget fraction of B_i^max"),
    "Z": Param(8, 1, 256, integer=True, doc="state types per family"),
    "skew": Param(1.0, 0.0, 10.0, doc="Zipf skew of the state types"),
    "mu": Param(2.0, 1e-3, 1e6, doc="compute per slot of every worker"),
    "link_capacity": Param(10, 1, 1_000_000, integer=True, doc="units per slot per link"),
    "bandwidth": Param(4.0, 0.0, 1e6, doc="transfer bandwidth, size units per slot"),
    "replicas": Param(2, 1, 64, integer=True, doc="identities per signature network-wide"),
    "penalty_scale": Param(0.04, 0.0, 1e6, doc="unit of every penalty"),
    "credit": Param(0.5, 0.0, 1e6, doc="reuse credit v per unit on a hit"),
    "link_cost": Param(0.1, 0.0, 1e6, doc="penalty d per routed unit"),
    "migration_cost": Param(2.0, 0.0, 1e6, doc="penalty per size unit moved"),
    "theta": Param(0.01, 0.0, 1e6, doc="holding penalty per size unit per slot"),
    "omega": Param(0.05, 0.0, 1e6, doc="write penalty per retained generated object"),
    "gen_prob": Param(1.0, 0.0, 1.0, doc="probability that a completion generates its object"),
    "rethink": Param(0.1, 0.0, 1.0, doc="probability an agentic verify sends back to plan"),
    "verify_rag_miss": Param(0.5, 0.0, 1.0, doc="P(verify) after a RAG generate miss"),
    "verify_rag_hit": Param(0.1, 0.0, 1.0, doc="P(verify) after a RAG generate hit"),
    "verify_moe_miss": Param(0.3, 0.0, 1.0, doc="P(verify) after an expert miss"),
    "verify_moe_hit": Param(0.1, 0.0, 1.0, doc="P(verify) after an expert hit"),
    "verify_agentic_miss": Param(0.6, 0.0, 1.0, doc="P(verify) after a tool miss"),
    "verify_agentic_hit": Param(0.15, 0.0, 1.0, doc="P(verify) after a tool hit"),
}

_MIXED = {
    **_SERVICE_GRAPH,
    "rag_share": Param(0.4, 0.0, 1.0, doc="arrival share of RAG requests"),
    "moe_share": Param(0.3, 0.0, 1.0, doc="arrival share of MoE requests"),
    "agentic_share": Param(0.3, 0.0, 1.0, doc="arrival share of agentic requests"),
    "copies": Param(1, 1, 64, integer=True, doc="copies of the workers behind one gateway"),
}


def noisy_law(hit: Law, miss: Law, eps: float) -> tuple[tuple[tuple[int, float], ...], ...]:
    """Mix each nominal law with the uniform law over the action's outcomes (SPEC 1).

    The support is the union of both laws' outcomes (exit included when either law exits
    with positive probability), so noise makes a memory-shaped law less sharp.
    """
    support = sorted(c for c in set(hit) | set(miss) if hit.get(c, 0) > 0 or miss.get(c, 0) > 0)
    exits = any(1.0 - sum(law.values()) > 1e-12 for law in (hit, miss))
    outcomes = len(support) + int(exits)
    realized = []
    for law in (hit, miss):
        uniform = eps / outcomes if outcomes else 0.0
        realized.append(tuple((c, (1 - eps) * law.get(c, 0.0) + uniform) for c in support))
    return tuple(realized)


def _budgets(
    n_nodes: int, actions: list[Action], signatures: list[Signature], beta: float
) -> list[float]:
    eligible: list[set[int]] = [set() for _ in range(n_nodes)]
    for action in actions:
        if action.signature >= 0:
            eligible[action.node].add(action.signature)
    return [beta * sum(signatures[s].size for s in sigs) for sigs in eligible]


def _primitive(
    p: dict[str, Any],
    *,
    signature: int,
    hit_law: Law,
    miss_law: Law,
    node: int,
    commodity: int,
    work: float = 1.0,
) -> Action:
    """An action whose miss costs ``K_w`` times the work and ``K`` times the loss."""
    scale = p["penalty_scale"]
    k_w = p["K"] if p["K_w"] is None else p["K_w"]
    law_hit, law_miss = noisy_law(hit_law, miss_law, p["eps"])
    if signature < 0:
        return Action(
            node=node,
            commodity=commodity,
            signature=-1,
            work_hit=work,
            work_miss=work,
            loss_hit=p["loss"] * scale,
            loss_miss=p["loss"] * scale,
            credit_hit=0.0,
            successors_hit=law_hit,
            successors_miss=law_miss,
            gen_prob=0.0,
        )
    return Action(
        node=node,
        commodity=commodity,
        signature=signature,
        work_hit=work,
        work_miss=k_w * work,
        loss_hit=p["loss"] * scale,
        loss_miss=p["K"] * p["loss"] * scale,
        credit_hit=p["credit"] * scale,
        successors_hit=law_hit,
        successors_miss=law_miss,
        gen_prob=p.get("gen_prob", 1.0),
    )


def _costs(p: dict[str, Any]) -> dict[str, Any]:
    scale = p["penalty_scale"]
    return {
        "eta": p["eta"],
        "migration_cost": p["migration_cost"] * scale,
        "theta": p["theta"] * scale,
        "omega": p["omega"] * scale,
    }


# -- theory workloads -----------------------------------------------------------------------
def work_reuse(p: dict[str, Any]) -> Workload:
    """Paper Prop. 1: memory that cuts work enlarges capacity.

    One server with ``mu = kappa_w``; a unit needs ``kappa_w`` work on a miss and 1 on a hit;
    one object (size 1) that fits the budget. Capacities: no-memory 1, all-hit ``kappa_w``
    requests per slot (defaults: 1 and 4), so ``load = 0.9`` is ``0.9 kappa_w``. The closed
    form holds in the simulator for whole-number ``kappa_w``: units are whole, so at a
    fractional ``kappa_w`` a slot serves ``floor(kappa_w)`` hits and the exact bound
    (``occupation_bound(workload, exact=True)``) is ``floor(kappa_w)`` (2 at 2.5).
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
    with (defaults 1 and 2 requests per slot).
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
    memory the capacity is ``2 * mu / K_w`` (2).
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


# -- the mixed RAG / MoE / agentic service graph --------------------------------------------
_NODES = (
    ("gw", "ingress"),
    ("ret0", "retriever"),
    ("ret1", "retriever"),
    ("gen0", "generator"),
    ("gen1", "generator"),
    ("moe0", "expert"),
    ("tool0", "tool"),
    ("ver0", "verifier"),
)
_LINKS = (
    ("gw", "ret0"),
    ("gw", "ret1"),
    ("gw", "gen0"),
    ("gw", "gen1"),
    ("gw", "moe0"),
    ("ret0", "gen0"),
    ("ret0", "gen1"),
    ("ret1", "gen0"),
    ("ret1", "gen1"),
    ("gen0", "tool0"),
    ("gen1", "tool0"),
    ("gen0", "ver0"),
    ("gen1", "ver0"),
    ("moe0", "ver0"),
    ("tool0", "ver0"),
    ("ver0", "gen0"),
    ("ver0", "gen1"),
    ("ret0", "ret1"),
    ("ret1", "ret0"),
    ("gen0", "gen1"),
    ("gen1", "gen0"),
)
# Links from one copy of the service graph to the next (``mixed`` with ``copies > 1``).
_CROSS_LINKS = (
    ("ret0", "gen0"),
    ("ret0", "gen1"),
    ("ret1", "gen0"),
    ("ret1", "gen1"),
    ("gen0", "ver0"),
    ("gen1", "ver0"),
    ("moe0", "ver0"),
    ("tool0", "ver0"),
)
# family -> stages as (stage name, serving nodes, object kind, object size or 0)
_FAMILIES = {
    "rag": (
        ("retrieve", ("ret0", "ret1"), "ctx", 1.0),
        ("generate", ("gen0", "gen1"), "kv_rag", 2.0),
        ("verify", ("ver0",), "", 0.0),
    ),
    "moe": (("expert", ("moe0",), "expert", 3.0), ("verify", ("ver0",), "", 0.0)),
    "agentic": (
        ("plan", ("gen0", "gen1"), "kv_agent", 2.0),
        ("tool", ("tool0",), "tool", 1.0),
        ("verify", ("ver0",), "", 0.0),
    ),
}


def _copy_name(node: str, copy: int) -> str:
    """Name of ``node`` in replica ``copy`` of the service graph (copy 0 keeps the name)."""
    return node if copy == 0 else f"{node}.{copy}"


def _service_actions(
    p: dict[str, Any],
    families: list[str],
    z_types: int,
    comm_id: dict[tuple[str, str, int], int],
    sig_id: dict[tuple[str, int], int],
    node_id: dict[str, int],
    copies: int,
) -> list[Action]:
    """Every stage of every family served by each of its servers in each copy, with its
    successor laws (the next stage; verify by hit and miss; agentic's rethink)."""
    verify_law = {
        "rag": (p["verify_rag_hit"], p["verify_rag_miss"]),
        "moe": (p["verify_moe_hit"], p["verify_moe_miss"]),
        "agentic": (p["verify_agentic_hit"], p["verify_agentic_miss"]),
    }
    for family, (hit, miss) in verify_law.items():
        if hit > miss:  # memory would add work: "full" (every action a hit) no longer bounds
            raise ValueError(
                f"verify_{family}_hit must be <= verify_{family}_miss (a hit creates no more "
                f"verification than a miss), got {hit:g} > {miss:g}"
            )
    actions: list[Action] = []
    for family in families:
        stages = _FAMILIES[family]
        for k, (stage, servers, kind, _) in enumerate(stages):
            for z in range(z_types):
                if k + 1 < len(stages):
                    nxt = comm_id[family, stages[k + 1][0], z]
                    if stages[k + 1][0] == "verify":
                        hit_p, miss_p = verify_law[family]
                        hit_law, miss_law = {nxt: hit_p}, {nxt: miss_p}
                    else:
                        hit_law = miss_law = {nxt: 1.0}
                elif family == "agentic":  # rethink: verify sends the request back to plan
                    back = comm_id[family, "plan", z]
                    hit_law = miss_law = {back: p["rethink"]}
                else:
                    hit_law = miss_law = {}
                for copy in range(copies):
                    for server in servers:
                        actions.append(
                            _primitive(
                                p,
                                signature=sig_id[kind, z] if kind else -1,
                                hit_law=hit_law,
                                miss_law=miss_law,
                                node=node_id[_copy_name(server, copy)],
                                commodity=comm_id[family, stage, z],
                            )
                        )
    return actions


def _service_links(p: dict[str, Any], node_id: dict[str, int], copies: int) -> tuple[Link, ...]:
    """The links of each copy, and with several copies a ring of cross links."""
    pairs = [
        (_copy_name(a, j) if a != "gw" else a, _copy_name(b, j))
        for j in range(copies)
        for a, b in _LINKS
    ]
    if copies > 1:
        # A ring of cross links: retrievers feed the next copy's generators and generators
        # the next copy's verifier, so that load can spill over between copies.
        for j in range(copies):
            nxt = (j + 1) % copies
            pairs += [(_copy_name(a, j), _copy_name(b, nxt)) for a, b in _CROSS_LINKS]
    pairs = list(dict.fromkeys(pairs))  # two copies: the ring's two directions coincide
    return tuple(
        Link(
            node_id[a],
            node_id[b],
            capacity=p["link_capacity"],
            cost=p["link_cost"] * p["penalty_scale"],
            bandwidth=p["bandwidth"],
        )
        for a, b in pairs
    )


def _service_graph(
    name: str, p: dict[str, Any], shares: dict[str, float], copies: int = 1
) -> Workload:
    families = [f for f in _FAMILIES if shares.get(f, 0.0) > 0]
    if not families:
        raise ValueError("rag_share, moe_share and agentic_share must not all be 0")
    total_share = sum(shares[f] for f in families)
    # The gateway is shared; every worker exists once per copy, copy 0 first (so that one
    # copy is exactly the single service graph).
    node_list = [_NODES[0]] + [
        (_copy_name(n, j), role) for j in range(copies) for n, role in _NODES[1:]
    ]
    node_id = {n: i for i, (n, _) in enumerate(node_list)}
    z_types = p["Z"]
    zipf = np.arange(1, z_types + 1, dtype=float) ** -p["skew"]
    zipf /= zipf.sum()

    commodities: list[Commodity] = []
    comm_id: dict[tuple[str, str, int], int] = {}
    signatures: list[Signature] = []
    sig_id: dict[tuple[str, int], int] = {}
    for family in families:
        for k, (stage, _, kind, size) in enumerate(_FAMILIES[family]):
            for z in range(z_types):
                comm_id[family, stage, z] = len(commodities)
                commodities.append(Commodity(f"{family}/{stage}/z{z}", family, k, z))
                if kind and (kind, z) not in sig_id:
                    sig_id[kind, z] = len(signatures)
                    signatures.append(Signature(f"{kind}[{z}]", size, kind))

    actions = _service_actions(p, families, z_types, comm_id, sig_id, node_id, copies)
    budgets = _budgets(len(node_list), actions, signatures, p["beta"])
    nodes = tuple(
        Node(n, role, mu=0.0 if role == "ingress" else p["mu"], budget=budgets[i])
        for i, (n, role) in enumerate(node_list)
    )
    links = _service_links(p, node_id, copies)
    arrival_mix = tuple(
        (
            node_id["gw"],
            comm_id[family, _FAMILIES[family][0][0], z],
            shares[family] / total_share * float(zipf[z]),
        )
        for family in families
        for z in range(z_types)
    )
    return Workload(
        name=name,
        nodes=nodes,
        links=links,
        commodities=tuple(commodities),
        signatures=tuple(signatures),
        actions=tuple(actions),
        arrival_mix=arrival_mix,
        load=p["load"],
        replicas=p["replicas"] * copies,
        horizon=p["horizon"],
        **_costs(p),
    )


def mixed(p: dict[str, Any]) -> Workload:
    """The mixed RAG / MoE / agentic service graph (SPEC 2; the default workload).

    Nodes ``gw`` (ingress), ``ret0``, ``ret1``, ``gen0``, ``gen1``, ``moe0``, ``tool0``,
    ``ver0``; families RAG / MoE / agentic with shares 0.4 / 0.3 / 0.3 and ``Z = 8`` Zipf
    state types. At the defaults the capacity LP gives: all-hit ``lambda_ref = 5.650``
    requests per slot, no-memory ``1.375`` (0.243 of ``lambda_ref``).

    ``copies=k`` (a generated large network, for studies of scale) replicates the seven
    workers ``k`` times behind the one gateway: copy ``j`` names its nodes ``ret0.j``, ...
    (copy 0 keeps the plain names, and ``copies=1`` is exactly the graph above), every copy
    has the 21 links of the single graph, the gateway links to every copy, and a ring of
    cross links joins copy ``j`` to copy ``j + 1 (mod k)`` (``ret0``, ``ret1`` -> ``gen0``,
    ``gen1``; ``gen0``, ``gen1``, ``moe0``, ``tool0`` -> ``ver0``). Commodities and
    signatures are shared and ``replicas`` counts identities per copy (the network holds
    ``k * replicas``). The capacities scale with the copies: all-hit ``5.650 k``,
    no-memory ``1.375 k`` requests per slot (the LP; checked for ``k = 2, 4`` in the tests).
    """
    shares = {"rag": p["rag_share"], "moe": p["moe_share"], "agentic": p["agentic_share"]}
    return _service_graph("mixed", p, shares, copies=p["copies"])


def rag(p: dict[str, Any]) -> Workload:
    """The mixed graph with RAG requests only (retrieve -> generate -> [verify]).

    Capacities at the defaults: all-hit 4.000, no-memory 1.000 requests per slot.
    """
    return _service_graph("rag", p, {"rag": 1.0})


def moe(p: dict[str, Any]) -> Workload:
    """The mixed graph with MoE requests only (expert -> [verify]).

    Capacities at the defaults: all-hit 2.000, no-memory 0.500 requests per slot.
    """
    return _service_graph("moe", p, {"moe": 1.0})


def agentic(p: dict[str, Any]) -> Workload:
    """The mixed graph with agentic requests only (plan -> tool -> [verify] -> rethink).

    Capacities at the defaults: all-hit 1.948, no-memory 0.459 requests per slot.
    """
    return _service_graph("agentic", p, {"agentic": 1.0})


# -- generated multihop networks ------------------------------------------------------------
def barabasi_albert(nodes: int, attach: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Undirected edges ``(u, v)``, ``u < v``, of a Barabasi-Albert preferential-attachment graph.

    Starts from a star of ``attach + 1`` nodes; every later node links to ``attach``
    distinct earlier nodes drawn with probability proportional to their degree. The graph
    is connected, and only ``rng`` draws.
    """
    if nodes < attach + 1:
        raise ValueError(f"nodes must be >= attach + 1 = {attach + 1}, got {nodes}")
    edges = [(0, v) for v in range(1, attach + 1)]
    degree = np.zeros(nodes)
    degree[0] = attach
    degree[1 : attach + 1] = 1
    for v in range(attach + 1, nodes):
        weights = degree[:v] / degree[:v].sum()
        targets = rng.choice(v, size=attach, replace=False, p=weights)
        for u in sorted(targets.tolist()):
            edges.append((u, v))
            degree[u] += 1
        degree[v] = attach
    return edges


def multihop(p: dict[str, Any]) -> Workload:
    """A random multihop service network: requests cross a Barabasi-Albert graph to hubs.

    For studies of scale. The graph has ``nodes`` nodes grown by preferential attachment
    (``attach`` links per new node, drawn from ``numpy.random.default_rng(seed)``), each
    undirected edge a pair of directed links of capacity ``link_capacity``. The
    ``servers`` nodes of highest degree (ties to the lower index; default ``nodes // 10``,
    at least 1) are hubs with compute ``mu`` that serve every one of ``classes`` request
    classes; every other node is a relay (``mu = 0``) that forwards any class. Requests of
    every class enter at every relay with equal shares and leave when served.

    With ``memory=1`` class ``c`` has one object signature (size 1): a hit takes work 1, a
    miss ``K_w`` (default ``K``) and ``K`` times the loss; a hub holds ``beta * classes``
    objects, the network ``servers`` identities of each signature, and hubs next to each
    other can transfer objects (``bandwidth``). With ``memory=0`` every unit takes work 1.

    Capacities: ``servers * mu`` requests per slot all-hit (``memory=1``) or with
    ``memory=0``, and ``servers * mu / K_w`` without memory (``memory=1``), as long as the
    links do not bind; the capacity LP gives ``lambda_ref`` (at the defaults, 50 nodes, 5
    hubs: 10.0, and 2.5 without memory; checked in the tests). The network is a function
    of its parameters alone: the same ``seed`` gives the same graph.
    """
    n, m, classes = p["nodes"], p["attach"], p["classes"]
    if n * classes > MAX_PAIRS:
        raise ValueError(
            f"nodes * classes must be at most {MAX_PAIRS:,} (the queues and the load scale's LP "
            f"grow with it: 1,000 nodes x 16 classes took 30 s to build), got {n} x {classes} "
            f"= {n * classes:,}"
        )
    if n < m + 2:
        raise ValueError(f"nodes must be >= attach + 2 = {m + 2} (a hub and a relay), got {n}")
    rng = np.random.default_rng(p["seed"])
    edges = barabasi_albert(n, m, rng)
    degree = np.zeros(n, dtype=np.int64)
    for u, v in edges:
        degree[u] += 1
        degree[v] += 1
    hubs_count = max(1, n // 10) if p["servers"] is None else p["servers"]
    if hubs_count >= n:
        raise ValueError(f"servers must be < nodes = {n}, got {hubs_count}")
    hubs = sorted(np.argsort(-degree, kind="stable")[:hubs_count].tolist())
    hub_set = set(hubs)
    memory = bool(p["memory"])
    commodities = tuple(Commodity(f"class{c}", "request", 0, c) for c in range(classes))
    signatures = [Signature(f"obj{c}", 1.0, "obj") for c in range(classes)] if memory else []
    actions = [
        _primitive(p, signature=c if memory else -1, hit_law={}, miss_law={}, node=i, commodity=c)
        for i in hubs
        for c in range(classes)
    ]
    budgets = _budgets(n, actions, signatures, p["beta"]) if memory else [0.0] * n
    nodes = tuple(
        Node(
            f"n{i}",
            "server" if i in hub_set else "ingress",
            mu=p["mu"] if i in hub_set else 0.0,
            budget=budgets[i],
        )
        for i in range(n)
    )
    link = dict(
        capacity=p["link_capacity"],
        cost=p["link_cost"] * p["penalty_scale"],
        bandwidth=p["bandwidth"] if memory else 0.0,
    )
    links = tuple(Link(a, b, **link) for u, v in edges for a, b in ((u, v), (v, u)))
    relays = [i for i in range(n) if i not in hub_set]
    share = 1.0 / (len(relays) * classes)
    return Workload(
        name="multihop",
        nodes=nodes,
        links=links,
        commodities=commodities,
        signatures=tuple(signatures),
        actions=tuple(actions),
        arrival_mix=tuple((i, c, share) for i in relays for c in range(classes)),
        transit=tuple((i, c) for i in relays for c in range(classes)),
        load=p["load"],
        replicas=max(1, len(hubs)),
        horizon=p["horizon"],
        **_costs(p),
    )


MAX_NODES = 5_000
MAX_PAIRS = 10_000
"""The largest ``nodes * classes`` of a generated network (its queues number about that)."""
"""The largest generated network (``multihop``'s ``nodes``): memory is linear in its size (sparse
LP, index arrays), the load scale's LP solve superlinear (tests/test_generated_workloads.py
builds it within a memory cap)."""

_MULTIHOP = {
    **{
        k: v
        for k, v in _SERVICE_GRAPH.items()
        if k not in ("Z", "skew", "replicas", "rethink") and not k.startswith("verify_")
    },
    "eps": Param(0.0, 0.0, 1.0, doc="transition noise (requests leave when served)"),
    "beta": Param(0.5, 0.0, 1.0, low_open=True, doc="hub memory as a fraction of classes"),
    "mu": Param(2.0, 1e-3, 1e6, doc="compute per slot of every hub"),
    "link_capacity": Param(2, 1, 1_000_000, integer=True, doc="units per slot per link"),
    "bandwidth": Param(1.0, 0.0, 1e6, doc="transfer bandwidth, size units per slot"),
    "nodes": Param(
        50,
        4,
        MAX_NODES,
        integer=True,
        doc="nodes of the graph (5,000 builds in about 20 s and 0.3 GB; the fluid LP of the "
        "load scale dominates)",
    ),
    "attach": Param(2, 1, 20, integer=True, doc="links of every new node (Barabasi-Albert m)"),
    "classes": Param(2, 1, 256, integer=True, doc="request classes"),
    "servers": Param(
        None,
        1,
        MAX_NODES,
        integer=True,
        optional=True,
        doc="hubs (highest degree) that serve; None: nodes // 10, at least 1",
    ),
    "memory": Param(1, 0, 1, integer=True, doc="1: objects make hits; 0: no signatures"),
    "seed": Param(0, 0, 2**32 - 1, integer=True, doc="seed of the random graph"),
}


_THEORY = {
    **{k: v for k, v in _COMMON.items() if k != "K_w"},
    "beta": Param(
        1.0,
        0.0,
        1.0,
        low_open=True,
        doc="budget fraction of B_i^max (below 1 the single object no longer fits)",
    ),
}

BUILDERS: dict[str, tuple[Callable[[dict[str, Any]], Workload], dict[str, Param]]] = {
    "work_reuse": (
        work_reuse,
        {
            **_THEORY,
            "load": Param(0.9, 0.0, 10.0, doc="normalized load (of kappa_w)"),
            "kappa_w": Param(4.0, 1.0, 1e6, doc="miss work and compute capacity"),
        },
    ),
    "successor": (
        successor,
        {
            **_THEORY,
            "load": Param(0.9, 0.0, 10.0, doc="normalized load"),
            "mu_u": Param(2.0, 1e-3, 1e6, doc="upstream compute per slot"),
            "mu_v": Param(1.0, 1e-3, 1e6, doc="verifier compute per slot"),
            "pi_h": Param(1.0, 0.0, 1.0, doc="P(verifier job) after a miss"),
            "pi_l": Param(0.0, 0.0, 1.0, doc="P(verifier job) after a hit"),
            "link_capacity": Param(10, 1, 1_000_000, integer=True, doc="upstream-verifier link"),
        },
    ),
    "separation": (
        separation,
        {
            "load": Param(0.5, 0.0, 10.0, doc="normalized load (of mu)"),
            "horizon": _COMMON["horizon"],
            "K": _COMMON["K"],
            "mu": Param(1.0, 1e-3, 1e6, doc="compute per slot"),
        },
    ),
    "boundary": (
        boundary,
        {
            **_COMMON,
            "K": Param(2.0, 1.0, 1e6, doc="noncached factor"),
            "beta": Param(0.5, 0.0, 1.0, low_open=True, doc="budget fraction of B_i^max"),
            "mu": Param(2.0, 1e-3, 1e6, doc="compute per slot of each server"),
            "share0": Param(0.5, 0.0, 1.0, doc="arrival share of commodity c0"),
            "link_capacity": Param(10, 1, 1_000_000, integer=True, doc="units per slot per link"),
            "bandwidth": Param(1.0, 0.0, 1e6, doc="transfer bandwidth"),
            "link_cost": Param(0.1, 0.0, 1e6, doc="penalty d per routed unit"),
            "credit": Param(0.5, 0.0, 1e6, doc="reuse credit v per unit on a hit"),
            "penalty_scale": Param(0.02, 0.0, 1e6, doc="unit of every penalty"),
            "migration_cost": Param(2.0, 0.0, 1e6, doc="penalty per size unit moved"),
            "theta": Param(0.01, 0.0, 1e6, doc="holding penalty per size unit per slot"),
            "omega": Param(0.05, 0.0, 1e6, doc="write penalty per retained generated object"),
        },
    ),
    "mixed": (mixed, _MIXED),
    "rag": (rag, _SERVICE_GRAPH),
    "moe": (moe, _SERVICE_GRAPH),
    "agentic": (agentic, _SERVICE_GRAPH),
    "multihop": (multihop, _MULTIHOP),
}
WORKLOADS = tuple(BUILDERS)


def is_workload_file(name: str) -> bool:
    """Whether ``name`` names a workload file rather than a built-in workload."""
    return isinstance(name, str) and name.lower().endswith((".json", ".yaml", ".yml"))


def workload_params(name: str) -> dict[str, Param]:
    """The parameters ``make_workload(name, ...)`` accepts, with defaults and ranges."""
    if name not in BUILDERS:
        raise ValueError(f"unknown workload {name!r}; choose one of {WORKLOADS}")
    return dict(BUILDERS[name][1])


def make_workload(name: str, **overrides: Any) -> Workload:
    """Build the workload ``name`` with the SPEC defaults and validated ``overrides``.

    ``name`` may also be ``"file"`` with ``path=...``, or the path of a workload file
    itself (``.json``, ``.yaml``); a file accepts the overrides ``load`` and ``horizon``.

    Raises:
        ValueError: unknown workload, unknown parameter, or a value out of its range
            (the message names the field and the allowed range).
    """
    if name == "file" or is_workload_file(name):
        from mabp_gym.core.fileformat import load_workload

        path = overrides.pop("path", None) if name == "file" else name
        if path is None:
            raise ValueError("make_workload('file', path=...) needs the path of a workload file")
        return load_workload(path, **overrides)
    params = workload_params(name)
    unknown = sorted(set(overrides) - set(params))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for workload {name!r}; allowed: {sorted(params)}"
        )
    values = {
        key: param.check(key, overrides.get(key, param.default)) for key, param in params.items()
    }
    builder = BUILDERS[name][0]
    workload = builder(values)
    from dataclasses import replace

    return replace(workload, params=tuple(sorted(values.items())))
