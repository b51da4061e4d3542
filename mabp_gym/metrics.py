"""SPEC section 5 metrics, computed from the slots a policy actually faced.

A :class:`Trace` accumulates :class:`~mabp_gym.simulator.SlotOutcome` records; every metric
is taken over the window after the first ``warmup`` fraction of slots.

Two stability verdicts per run (SPEC 9.2), each named for what it measures:

* ``stable``: the backlog does not grow. Its least-squares slope over the window, divided by
  the arrival rate in the window (requests per slot), is the fraction of arrivals that the
  network leaves behind; the run grows when that fraction reaches ``GROWTH_LIMIT``. The
  ratio is free of the network's size and of the load, so one limit serves every workload;
  an absolute slope limit mistakes the slow rise toward a high stationary backlog near the
  boundary for growth, and an absolute backlog cap measures queue length, not growth.
* ``paper_stable``: the paper's rule on the run's first ``PAPER_HORIZON`` slots (warm-up
  20%): slope < 0.035 units per slot and mean backlog < 120 units. A long run's first 600
  slots are exactly the 600-slot run of the same seed, so one run gives both verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mabp_gym.simulator import SlotOutcome

STABLE_SLOPE = 0.035  # units per slot (the paper's rule)
STABLE_BACKLOG = 120.0  # units (the paper's rule)
PAPER_HORIZON = 600  # slots the paper's rule looks at
PAPER_WARMUP = 0.2
GROWTH_LIMIT = 0.015  # fraction of arrivals left behind; see docs/results.md for the choice


@dataclass
class Trace:
    """Per-slot series of one run (one entry per slot)."""

    backlog: list[int] = field(default_factory=list)  # ||Q(t+1)||_1
    arrivals: list[int] = field(default_factory=list)
    completed: list[int] = field(default_factory=list)
    served: list[int] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    churn: list[int] = field(default_factory=list)  # insertions + evictions
    work: list[float] = field(default_factory=list)
    penalty_compute: list[float] = field(default_factory=list)
    penalty_transmission: list[float] = field(default_factory=list)
    penalty_memory: list[float] = field(default_factory=list)
    delays: list[tuple[int, ...]] = field(default_factory=list)

    def record(self, outcome: SlotOutcome) -> None:
        self.backlog.append(outcome.backlog)
        self.arrivals.append(outcome.arrivals)
        self.completed.append(outcome.completed)
        self.served.append(outcome.served)
        self.hits.append(outcome.hits)
        self.churn.append(outcome.insertions + outcome.evictions)
        self.work.append(outcome.work)
        self.penalty_compute.append(outcome.penalty_compute)
        self.penalty_transmission.append(outcome.penalty_transmission)
        self.penalty_memory.append(outcome.penalty_memory)
        self.delays.append(outcome.delays)


def backlog_slope(backlog: np.ndarray) -> float:
    """Least-squares slope of ``B(t)`` against ``t`` (units per slot); 0 for < 2 points."""
    if len(backlog) < 2:
        return 0.0
    t = np.arange(len(backlog), dtype=np.float64)
    return float(np.polyfit(t, np.asarray(backlog, dtype=np.float64), 1)[0])


def is_stable(slope: float, mean_backlog: float) -> bool:
    """The paper's rule (SPEC 5): slope < 0.035 and mean backlog < 120 (a run or a
    seed-mean)."""
    return bool(slope < STABLE_SLOPE and mean_backlog < STABLE_BACKLOG)


def growth(slope: float, arrival_rate: float) -> float:
    """Fraction of arrivals the network leaves behind: backlog slope / arrival rate."""
    return float(slope / arrival_rate) if arrival_rate > 0 else 0.0


def does_not_grow(growth_fraction: float) -> bool:
    """SPEC 9.2's per-run verdict: less than ``GROWTH_LIMIT`` of the arrivals left behind."""
    return bool(growth_fraction < GROWTH_LIMIT)


def paper_window(backlog: list[int] | np.ndarray) -> tuple[float, float]:
    """Slope and mean backlog of the paper's window: slots ``[120, 600)`` of a run (all of a
    shorter run after its 20% warm-up)."""
    first = np.asarray(backlog[:PAPER_HORIZON], dtype=np.float64)
    window = first[int(len(first) * PAPER_WARMUP) :]
    return backlog_slope(window), float(window.mean()) if window.size else 0.0


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator else float("nan")


