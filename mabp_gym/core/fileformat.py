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

Every problem raises ``ValueError`` naming the file and the path in it (``links[2].dst``)
and what is allowed; nothing is built until the whole file has been read and checked.
Checking runs in two passes: the shipped JSON Schema (with ``jsonschema``: types, required
fields, unknown keys, and the documented range of every number), then the meaning: names
that resolve, probabilities that sum to at most 1, a network that can serve its arrivals
(``lambda_ref > 0`` when requests arrive) and successor laws under which every request
can still complete (no probability-1 loop).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from mabp_gym.core.fluid import fluid_capacity
from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import (
    FILE_FORMAT,
    FILE_VERSION,
    Action,
    Commodity,
    Link,
    Node,
    Signature,
    Workload,
)

FORMAT = FILE_FORMAT
VERSION = FILE_VERSION
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schema" / "workload.schema.json"

_TOP = {
    "format",
    "version",
    "name",
    "nodes",
    "links",
    "commodities",
    "signatures",
    "actions",
    "transit",
    "arrivals",
    "costs",
    "memory",
    "horizon",
}
_NODE = {"name", "role", "mu", "budget", "beta"}
_LINK = {"src", "dst", "capacity", "cost", "bandwidth"}
_COMMODITY = {"name", "family", "stage", "state_type"}
_SIGNATURE = {"name", "size", "kind"}
_ACTION = {
    "node",
    "commodity",
    "signature",
    "work_hit",
    "work_miss",
    "loss_hit",
    "loss_miss",
    "credit_hit",
    "successors_hit",
    "successors_miss",
    "gen_prob",
}
_ARRIVALS = {"mix", "load", "rate"}
_COSTS = {"eta", "migration_cost", "theta", "omega"}
_MEMORY = {"replicas", "initial", "fixed"}
MAX_DEPTH = 16  # the format nests 6 levels deep; deeper input is refused before parsing it


@lru_cache(maxsize=1)
def _schema_validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _json_path(parts: Any) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _schema_problem(error: Any) -> tuple[str, str]:
    """``(path, message)`` of a ``jsonschema`` error, worded like the semantic checks."""
    path = _json_path(error.absolute_path)
    kind, bound, value = error.validator, error.validator_value, error.instance
    join = lambda key: f"{path}.{key}" if path else key  # noqa: E731
    if kind == "additionalProperties" and isinstance(value, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(value) - set(allowed), key=str)
        return join(unknown[0]), f"unknown key; allowed: {allowed}"
    if kind == "required" and isinstance(value, dict):
        missing = [k for k in bound if k not in value]
        return join(missing[0]), "missing required field"
    messages = {
        "minimum": lambda: f"must be >= {bound:g}, got {value!r}",
        "maximum": lambda: f"must be <= {bound:g} (the documented range), got {value!r}",
        "exclusiveMinimum": lambda: f"must be > {bound:g}, got {value!r}",
        "enum": lambda: f"must be one of {bound}, got {value!r}",
        "const": lambda: f"must be {bound!r}, got {value!r}",
        "type": lambda: f"must be of type {bound}, got {value!r}",
        "minLength": lambda: f"must be a non-empty string, got {value!r}",
        "minItems": lambda: f"must have at least {bound} item(s)",
        "maxItems": lambda: f"must have at most {bound} items (the documented range)",
    }
    if kind in messages:
        return path, messages[kind]()
    if (
        kind in ("oneOf", "not", "anyOf")
        and isinstance(error.schema, dict)
        and "description" in error.schema
    ):
        return path, error.schema["description"]
    return path, error.message


