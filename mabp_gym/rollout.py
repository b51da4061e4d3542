"""Run a score rule on the simulator core and collect its trace."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mabp_gym.metrics import Trace
from mabp_gym.simulator import Simulator
from mabp_gym.state import SimState
from mabp_gym.workload import Workload

ScoreRule = Callable[[Workload, SimState], np.ndarray]


def rollout(workload: Workload, score_rule: ScoreRule, seed: int, *,
            horizon: int | None = None, memory: bool = True,
            check_invariants: bool = True) -> Trace:
    """Simulate ``horizon`` slots (default: the workload's) under ``score_rule``.

    Every control goes through the shared projection and the feasibility check; with
    ``check_invariants`` SPEC 6's invariants are asserted after every slot.
    """
    sim = Simulator(workload, memory=memory, check_invariants=check_invariants)
    sim.reset(seed)
    trace = Trace()
    for _ in range(workload.horizon if horizon is None else horizon):
        _, outcome = sim.step_scores(score_rule(workload, sim.state))
        trace.record(outcome)
    return trace
