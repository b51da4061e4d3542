"""Learn-MABP: MABP run with frozen estimates of the primitives learned from interaction.

The estimator sees what a serving system observes per completed unit: the action, whether
it was memory-assisted (the hit bit), the successor it created (or exit), its work and its
penalty. Per (action, hit) it fits, in torch on ``cuda`` when present, the maximum-likelihood
estimates: mean work, mean penalty and the empirical successor law. MABP then runs on the
frozen estimates. Pairs never seen fall back to the no-reuse (miss) primitives: an unseen
hit uses the action's estimated miss primitives; an action never seen at all uses the mean
work and penalty of its node's seen actions and exits.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mabp_gym.agents import checkpoint_file
from mabp_gym.agents.checkpoint_file import given_checkpoint, missing_checkpoint
from mabp_gym.agents.mabp import MABP, Primitives
from mabp_gym.core.workload import Workload

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"


class PrimitiveEstimate:
    """Estimated primitives ``work (2, A)``, ``penalty (2, A)``, ``law (2, A, C)`` (the
    exit probability is the remainder) and ``seen (2, A)``, rows indexed by the hit bit."""

    def __init__(
        self,
        work: np.ndarray,
        penalty: np.ndarray,
        law: np.ndarray,
        seen: np.ndarray,
        counts: np.ndarray,
    ) -> None:
        self.work, self.penalty, self.law = work, penalty, law
        self.seen, self.counts = seen, counts

    @classmethod
    def fit(
        cls,
        workload: Workload,
        units: Iterable[tuple[int, int, int, float, float]],
        device: str = "cpu",
    ) -> PrimitiveEstimate:
        """Maximum-likelihood fit from ``(action, hit, successor or -1, work, penalty)``."""
        ix = workload.index
        rows = np.asarray(list(units), dtype=np.float64).reshape(-1, 5)
        a_n, c_n = ix.num_actions, ix.num_commodities
        action = torch.as_tensor(rows[:, 0], dtype=torch.long, device=device)
        hit = torch.as_tensor(rows[:, 1], dtype=torch.long, device=device)
        successor = torch.as_tensor(rows[:, 2], dtype=torch.long, device=device)
        successor = torch.where(successor < 0, torch.full_like(successor, c_n), successor)
        cell = hit * a_n + action
        counts = torch.zeros(2 * a_n, device=device, dtype=torch.float64)
        counts.index_add_(0, cell, torch.ones_like(cell, dtype=torch.float64))
        sums = torch.zeros(2, 2 * a_n, device=device, dtype=torch.float64)
        values = torch.as_tensor(rows[:, 3:5].T.copy(), device=device)
        sums[0].index_add_(0, cell, values[0])
        sums[1].index_add_(0, cell, values[1])
        outcomes = torch.zeros(2 * a_n * (c_n + 1), device=device, dtype=torch.float64)
        outcomes.index_add_(
            0, cell * (c_n + 1) + successor, torch.ones_like(cell, dtype=torch.float64)
        )
        safe = counts.clamp(min=1.0)
        work = (sums[0] / safe).view(2, a_n)
        penalty = (sums[1] / safe).view(2, a_n)
        law = (outcomes.view(2 * a_n, c_n + 1) / safe[:, None]).view(2, a_n, c_n + 1)
        counts = counts.view(2, a_n)
        estimate = cls(
            work.cpu().numpy(),
            penalty.cpu().numpy(),
            law[..., :c_n].cpu().numpy(),
            (counts > 0).cpu().numpy(),
            counts.cpu().numpy(),
        )
        estimate._fill_unseen(workload)
        return estimate

    def _fill_unseen(self, workload: Workload) -> None:
        ix = workload.index
        miss_seen = self.seen[0]
        for a in range(ix.num_actions):
            if not miss_seen[a]:
                node = ix.action_node == ix.action_node[a]
                known = node & miss_seen
                self.work[0, a] = self.work[0, known].mean() if known.any() else 1.0
                self.penalty[0, a] = self.penalty[0, known].mean() if known.any() else 0.0
                self.law[0, a] = 0.0
            if not self.seen[1, a]:
                self.work[1, a] = self.work[0, a]
                self.penalty[1, a] = self.penalty[0, a]
                self.law[1, a] = self.law[0, a]

    def primitives(self) -> Primitives:
        """The estimates as the :class:`~mabp_gym.agents.mabp.Primitives` MABP scores with."""
        return Primitives(work=self.work, penalty=self.penalty, law=self.law)

    def errors(self, workload: Workload) -> dict[str, float]:
        """Estimation error against the true primitives, over the pairs seen."""
        ix = workload.index
        seen = self.seen
        true_law = ix.successor_law[:, :, :-1]
        total_variation = 0.5 * (
            np.abs(self.law - true_law).sum(axis=2)
            + np.abs((1 - self.law.sum(axis=2)) - ix.successor_law[:, :, -1])
        )
        return {
            "pairs_seen": int(seen.sum()),
            "pairs": int(seen.size),
            "work_abs_error": float(np.abs(self.work - ix.work)[seen].mean()),
            "penalty_abs_error": float(np.abs(self.penalty - ix.penalty)[seen].mean()),
            "successor_tv_mean": float(total_variation[seen].mean()),
            "successor_tv_max": float(total_variation[seen].max()),
        }

    _ARRAYS = ("work", "penalty", "law", "seen", "counts")

    def save(self, path: str | Path, workload: Workload, **extra: Any) -> str:
        """Save the estimates as tensors with the full description of ``workload``
        (``extra``: JSON-serializable notes); return the content digest."""
        from mabp_gym.agents.gnn import shape_of

        tensors = {name: torch.as_tensor(np.asarray(getattr(self, name))) for name in self._ARRAYS}
        meta = {
            "workload": workload.name,
            "shape": shape_of(workload),
            "workload_identity": checkpoint_file.workload_identity(workload),
            **extra,
        }
        return checkpoint_file.save(path, "learn-mabp", tensors, meta)

    @classmethod
    def load(cls, path: str | Path, workload: Workload) -> tuple[PrimitiveEstimate, dict]:
        """Read estimates (``weights_only=True``, digest verified) made for ``workload``.

        Raises:
            ValueError: the file is not a sound Learn-MABP checkpoint, or was fitted on a
                workload of another shape or with other parameters (they are named): the
                estimates of one network say nothing about another.
        """
        from mabp_gym.agents.gnn import shape_of

        tensors, meta = checkpoint_file.load(path, "learn-mabp")
        if meta.get("shape") != shape_of(workload):
            raise ValueError(
                f"checkpoint {path} was fitted on workload {meta.get('workload')!r} with shape "
                f"{meta.get('shape')}, but this workload {workload.name!r} has shape "
                f"{shape_of(workload)}"
            )
        checkpoint_file.check_workload(meta, workload, path)
        ix = workload.index
        a_n, c_n = ix.num_actions, ix.num_commodities
        expected = {
            "work": (2, a_n),
            "penalty": (2, a_n),
            "law": (2, a_n, c_n),
            "seen": (2, a_n),
            "counts": (2, a_n),
        }
        for name, shape in expected.items():
            if name not in tensors or tuple(tensors[name].shape) != shape:
                raise ValueError(f"{path}: damaged checkpoint: {name} should have shape {shape}")
        arrays = {name: tensors[name].numpy() for name in cls._ARRAYS}
        return cls(
            arrays["work"], arrays["penalty"], arrays["law"], arrays["seen"], arrays["counts"]
        ), meta


def default_checkpoint(workload_name: str) -> Path:
    """The shipped checkpoint ``make_policy("learn-mabp", ...)`` loads for a workload."""
    return checkpoint_file.default_checkpoint("learn-mabp", workload_name)


class LearnMABP(MABP):
    """MABP whose work, penalty and successor law are frozen estimates.

    Args:
        workload: the network.
        estimate: the fitted primitives, passed to MABP as its ``primitives`` (so MABP's
            ``reuse`` has no effect: the estimated penalty is what was observed).
        **kw: MABP's other keyword arguments.
    """

    name = "learn-mabp"

    def __init__(self, workload: Workload, estimate: PrimitiveEstimate, **kw: Any) -> None:
        if "primitives" in kw:
            raise TypeError("LearnMABP takes its primitives from estimate, not primitives=")
        super().__init__(workload, primitives=estimate.primitives(), **kw)
        self.estimate = estimate

    @classmethod
    def from_checkpoint(
        cls, workload: Workload, checkpoint: str | Path | None = None, **kw: Any
    ) -> LearnMABP:
        path = given_checkpoint(checkpoint, lambda: default_checkpoint(workload.name))
        if not path.exists():
            raise ValueError(missing_checkpoint("learn-mabp", path, workload, "Learn-MABP"))
        estimate, _ = PrimitiveEstimate.load(path, workload)
        return cls(workload, estimate, **kw)
