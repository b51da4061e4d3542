"""Workload builders (SPEC section 2): one generator per workload, with validated overrides.

``make_workload(name, **overrides)`` builds a frozen :class:`~mabp_gym.core.workload.Workload`.
Each builder declares its parameters (default and allowed range); an unknown or
out-of-range override raises ``ValueError`` naming the field and what is allowed.

This module is the registry: the parameter tables, ``BUILDERS`` and ``make_workload``. The
builders live by concept and are importable from here too: the theory instances in
:mod:`~mabp_gym.core.workloads_theory`, the service graphs in
:mod:`~mabp_gym.core.workloads_service`, the generated network in
:mod:`~mabp_gym.core.workloads_multihop`, the parts they share in
:mod:`~mabp_gym.core.workloads_parts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads_multihop import MAX_NODES, MAX_PAIRS, barabasi_albert, multihop
from mabp_gym.core.workloads_parts import Law, noisy_law
from mabp_gym.core.workloads_service import agentic, mixed, moe, rag
from mabp_gym.core.workloads_theory import boundary, separation, successor, work_reuse

__all__ = [
    "BUILDERS",
    "MAX_NODES",
    "MAX_PAIRS",
    "WORKLOADS",
    "Law",
    "Param",
    "agentic",
    "barabasi_albert",
    "boundary",
    "check_number",
    "is_workload_file",
    "make_workload",
    "mixed",
    "moe",
    "multihop",
    "noisy_law",
    "rag",
    "separation",
    "successor",
    "work_reuse",
    "workload_params",
]


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
    "dedicated": Param(
        0,
        0,
        1,
        integer=True,
        doc="1: class c is served at hub c mod servers alone, the other hubs relay it "
        "(a packet network with a destination per class); 0: every hub serves every class",
    ),
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
            "load": Param(0.9, 0.0, 10.0, doc="normalized load (of floor(kappa_w))"),
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
