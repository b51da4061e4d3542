"""Serving-fleet mode (SPEC 11): LLM workers with prefix caches, trace replay, routers.

Gymnasium-free (the env lives in ``mabp_gym.fleet.env``). ``replay(trace, router, config)``
routes a trace; ``evaluate_fleet`` runs the Table II analogue.
"""

from __future__ import annotations

from mabp_gym.fleet.routers import (
    ABLATION_ROUTERS,
    PRODUCTION_ROUTERS,
    REFERENCE_ROUTERS,
    ROUTERS,
    make_router,
    register_router,
    router_names,
)
from mabp_gym.fleet.simulator import (
    COUNTS,
    METRICS,
    FleetConfig,
    FleetSimulator,
    Request,
    Telemetry,
    make_config,
    nominal_load,
    replay,
    scale_to_load,
)
from mabp_gym.fleet.trace import (
    BLOCK_TOKENS,
    SHIPPED_TRACES,
    Trace,
    TraceRequest,
    agentic_session_trace,
    load_trace,
    parse_mooncake,
    prefix_tree_trace,
    read_mooncake,
    shipped_trace,
    trace_from_columns,
    write_mooncake,
)

__all__ = [
    "ABLATION_ROUTERS",
    "BLOCK_TOKENS",
    "COUNTS",
    "METRICS",
    "PRODUCTION_ROUTERS",
    "REFERENCE_ROUTERS",
    "ROUTERS",
    "SHIPPED_TRACES",
    "FleetConfig",
    "FleetSimulator",
    "Request",
    "Telemetry",
    "Trace",
    "TraceRequest",
    "agentic_session_trace",
    "evaluate_fleet",
    "load_trace",
    "make_config",
    "make_router",
    "nominal_load",
    "parse_mooncake",
    "prefix_tree_trace",
    "register_router",
    "router_names",
    "read_mooncake",
    "replay",
    "scale_to_load",
    "shipped_trace",
    "trace_from_columns",
    "write_mooncake",
]


def __getattr__(name: str) -> object:
    """``evaluate_fleet`` on first use: its module loads scipy, which routing does not need."""
    if name == "evaluate_fleet":
        from mabp_gym.fleet.evaluate import evaluate_fleet

        return evaluate_fleet
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
