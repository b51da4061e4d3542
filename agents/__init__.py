"""Scheduling policies for mabp-gym, all scoring candidates for the shared projection.

``make_policy(name, env_or_workload, **kw)`` builds a registered policy; ``POLICIES``
lists the built-in names. The registry itself is :mod:`mabp_gym.registry`: it names each
policy by an entry-point string, so the core never imports this package. Every policy
follows :class:`mabp_gym.policy.Policy` (``reset(seed)``, ``act(obs, state)``); score
policies also expose ``scores(obs)``, exact-control agents (``oracle-sur``,
``frame-mabp``) ``control(state, obs)``.
"""

from __future__ import annotations

from mabp_gym.agents.backpressure import Backpressure
from mabp_gym.agents.base import Policy
from mabp_gym.agents.frame_mabp import FrameMABP
from mabp_gym.agents.mabp import MABP
from mabp_gym.agents.oracle import OracleSur
from mabp_gym.agents.shortest_path import JoinShortestQueue, ShortestPath
from mabp_gym.registry import POLICIES, make_policy, register_policy

__all__ = [
    "MABP",
    "POLICIES",
    "Backpressure",
    "FrameMABP",
    "JoinShortestQueue",
    "OracleSur",
    "Policy",
    "ShortestPath",
    "make_policy",
    "register_policy",
]
