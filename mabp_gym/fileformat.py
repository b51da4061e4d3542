"""Workloads from files: a JSON (or YAML) description of any SFMSN the core simulates.

The format (``"format": "mabp-gym.workload"``, ``"version": 1``; JSON Schema in
``mabp_gym/schema/workload.schema.json``, a complete example in ``docs/workload-files.md``)
names everything and references by name:

- ``nodes``: ``name``, ``role``, ``mu`` and either ``budget`` (size units) or ``beta``
  (a fraction of the node's eligible-object footprint ``B_i^max``);
- ``links``: ``src``, ``dst``, ``capacity`` (units per slot), ``cost`` (``d``),
  ``bandwidth`` (transfer, size units per slot);
- ``commodities``: ``name`` and optionally ``family``, ``stage``, ``state_type``;
- ``signatures``: the object kinds, ``name``, ``size``, ``kind``;
- ``actions``: who serves what (``node``, ``commodity``, the compatible ``signature`` or
  null), ``work_hit`` / ``work_miss`` (0: instant delivery), ``loss_hit`` / ``loss_miss``,
  ``credit_hit``, ``gen_prob`` and the successor laws ``successors_hit`` /
  ``successors_miss`` as ``[[commodity, probability], ...]`` (the rest exits; a rethink
  loop is a successor pointing back to an earlier stage);
- ``transit``: ``{node, commodity}`` relays of a multihop network;
- ``arrivals``: ``mix`` (``{node, commodity, share}``; state-type popularity is the shares)
  and ``load`` (normalized) or ``rate`` (requests per slot);
- ``costs`` (``eta``, ``migration_cost``, ``theta``, ``omega``), ``memory``
  (``replicas``, ``initial``, ``fixed``) and ``horizon``.

Every problem raises ``ValueError`` naming the path in the file (``links[2].dst``) and what
is allowed; nothing is built until the whole file has been read and checked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mabp_gym.workload import Action, Commodity, Link, Node, Signature, Workload

FORMAT = "mabp-gym.workload"
VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "workload.schema.json"

_TOP = {"format", "version", "name", "nodes", "links", "commodities", "signatures", "actions",
        "transit", "arrivals", "costs", "memory", "horizon"}
_NODE = {"name", "role", "mu", "budget", "beta"}
_LINK = {"src", "dst", "capacity", "cost", "bandwidth"}
_COMMODITY = {"name", "family", "stage", "state_type"}
_SIGNATURE = {"name", "size", "kind"}
_ACTION = {"node", "commodity", "signature", "work_hit", "work_miss", "loss_hit", "loss_miss",
           "credit_hit", "successors_hit", "successors_miss", "gen_prob"}
_ARRIVALS = {"mix", "load", "rate"}
_COSTS = {"eta", "migration_cost", "theta", "omega"}
_MEMORY = {"replicas", "initial", "fixed"}


class _Reader:
    """Reads one file's dict, raising ``ValueError`` with the path of every problem."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> None:
        prefix = f"{self.source}: " if self.source else ""
        raise ValueError(f"{prefix}{path}: {message}")

    def mapping(self, value: Any, path: str, allowed: set[str], required: set[str]) -> dict:
        if not isinstance(value, dict):
            self.fail(path, f"must be an object, got {type(value).__name__}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            self.fail(f"{path}.{unknown[0]}" if path else unknown[0],
                      f"unknown key; allowed: {sorted(allowed)}")
        missing = sorted(required - set(value))
        if missing:
            self.fail(f"{path}.{missing[0]}" if path else missing[0], "missing required field")
        return value

    def items(self, value: Any, path: str) -> list:
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def number(self, value: Any, path: str, *, low: float | None = None,
               integer: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            self.fail(path, f"must be finite, got {value!r}")
        if integer and int(value) != value:
            self.fail(path, f"must be an integer, got {value!r}")
        if low is not None and value < low:
            self.fail(path, f"must be >= {low:g}, got {value!r}")
        return int(value) if integer else float(value)

    def name(self, value: Any, path: str, known: dict[str, int], what: str) -> int:
        if value not in known:
            listed = list(known)
            shown = listed if len(listed) <= 12 else listed[:12] + ["..."]
            self.fail(path, f"unknown {what} {value!r}; known: {shown}")
        return known[value]


def _names(reader: _Reader, entries: list, path: str) -> dict[str, int]:
    names: dict[str, int] = {}
    for k, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            reader.fail(f"{path}[{k}].name", "must be a non-empty string")
        if name in names:
            reader.fail(f"{path}[{k}].name", f"duplicate name {name!r}")
        names[name] = k
    return names


def workload_from_dict(data: Any, source: str = "", **overrides: Any) -> Workload:
    """Build a :class:`Workload` from the file format (``overrides``: ``load``, ``horizon``)."""
    r = _Reader(source)
    unknown = sorted(set(overrides) - {"load", "horizon"})
    if unknown:
        raise ValueError(f"a workload file accepts the overrides load and horizon only, got "
                         f"{unknown}")
    top = r.mapping(data, "", _TOP, {"nodes", "commodities", "actions", "arrivals"})
    if top.get("format", FORMAT) != FORMAT:
        r.fail("format", f"must be {FORMAT!r}, got {top['format']!r}")
    if top.get("version", VERSION) != VERSION:
        r.fail("version", f"must be {VERSION}, got {top['version']!r}")

    raw_nodes = r.items(top["nodes"], "nodes")
    raw_commodities = r.items(top["commodities"], "commodities")
    raw_signatures = r.items(top.get("signatures", []), "signatures")
    raw_links = r.items(top.get("links", []), "links")
    raw_actions = r.items(top["actions"], "actions")
    node_id = _names(r, raw_nodes, "nodes")
    commodity_id = _names(r, raw_commodities, "commodities")
    signature_id = _names(r, raw_signatures, "signatures")

    commodities = []
    for k, raw in enumerate(raw_commodities):
        raw = r.mapping(raw, f"commodities[{k}]", _COMMODITY, {"name"})
        commodities.append(Commodity(
            raw["name"], str(raw.get("family", "")),
            r.number(raw.get("stage", 0), f"commodities[{k}].stage", low=0, integer=True),
            r.number(raw.get("state_type", 0), f"commodities[{k}].state_type", low=0,
                     integer=True)))
    signatures = []
    for k, raw in enumerate(raw_signatures):
        raw = r.mapping(raw, f"signatures[{k}]", _SIGNATURE, {"name", "size"})
        size = r.number(raw["size"], f"signatures[{k}].size", low=0.0)
        if size <= 0:
            r.fail(f"signatures[{k}].size", f"must be > 0, got {size!r}")
        signatures.append(Signature(raw["name"], size, str(raw.get("kind", ""))))

    actions = []
    served = set()
    for k, raw in enumerate(raw_actions):
        path = f"actions[{k}]"
        raw = r.mapping(raw, path, _ACTION, {"node", "commodity"})
        node = r.name(raw["node"], f"{path}.node", node_id, "node")
        commodity = r.name(raw["commodity"], f"{path}.commodity", commodity_id, "commodity")
        signature = -1
        if raw.get("signature") is not None:
            signature = r.name(raw["signature"], f"{path}.signature", signature_id, "signature")
        laws = {}
        for key in ("successors_hit", "successors_miss"):
            law, total = [], 0.0
            for q, pair in enumerate(r.items(raw.get(key, []), f"{path}.{key}")):
                if not isinstance(pair, list) or len(pair) != 2:
                    r.fail(f"{path}.{key}[{q}]", "must be [commodity, probability]")
                target = r.name(pair[0], f"{path}.{key}[{q}][0]", commodity_id, "commodity")
                prob = r.number(pair[1], f"{path}.{key}[{q}][1]", low=0.0)
                total += prob
                law.append((target, prob))
            if total > 1.0 + 1e-9:
                r.fail(f"{path}.{key}", f"probabilities sum to {total:g}; they must sum to at "
                       "most 1 (the remainder exits)")
            laws[key] = tuple(law)
        fields = {}
        for key, default in (("work_hit", 1.0), ("work_miss", None), ("loss_hit", 0.0),
                             ("loss_miss", None), ("credit_hit", 0.0), ("gen_prob", 1.0)):
            value = raw.get(key, default)
            if value is None:  # a miss defaults to the hit value
                value = fields[key.replace("miss", "hit")]
            fields[key] = r.number(value, f"{path}.{key}", low=0.0 if "work" in key or
                                   key == "gen_prob" else None)
        actions.append(Action(node=node, commodity=commodity, signature=signature, **fields,
                              **laws))
        served.add(commodity)

    transit = []
    for k, raw in enumerate(r.items(top.get("transit", []), "transit")):
        raw = r.mapping(raw, f"transit[{k}]", {"node", "commodity"}, {"node", "commodity"})
        transit.append((r.name(raw["node"], f"transit[{k}].node", node_id, "node"),
                        r.name(raw["commodity"], f"transit[{k}].commodity", commodity_id,
                               "commodity")))
    for c, commodity in enumerate(commodities):
        if c not in served:
            r.fail(f"commodities[{c}]", f"{commodity.name!r} is served by no node; add an "
                   "action that serves it")

    eligible: list[set[int]] = [set() for _ in raw_nodes]
    for action in actions:
        if action.signature >= 0:
            eligible[action.node].add(action.signature)
    nodes = []
    for k, raw in enumerate(raw_nodes):
        path = f"nodes[{k}]"
        raw = r.mapping(raw, path, _NODE, {"name", "role", "mu"})
        if "budget" in raw and "beta" in raw:
            r.fail(path, "give budget or beta, not both")
        if "beta" in raw:
            beta = r.number(raw["beta"], f"{path}.beta", low=0.0)
            budget = beta * sum(signatures[s].size for s in eligible[k])
        else:
            budget = r.number(raw.get("budget", 0.0), f"{path}.budget", low=0.0)
        nodes.append(Node(raw["name"], str(raw["role"]),
                          r.number(raw["mu"], f"{path}.mu", low=0.0), budget))
    largest = max((n.budget for n in nodes), default=0.0)
    for s, signature in enumerate(signatures):
        if signature.size > largest + 1e-9 and any(s in e for e in eligible):
            r.fail(f"signatures[{s}].size", f"{signature.size:g} is larger than every node's "
                   f"budget (largest {largest:g}): the object could never be held")

    links = []
    for k, raw in enumerate(raw_links):
        path = f"links[{k}]"
        raw = r.mapping(raw, path, _LINK, {"src", "dst", "capacity"})
        links.append(Link(r.name(raw["src"], f"{path}.src", node_id, "node"),
                          r.name(raw["dst"], f"{path}.dst", node_id, "node"),
                          r.number(raw["capacity"], f"{path}.capacity", low=0, integer=True),
                          r.number(raw.get("cost", 0.0), f"{path}.cost"),
                          r.number(raw.get("bandwidth", 0.0), f"{path}.bandwidth", low=0.0)))

    arrivals = r.mapping(top["arrivals"], "arrivals", _ARRIVALS, {"mix"})
    if ("load" in arrivals) == ("rate" in arrivals):
        r.fail("arrivals", "give exactly one of load (normalized) and rate (requests/slot)")
    mix = []
    for k, raw in enumerate(r.items(arrivals["mix"], "arrivals.mix")):
        raw = r.mapping(raw, f"arrivals.mix[{k}]", {"node", "commodity", "share"},
                        {"node", "commodity", "share"})
        mix.append((r.name(raw["node"], f"arrivals.mix[{k}].node", node_id, "node"),
                    r.name(raw["commodity"], f"arrivals.mix[{k}].commodity", commodity_id,
                           "commodity"),
                    r.number(raw["share"], f"arrivals.mix[{k}].share", low=0.0)))
    costs = r.mapping(top.get("costs", {}), "costs", _COSTS, set())
    memory = r.mapping(top.get("memory", {}), "memory", _MEMORY, set())
    initial = []
    for k, alternative in enumerate(r.items(memory.get("initial", []), "memory.initial")):
        placed = []
        for q, raw in enumerate(r.items(alternative, f"memory.initial[{k}]")):
            raw = r.mapping(raw, f"memory.initial[{k}][{q}]", {"node", "signature"},
                            {"node", "signature"})
            placed.append((r.name(raw["node"], f"memory.initial[{k}][{q}].node", node_id,
                                  "node"),
                           r.name(raw["signature"], f"memory.initial[{k}][{q}].signature",
                                  signature_id, "signature")))
        initial.append(tuple(placed))

    spec = dict(
        name=str(top.get("name", Path(source).stem if source else "file")),
        nodes=tuple(nodes), links=tuple(links), commodities=tuple(commodities),
        signatures=tuple(signatures), actions=tuple(actions), arrival_mix=tuple(mix),
        transit=tuple(transit), initial_memory=tuple(initial),
        replicas=r.number(memory.get("replicas", 1), "memory.replicas", low=1, integer=True),
        fixed_memory=bool(memory.get("fixed", False)),
        eta=r.number(costs.get("eta", 1.0), "costs.eta", low=0.0),
        migration_cost=r.number(costs.get("migration_cost", 0.0), "costs.migration_cost",
                                low=0.0),
        theta=r.number(costs.get("theta", 0.0), "costs.theta", low=0.0),
        omega=r.number(costs.get("omega", 0.0), "costs.omega", low=0.0),
        horizon=r.number(overrides.get("horizon", top.get("horizon", 600)), "horizon", low=1,
                         integer=True),
    )
    try:
        workload = Workload(**spec, load=0.0)
    except ValueError as error:
        prefix = f"{source}: " if source else ""
        raise ValueError(f"{prefix}{error}") from None
    if "load" in overrides:
        load = r.number(overrides["load"], "load", low=0.0)
    elif "load" in arrivals:
        load = r.number(arrivals["load"], "arrivals.load", low=0.0)
    else:
        rate = r.number(arrivals["rate"], "arrivals.rate", low=0.0)
        assert workload.lambda_ref is not None
        load = rate / workload.lambda_ref if workload.lambda_ref > 0 else 0.0
    return workload.with_load(load)


def workload_to_dict(workload: Workload) -> dict[str, Any]:
    """The file format of ``workload`` (re-imports to an identical simulation)."""
    nodes = [n.name for n in workload.nodes]
    comms = [c.name for c in workload.commodities]
    sigs = [s.name for s in workload.signatures]

    def law(pairs: tuple[tuple[int, float], ...]) -> list[list[Any]]:
        return [[comms[c], p] for c, p in pairs]

    return {
        "format": FORMAT, "version": VERSION, "name": workload.name,
        "nodes": [{"name": n.name, "role": n.role, "mu": n.mu, "budget": n.budget}
                  for n in workload.nodes],
        "links": [{"src": nodes[x.src], "dst": nodes[x.dst], "capacity": x.capacity,
                   "cost": x.cost, "bandwidth": x.bandwidth} for x in workload.links],
        "commodities": [{"name": c.name, "family": c.family, "stage": c.stage,
                         "state_type": c.state_type} for c in workload.commodities],
        "signatures": [{"name": s.name, "size": s.size, "kind": s.kind}
                       for s in workload.signatures],
        "actions": [{"node": nodes[a.node], "commodity": comms[a.commodity],
                     "signature": sigs[a.signature] if a.signature >= 0 else None,
                     "work_hit": a.work_hit, "work_miss": a.work_miss,
                     "loss_hit": a.loss_hit, "loss_miss": a.loss_miss,
                     "credit_hit": a.credit_hit, "gen_prob": a.gen_prob,
                     "successors_hit": law(a.successors_hit),
                     "successors_miss": law(a.successors_miss)} for a in workload.actions],
        "transit": [{"node": nodes[i], "commodity": comms[c]} for i, c in workload.transit],
        "arrivals": {"mix": [{"node": nodes[i], "commodity": comms[c], "share": share}
                             for i, c, share in workload.arrival_mix],
                     "load": workload.load},
        "costs": {"eta": workload.eta, "migration_cost": workload.migration_cost,
                  "theta": workload.theta, "omega": workload.omega},
        "memory": {"replicas": workload.replicas, "fixed": workload.fixed_memory,
                   "initial": [[{"node": nodes[i], "signature": sigs[s]} for i, s in alt]
                               for alt in workload.initial_memory]},
        "horizon": workload.horizon,
    }


def load_workload(path: str | Path, **overrides: Any) -> Workload:
    """Read a workload file (``.json``, or ``.yaml`` / ``.yml`` with PyYAML installed)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no workload file at {str(path)!r}")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as error:
            raise ValueError(f"{path}: reading YAML needs PyYAML (pip install pyyaml); "
                             "JSON works without it") from error
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"{path}: not valid YAML: {error}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON: {error}") from None
    return workload_from_dict(data, source=str(path), **overrides)


def save_workload(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` in the file format (JSON)."""
    Path(path).write_text(json.dumps(workload_to_dict(workload), indent=1) + "\n",
                          encoding="utf-8")
