"""The one interface every scheduler implements: :class:`Policy`.

A policy sees, each slot, the env's observation (:class:`~mabp_gym.core.encoding.
ObservationEncoder`) and the simulator state, and returns a *decision*: either one score per
candidate, ``[service (A) | route (R) | transfer (T) | retain (K)]``, which the shared
projection (:func:`mabp_gym.project`) turns into a feasible control, or a
:class:`~mabp_gym.core.control.Control` it built itself (exact agents such as Oracle-Sur), which
is checked for feasibility before it runs. :func:`mabp_gym.rollout.episode` is the one loop
that drives a policy: the evaluation harness, the training code and the CLI all use it.

Scripted agents subclass :class:`mabp_gym.agents.Policy`, whose :meth:`act` returns
``scores(obs)``; anything with these members is a policy (the protocol is structural), and
:class:`ScoreFunction` makes one out of a plain ``f(workload, state) -> scores``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from mabp_gym.core.control import Control
from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Workload

Observation = dict[str, np.ndarray]
"""The env's Dict observation (see :attr:`mabp_gym.core.encoding.ObservationEncoder.layout`)."""
Decision = np.ndarray | Control
"""Scores ``(D,)`` for the shared projection, or a control to execute as it is (checked)."""


@runtime_checkable
class Policy(Protocol):
    """A scheduler: ``reset`` at the start of an episode, ``act`` once per slot.

    Attributes:
        name: the registered name (set by :func:`mabp_gym.registry.make_policy`).
        observes: ``False`` when :meth:`act` reads only the state, so the loop need not
            encode an observation (it then passes ``None``).
    """

    name: str
    observes: bool

    def reset(self, seed: int | None = None) -> None:
        """Forget per-episode state (averages, recency, plans)."""

    def act(self, obs: Observation | None, state: SimState) -> Decision:
        """This slot's decision. ``state`` is read-only: a policy must not change it."""


class ScoreFunction:
    """A :class:`Policy` from a plain score rule ``f(workload, state) -> scores``."""

    observes = False

    def __init__(
        self,
        rule: Callable[[Workload, SimState], np.ndarray],
        workload: Workload,
        name: str | None = None,
    ) -> None:
        self.rule = rule
        self.workload = workload
        self.name: str = name or str(getattr(rule, "__name__", "score-function"))

    def reset(self, seed: int | None = None) -> None:
        """A score rule keeps no state."""

    def act(self, obs: Observation | None, state: SimState) -> np.ndarray:
        return self.rule(self.workload, state)
