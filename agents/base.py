"""What every scheduling policy shares: construction, per-episode state, the score layout.

A policy reads the env's observation (so it runs inside any Gymnasium loop) and returns one
score per candidate, ``[service (A) | route (R) | transfer (T) | retain (K)]``; the shared
projection (:func:`mabp_gym.project`) turns scores into a feasible control.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mabp_gym.workload import Workload
from mabp_gym.workloads import make_workload


def resolve_workload(env_or_workload: Any) -> tuple[Workload, dict[str, Any]]:
    """The workload behind a workload name, a :class:`Workload` or a (wrapped) env, and the
    env's ``nu`` / ``memory`` settings when there is an env."""
    if isinstance(env_or_workload, Workload):
        return env_or_workload, {}
    if isinstance(env_or_workload, str):
        return make_workload(env_or_workload), {}
    unwrapped = getattr(env_or_workload, "unwrapped", None)
    workload = getattr(unwrapped, "workload", None)
    if isinstance(workload, Workload):
        return workload, {"nu": unwrapped.nu, "memory": unwrapped.memory}
    raise ValueError("make_policy needs a workload name, a Workload or an mabp_gym env, got "
                     f"{type(env_or_workload).__name__}")


class Policy:
    """Base class: a score rule over the env's observation.

    Args:
        workload: the network (its primitives are the "known primitives").
        nu: weight of the penalty against queues (SPEC 4, paper (16)).
        memory: ``False`` when the policy runs on the no-memory system.
    """

    name = "policy"
    memory_aware = False  # does the rule read the memory state?

    def __init__(self, workload: Workload, *, nu: float = 5.0, memory: bool = True) -> None:
        if not np.isfinite(nu) or nu < 0:
            raise ValueError(f"nu must be a finite number >= 0, got {nu!r}")
        self.workload = workload
        self.nu = float(nu)
        self.memory = bool(memory)
        ix = workload.index
        self.ix = ix
        self.slices = ix.score_slices
        self.t = 0

    def reset(self, seed: int | None = None) -> None:
        """Forget per-episode state (averages, recency)."""
        self.t = 0

    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """One score per candidate for this slot's observation, ``(D,)`` float64."""
        result = np.full(self.ix.num_scores, -1.0)
        queues = np.asarray(obs["queues"], dtype=np.float64)
        self._fill(obs, queues, result)
        self.t += 1
        return result

    __call__ = scores

    def _fill(self, obs: dict[str, np.ndarray], queues: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    # -- shared pieces --------------------------------------------------------------------
    def pair_backlog(self, queues: np.ndarray) -> np.ndarray:
        """Backlog per admissible pair, ``(P,)``."""
        return queues[self.ix.pair_node, self.ix.pair_commodity]


class RecencyRetention:
    """Most-recently-used retention that never reads memory.

    A retain candidate ``(i, s)`` was "used" in the last slot in which node ``i`` had
    units queued of a commodity that ``s`` makes a hit there; priorities decay with the
    slots since then, so the projection keeps the most recently used objects that fit.
    """

    def __init__(self, workload: Workload) -> None:
        ix = workload.index
        compat = np.zeros((ix.num_retains, ix.num_commodities), dtype=bool)
        retain_of = ix.retain_of
        for a in np.flatnonzero(ix.action_signature >= 0):
            k = retain_of[ix.action_node[a], ix.action_signature[a]]
            if k >= 0:
                compat[k, ix.action_commodity[a]] = True
        self._compat = compat
        self._node = ix.retain_node
        self.last_used = np.full(ix.num_retains, -1e9)

    def reset(self) -> None:
        self.last_used[:] = -1e9

    def priorities(self, queues: np.ndarray, t: int) -> np.ndarray:
        wanted = (self._compat * queues[self._node]).sum(axis=1) > 0
        self.last_used[wanted] = t
        return 1.0 / (1.0 + np.minimum(t - self.last_used, 1e6))
