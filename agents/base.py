"""What every scheduling policy shares: construction, per-episode state, the score layout.

A policy reads the env's observation (so it runs inside any Gymnasium loop) and returns one
score per candidate, ``[service (A) | route (R) | transfer (T) | retain (K)]``; the shared
projection (:func:`mabp_gym.project`) turns scores into a feasible control.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mabp_gym.core.index import WorkloadIndex
from mabp_gym.core.state import SimState
from mabp_gym.core.validate import is_real
from mabp_gym.core.workload import Workload


class Policy:
    """Base class: a score rule over the env's observation.

    Args:
        workload: the network (its primitives are the "known primitives").
        nu: weight of the penalty against queues (SPEC 4, paper (16)).
        memory: ``False`` when the policy runs on the no-memory system.
    """

    name = "policy"
    memory_aware = False  # does the rule read the memory state?
    observes = True  # act() reads the observation (mabp_gym.policy.Policy)

    def __init__(self, workload: Workload, *, nu: float = 5.0, memory: bool = True) -> None:
        if not is_real(nu) or not np.isfinite(nu) or nu < 0:
            raise ValueError(f"nu must be a finite number >= 0, got {nu!r}")
        if not isinstance(memory, (bool, np.bool_)):
            raise ValueError(f"memory must be True or False, got {memory!r}")
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
        queues = self._queues(obs)
        self._fill(obs, queues, result)
        self.t += 1
        return result

    __call__ = scores

    def act(self, obs: dict[str, np.ndarray] | None, state: SimState) -> np.ndarray:
        """The :class:`mabp_gym.policy.Policy` decision: this slot's scores."""
        assert obs is not None, "a score policy observes (observes = True)"
        return self.scores(obs)

    def _fill(self, obs: dict[str, np.ndarray], queues: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    def _queues(self, obs: Any) -> np.ndarray:
        """``obs["queues"]``, checked to be this workload's dict observation."""
        try:
            queues = np.asarray(obs["queues"], dtype=np.float64)
        except (IndexError, KeyError, TypeError, ValueError):  # a flat array, say
            raise ValueError(
                f"policy {self.name!r} reads the env's dict observation (obs_mode='dict', no "
                f"FlattenObservation), got {type(obs).__name__}"
            ) from None
        expected = (self.ix.num_nodes, self.ix.num_commodities)
        if queues.shape != expected and queues.shape[1:] == expected:
            raise ValueError(
                f"policy {self.name!r} scores one env's observation, got a batch of "
                f"{queues.shape[0]} (a vector env's): score each env's own, obs[k] per key"
            )
        if queues.shape != expected:
            raise ValueError(
                f"policy {self.name!r} was made for {self.workload.name!r} (queues {expected}), "
                f"got an observation with queues {queues.shape}: another workload's"
            )
        shapes = self._observation_shapes()
        try:  # the common case in one comparison (about 1 us a slot)
            if tuple([obs[key].shape for key in shapes]) == self._shape_row:
                return queues
        except (KeyError, AttributeError, TypeError):
            pass
        for key, shape in shapes.items():
            value = obs.get(key) if isinstance(obs, dict) else None
            # Two networks can share the queues' shape (rag and agentic): the compiled
            # rules would then read past the candidate arrays of the other's observation.
            if value is not None and np.shape(value) != shape:
                raise ValueError(
                    f"policy {self.name!r} was made for {self.workload.name!r} ({key} "
                    f"{shape}), got an observation with {key} {np.shape(value)}: another "
                    "workload's"
                )
        return queues

    def _observation_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every array of this workload's observation (built on first use)."""
        shapes: dict[str, tuple[int, ...]] | None = getattr(self, "_shapes", None)
        if shapes is None:
            from mabp_gym.core.encoding import ObservationEncoder

            layout = ObservationEncoder(self.workload).layout
            shapes = self._shapes = {k: tuple(v.shape) for k, v in layout.items()}
            self._shape_row = tuple(shapes.values())  # what the common case compares with
        return shapes

    # -- shared pieces --------------------------------------------------------------------
    def pair_backlog(self, queues: np.ndarray) -> np.ndarray:
        """Backlog per admissible pair, ``(P,)``."""
        return queues[self.ix.pair_node, self.ix.pair_commodity]


def successor_support(
    ix: WorkloadIndex, law: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The successor laws as a gather over their support (they have a few outcomes each).

    Args:
        ix: the workload's index.
        law: ``(2, A, C)`` successor probabilities (default: the workload's own, exits
            excluded), e.g. a learner's estimate; the support is where it is nonzero.

    Returns:
        ``positions`` ``(A, W)`` int64, raveled ``(N, C)`` positions of every action's
        successor queues at its node, in commodity order, and ``probs`` ``(2, A, W)``
        float64, their probabilities per hit bit. Padding repeats the node's first
        position with probability 0, so ``(probs * queues.ravel()[positions]).sum(-1)``
        is the successor pressure ``sum_c' P(c'|a) Q_i^c'`` without an ``(A, C)`` product.
    """
    n_comm = ix.num_commodities
    law = ix.successor_law[:, :, :n_comm] if law is None else np.asarray(law, dtype=np.float64)
    support = [np.flatnonzero((law[:, a] > 0).any(axis=0)) for a in range(ix.num_actions)]
    width = max([1, *(len(c) for c in support)])
    positions = np.repeat((ix.action_node * n_comm)[:, None], width, axis=1)
    probs = np.zeros((2, ix.num_actions, width))
    for a, outcomes in enumerate(support):
        positions[a, : len(outcomes)] = ix.action_node[a] * n_comm + outcomes
        probs[:, a, : len(outcomes)] = law[:, a, outcomes]
    return positions, probs


def compatible_support(ix: WorkloadIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per retain candidate ``(i, s)``, the raveled ``(N, C)`` positions of the commodities
    that ``s`` makes hits at ``i``: ``positions`` ``(K, W)`` int64 and ``valid`` ``(K, W)``
    float64 (1 for a position, 0 for padding)."""
    n_comm = ix.num_commodities
    served = [
        sorted({int(ix.action_commodity[a]) for a in members}) for members in ix.retain_actions
    ]
    width = max([1, *(len(c) for c in served)])
    positions = np.repeat((ix.retain_node * n_comm)[:, None], width, axis=1)
    valid = np.zeros((ix.num_retains, width))
    for k, commodities in enumerate(served):
        positions[k, : len(commodities)] = ix.retain_node[k] * n_comm + np.asarray(
            commodities, dtype=np.int64
        )
        valid[k, : len(commodities)] = 1.0
    return positions, valid


class RecencyRetention:
    """Most-recently-used retention that never reads memory.

    A retain candidate ``(i, s)`` was "used" in the last slot in which node ``i`` had
    units queued of a commodity that ``s`` makes a hit there; priorities decay with the
    slots since then, so the projection keeps the most recently used objects that fit.
    """

    def __init__(self, workload: Workload) -> None:
        ix = workload.index
        self._positions, self._valid = compatible_support(ix)  # (K, W), (K, W)
        self.last_used = np.full(ix.num_retains, -1e9)

    def reset(self) -> None:
        self.last_used[:] = -1e9

    def priorities(self, queues: np.ndarray, t: int) -> np.ndarray:
        wanted = self.demand(queues) > 0
        self.last_used[wanted] = t
        return 1.0 / (1.0 + np.minimum(t - self.last_used, 1e6))

    def demand(self, queues: np.ndarray) -> np.ndarray:
        """Queued units per retain candidate of the commodities its object makes hits,
        ``(K,)`` (``queues``: the ``(N, C)`` backlog)."""
        return (self._valid * queues.ravel()[self._positions]).sum(axis=1)
