"""Routers for fleet mode by name: the paper's baselines, the production rules and MABP-Route.

Every router is a small object with ``reset(num_workers, rng)`` and
``choose(request, telemetry) -> worker`` that an asynchronous dispatcher could call as is
(subclass :class:`~mabp_gym.fleet.routers.base.RouterBase`). Production rules reimplement
the rule (not the code) of the file their docstring cites; they keep their own approximate
indexes where the real router does (SGLang, llm-d, production-stack's ``prefixaware`` and
AIBrix learn which worker saw which prefix from their own routing history), and read the
engines' cache through ``Telemetry.cached_blocks`` where the real router subscribes to KV
events (Dynamo) or asks the cache's controller (production-stack's ``loadaware``, LMCache).
Block hashes stand in for tokens and prompt text. One module per family
(``vidur`` holds the reference simulator's ``lor``).

The plug-in mechanism is :func:`mabp_gym.registry.register_policy`'s, for routers::

    register_router("mine", "my_package.routing:MyRouter")   # or a callable
    make_router("mine")                                      # what fleet and replay build

A name's ``kind`` says what its rows mean in a fleet table: ``baseline`` and ``production``
compete for the best cell, ``ablation`` (a labelled variant) and ``reference`` (reads the
exact engine state, which no deployable router sees) never do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mabp_gym.core.validate import (
    check_entry_point,
    entry_identity,
    import_entry_point,
    resolve_entry_point,
)

KINDS = ("baseline", "production", "ablation", "reference", "user")
"""What a router's row is; ``user`` (the default of :func:`register_router`) competes."""
COMPETING = ("baseline", "production", "user")


@dataclass(frozen=True)
class RouterSpec:
    """A registered router: where it lives, the arguments fixed by its name, and its kind.
    Calling the spec builds a fresh router."""

    name: str
    entry_point: str | Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    kind: str = "user"

    def load(self) -> Callable[..., Any]:
        """The callable behind the entry point (``"module:attr"``), imported now."""
        return resolve_entry_point(self.entry_point)

    def __call__(self) -> Any:
        return self.load()(**self.kwargs)


ROUTERS: dict[str, RouterSpec] = {}
"""Every registered router by name, built-in ones first; ``make_router(name)`` builds one."""


def register_router(
    name: str, entry_point: str | Callable[..., Any], *, kind: str = "user", **kwargs: Any
) -> None:
    """Register ``entry_point`` (``"module:attribute"`` or a callable returning a router) as
    router ``name``; ``kwargs`` are its fixed arguments, ``kind`` one of :data:`KINDS`.

    Raises:
        ValueError: the name is empty or taken, the kind unknown, or the entry point
            neither a ``"module:attribute"`` string nor a callable, or (one of yours,
            imported now) not importable.
    """
    if not isinstance(name, str) or not name or "," in name:
        raise ValueError(f"router name must be a non-empty string without ',', got {name!r}")
    if name in ROUTERS:
        raise ValueError(f"router {name!r} is already registered; choose another name")
    if kind not in KINDS:
        raise ValueError(f"kind of router {name!r} must be one of {KINDS}, got {kind!r}")
    check_entry_point("router", name, entry_point)
    if isinstance(entry_point, str) and not entry_point.startswith("mabp_gym."):
        import_entry_point("router", entry_point)  # yours: a typo now, not at the first run
    ROUTERS[name] = RouterSpec(name, entry_point, dict(kwargs), kind)


def router_identity(name: str) -> str | None:
    """What a router of your own is (its entry point, fixed arguments and a digest of its
    source files), for the keys of results files; ``None`` for the built-in ones, whose
    runs the package's version keys."""
    spec = ROUTERS.get(name)
    if spec is None or name in BUILT_IN_ROUTERS:
        return None
    return entry_identity(spec.entry_point, spec.kwargs)


def router_names(*kinds: str) -> tuple[str, ...]:
    """The registered names of these kinds (all when none is given), in registration order."""
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"router kind must be one of {KINDS}, got {kind!r}")
    return tuple(n for n, spec in ROUTERS.items() if not kinds or spec.kind in kinds)


def make_router(name: str) -> Any:
    """A fresh router by name (see :data:`ROUTERS`)."""
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; choose from {sorted(ROUTERS)}")
    return ROUTERS[name]()


_HERE = "mabp_gym.fleet.routers."
for _name, _entry, _kind, _kwargs in (
    ("round-robin", "baselines:RoundRobin", "baseline", {}),
    ("jsq", "baselines:JSQ", "baseline", {}),
    ("lor", "vidur:LeastOutstandingRequests", "baseline", {}),
    ("bp", "baselines:BP", "baseline", {}),
    ("affinity", "baselines:PrefixAffinity", "baseline", {}),
    ("sglang", "sglang:SGLangCacheAware", "production", {"preset": "deployed"}),
    ("sglang-lib-default", "sglang:SGLangCacheAware", "ablation", {"preset": "lib-default"}),
    ("dynamo-t0", "dynamo:DynamoKV", "production", {"temperature": 0.0}),
    ("dynamo-t0.5", "dynamo:DynamoKV", "production", {"temperature": 0.5}),
    (
        "dynamo-t0-approx",
        "dynamo:DynamoKV",
        "production",
        {"temperature": 0.0, "kv_events": False},
    ),
    ("llm-d", "llmd:LLMD", "production", {}),
    # llm-d's other default: the fixed index of 31,250 blocks of 16 tokens a server.
    ("llm-d-fixed-index", "llmd:LLMD", "ablation", {"lru_tokens_per_server": 500_000}),
    (
        "vllm-prefixaware",
        "production_stack:VLLMProductionStack",
        "production",
        {"mode": "prefixaware"},
    ),
    ("vllm-loadaware", "production_stack:VLLMProductionStack", "production", {"mode": "loadaware"}),
    ("aibrix", "aibrix:AIBrixPrefixCache", "production", {}),
    ("mabp-route", "mabp_route:MABPRoute", "baseline", {}),
    ("mabp-route-exact", "mabp_route:MABPRoute", "reference", {"exact": True}),
    ("oracle-ttft", "oracle:OracleTTFT", "reference", {}),
):
    register_router(_name, _HERE + _entry, kind=_kind, **_kwargs)

BUILT_IN_ROUTERS = tuple(ROUTERS)
"""The shipped routers' names (their runs are keyed by the package's version)."""
PRODUCTION_ROUTERS = router_names("production")
"""The production rules of the shipped routers (routers.md)."""
ABLATION_ROUTERS = router_names("ablation")
"""Rules kept for comparison, not production rows: SGLang's library default."""
REFERENCE_ROUTERS = router_names("reference")
"""References on the exact engine state, which no deployable router sees."""

__all__ = [
    "ABLATION_ROUTERS",
    "BUILT_IN_ROUTERS",
    "COMPETING",
    "KINDS",
    "PRODUCTION_ROUTERS",
    "REFERENCE_ROUTERS",
    "ROUTERS",
    "RouterSpec",
    "make_router",
    "register_router",
    "router_identity",
    "router_names",
]
