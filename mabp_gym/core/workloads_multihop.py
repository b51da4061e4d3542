"""The generated multihop network: a Barabasi-Albert graph whose hubs serve every class.

``barabasi_albert`` draws the graph, ``multihop`` builds the workload on it; ``MAX_NODES``
and ``MAX_PAIRS`` bound its size. Its parameters are registered in
:mod:`mabp_gym.core.workloads`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mabp_gym.core.workload import Commodity, Link, Node, Signature, Workload
from mabp_gym.core.workloads_parts import _budgets, _costs, _primitive

MAX_NODES = 5_000
"""The largest generated network (``multihop``'s ``nodes``): memory is linear in its size (sparse
LP, index arrays), the load scale's LP solve superlinear (tests/test_generated_workloads.py
builds it within a memory cap)."""
MAX_PAIRS = 10_000
"""The largest ``nodes * classes`` of a generated network (its queues number about that)."""


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


def _serves(p: dict[str, Any], hub: int, commodity: int, hubs: list[int]) -> bool:
    """Whether the ``hub``-th hub serves ``commodity``: always, or with ``dedicated`` only
    the hub ``commodity mod servers``."""
    return not p["dedicated"] or commodity % len(hubs) == hub


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
    With ``dedicated=1`` class ``c`` is served at the hub ``c mod servers`` alone and the
    other hubs relay it: with ``memory=0`` the classic multi-commodity packet network, one
    destination per class, that backpressure routing was made for.

    Capacities: ``servers * mu`` requests per slot all-hit (``memory=1``) or with
    ``memory=0``, and ``servers * mu / K_w`` without memory (``memory=1``), as long as the
    links do not bind and ``mu / w`` is whole (units are whole: ``mu = 1.5`` serves one of
    work 1); the capacity LP gives ``lambda_ref`` (at the defaults, 50 nodes, 5
    hubs: 10.0, and 2.5 without memory; checked in the tests; with ``dedicated=1`` a class
    has its own hub's ``mu`` alone). The network is a function
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
    # Which hubs serve which classes: every hub every class, or (``dedicated``) class c at
    # hub c mod servers alone, the other hubs relaying it.
    serves = [(i, c) for k, i in enumerate(hubs) for c in range(classes) if _serves(p, k, c, hubs)]
    actions = [
        _primitive(p, signature=c if memory else -1, hit_law={}, miss_law={}, node=i, commodity=c)
        for i, c in serves
    ]
    served = set(serves)
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
        transit=tuple((i, c) for i in relays for c in range(classes))
        + tuple((i, c) for i in hubs for c in range(classes) if (i, c) not in served),
        load=p["load"],
        replicas=max(1, len(hubs)),
        horizon=p["horizon"],
        **_costs(p),
    )
