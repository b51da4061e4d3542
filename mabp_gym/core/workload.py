"""The frozen, validated description of a stateful foundation-model service network.

A :class:`Workload` is the graph (nodes, links), the commodities, the object signatures,
the actions with their memory-dependent primitives and the arrival mix. It is built once,
validated, and then only read: the simulator, the projection, the capacity LP, the
Gymnasium adapter and every policy work from the same index arrays that
:class:`Workload` derives at construction (``workload.index``).

Conventions (SPEC section 1):

* Memory enters only through the *hit bit* of an action: an action with a signature is
  memory-assisted when its node holds a replica of that signature.
* Primitive arrays are indexed ``[hit, action]`` with ``hit = 0`` for a miss, ``1`` for a hit.
* Penalties are absolute (already multiplied by the workload's penalty scale);
  ``p = loss - eta * credit``.
* Admissibility is derived, never listed: ``(i, c)`` is admissible when ``i`` receives
  arrivals of ``c``, when an action at ``i`` can create ``c`` as a successor (the
  appearance nodes), or when ``i`` serves ``c``. A unit of ``c`` may be routed along
  ``(i, j)`` only when ``j`` serves ``c``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mabp_gym.core.fluid import fluid_capacity
from mabp_gym.core.index import FastLists, WorkloadIndex
from mabp_gym.core.validate import check_number

ROLES = ("ingress", "retriever", "generator", "expert", "tool", "verifier", "server")
EXIT = -1
FILE_FORMAT = "mabp-gym.workload"
"""The ``format`` field of a workload file (:mod:`mabp_gym.core.fileformat`)."""
FILE_VERSION = 1
"""Successor target meaning "the request leaves the network"."""


@dataclass(frozen=True)
class Node:
    """A worker (or the ingress) of the service graph."""

    name: str
    role: str
    mu: float  # compute (work units) per slot
    budget: float = 0.0  # memory budget in size units


@dataclass(frozen=True)
class Link:
    """A directed link ``src -> dst``."""

    src: int
    dst: int
    capacity: int  # routed units per slot (C_ij)
    cost: float = 0.0  # penalty per routed unit (d_ij)
    bandwidth: float = 0.0  # transfer bandwidth, object size units per slot


@dataclass(frozen=True)
class Commodity:
    """A commodity ``c = (family, stage, state_type)``."""

    name: str
    family: str = ""
    stage: int = 0
    state_type: int = 0


@dataclass(frozen=True)
class Signature:
    """A content signature; the network holds at most ``replicas`` identities of it."""

    name: str
    size: float
    kind: str = ""


@dataclass(frozen=True)
class Action:
    """A service action: node ``node`` consumes one unit of ``commodity``.

    ``signature`` is the compatible object signature (``-1``: never memory-assisted).
    Successor laws list ``(commodity, probability)``; the remaining mass exits. A completed
    unit of an action with a signature generates a replica of it (SPEC 1, step 6) with
    probability ``gen_prob``.
    """

    node: int
    commodity: int
    signature: int = -1
    work_hit: float = 1.0
    work_miss: float = 1.0
    loss_hit: float = 0.0
    loss_miss: float = 0.0
    credit_hit: float = 0.0
    successors_hit: tuple[tuple[int, float], ...] = ()
    successors_miss: tuple[tuple[int, float], ...] = ()
    gen_prob: float = 1.0


@dataclass(frozen=True)
class Workload:
    """A frozen, validated SFMSN description (SPEC sections 1 and 2).

    Construct through :func:`mabp_gym.make_workload` for the built-in workloads, or directly
    for a hand-made network. ``lambda_ref`` (the all-hit fluid capacity, requests per slot)
    is computed by the capacity LP when left ``None``. Arrival rates are
    ``load * lambda_ref * share`` per arrival pair.

    ``transit`` lists ``(node, commodity)`` pairs where units may wait and be forwarded
    without being served there (the relays of a multihop network); everywhere else a unit
    of ``c`` is routed only toward a node that serves ``c``.

    ``initial_memory`` lists alternatives of ``(node, signature)`` placements; an episode
    seeded with ``seed`` starts from alternative ``seed % len(initial_memory)`` (the paired
    instances of the ``separation`` workload flip by seed parity). With ``fixed_memory``
    the initial memory is held for the whole episode: there are no transfer or retain
    candidates and generated objects are discarded.
    """

    name: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    commodities: tuple[Commodity, ...]
    signatures: tuple[Signature, ...]
    actions: tuple[Action, ...]
    arrival_mix: tuple[tuple[int, int, float], ...]  # (node, commodity, share)
    load: float = 0.85
    lambda_ref: float | None = None
    replicas: int = 1
    eta: float = 1.0
    migration_cost: float = 0.0  # per size unit moved (kappa = migration_cost * b_m)
    theta: float = 0.0  # holding cost per size unit held per slot
    omega: float = 0.0  # write cost per generated object retained
    initial_memory: tuple[tuple[tuple[int, int], ...], ...] = ()
    fixed_memory: bool = False  # memory stays as initialized: no transfers, no retention
    transit: tuple[tuple[int, int], ...] = ()  # (node, commodity) pairs that relay units
    horizon: int = 600
    params: tuple[tuple[str, Any], ...] = ()  # builder parameters, for the record
    index: WorkloadIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in (
            "nodes",
            "links",
            "commodities",
            "signatures",
            "actions",
            "arrival_mix",
            "initial_memory",
            "transit",
            "params",
        ):
            object.__setattr__(self, name, _freeze(getattr(self, name)))
        self._validate()
        object.__setattr__(self, "index", _build_index(self))
        if self.lambda_ref is None:
            object.__setattr__(
                self, "lambda_ref", fluid_capacity(self.index, hit=True, name=self.name)
            )
        _check_number_at("lambda_ref", self.lambda_ref, low=0.0)

    # -- derived quantities -------------------------------------------------------------
    @property
    def arrival_rates(self) -> np.ndarray:
        """Poisson rate per arrival pair, ``(Z,)`` float64 (requests per slot)."""
        assert self.lambda_ref is not None
        return self.load * self.lambda_ref * self.index.arrival_share

    @property
    def total_rate(self) -> float:
        """Total exogenous arrival rate, requests per slot."""
        assert self.lambda_ref is not None
        return float(self.load * self.lambda_ref)

    def node_id(self, name: str) -> int:
        """Index of the node called ``name``."""
        for i, node in enumerate(self.nodes):
            if node.name == name:
                return i
        raise KeyError(f"no node named {name!r}; nodes: {[n.name for n in self.nodes]}")

    def commodity_id(self, name: str) -> int:
        """Index of the commodity called ``name``."""
        for c, commodity in enumerate(self.commodities):
            if commodity.name == name:
                return c
        raise KeyError(f"no commodity named {name!r}")

    def signature_id(self, name: str) -> int:
        """Index of the signature called ``name``."""
        for s, signature in enumerate(self.signatures):
            if signature.name == name:
                return s
        raise KeyError(f"no signature named {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """This workload in the file format (:mod:`mabp_gym.core.fileformat` reads it back to an
        identical simulation)."""
        nodes = [n.name for n in self.nodes]
        comms = [c.name for c in self.commodities]
        sigs = [s.name for s in self.signatures]

        def law(pairs: tuple[tuple[int, float], ...]) -> list[list[Any]]:
            return [[comms[c], p] for c, p in pairs]

        return {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "name": self.name,
            "nodes": [
                {"name": n.name, "role": n.role, "mu": n.mu, "budget": n.budget} for n in self.nodes
            ],
            "links": [
                {
                    "src": nodes[x.src],
                    "dst": nodes[x.dst],
                    "capacity": x.capacity,
                    "cost": x.cost,
                    "bandwidth": x.bandwidth,
                }
                for x in self.links
            ],
            "commodities": [
                {"name": c.name, "family": c.family, "stage": c.stage, "state_type": c.state_type}
                for c in self.commodities
            ],
            "signatures": [
                {"name": s.name, "size": s.size, "kind": s.kind} for s in self.signatures
            ],
            "actions": [
                {
                    "node": nodes[a.node],
                    "commodity": comms[a.commodity],
                    "signature": sigs[a.signature] if a.signature >= 0 else None,
                    "work_hit": a.work_hit,
                    "work_miss": a.work_miss,
                    "loss_hit": a.loss_hit,
                    "loss_miss": a.loss_miss,
                    "credit_hit": a.credit_hit,
                    "gen_prob": a.gen_prob,
                    "successors_hit": law(a.successors_hit),
                    "successors_miss": law(a.successors_miss),
                }
                for a in self.actions
            ],
            "transit": [{"node": nodes[i], "commodity": comms[c]} for i, c in self.transit],
            "arrivals": {
                "mix": [
                    {"node": nodes[i], "commodity": comms[c], "share": share}
                    for i, c, share in self.arrival_mix
                ],
                "load": self.load,
            },
            "costs": {
                "eta": self.eta,
                "migration_cost": self.migration_cost,
                "theta": self.theta,
                "omega": self.omega,
            },
            "memory": {
                "replicas": self.replicas,
                "fixed": self.fixed_memory,
                "initial": [
                    [{"node": nodes[i], "signature": sigs[s]} for i, s in alt]
                    for alt in self.initial_memory
                ],
            },
            "horizon": self.horizon,
        }

    def with_load(self, load: float) -> Workload:
        """The same network at another normalized load (``lambda_ref`` is kept), in [0, 10]
        as everywhere a load is given."""
        from dataclasses import replace

        _check_number_at("load", load, low=0.0, high=10.0)
        return replace(self, load=float(load))

    # -- validation ---------------------------------------------------------------------
    def _validate(self) -> None:
        """Every field checked, in this order; the first violation raises, naming its path."""
        self._validate_network()
        self._validate_actions()
        self._validate_flows()

    def _validate_network(self) -> None:
        """Nodes, links, commodities and signatures."""
        n_nodes, n_comm = len(self.nodes), len(self.commodities)
        if n_nodes == 0:
            _fail("nodes", "at least one node is required")
        if n_comm == 0:
            _fail("commodities", "at least one commodity is required")
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            _fail("nodes", f"node names must be unique, got {names}")
        for i, node in enumerate(self.nodes):
            if node.role not in ROLES:
                _fail(f"nodes[{i}].role", f"must be one of {ROLES}, got {node.role!r}")
            _check_number_at(f"nodes[{i}].mu", node.mu, low=0.0)
            _check_number_at(f"nodes[{i}].budget", node.budget, low=0.0)
        seen_links: set[tuple[int, int]] = set()
        for e, link in enumerate(self.links):
            for end in ("src", "dst"):
                value = getattr(link, end)
                _check_number_at(f"links[{e}].{end}", value, low=0, high=n_nodes - 1, integer=True)
            if link.src == link.dst:
                _fail(
                    f"links[{e}]", f"a link needs two different nodes, got {link.src} -> {link.dst}"
                )
            if (link.src, link.dst) in seen_links:
                _fail(f"links[{e}]", f"duplicate link {link.src} -> {link.dst}")
            seen_links.add((link.src, link.dst))
            _check_number_at(f"links[{e}].capacity", link.capacity, low=0, integer=True)
            _check_number_at(f"links[{e}].cost", link.cost)
            _check_number_at(f"links[{e}].bandwidth", link.bandwidth, low=0.0)
        comm_names = [c.name for c in self.commodities]
        if len(set(comm_names)) != len(comm_names):
            _fail("commodities", "commodity names must be unique")
        sig_names = [s.name for s in self.signatures]
        if len(set(sig_names)) != len(sig_names):
            _fail("signatures", "signature names must be unique")
        for s, signature in enumerate(self.signatures):
            _check_number_at(f"signatures[{s}].size", signature.size, low=0.0, low_open=True)

    def _validate_actions(self) -> None:
        """Each action: its node, commodity and signature, costs and successor laws."""
        n_nodes, n_comm, n_sig = len(self.nodes), len(self.commodities), len(self.signatures)
        served: set[tuple[int, int, int]] = set()
        for a, action in enumerate(self.actions):
            path = f"actions[{a}]"
            _check_number_at(f"{path}.node", action.node, low=0, high=n_nodes - 1, integer=True)
            _check_number_at(
                f"{path}.commodity", action.commodity, low=0, high=n_comm - 1, integer=True
            )
            _check_number_at(
                f"{path}.signature", action.signature, low=-1, high=n_sig - 1, integer=True
            )
            key3 = (action.node, action.commodity, action.signature)
            if key3 in served:
                _fail(path, "two actions of one node on one commodity must differ in signature")
            served.add(key3)
            if self.nodes[action.node].mu <= 0:
                _fail(
                    f"{path}.node",
                    f"node {self.nodes[action.node].name!r} has mu = 0 and cannot serve",
                )
            for key in ("work_hit", "work_miss"):
                _check_number_at(f"{path}.{key}", getattr(action, key), low=0.0)
            for key in ("loss_hit", "loss_miss", "credit_hit"):
                _check_number_at(f"{path}.{key}", getattr(action, key))
            _check_number_at(f"{path}.gen_prob", action.gen_prob, low=0.0, high=1.0)
            for key in ("successors_hit", "successors_miss"):
                _check_successors(f"{path}.{key}", getattr(action, key), n_comm)

    def _validate_flows(self) -> None:
        """Transit pairs, the arrival mix and the scalar parameters."""
        n_nodes, n_comm = len(self.nodes), len(self.commodities)
        for k, (node_id, commodity) in enumerate(self.transit):
            _check_number_at(f"transit[{k}].node", node_id, low=0, high=n_nodes - 1, integer=True)
            _check_number_at(
                f"transit[{k}].commodity", commodity, low=0, high=n_comm - 1, integer=True
            )
        if not self.arrival_mix:
            _fail("arrival_mix", "at least one arrival pair is required")
        total = 0.0
        seen_arrivals = set()
        for k, (node_id, commodity, share) in enumerate(self.arrival_mix):
            _check_number_at(
                f"arrival_mix[{k}].node", node_id, low=0, high=n_nodes - 1, integer=True
            )
            _check_number_at(
                f"arrival_mix[{k}].commodity", commodity, low=0, high=n_comm - 1, integer=True
            )
            _check_number_at(f"arrival_mix[{k}].share", share, low=0.0)
            if (node_id, commodity) in seen_arrivals:
                _fail(f"arrival_mix[{k}]", "duplicate arrival pair")
            seen_arrivals.add((node_id, commodity))
            total += share
        if abs(total - 1.0) > 1e-6:
            _fail("arrival_mix", f"shares must sum to 1, got {total:.6g}")
        _check_number_at("load", self.load, low=0.0)
        _check_number_at("replicas", self.replicas, low=1, integer=True)
        _check_number_at("horizon", self.horizon, low=1, integer=True)
        for key in ("eta", "migration_cost", "theta", "omega"):
            _check_number_at(key, getattr(self, key), low=0.0)

    def _validate_memory(self, index: WorkloadIndex) -> None:
        for k, alternative in enumerate(self.initial_memory):
            used = np.zeros(len(self.nodes))
            count = np.zeros(len(self.signatures), dtype=int)
            placed = set()
            for q, (node, signature) in enumerate(alternative):
                path = f"initial_memory[{k}][{q}]"
                _check_number_at(
                    f"{path}.node", node, low=0, high=len(self.nodes) - 1, integer=True
                )
                _check_number_at(
                    f"{path}.signature",
                    signature,
                    low=0,
                    high=len(self.signatures) - 1,
                    integer=True,
                )
                if not index.eligible[node, signature]:
                    _fail(path, "no action of the node is compatible with the signature")
                if (node, signature) in placed:
                    _fail(path, "a node holds at most one replica of a signature")
                placed.add((node, signature))
                used[node] += self.signatures[signature].size
                count[signature] += 1
            for i in np.flatnonzero(used > index.budget + 1e-9):
                _fail(
                    f"initial_memory[{k}]",
                    f"node {self.nodes[i].name!r} holds {used[i]:g} "
                    f"size units, budget {index.budget[i]:g}",
                )
            for s in np.flatnonzero(count > self.replicas):
                _fail(
                    f"initial_memory[{k}]",
                    f"signature {self.signatures[s].name!r} placed "
                    f"{count[s]} times, at most replicas = {self.replicas}",
                )


def _fail(path: str, message: str) -> None:
    raise ValueError(f"{path}: {message}")


def _check_number_at(path: str, value: Any, **bounds: Any) -> None:
    check_number(value, path, **bounds)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return tuple((k, _freeze(v)) for k, v in value.items())
    return value


def _int_array(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _where_served(wl: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``serves``, ``eligible`` (node x signature), ``relays`` and ``admissible``: where
    each commodity is served, each signature can be held, relayed, and may queue."""
    n_nodes, n_comm, n_sig = len(wl.nodes), len(wl.commodities), len(wl.signatures)
    serves = np.zeros((n_nodes, n_comm), dtype=bool)
    eligible = np.zeros((n_nodes, n_sig), dtype=bool)
    admissible = np.zeros((n_nodes, n_comm), dtype=bool)
    for action in wl.actions:
        serves[action.node, action.commodity] = True
        admissible[action.node, action.commodity] = True
        if action.signature >= 0:
            eligible[action.node, action.signature] = True
        for commodity, prob in action.successors_hit + action.successors_miss:
            if prob > 0:
                admissible[action.node, commodity] = True
    for node, commodity, _ in wl.arrival_mix:
        admissible[node, commodity] = True
    relays = np.zeros((n_nodes, n_comm), dtype=bool)
    for node, commodity in wl.transit:
        relays[node, commodity] = True
    admissible |= relays
    return serves, eligible, relays, admissible


