"""What the training entry points share: argument dataclasses on the command line, seeding,
devices, teacher rollouts."""

from __future__ import annotations

import argparse
import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any, get_type_hints

import numpy as np
import torch

from mabp_gym.env import ObservationEncoder
from mabp_gym.simulator import Simulator, SlotOutcome
from mabp_gym.workload import Workload


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--field`` option per dataclass field, typed, with the field's doc as help."""
    hints = get_type_hints(cls)
    docs = getattr(cls, "__field_docs__", {})
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        option = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        help_text = f"{docs.get(f.name, '')} (default: {default})"
        if kind is bool:
            parser.add_argument(option, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=default, help=help_text)
        elif kind in (int, float, str):
            parser.add_argument(option, dest=f.name, type=kind, default=default, help=help_text)
        elif kind == (str | None):
            parser.add_argument(option, dest=f.name, type=str, default=default, help=help_text)
        elif kind == list[float]:
            parser.add_argument(option, dest=f.name, type=float, nargs="+", default=default,
                                help=help_text)
        elif kind == list[int]:
            parser.add_argument(option, dest=f.name, type=int, nargs="+", default=default,
                                help=help_text)
        else:  # pragma: no cover - a field type this helper does not know
            raise TypeError(f"unsupported field type {kind} for {f.name}")


def command_line(learner: str, args: Any) -> str:
    """The ``mabp-gym train`` command that reproduces a run (recorded in checkpoints)."""
    parts = []
    for key, value in dataclasses.asdict(args).items():
        if value is None or isinstance(value, bool):
            continue
        text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(f"--{key.replace('_', '-')} {text}")
    return f"mabp-gym train {learner} " + " ".join(parts)


def from_namespace(cls: type, namespace: argparse.Namespace) -> Any:
    return cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)})


def seed_everything(seed: int) -> None:
    """Seed Python, numpy's legacy global state (libraries may use it) and torch."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - third-party code may read the global state
    torch.manual_seed(seed)


def rollout(workload: Workload, teacher: Callable[[dict[str, np.ndarray]], np.ndarray] | None,
            seed: int, slots: int, *,
            actor: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
            noise: float = 0.0
            ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray | None, SlotOutcome]]:
    """Yield ``(observation, teacher scores, outcome)`` slot by slot.

    The teacher is called exactly once per slot (policies keep per-episode averages). The
    executed scores are the teacher's, or ``actor``'s when given; ``noise > 0`` adds
    Gaussian noise to the executed scores (never to the labels), so the states visited
    spread beyond one policy's own trajectory.
    """
    sim = Simulator(workload)
    sim.reset(seed)
    encoder = ObservationEncoder(workload)
    rng = np.random.default_rng(seed + 7919)
    for _ in range(slots):
        obs = encoder.encode(sim.state)
        target = teacher(obs) if teacher is not None else None
        scores = actor(obs) if actor is not None else target
        if scores is None:
            raise ValueError("rollout needs a teacher or an actor")
        if noise > 0:
            scores = scores + rng.normal(0.0, noise, scores.shape)
        outcome = sim.step(sim.project(scores))
        yield obs, target, outcome
