"""What the training entry points share: seeding, teacher rollouts (their command lines are
:mod:`mabp_gym.training.arguments`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mabp_gym.core.simulator import Simulator, SlotOutcome
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import make_workload
from mabp_gym.rollout import episode

ScoreCallable = Callable[[dict[str, np.ndarray]], np.ndarray]


FINAL_EVAL_SEED = 200
"""First seed of a trainer's final evaluation (``--eval-seeds`` of them): no training
episode or checkpoint choice uses it."""


def final_eval_seeds(count: int) -> range:
    return range(FINAL_EVAL_SEED, FINAL_EVAL_SEED + count)


def check_network(
    workload: str,
    option: str = "--workload",
    *,
    instead: str = "train on another network",
    **overrides: Any,
) -> None:
    """Refuse a workload that is not one (``make_workload``'s error) or that the
    benchmark's generalisation track holds out (its networks are never trained on);
    ``option`` names what gave it, ``instead`` what to do about a held-out one."""
    from mabp_gym.core.held_out import held_out_reason

    reason = held_out_reason(make_workload(workload, **overrides))
    if reason is not None:
        raise ValueError(f"{option} {workload}: {reason}; {instead}")


def check_held_out(seed: Any, training: set[int], held_out: dict[str, Any], hint: str) -> None:
    """Refuse a ``--seed`` whose training episodes would start from a held-out seed (a
    result on it would not be held out), naming whose seeds and what to avoid.

    Args:
        training: every seed a training episode starts from.
        held_out: whose seeds ("the final evaluation's") -> the seeds.
        hint: how the training seeds follow from ``--seed``.
    """
    from mabp_gym.harness.bench import EVALUATION_SEEDS

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {seed!r}")
    for whose, seeds in {**held_out, "the benchmark's": EVALUATION_SEEDS}.items():
        used = sorted(training & set(seeds))
        if used:
            raise ValueError(
                f"--seed {seed}: training would start episodes from seeds {used}, {whose} "
                f"(held out); choose a --seed whose training seeds ({hint}) avoid them"
            )


def seed_everything(seed: int) -> None:
    """Seed Python, numpy's legacy global state (libraries may use it) and torch."""
    import torch

    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - third-party code may read the global state
    torch.manual_seed(seed)


class _Labelled:
    """The policy :func:`rollout` runs: the teacher labels every slot, the actor (or the
    teacher) acts, with Gaussian exploration noise on the executed scores only."""

    name = "labelled"
    observes = True

    def __init__(
        self,
        teacher: ScoreCallable | None,
        actor: ScoreCallable | None,
        noise: float,
        rng: np.random.Generator,
    ) -> None:
        if teacher is None and actor is None:
            raise ValueError("rollout needs a teacher or an actor")
        self.teacher, self.actor, self.noise, self.rng = teacher, actor, noise, rng
        self.target: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> None:
        self.target = None

    def act(self, obs: dict[str, np.ndarray] | None, state: Any) -> np.ndarray:
        assert obs is not None
        self.target = self.teacher(obs) if self.teacher is not None else None
        scores = self.actor(obs) if self.actor is not None else self.target
        assert scores is not None
        if self.noise > 0:
            scores = scores + self.rng.normal(0.0, self.noise, scores.shape)
        return scores


def rollout(
    workload: Workload,
    teacher: ScoreCallable | None,
    seed: int,
    slots: int,
    *,
    actor: ScoreCallable | None = None,
    noise: float = 0.0,
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray | None, SlotOutcome]]:
    """Yield ``(observation, teacher scores, outcome)`` slot by slot.

    The teacher is called exactly once per slot (policies keep per-episode averages). The
    executed scores are the teacher's, or ``actor``'s when given; ``noise > 0`` adds
    Gaussian noise to the executed scores (never to the labels), so the states visited
    spread beyond one policy's own trajectory. The slots are those of the harness's loop
    (:func:`mabp_gym.rollout.episode`), every control checked.
    """
    policy = _Labelled(teacher, actor, noise, np.random.default_rng(seed + 7919))
    sim = Simulator(workload)
    sim.reset(seed)
    for slot in episode(sim, policy, slots, check=True):
        assert slot.obs is not None
        yield slot.obs, policy.target, slot.outcome
