"""Residual-MABP: MABP's scores plus a learned correction that starts at zero.

The correction is linear in a few features of each candidate that the env's observation
holds (:data:`FEATURES`), one weight per feature and candidate kind, added to MABP's own
score of that candidate before the shared projection. With every weight 0 the policy *is*
MABP: the same scores, hence the same controls, slot for slot (tested). What the weights
can express is the part of frame-MABP's plan that one slot sees: ranking hits of a
resident object above misses (batches form behind one miss instead of the miss of a long
queue evicting an object whose batch was still coming), by queue length, and keeping held
objects with demand.

The weights are learned against the simulator by the cross-entropy method on training
seeds near the bound (:mod:`mabp_gym.training.residual_mabp`); the shipped checkpoint names
its seeds, loads and budget in env steps.

Every weight is per feature and candidate kind, shared by all candidates of every network,
so the same weights run on any network. A checkpoint trained on a family of networks
(``--family``) records no workload and loads on any one: ``residual-mabp-any`` runs the
shipped one (``residual_mabp_any.pt``), zero-shot on networks it never saw.

The correction acts only on a network that can hold memory (:func:`holds_memory`) and a
policy built with ``memory=True``. Elsewhere (no node with room for an object it uses, or
the no-memory ablation), the policy is its base, slot for slot: its features are about
objects, the learned queue terms among them were tuned on networks where memory is what
they trade against, and on the one memoryless network tried they ranged from 0.6 to 3.3
times MABP's P95 delay with the training seed (``docs/learning.md``). MABP's own rule is
what the theory backs there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.agents.base import Policy
from mabp_gym.agents.checkpoint_file import missing_checkpoint
from mabp_gym.agents.frame_mabp import FrameMABP
from mabp_gym.agents.mabp import MABP
from mabp_gym.agents.residual_mabp_core import correct_scores
from mabp_gym.core.kernels import jit
from mabp_gym.core.workload import Workload

FEATURES: tuple[str, ...] = (
    "service.hit",
    "service.hit_log_queue",
    "service.miss_log_queue",
    "service.log_successor_pressure",
    "route.dst_compatible_memory",
    "route.log_queue",
    "retain.held",
    "retain.log_demand",
)
"""The correction's features, one weight each; ``log`` is ``log(1 + x)``."""

COMPILE_AFTER = 20_000
"""Corrections this process makes with numpy before it compiles the kernel: compiling
takes about 0.45 s once per install (cached on disk after), about what this many
corrections save (the kernel takes about 20 us less a slot:
``benchmarks/bench_objective.py``). Where the disk cache holds it, it runs at once."""
WARMUP = jit.Warmup(correct_scores)

KIND = "residual-mabp"
ANY = "any"
"""The ``networks`` a family-trained checkpoint records: it runs on every network."""


class ResidualMABP(Policy):
    """MABP plus ``weights . features`` per candidate.

    Args:
        workload: the network.
        weights: one per :data:`FEATURES` (default: all 0, exactly MABP).
        nu, memory: as for every policy.
        **mabp_kw: passed to the composed :class:`mabp_gym.agents.mabp.MABP`.
    """

    name = "residual-mabp"
    memory_aware = True

    def __init__(
        self,
        workload: Workload,
        *,
        weights: Any = None,
        nu: float = 5.0,
        memory: bool = True,
        **mabp_kw: Any,
    ) -> None:
        super().__init__(workload, nu=nu, memory=memory)
        self.weights = check_weights(weights)
        self.acting = self.memory and holds_memory(workload)
        """Whether the correction acts here (memory on, :func:`holds_memory`); else this
        is MABP."""
        self.mabp = MABP(workload, nu=nu, memory=memory, **mabp_kw)

    @classmethod
    def from_checkpoint(
        cls, workload: Workload, checkpoint: str | Path | None = None, **kw: Any
    ) -> ResidualMABP:
        """The policy with the weights of a checkpoint (default: the shipped one for the
        workload). ``weights=`` instead of a checkpoint builds it without a file."""
        return _built(cls, workload, checkpoint, None, kw)

    @classmethod
    def any_network(
        cls, workload: Workload, checkpoint: str | Path | None = None, **kw: Any
    ) -> ResidualMABP:
        """``residual-mabp-any``: the policy with a family-trained checkpoint's weights
        (default: the shipped ``residual_mabp_any.pt``) on any network.

        Raises:
            ValueError: the checkpoint was trained for one workload only.
        """
        return _built(cls, workload, checkpoint, "residual-mabp-any", kw, family_only=True)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self.mabp.reset(seed)

    def _fill(self, obs: dict[str, np.ndarray], queues: np.ndarray, out: np.ndarray) -> None:
        out[:] = self.mabp.scores(obs)
        if self.acting:
            correct(self.weights, obs, self.slices, out, live_only=False)


