"""The simulator state: FIFO queues of birth slots and object identities per node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mabp_gym.core.workload import Workload


class Fifo(Protocol):
    """The waiting units of every admissible pair: their birth slots, oldest first
    (:class:`mabp_gym.core.kernels.transition_core.RunFifo`: runs of equal birth slots in
    flat arrays, which the transition's kernels update in place)."""

    def births(self, pair: int) -> list[int]:
        """Birth slots of the units waiting at ``pair``, oldest first."""
        ...

    def lengths(self) -> list[int]:
        """Units waiting per pair, recounted from the contents."""
        ...

    def heads(self) -> tuple[np.ndarray, np.ndarray]:
        """``(pairs, births)``: every nonempty pair and its oldest unit's birth slot."""
        ...

    def extend(self, pair: int, birth: int, count: int) -> None:
        """Append ``count`` units born in ``birth`` to ``pair``."""
        ...


@dataclass
class SimState:
    """State at the start of a slot (``Q(t)``, ``Y^-(t)`` and units in service).

    Queues hold waiting units only; a unit in multi-slot service is held by its node
    (``service_*``) and still counts in the backlog.
    """

    t: int
    fifo: Fifo  # per admissible pair: birth slots of waiting units, oldest first
    queue_len: np.ndarray  # (P,) int64, len of each queue
    holder: np.ndarray  # (N, S) int64, identity the node holds of each signature, -1 none
    owner: np.ndarray  # (M,) int64, node holding each identity, -1 free
    memory_used: np.ndarray  # (N,) float64, size units resident
    service_action: np.ndarray  # (N,) int64, action of the unit in service, -1 none
    service_residual: np.ndarray  # (N,) float64, work the unit in service still needs
    service_hit: np.ndarray  # (N,) int64, hit bit fixed when the unit started
    service_birth: np.ndarray  # (N,) int64, birth slot of the unit in service
    units: int = 0  # ||Q||_1 kept by arrivals minus exits; invariant mode recounts it

    @classmethod
    def empty(cls, workload: Workload, fifo: Fifo) -> SimState:
        """No units, no objects, slot 0, waiting units in ``fifo`` (empty)."""
        ix = workload.index
        return cls(
            t=0,
            fifo=fifo,
            queue_len=np.zeros(ix.num_pairs, dtype=np.int64),
            holder=np.full((ix.num_nodes, ix.num_signatures), -1, dtype=np.int64),
            owner=np.full(ix.num_objects, -1, dtype=np.int64),
            memory_used=np.zeros(ix.num_nodes),
            service_action=np.full(ix.num_nodes, -1, dtype=np.int64),
            service_residual=np.zeros(ix.num_nodes),
            service_hit=np.zeros(ix.num_nodes, dtype=np.int64),
            service_birth=np.zeros(ix.num_nodes, dtype=np.int64),
        )

    def check_fits(self, workload: Workload) -> None:
        """Raise ``ValueError`` unless this state's arrays are shaped for ``workload`` and
        index only its actions, objects and nodes: the compiled kernels read a state of
        another workload past its arrays' ends (and a wrong control came back, or the
        process crashed)."""
        ix = workload.index
        nodes = (ix.num_nodes,)
        expected = {
            "queue_len": (ix.num_pairs,),
            "holder": (ix.num_nodes, ix.num_signatures),
            "owner": (ix.num_objects,),
            "memory_used": nodes,
            "service_action": nodes,
            "service_residual": nodes,
            "service_hit": nodes,
            "service_birth": nodes,
        }
        for name, shape in expected.items():
            got = np.shape(getattr(self, name))
            if got != shape:
                raise ValueError(
                    f"the state is not one of {workload.name!r}: its {name} is {got}, the "
                    f"workload's {shape} (a state of another workload?)"
                )
        for name, bound in (
            ("service_action", ix.num_actions),
            ("holder", ix.num_objects),
            ("owner", ix.num_nodes),
        ):
            values = getattr(self, name)
            if values.size and (values.max() >= bound or values.min() < -1):
                raise ValueError(
                    f"the state is not one of {workload.name!r}: its {name} holds "
                    f"{int(values.max())}, and the workload has {bound} (a state of another "
                    "workload?)"
                )

    @property
    def queues(self) -> list[tuple[int, ...]]:
        """Birth slots of the waiting units per pair, oldest first (a copy)."""
        return [tuple(self.fifo.births(p)) for p in range(self.queue_len.shape[0])]

    def backlog_pairs(self, workload: Workload) -> np.ndarray:
        """Units per admissible pair, those in service included: ``(P,)`` int64."""
        backlog = self.queue_len.copy()
        action_pair = workload.index.fast.action_pair
        for a in self.service_action.tolist():  # a few nodes: cheaper than np.add.at
            if a >= 0:
                backlog[action_pair[a]] += 1
        return backlog

    def backlog_matrix(self, workload: Workload) -> np.ndarray:
        """``Q`` as an ``(N, C)`` int64 matrix, units in service included."""
        ix = workload.index
        matrix = np.zeros((ix.num_nodes, ix.num_commodities), dtype=np.int64)
        matrix[ix.pair_node, ix.pair_commodity] = self.backlog_pairs(workload)
        return matrix