def _routes(
    wl: Workload,
    serves: np.ndarray,
    relays: np.ndarray,
    admissible: np.ndarray,
    link_src: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``route_link`` and ``route_commodity`` of every route; refuses a queue that cannot
    drain (neither served where it is nor routable toward a server)."""
    route_link, route_commodity = [], []
    for e, link in enumerate(wl.links):
        for c in range(len(wl.commodities)):
            if admissible[link.src, c] and (serves[link.dst, c] or relays[link.dst, c]):
                route_link.append(e)
                route_commodity.append(c)
    route_link_arr = _int_array(route_link)
    route_comm_arr = _int_array(route_commodity)
    routable = np.zeros_like(admissible)
    routable[link_src[route_link_arr], route_comm_arr] = True
    stuck = admissible & ~serves & ~routable
    if stuck.any():
        i, c = (int(x[0]) for x in np.nonzero(stuck))
        _fail(
            "links",
            f"commodity {wl.commodities[c].name!r} appears at node "
            f"{wl.nodes[i].name!r}, which does not serve it and has no link to a node "
            "that does",
        )
    return route_link_arr, route_comm_arr


def _action_laws(wl: Workload, pair_of: np.ndarray) -> dict[str, Any]:
    """Per action and hit bit: work, loss, credit, the successor law, and its cumulative
    probabilities and target pairs as lists (the transition's draws)."""
    n_act, n_comm = len(wl.actions), len(wl.commodities)
    work = np.zeros((2, n_act))
    loss = np.zeros((2, n_act))
    credit = np.zeros((2, n_act))
    law = np.zeros((2, n_act, n_comm + 1))
    cum: tuple[list[list[float]], list[list[float]]] = ([], [])
    targets: tuple[list[list[int]], list[list[int]]] = ([], [])
    for a, action in enumerate(wl.actions):
        work[:, a] = (action.work_miss, action.work_hit)
        loss[:, a] = (action.loss_miss, action.loss_hit)
        credit[1, a] = action.credit_hit
        for hit, successors in ((0, action.successors_miss), (1, action.successors_hit)):
            running, cum_row, target_row = 0.0, [], []
            for commodity, prob in successors:
                if prob <= 0:
                    continue
                law[hit, a, commodity] = prob
                running += prob
                cum_row.append(running)
                target_row.append(int(pair_of[action.node, commodity]))
            law[hit, a, n_comm] = max(0.0, 1.0 - running)
            cum[hit].append(cum_row)
            targets[hit].append(target_row)
    return {
        "work": work,
        "loss": loss,
        "credit": credit,
        "penalty": loss - wl.eta * credit,
        "successor_law": law,
        "successor_cum": cum,
        "successor_pair": targets,
    }


def _attach_lookups(index: WorkloadIndex) -> None:
    """The derived lookups the kernels read (list copies, raveled slots, the actions of
    each retain candidate), then every array frozen."""
    fast = {name: getattr(index, name).tolist() for name in FastLists.__dataclass_fields__}
    object.__setattr__(index, "fast", FastLists(**fast))
    n_sig = index.num_signatures
    # Raveled (N * S + 1,) lookup position of each action's signature; actions with no
    # signature point at the extra last slot, which always reads "not held".
    slot = np.where(
        index.action_signature >= 0,
        index.action_node * n_sig + index.action_signature,
        index.num_nodes * n_sig,
    )
    object.__setattr__(index, "hit_slot", slot.astype(np.int64))
    src, dst = index.link_src[index.transfer_link], index.link_dst[index.transfer_link]
    object.__setattr__(index, "transfer_src_slot", src * n_sig + index.transfer_signature)
    object.__setattr__(index, "transfer_dst_slot", dst * n_sig + index.transfer_signature)
    members: list[list[int]] = [[] for _ in range(index.num_retains)]
    for a in np.flatnonzero(index.action_signature >= 0).tolist():
        k = int(index.retain_of[index.action_node[a], index.action_signature[a]])
        if k >= 0:
            members[k].append(a)
    object.__setattr__(index, "retain_actions", tuple(tuple(m) for m in members))
    for arr in vars(index).values():
        if isinstance(arr, np.ndarray):
            arr.flags.writeable = False


def _check_successors(path: str, successors: tuple[tuple[int, float], ...], n_comm: int) -> None:
    """A successor law: known commodities, each once, probabilities summing to at most 1."""
    total = 0.0
    targets = set()
    for k, (commodity, prob) in enumerate(successors):
        _check_number_at(f"{path}[{k}].commodity", commodity, low=0, high=n_comm - 1, integer=True)
        _check_number_at(f"{path}[{k}].probability", prob, low=0.0, high=1.0)
        if commodity in targets:
            _fail(path, f"commodity {commodity} listed twice")
        targets.add(commodity)
        total += prob
    if total > 1.0 + 1e-9:
        _fail(path, f"probabilities must sum to at most 1 (the rest exits), got {total:.6g}")


def _build_index(wl: Workload) -> WorkloadIndex:
    n_nodes, n_comm, n_sig = len(wl.nodes), len(wl.commodities), len(wl.signatures)
    n_act, n_links = len(wl.actions), len(wl.links)
    serves, eligible, relays, admissible = _where_served(wl)
    pair_node, pair_commodity = np.nonzero(admissible)
    pair_of = np.full((n_nodes, n_comm), -1, dtype=np.int64)
    pair_of[pair_node, pair_commodity] = np.arange(len(pair_node))

    link_src = _int_array([link.src for link in wl.links])
    link_dst = _int_array([link.dst for link in wl.links])
    route_link_arr, route_comm_arr = _routes(wl, serves, relays, admissible, link_src)

    transfer_link, transfer_signature = [], []
    for e, link in enumerate(() if wl.fixed_memory else wl.links):
        for s in range(n_sig):
            if eligible[link.src, s] and eligible[link.dst, s] and link.bandwidth > 0:
                transfer_link.append(e)
                transfer_signature.append(s)
    retain_node, retain_signature = np.nonzero(eligible & (not wl.fixed_memory))
    retain_of = np.full((n_nodes, n_sig), -1, dtype=np.int64)
    retain_of[retain_node, retain_signature] = np.arange(len(retain_node))

    sizes = np.asarray([s.size for s in wl.signatures], dtype=np.float64).reshape(-1)
    max_budget = (eligible * sizes[None, :]).sum(axis=1) if n_sig else np.zeros(n_nodes)

    arrival_pair = _int_array([int(pair_of[n, c]) for n, c, _ in wl.arrival_mix])
    arrival_share = np.asarray([s for _, _, s in wl.arrival_mix], dtype=np.float64)
    arrival_share = arrival_share / arrival_share.sum()

    index = WorkloadIndex(
        num_nodes=n_nodes,
        num_links=n_links,
        num_commodities=n_comm,
        num_signatures=n_sig,
        num_objects=n_sig * wl.replicas,
        num_actions=n_act,
        num_pairs=len(pair_node),
        num_routes=len(route_link_arr),
        num_transfers=len(transfer_link),
        num_retains=len(retain_node),
        mu=np.asarray([n.mu for n in wl.nodes], dtype=np.float64),
        budget=np.asarray([n.budget for n in wl.nodes], dtype=np.float64),
        link_src=link_src,
        link_dst=link_dst,
        link_capacity=_int_array([link.capacity for link in wl.links]),
        link_cost=np.asarray([link.cost for link in wl.links], dtype=np.float64).reshape(-1),
        link_bandwidth=np.asarray([link.bandwidth for link in wl.links], dtype=np.float64).reshape(
            -1
        ),
        signature_size=sizes,
        object_signature=np.repeat(np.arange(n_sig, dtype=np.int64), wl.replicas),
        pair_node=pair_node.astype(np.int64),
        pair_commodity=pair_commodity.astype(np.int64),
        pair_of=pair_of,
        serves=serves,
        eligible=eligible,
        max_budget=max_budget,
        action_node=_int_array([a.node for a in wl.actions]),
        action_commodity=_int_array([a.commodity for a in wl.actions]),
        action_pair=_int_array([int(pair_of[a.node, a.commodity]) for a in wl.actions]),
        action_signature=_int_array([a.signature for a in wl.actions]),
        gen_prob=np.asarray([a.gen_prob for a in wl.actions], dtype=np.float64).reshape(-1),
        route_link=route_link_arr,
        route_commodity=route_comm_arr,
        route_src_pair=pair_of[link_src[route_link_arr], route_comm_arr].reshape(-1),
        route_dst_pair=pair_of[link_dst[route_link_arr], route_comm_arr].reshape(-1),
        transfer_link=_int_array(transfer_link),
        transfer_signature=_int_array(transfer_signature),
        retain_node=retain_node.astype(np.int64),
        retain_signature=retain_signature.astype(np.int64),
        retain_of=retain_of,
        arrival_pair=arrival_pair,
        arrival_share=arrival_share,
        fast=None,  # type: ignore[arg-type]
        **_action_laws(wl, pair_of),
    )
    _attach_lookups(index)
    wl._validate_memory(index)
    return index