def _born_in_window(trace: Trace, start: int) -> tuple[np.ndarray, np.ndarray]:
    """The requests born in the window (slots ``start`` onward): the delays of those that
    left, and the age at the end of those still in the network.

    A request born in slot ``b`` that leaves in slot ``k`` has delay ``k - b``; one that has
    not left by the last slot ``T - 1`` has been in the network ``T - b`` slots at the end.
    """
    horizon = len(trace.arrivals)
    born = np.asarray(trace.arrivals, dtype=np.int64)
    finished = np.zeros(horizon, dtype=np.int64)
    delays: list[int] = []
    for k in range(start, len(trace.delays)):
        for delay in trace.delays[k]:
            if k - delay >= start:
                finished[k - delay] += 1
                delays.append(delay)
    left = np.maximum(born[start:] - finished[start:], 0)
    ages = np.repeat(horizon - np.arange(start, horizon), left)
    return np.asarray(delays, dtype=np.int64), ages


def completion_ratio(trace: Trace, start: int) -> float:
    """Of the requests that arrived in the window (slots ``start`` onward), the fraction
    that completed by the end of the run; NaN when none arrived.

    Only requests born in the window count, in the numerator as in the denominator, so the
    ratio is a fraction in ``[0, 1]``: completions of requests born during the warm-up
    (which made the old completed/arrived ratio exceed 1) are left out. Requests still in
    the network when the run ends count as not completed, so a stable run scores slightly
    below 1 (by about the mean delay over the window length).
    """
    finished, _ = _born_in_window(trace, start)
    return _ratio(finished.size, sum(trace.arrivals[start:]))


def window_delays(trace: Trace, start: int) -> np.ndarray:
    """The delay of every request born in the window, counting the requests still in the
    network when the run ends at their age so far (a lower bound of their delay).

    Counting them keeps an unstable run's delays from being set by the run length:
    completed requests alone are the ones that got through.
    """
    return np.concatenate(_born_in_window(trace, start))


def summarize(trace: Trace, warmup: float = 0.2) -> dict[str, float | bool]:
    """Every SPEC 5 metric of one run, after discarding the first ``warmup`` of its slots."""
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    start = int(len(trace.backlog) * warmup)
    window = slice(start, None)
    backlog = np.asarray(trace.backlog[window], dtype=np.float64)
    slope = backlog_slope(backlog)
    mean_backlog = float(backlog.mean()) if backlog.size else 0.0
    arrivals = float(sum(trace.arrivals[window]))
    fraction = growth(slope, arrivals / backlog.size if backlog.size else 0.0)
    paper_slope, paper_backlog = paper_window(trace.backlog)
    completed = float(sum(trace.completed[window]))
    served = float(sum(trace.served[window]))
    delays = [d for slot in trace.delays[window] for d in slot]
    finished, ages = _born_in_window(trace, start)  # one pass for both metrics below
    everyone = np.concatenate([finished, ages])
    compute = sum(trace.penalty_compute[window])
    transmission = sum(trace.penalty_transmission[window])
    memory = sum(trace.penalty_memory[window])
    return {
        "slope": slope,
        "mean_backlog": mean_backlog,
        "growth": fraction,
        "stable": does_not_grow(fraction),
        "paper_slope": paper_slope,
        "paper_backlog": paper_backlog,
        "paper_stable": is_stable(paper_slope, paper_backlog),
        "penalty": _ratio(compute + transmission + memory, completed),
        "p95_delay": float(np.percentile(delays, 95)) if delays else float("nan"),
        "p95_delay_all": float(np.percentile(everyone, 95)) if everyone.size else float("nan"),
        "penalty_per_arrival": _ratio(compute + transmission + memory, arrivals),
        "hit_ratio": _ratio(sum(trace.hits[window]), served),
        "churn": _ratio(sum(trace.churn[window]), served),
        "completion_ratio": _ratio(finished.size, sum(trace.arrivals[window])),
        "work_per_request": _ratio(sum(trace.work[window]), completed),
        "compute_cost": _ratio(compute, completed),
        "transmission_cost": _ratio(transmission, completed),
        "memory_cost": _ratio(memory, completed),
    }