class ResidualFrameMABP(FrameMABP):
    """Frame-MABP plus ``weights . features`` per candidate (``residual-frame-mabp``): the
    same correction as :class:`ResidualMABP`, over frame-MABP's scores, so the frame plan,
    its batching and its sibling caps stay and the weights reorder within them. A service
    candidate frame-MABP holds back (score -1) stays held back. With every weight 0, on a
    network that cannot hold memory, or with ``memory=False``, the policy is frame-MABP.
    """

    name = "residual-frame-mabp"

    def __init__(self, workload: Workload, *, weights: Any = None, **kw: Any) -> None:
        super().__init__(workload, **kw)
        self.weights = check_weights(weights)
        self.acting = self.memory and holds_memory(workload)

    @classmethod
    def from_checkpoint(
        cls, workload: Workload, checkpoint: str | Path | None = None, **kw: Any
    ) -> ResidualFrameMABP:
        """The policy with a checkpoint's weights (default: the shipped family-trained
        ``residual_frame_mabp_any.pt``, which runs on every network); ``weights=`` instead
        of a checkpoint builds it without a file.

        Raises:
            ValueError: the checkpoint's weights were learned over another base policy.
        """
        return _built(cls, workload, checkpoint, cls.name, kw)

    def _fill(self, obs: dict[str, np.ndarray], queues: np.ndarray, out: np.ndarray) -> None:
        super()._fill(obs, queues, out)
        if self.acting:
            correct(self.weights, obs, self.slices, out, live_only=True)


BASES = {"mabp": ResidualMABP, "frame-mabp": ResidualFrameMABP}
"""The policies a correction is learned over, by the base's name (recorded in checkpoints)."""
BASE_OF = {policy: base for base, policy in BASES.items()}


def _built(
    cls: Any,
    workload: Workload,
    checkpoint: str | Path | None,
    family_policy: str | None,
    kw: dict[str, Any],
    *,
    family_only: bool = False,
) -> Any:
    """``cls`` with ``weights=`` from ``kw``, or with a checkpoint's weights: the file
    given, else the shipped checkpoint the registry names for policy ``family_policy`` on
    the workload, else (``None``) residual-mabp's shipped one for the workload.
    ``family_only`` refuses a single-workload one.

    Raises:
        ValueError: weights and a checkpoint both given, or a checkpoint it cannot take.
    """
    from mabp_gym.agents import checkpoint_file

    if "weights" in kw:
        if checkpoint:
            raise ValueError(f"give {cls.name} a checkpoint or weights, not both")
        return cls(workload, **kw)
    if family_policy is not None:
        checkpoint = checkpoint_file.given_checkpoint(
            checkpoint, lambda: checkpoint_file.default_checkpoint(family_policy, workload.name)
        )
    weights, meta = load(checkpoint, workload, BASE_OF[cls], family_policy or cls.name)
    if family_only and meta.get("networks") != ANY:
        raise ValueError(
            f"{checkpoint} was trained for one workload; {family_policy} takes a checkpoint "
            "trained on a family of networks (`mabp-gym train residual-mabp --family ...`)"
        )
    return cls(workload, weights=weights, **kw)


def holds_memory(workload: Workload) -> bool:
    """Whether the network can hold an object anywhere: some node has an action that uses
    an object kind whose size fits the node's budget. The correction acts only on such a
    network."""
    ix = workload.index
    fits = ix.signature_size[None, :] <= ix.budget[:, None] + 1e-9
    return bool((ix.eligible & fits).any())


def correct(
    w: np.ndarray,
    obs: dict[str, np.ndarray],
    slices: tuple[slice, ...],
    out: np.ndarray,
    *,
    live_only: bool,
) -> None:
    """Add the correction ``w . features`` to the base's scores ``out`` in place. A service
    candidate with an empty queue keeps its score, and with ``live_only`` so does one whose
    score is not positive (a base that holds a candidate back keeps it back). Compiled
    (:func:`mabp_gym.agents.residual_mabp_core.correct_scores`: the same scores) once
    :data:`WARMUP` says so, with numpy before that and without numba."""
    if not w.any():
        return
    service = np.asarray(obs["service"], dtype=np.float64)
    route = np.asarray(obs["route"], dtype=np.float64)
    retain = np.asarray(obs["retain"], dtype=np.float64)
    log_queue = np.log1p(service[:, 4])
    log_pressure = np.log1p(np.maximum(service[:, 3], 0.0))
    log_route, log_demand = np.log1p(route[:, 3]), np.log1p(retain[:, 2])
    if jit.COMPILED and WARMUP.due(COMPILE_AFTER):
        starts = (slices[0].start, slices[1].start, slices[3].start)
        logs = (log_queue, log_pressure, log_route, log_demand)
        correct_scores(w, (service, route, retain), logs, starts, live_only, out)
        return
    hit = service[:, 2]
    delta = w[0] * hit + w[1] * hit * log_queue + w[2] * (1.0 - hit) * log_queue
    scores = out[slices[0]]
    live = service[:, 4] > 0
    if live_only:
        live &= scores > 0
    out[slices[0]] = np.where(live, scores + (delta + w[3] * log_pressure), scores)
    out[slices[1]] += w[4] * route[:, 2] + w[5] * log_route
    out[slices[3]] += w[6] * retain[:, 0] + w[7] * log_demand


