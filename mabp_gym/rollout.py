"""The one episode loop: a :class:`~mabp_gym.policy.Policy` on the simulator core.

:func:`episode` yields every slot (observation, decision, outcome, decision time); the
evaluation harness (:func:`mabp_gym.harness.runs.run`), the training code
(:mod:`mabp_gym.training.common`) and the CLI's ``simulate`` all run it, so a slot means
the same thing everywhere. :func:`rollout` collects the :class:`~mabp_gym.core.metrics.Trace`
of a score rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from mabp_gym.core.control import Control
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.core.metrics import Trace
from mabp_gym.core.simulator import Simulator, SlotOutcome
from mabp_gym.core.state import SimState
from mabp_gym.core.validate import check_number
from mabp_gym.core.workload import Workload
from mabp_gym.policy import Decision, Observation, Policy, ScoreFunction

ScoreRule = Callable[[Workload, SimState], np.ndarray]


@dataclass(frozen=True)
class Slot:
    """One simulated slot: what the policy saw, what it decided, what happened."""

    obs: Observation | None
    decision: Decision
    outcome: SlotOutcome
    decision_s: float
    """Seconds the decision took: the policy's, and the projection of its scores when
    controls are checked (with ``check=False`` projection and execution are one call)."""


def episode(
    sim: Simulator,
    policy: Policy,
    slots: int,
    *,
    check: bool = True,
    encoder: ObservationEncoder | None = None,
) -> Iterator[Slot]:
    """Run ``policy`` for ``slots`` slots from the simulator's current state.

    Args:
        sim: a simulator after :meth:`~mabp_gym.core.simulator.Simulator.reset`.
        policy: called once per slot; its scores go through the shared projection.
        slots: how many slots.
        check: check every executed control for feasibility (the evaluation harness).
            ``False`` skips the check for controls the shared projection produced (the
            training path); a control a policy built itself is always checked.
        encoder: the observation encoder (default: one for the simulator's workload;
            none is used when the policy does not observe).
    """
    slots = check_number(slots, "episode: slots", low=0, integer=True)
    observes = getattr(policy, "observes", True)
    if observes and encoder is None:
        encoder = ObservationEncoder(sim.workload, memory=sim.memory)
    for _ in range(slots):
        obs = encoder.encode(sim.state) if encoder is not None and observes else None
        tick = time.perf_counter()
        decision = policy.act(obs, sim.state)
        if isinstance(decision, Control):
            elapsed = time.perf_counter() - tick
            outcome = sim.step(decision)
        elif check:
            control = sim.project(decision)
            elapsed = time.perf_counter() - tick
            outcome = sim.step(control)
        else:
            elapsed = time.perf_counter() - tick
            _, outcome = sim.step_scores(decision)
        yield Slot(obs, decision, outcome, elapsed)


def rollout(
    workload: Workload,
    score_rule: ScoreRule,
    seed: int,
    *,
    horizon: int | None = None,
    memory: bool = True,
    check_invariants: bool = True,
) -> Trace:
    """Simulate ``horizon`` slots (default: the workload's) under ``score_rule``.

    Every control goes through the shared projection; with ``check_invariants`` SPEC 6's
    invariants are asserted and every control is checked after every slot.
    """
    if horizon is not None:
        horizon = check_number(horizon, "rollout: horizon", low=1, integer=True)
    sim = Simulator(workload, memory=memory, check_invariants=check_invariants)
    sim.reset(seed)
    trace = Trace()
    policy = ScoreFunction(score_rule, workload)
    for slot in episode(sim, policy, workload.horizon if horizon is None else horizon, check=False):
        trace.record(slot.outcome)
    return trace
