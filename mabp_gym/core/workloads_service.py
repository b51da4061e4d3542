"""The mixed RAG / MoE / agentic service graph: its node, link and family tables and builders.

``mixed`` (all three families, optionally ``copies`` of the workers behind one gateway) and
the single-family graphs ``rag``, ``moe`` and ``agentic``. Their parameters are registered
in :mod:`mabp_gym.core.workloads`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mabp_gym.core.workload import Action, Commodity, Link, Node, Signature, Workload
from mabp_gym.core.workloads_parts import _budgets, _costs, _primitive

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