def _depth_problem(data: Any) -> str | None:
    """The path of a container nested deeper than :data:`MAX_DEPTH` (iteratively: a
    recursive walk of hostile input would itself overflow the stack)."""
    stack: list[tuple[Any, list[Any]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, (dict, list)):
            if len(path) >= MAX_DEPTH:
                return _json_path(path) or "(top)"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((child, [*path, key]) for key, child in items)
    return None


def validate_schema(data: Any, source: str = "") -> None:
    """Check ``data`` against the shipped JSON Schema; raise ``ValueError`` naming the
    path of the first problem."""
    prefix = f"{source}: " if source else ""
    deep = _depth_problem(data)
    if deep is not None:
        raise ValueError(
            f"{prefix}{deep}: nested more than {MAX_DEPTH} levels deep; the format nests at most 6"
        )
    import jsonschema

    errors = list(_schema_validator().iter_errors(data))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        path, message = _schema_problem(error)
        raise ValueError(f"{prefix}{path or '(top)'}: {message}")


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
            self.fail(
                f"{path}.{unknown[0]}" if path else unknown[0],
                f"unknown key; allowed: {sorted(allowed)}",
            )
        missing = sorted(required - set(value))
        if missing:
            self.fail(f"{path}.{missing[0]}" if path else missing[0], "missing required field")
        return value

    def items(self, value: Any, path: str) -> list:
        if not isinstance(value, list):
            self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def number(
        self,
        value: Any,
        path: str,
        *,
        low: float | None = None,
        high: float | None = None,
        integer: bool = False,
    ) -> Any:
        try:
            return check_number(value, path, low=low, high=high, integer=integer)
        except ValueError as error:
            prefix = f"{self.source}: " if self.source else ""
            raise ValueError(f"{prefix}{error}") from None

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
        assert isinstance(name, str)  # reader.fail raised otherwise
        names[name] = k
    return names


def workload_from_dict(data: Any, source: str = "", **overrides: Any) -> Workload:
    """Build a :class:`Workload` from the file format (``overrides``: ``load``, ``horizon``).

    The sections are read in a fixed order (each reader below takes what the earlier ones
    produced), so the first problem reported for a file is always the same one.
    """
    r = _Reader(source)
    unknown = sorted(set(overrides) - {"load", "horizon"})
    if unknown:
        raise ValueError(
            f"a workload file accepts the overrides load and horizon only, got {unknown}"
        )
    validate_schema(data, source)
    top = _read_top(r, data)
    name = _read_name(r, top, source)
    fixed = _read_fixed(r, top)

    raw_nodes = r.items(top["nodes"], "nodes")
    raw_commodities = r.items(top["commodities"], "commodities")
    raw_signatures = r.items(top.get("signatures", []), "signatures")
    raw_links = r.items(top.get("links", []), "links")
    raw_actions = r.items(top["actions"], "actions")
    node_id = _names(r, raw_nodes, "nodes")
    commodity_id = _names(r, raw_commodities, "commodities")
    signature_id = _names(r, raw_signatures, "signatures")

    commodities = _read_commodities(r, raw_commodities)
    signatures = _read_signatures(r, raw_signatures)
    actions = _read_actions(r, raw_actions, node_id, commodity_id, signature_id)
    transit = _read_transit(r, top, node_id, commodity_id)
    _check_served(r, commodities, actions)
    nodes = _read_nodes(r, raw_nodes, signatures, actions)
    links = _read_links(r, raw_links, node_id)
    arrivals, mix = _read_arrivals(r, top, node_id, commodity_id)
    costs = r.mapping(top.get("costs", {}), "costs", _COSTS, set())
    initial, replicas = _read_memory(r, top, node_id, signature_id)
    spec = dict(
        name=name,
        nodes=nodes,
        links=links,
        commodities=commodities,
        signatures=signatures,
        actions=actions,
        arrival_mix=mix,
        transit=transit,
        initial_memory=initial,
        replicas=replicas,
        fixed_memory=fixed,
        **_read_costs(r, costs),
        horizon=_read_horizon(r, top, overrides),
    )
    try:
        workload = Workload(**spec, load=0.0)
    except ValueError as error:
        prefix = f"{source}: " if source else ""
        raise ValueError(f"{prefix}{error}") from None
    load, where = _read_load(r, arrivals, overrides, workload)
    _check_completion(r, workload)
    _check_capacity(r, workload, load, where)
    return workload.with_load(load)


def _read_top(r: _Reader, data: Any) -> dict:
    """The top-level object, its ``format`` and its ``version``."""
    top = r.mapping(data, "", _TOP, {"nodes", "commodities", "actions", "arrivals"})
    if top.get("format", FORMAT) != FORMAT:
        r.fail("format", f"must be {FORMAT!r}, got {top['format']!r}")
    version = top.get("version", VERSION)
    if type(version) is not int or version != VERSION:  # True == 1 in Python
        r.fail("version", f"must be {VERSION}, got {version!r}")
    return top


def _read_name(r: _Reader, top: dict, source: str) -> str:
    """The workload's name: the file's stem when the file names none."""
    name = top.get("name", Path(source).stem if source else "file")
    if not isinstance(name, str) or not name:
        r.fail("name", f"must be a non-empty string, got {name!r}")
    return name


def _read_fixed(r: _Reader, top: dict) -> bool:
    """``memory.fixed``, read before the rest of ``memory`` (it is checked first)."""
    fixed = r.mapping(top.get("memory", {}), "memory", _MEMORY, set()).get("fixed", False)
    if not isinstance(fixed, bool):
        r.fail("memory.fixed", f"must be true or false, got {fixed!r}")
    return fixed


def _read_commodities(r: _Reader, raw_commodities: list) -> tuple[Commodity, ...]:
    commodities = []
    for k, raw in enumerate(raw_commodities):
        raw = r.mapping(raw, f"commodities[{k}]", _COMMODITY, {"name"})
        commodities.append(
            Commodity(
                raw["name"],
                str(raw.get("family", "")),
                r.number(raw.get("stage", 0), f"commodities[{k}].stage", low=0, integer=True),
                r.number(
                    raw.get("state_type", 0), f"commodities[{k}].state_type", low=0, integer=True
                ),
            )
        )
    return tuple(commodities)


def _read_signatures(r: _Reader, raw_signatures: list) -> tuple[Signature, ...]:
    signatures = []
    for k, raw in enumerate(raw_signatures):
        raw = r.mapping(raw, f"signatures[{k}]", _SIGNATURE, {"name", "size"})
        size = r.number(raw["size"], f"signatures[{k}].size", low=0.0)
        if size <= 0:
            r.fail(f"signatures[{k}].size", f"must be > 0, got {size!r}")
        signatures.append(Signature(raw["name"], size, str(raw.get("kind", ""))))
    return tuple(signatures)


def _read_actions(
    r: _Reader,
    raw_actions: list,
    node_id: dict[str, int],
    commodity_id: dict[str, int],
    signature_id: dict[str, int],
) -> tuple[Action, ...]:
    actions = []
    for k, raw in enumerate(raw_actions):
        path = f"actions[{k}]"
        raw = r.mapping(raw, path, _ACTION, {"node", "commodity"})
        node = r.name(raw["node"], f"{path}.node", node_id, "node")
        commodity = r.name(raw["commodity"], f"{path}.commodity", commodity_id, "commodity")
        signature = -1
        if raw.get("signature") is not None:
            signature = r.name(raw["signature"], f"{path}.signature", signature_id, "signature")
        laws: dict[str, Any] = {
            key: _read_law(r, raw.get(key, []), f"{path}.{key}", commodity_id)
            for key in ("successors_hit", "successors_miss")
        }
        fields: dict[str, Any] = {}
        for key, default in (
            ("work_hit", 1.0),
            ("work_miss", None),
            ("loss_hit", 0.0),
            ("loss_miss", None),
            ("credit_hit", 0.0),
            ("gen_prob", 1.0),
        ):
            value = raw.get(key, default)
            if value is None:  # a miss defaults to the hit value
                value = fields[key.replace("miss", "hit")]
            fields[key] = r.number(
                value, f"{path}.{key}", low=0.0 if "work" in key or key == "gen_prob" else None
            )
        actions.append(
            Action(node=node, commodity=commodity, signature=signature, **fields, **laws)
        )
    return tuple(actions)


def _read_law(
    r: _Reader, value: Any, path: str, commodity_id: dict[str, int]
) -> tuple[tuple[int, float], ...]:
    """A successor law ``[[commodity, probability], ...]``; the remainder exits."""
    law, total = [], 0.0
    for q, pair in enumerate(r.items(value, path)):
        if not isinstance(pair, list) or len(pair) != 2:
            r.fail(f"{path}[{q}]", "must be [commodity, probability]")
        target = r.name(pair[0], f"{path}[{q}][0]", commodity_id, "commodity")
        prob = r.number(pair[1], f"{path}[{q}][1]", low=0.0)
        total += prob
        law.append((target, prob))
    if total > 1.0 + 1e-9:
        r.fail(
            path,
            f"probabilities sum to {total:g}; they must sum to at most 1 (the remainder exits)",
        )
    return tuple(law)


def _read_transit(
    r: _Reader, top: dict, node_id: dict[str, int], commodity_id: dict[str, int]
) -> tuple[tuple[int, int], ...]:
    transit = []
    for k, raw in enumerate(r.items(top.get("transit", []), "transit")):
        raw = r.mapping(raw, f"transit[{k}]", {"node", "commodity"}, {"node", "commodity"})
        transit.append(
            (
                r.name(raw["node"], f"transit[{k}].node", node_id, "node"),
                r.name(raw["commodity"], f"transit[{k}].commodity", commodity_id, "commodity"),
            )
        )
    return tuple(transit)


def _check_served(
    r: _Reader, commodities: tuple[Commodity, ...], actions: tuple[Action, ...]
) -> None:
    """Every declared commodity is served by some action."""
    served = {action.commodity for action in actions}
    for c, declared in enumerate(commodities):
        if c not in served:
            r.fail(
                f"commodities[{c}]",
                f"{declared.name!r} is served by no node; add an action that serves it",
            )


def _read_nodes(
    r: _Reader,
    raw_nodes: list,
    signatures: tuple[Signature, ...],
    actions: tuple[Action, ...],
) -> tuple[Node, ...]:
    """The nodes (a ``beta`` is a fraction of the node's eligible-object footprint), and no
    eligible object larger than every budget."""
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
        nodes.append(
            Node(raw["name"], str(raw["role"]), r.number(raw["mu"], f"{path}.mu", low=0.0), budget)
        )
    largest = max((n.budget for n in nodes), default=0.0)
    for s, held in enumerate(signatures):
        if held.size > largest + 1e-9 and any(s in e for e in eligible):
            r.fail(
                f"signatures[{s}].size",
                f"{held.size:g} is larger than every node's "
                f"budget (largest {largest:g}): the object could never be held",
            )
    return tuple(nodes)


def _read_links(r: _Reader, raw_links: list, node_id: dict[str, int]) -> tuple[Link, ...]:
    links = []
    for k, raw in enumerate(raw_links):
        path = f"links[{k}]"
        raw = r.mapping(raw, path, _LINK, {"src", "dst", "capacity"})
        links.append(
            Link(
                r.name(raw["src"], f"{path}.src", node_id, "node"),
                r.name(raw["dst"], f"{path}.dst", node_id, "node"),
                r.number(raw["capacity"], f"{path}.capacity", low=0, integer=True),
                r.number(raw.get("cost", 0.0), f"{path}.cost", low=0.0),
                r.number(raw.get("bandwidth", 0.0), f"{path}.bandwidth", low=0.0),
            )
        )
    return tuple(links)


def _read_arrivals(
    r: _Reader, top: dict, node_id: dict[str, int], commodity_id: dict[str, int]
) -> tuple[dict, tuple[tuple[int, int, float], ...]]:
    """The ``arrivals`` object (its load or rate is read once the network is built) and
    its ``mix``."""
    arrivals = r.mapping(top["arrivals"], "arrivals", _ARRIVALS, {"mix"})
    if ("load" in arrivals) == ("rate" in arrivals):
        r.fail("arrivals", "give exactly one of load (normalized) and rate (requests/slot)")
    mix = []
    for k, raw in enumerate(r.items(arrivals["mix"], "arrivals.mix")):
        raw = r.mapping(
            raw,
            f"arrivals.mix[{k}]",
            {"node", "commodity", "share"},
            {"node", "commodity", "share"},
        )
        mix.append(
            (
                r.name(raw["node"], f"arrivals.mix[{k}].node", node_id, "node"),
                r.name(raw["commodity"], f"arrivals.mix[{k}].commodity", commodity_id, "commodity"),
                r.number(raw["share"], f"arrivals.mix[{k}].share", low=0.0),
            )
        )
    return arrivals, tuple(mix)


def _read_memory(
    r: _Reader, top: dict, node_id: dict[str, int], signature_id: dict[str, int]
) -> tuple[tuple[tuple[tuple[int, int], ...], ...], int]:
    """``memory.initial`` (alternative placements of ``{node, signature}``) and
    ``memory.replicas``."""
    memory = r.mapping(top.get("memory", {}), "memory", _MEMORY, set())
    initial = []
    for k, alternative in enumerate(r.items(memory.get("initial", []), "memory.initial")):
        placed = []
        for q, raw in enumerate(r.items(alternative, f"memory.initial[{k}]")):
            raw = r.mapping(
                raw, f"memory.initial[{k}][{q}]", {"node", "signature"}, {"node", "signature"}
            )
            placed.append(
                (
                    r.name(raw["node"], f"memory.initial[{k}][{q}].node", node_id, "node"),
                    r.name(
                        raw["signature"],
                        f"memory.initial[{k}][{q}].signature",
                        signature_id,
                        "signature",
                    ),
                )
            )
        initial.append(tuple(placed))
    replicas = r.number(memory.get("replicas", 1), "memory.replicas", low=1, integer=True)
    return tuple(initial), replicas


def _read_costs(r: _Reader, costs: dict) -> dict[str, Any]:
    """The numbers of ``costs`` (the object itself is checked before ``memory``)."""
    return dict(
        eta=r.number(costs.get("eta", 1.0), "costs.eta", low=0.0),
        migration_cost=r.number(costs.get("migration_cost", 0.0), "costs.migration_cost", low=0.0),
        theta=r.number(costs.get("theta", 0.0), "costs.theta", low=0.0),
        omega=r.number(costs.get("omega", 0.0), "costs.omega", low=0.0),
    )


def _read_horizon(r: _Reader, top: dict, overrides: dict[str, Any]) -> Any:
    return r.number(
        overrides.get("horizon", top.get("horizon", 600)),
        "horizon",
        low=1,
        high=10_000_000,
        integer=True,
    )


def _read_load(
    r: _Reader, arrivals: dict, overrides: dict[str, Any], workload: Workload
) -> tuple[float, str]:
    """The normalized load (the override, ``arrivals.load``, or ``arrivals.rate`` over the
    built network's ``lambda_ref``) and the path it was read from."""
    if "load" in overrides:
        load, where = r.number(overrides["load"], "load", low=0.0, high=10.0), "load"
    elif "load" in arrivals:
        load, where = r.number(arrivals["load"], "arrivals.load", low=0.0), "arrivals.load"
    else:
        rate, where = r.number(arrivals["rate"], "arrivals.rate", low=0.0), "arrivals.rate"
        assert workload.lambda_ref is not None
        load = rate / workload.lambda_ref if workload.lambda_ref > 0 else rate
    return load, where


def _check_capacity(r: _Reader, workload: Workload, load: float, where: str) -> None:
    """Refuse a network whose all-hit capacity is unbounded, or 0 while requests arrive."""
    assert workload.lambda_ref is not None
    if not math.isfinite(workload.lambda_ref):
        r.fail(
            "nodes",
            "the network's all-hit capacity is unbounded (work 0 everywhere "
            "a request goes): give some action work > 0",
        )
    if load > 0 and workload.lambda_ref <= 0:
        r.fail(
            where,
            f"requests arrive (load {load:g}) but the network's all-hit capacity "
            "lambda_ref is 0: no arrival pair can reach a node that serves it with "
            "compute and links to spare (total capacity 0)",
        )
    # Memory that adds work: the builders refuse it by parameter (successor's pi_l > pi_h,
    # mixed's verify_*_hit > verify_*_miss); a file by its effect. Then every load, scaled
    # by the all-hit capacity, meant less than the network without memory carries, and
    # memory could make a stable load unstable.
    # Both in fluid terms: the whole-unit bound is exact for neither where a node has work
    # above mu, and applied to one side only it refused memory that only helps.
    if workload.signatures:
        no_memory, all_hit = (
            fluid_capacity(workload.index, hit=hit, name=workload.name, whole_units=False)
            for hit in (False, True)
        )
        if no_memory > all_hit * (1 + 1e-9) + 1e-12:
            r.fail(
                "actions",
                f"memory adds work here: the fluid no-memory capacity {no_memory:.4g} is above "
                f"the all-hit one {all_hit:.4g} requests per slot; a hit must take no more "
                "work and pass on no more jobs than a miss (work_hit <= work_miss, "
                "successors_hit no heavier than successors_miss)",
            )


def _check_completion(r: _Reader, workload: Workload) -> None:
    """Refuse successor laws under which a request can never leave: a commodity reachable
    from the arrivals from which no sequence of services (hit or miss) reaches an exit."""
    n = len(workload.commodities)
    successors: list[set[int]] = [set() for _ in range(n)]
    exits = [False] * n
    for action in workload.actions:
        for law in (action.successors_hit, action.successors_miss):
            successors[action.commodity].update(c for c, p in law if p > 0)
            if sum(p for _, p in law) < 1.0 - 1e-9:
                exits[action.commodity] = True
    can_finish = list(exits)
    changed = True
    while changed:  # fixed point: c can finish if it exits or leads to one that can
        changed = False
        for c in range(n):
            if not can_finish[c] and any(can_finish[d] for d in successors[c]):
                can_finish[c] = changed = True
    reachable, frontier = set(), [c for _, c, share in workload.arrival_mix if share > 0]
    while frontier:
        c = frontier.pop()
        if c not in reachable:
            reachable.add(c)
            frontier.extend(successors[c])
    for c in sorted(reachable):
        if not can_finish[c]:
            r.fail(
                f"commodities[{c}]",
                f"a request at {workload.commodities[c].name!r} can "
                "never complete: every action serving it, hit or miss, passes it on with "
                "probability 1 into commodities that never exit (a probability-1 loop)",
            )


def workload_to_dict(workload: Workload) -> dict[str, Any]:
    """The file format of ``workload`` (re-imports to an identical simulation)."""
    return workload.to_dict()


def load_workload(path: str | Path, **overrides: Any) -> Workload:
    """Read a workload file (``.json``, or ``.yaml`` / ``.yml`` with PyYAML installed)."""
    path = Path(path)
    if not path.is_file():
        shipped = Path(__file__).resolve().parents[1] / "examples" / path.name
        hint = f"; the package ships {path.name} at {str(shipped)!r}" if shipped.is_file() else ""
        raise ValueError(f"no workload file at {str(path)!r}{hint}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: not a UTF-8 text file (byte {error.start}: {error.reason})"
        ) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as error:
            raise ValueError(
                f"{path}: reading YAML needs PyYAML (pip install pyyaml); JSON works without it"
            ) from error
        parse: Callable[[str], Any] = partial(yaml.load, Loader=_unique_keys_yaml_loader(yaml))
        kind, malformed = "YAML", yaml.YAMLError
    else:
        parse = partial(json.loads, object_pairs_hook=_unique_keys)
        kind, malformed = "JSON", json.JSONDecodeError
    try:
        data = parse(text)
    except malformed as error:
        raise ValueError(f"{path}: not valid {kind}: {error}") from None
    except ValueError as error:  # a key given twice
        raise ValueError(f"{path}: {error}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a workload file") from None
    return workload_from_dict(data, source=str(path), **overrides)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (json keeps the last silently,
    so one of two values the author wrote would be dropped unseen)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice in one object; give it once")
        result[key] = value
    return result


def _unique_keys_yaml_loader(yaml: Any) -> type:
    """PyYAML's safe loader, refusing a mapping key given twice as :func:`_unique_keys` does."""

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
            for key in keys:
                if keys.count(key) > 1:
                    raise ValueError(
                        f"the key {key!r} appears twice in one mapping (line "
                        f"{node.start_mark.line + 1}); give it once"
                    )
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def save_workload(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` in the file format (JSON)."""
    Path(path).write_text(json.dumps(workload_to_dict(workload), indent=1) + "\n", encoding="utf-8")


def workload_digest_of(workload: Workload) -> str:
    """SHA-256 of a workload's whole file-format description with its load left out (the
    load is keyed exactly on its own) and its builder parameters."""
    description = workload_to_dict(workload)
    description["arrivals"].pop("load", None)
    params = [[k, v] for k, v in workload.params if k != "load"]
    text = json.dumps([description, params, workload.lambda_ref], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (what a results file keys a checkpoint by, not its path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
