"""Scheduling policies for mabp-gym, all scoring candidates for the shared projection.

``make_policy(name, env_or_workload, **kw)`` builds a registered policy; ``POLICIES``
lists the names. Every policy exposes ``scores(obs)`` over the env's observation and
``reset(seed)``; exact-control agents (``oracle-sur``) also expose ``control(state)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.backpressure import Backpressure, make_bp, make_cost_bp, make_greedycache_bp
from agents.base import Policy, resolve_workload
from agents.frame_mabp import FrameMABP
from agents.mabp import MABP
from agents.oracle import OracleSur
from agents.shortest_path import JoinShortestQueue, ShortestPath


def _mabp(**fixed: Any) -> Callable[..., MABP]:
    def build(workload, **kw) -> MABP:
        policy = MABP(workload, **{**fixed, **kw})
        return policy

    return build


def _gnn(workload, **kw) -> Policy:
    from agents.gnn import GNNPolicy  # torch and PyG load only when a GNN is asked for

    return GNNPolicy(workload, **kw)


def _learn_mabp(workload, **kw) -> Policy:
    from agents.learn_mabp import LearnMABP

    return LearnMABP.from_checkpoint(workload, **kw)


_REGISTRY: dict[str, Callable[..., Policy]] = {
    "sp": ShortestPath,
    "jsq": JoinShortestQueue,
    "bp": make_bp,
    "cost-bp": make_cost_bp,
    "greedycache-bp": make_greedycache_bp,
    "mabp": _mabp(),
    "mabp-no-transition": _mabp(transition=False),
    "mabp-no-reuse": _mabp(reuse=False),
    "mabp-no-retention": _mabp(retention=False),
    "oracle-sur": OracleSur,
    "frame-mabp": FrameMABP,
    "gnn": _gnn,
    "learn-mabp": _learn_mabp,
}
POLICIES: tuple[str, ...] = tuple(_REGISTRY)


def make_policy(name: str, env_or_workload: Any, **kw: Any) -> Policy:
    """Build policy ``name`` for a workload name, a ``Workload`` or an mabp_gym env.

    With an env, the env's ``nu`` and ``memory`` settings are used unless given in ``kw``.
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}; choose one of {POLICIES}")
    workload, settings = resolve_workload(env_or_workload)
    policy = _REGISTRY[name](workload, **{**settings, **kw})
    policy.name = name
    return policy


__all__ = ["MABP", "POLICIES", "Backpressure", "FrameMABP", "JoinShortestQueue", "OracleSur",
           "Policy", "ShortestPath", "make_policy"]