def check_weights(weights: Any) -> np.ndarray:
    """The weights as a float vector of length ``len(FEATURES)`` (``None``: zeros).

    Raises:
        ValueError: wrong length, or a value that is not a finite number.
    """
    if weights is None:
        return np.zeros(len(FEATURES))
    try:
        array = np.asarray(weights, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"residual-mabp weights must be {len(FEATURES)} numbers ({', '.join(FEATURES)}), "
            f"got {weights!r}"
        ) from error
    if array.size != len(FEATURES) or not np.isfinite(array).all():
        raise ValueError(
            f"residual-mabp weights must be {len(FEATURES)} finite numbers "
            f"({', '.join(FEATURES)}), got {weights!r}"
        )
    return array


def save(path: str | Path, weights: Any, workload: Workload | None, **meta: Any) -> None:
    """Write the weights as a :mod:`~mabp_gym.agents.checkpoint_file` checkpoint, for
    ``workload`` or (``None``) for every network."""
    import torch

    from mabp_gym.agents import checkpoint_file

    tensors = {"weights": torch.as_tensor(check_weights(weights))}
    info: dict[str, Any] = {"features": list(FEATURES)}
    if workload is None:
        info["networks"] = ANY
    else:
        info["workload_identity"] = checkpoint_file.workload_identity(workload)
    checkpoint_file.save(path, KIND, tensors, {**info, **meta})


def load(
    checkpoint: str | Path | None,
    workload: Workload | None,
    base: str = "mabp",
    policy: str = "residual-mabp",
) -> tuple[np.ndarray, dict[str, Any]]:
    """The weights and meta of a checkpoint (default: the shipped one for ``workload``)
    whose correction was learned over the policy ``base`` (:data:`BASES`); ``workload``
    None reads a given file's weights whatever it was trained on (a search's start).

    Raises:
        ValueError: no such file, another kind of checkpoint, other features, another
            base, or a checkpoint made for another workload (the differing parameters
            named); a family-trained one loads for every workload.
    """
    from mabp_gym.agents import checkpoint_file

    path = checkpoint_file.given_checkpoint(
        checkpoint, lambda: checkpoint_file.default_checkpoint(KIND, _name(workload))
    )
    if not path.exists():
        if workload is None:
            raise ValueError(f"no such file: {path}")
        if not holds_memory(workload):
            raise ValueError(
                f"no {policy} checkpoint at {path}, and none is needed: {workload.name} "
                f"cannot hold memory, so {policy} is {base} there (its correction does not "
                f"act); use `{base}`"
            )
        if policy == "residual-mabp":
            raise ValueError(missing_checkpoint(policy, path, workload))
        over = "" if base == "mabp" else f" --base {base}"
        raise ValueError(
            f"no {policy} checkpoint at {path}; train one for every network with "
            f"`mabp-gym train residual-mabp{over} --family ...` (docs/learning.md)"
        )
    tensors, meta = checkpoint_file.load(path, KIND)
    if meta.get("features") != list(FEATURES):
        raise ValueError(
            f"{path}: a residual-mabp checkpoint of features {meta.get('features')}, "
            f"this version reads {list(FEATURES)}"
        )
    learned_over = meta.get("base", "mabp")  # checkpoints before the frame base: MABP's
    if learned_over != base:
        raise ValueError(
            f"{path}: a correction learned over {learned_over}; this policy corrects {base} "
            f"(use {BASES[learned_over].name if learned_over in BASES else 'another policy'})"
        )
    if workload is not None and meta.get("networks") != ANY:  # a family's runs anywhere
        instead = (
            checkpoint_file.ANYWHERE
            if base == "mabp"
            else f"use `{BASES[base].name}` with its shipped checkpoint, which runs on "
            "every network"
        )
        checkpoint_file.check_workload(meta, workload, path, instead)
    return check_weights(tensors["weights"].numpy()), meta


def _name(workload: Workload | None) -> str:
    if workload is None:
        raise ValueError("name the checkpoint file to read")
    return workload.name
