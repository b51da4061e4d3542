"""SPEC section 5 metrics, computed from the slots a policy actually faced.

A :class:`Trace` accumulates :class:`~mabp_gym.core.simulator.SlotOutcome` records; every metric
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mabp_gym.core.simulator import SlotOutcome

STABLE_SLOPE = 0.035  # units per slot (the paper's rule)
STABLE_BACKLOG = 120.0  # units (the paper's rule)
PAPER_HORIZON = 600  # slots the paper's rule looks at
PAPER_WARMUP = 0.2
GROWTH_LIMIT = 0.015  # fraction of arrivals left behind; see docs/results.md for the choice
TRACE_STRIDE = 5  # a record's stored backlog trace keeps every 5th slot
TREND_RATIO = 0.5
"""Verdict v4's trend check (v3's too): the growth must at least halve when the run doubles (fall to
this fraction of its value at half the horizon), or not significantly fail to. A queue that settles
by the window's start leaves a slope of noise; one still settling within the window gives
about half; a queue at capacity keeps more (``1 / sqrt(2) = 0.71`` for a driftless random
walk; 0.54-0.55 measured for MABP at `mixed`'s bound, load 1.0, at 4,000 and 8,000 slots),
a growing queue all of it."""
MATERIAL_RISE = 0.25
"""Verdict v4's materiality: the trend test fails a load only where its backlog rose over
the window by at least this fraction of its mean level there (seed-mean). A queue at
capacity rises by about 0.71 of its mean (``c sqrt(t)`` over ``[0.2 H, H)``), a linear rise
by 1.33; a settled queue by noise that shrinks as the run lengthens. The value is chosen by
``benchmarks/bench_verdict.py`` (``docs/benchmark.md``, "Verdict v4")."""


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


MIN_WINDOW_SLOTS = 10
"""Slots a run must keep after its warm-up for its growth to mean anything: one slot's
backlog has slope 0, and every run would read stable (:func:`mabp_gym.harness.runs.plan`
refuses fewer)."""


def warmup_slots(horizon: int, warmup: float) -> int:
    """The slots a run of ``horizon`` slots discards as its warm-up."""
    return int(horizon * warmup)


def check_window(horizon: int, warmup: float) -> None:
    """Refuse a run whose window after the warm-up is under :data:`MIN_WINDOW_SLOTS`
    (its verdict would mean nothing: one slot's backlog has slope 0)."""
    window = int(horizon) - warmup_slots(int(horizon), float(warmup))
    if window < MIN_WINDOW_SLOTS:
        raise ValueError(
            f"horizon {horizon} with warmup {warmup} leaves {window} slot(s) after the warm-up; "
            f"a run's growth needs at least {MIN_WINDOW_SLOTS} (a longer horizon or a shorter "
            "warm-up)"
        )


def summarize(trace: Trace, warmup: float = 0.2) -> dict[str, float | bool]:
    """Every SPEC 5 metric of one run, after discarding the first ``warmup`` of its slots."""
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    start = warmup_slots(len(trace.backlog), warmup)
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


# -- growth of saved runs cut at a shorter horizon, pooled over seeds (SPEC 9.2, v3) ------
MIN_TRACE_POINTS = 10
"""Stored backlog points a cut must keep after its warm-up to fit a slope: fewer give a
slope of 0 or noise (a two-point window reads every policy stable)."""


def min_horizon(warmup: float = PAPER_WARMUP) -> int:
    """The shortest cut that keeps :data:`MIN_TRACE_POINTS` stored points after ``warmup``
    (61 slots at the default warm-up: points every ``TRACE_STRIDE`` = 5 slots)."""
    horizon = 1
    while _points(horizon, warmup) < MIN_TRACE_POINTS:
        horizon += 1
    return horizon


def _points(horizon: int, warmup: float) -> int:
    start = int(horizon * warmup)
    return len(range(-(-start // TRACE_STRIDE) * TRACE_STRIDE, horizon, TRACE_STRIDE))


def check_record_trace(record: dict[str, Any]) -> None:
    """Refuse a record whose saved backlog trace cannot be cut (missing, null, not a list of
    numbers), naming the run."""
    trace = record.get("backlog_trace")
    if not isinstance(trace, list) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in trace
    ):
        raise ValueError(
            f"run {record.get('policy')!r} at load {record.get('load')} seed "
            f"{record.get('seed')}: its backlog_trace is {type(trace).__name__}, not a list "
            "of numbers; it cannot be cut at a shorter horizon"
        )


def growth_at(record: dict[str, Any], horizon: int, warmup: float = PAPER_WARMUP) -> float:
    """Growth (slope / arrival rate) of a saved run cut at ``horizon`` slots.

    The slope is fitted to the stored trace (every ``TRACE_STRIDE``-th slot) and divided by
    the configured arrival rate, so it differs from the run's own ``growth`` (every slot,
    measured arrivals) by sampling noise only.

    Raises:
        ValueError: the run is shorter than ``horizon``.
    """
    if horizon > record["horizon"]:
        raise ValueError(f"horizon {horizon} is longer than the run ({record['horizon']} slots)")
    if horizon < min_horizon(warmup):
        raise ValueError(
            f"horizon {horizon} keeps fewer than {MIN_TRACE_POINTS} stored backlog points after "
            f"the warm-up; cut at {min_horizon(warmup)} slots or more"
        )
    check_record_trace(record)
    trace = np.asarray(record["backlog_trace"], dtype=np.float64)
    slots = np.arange(len(trace)) * TRACE_STRIDE
    keep = (slots >= int(horizon * warmup)) & (slots < horizon)
    slope = backlog_slope(trace[keep]) / TRACE_STRIDE
    return growth(slope, record["arrival_rate"])


def t_975(dof: int) -> float:
    """The 97.5% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    from scipy import stats

    return float(stats.t.ppf(0.975, dof))


def pooled(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% confidence half-width (Student t) of per-seed values; the half-width
    is 0 for a single value (no spread to estimate: the verdict is the point estimate)."""
    array = np.asarray(values, dtype=np.float64)
    if not array.size:
        raise ValueError("no values to pool")
    if array.size == 1:
        return float(array[0]), 0.0
    half = t_975(array.size - 1) * float(array.std(ddof=1)) / np.sqrt(array.size)
    return float(array.mean()), half


def geometric_mean(values: Sequence[float] | np.ndarray) -> float:
    """The geometric mean of positive ratios (the board's standings, the learned
    objectives and the checkpoint choice all average ratios this way)."""
    array = np.asarray(values, dtype=np.float64)
    if not array.size:
        raise ValueError("no values to average")
    if not np.all(array > 0):
        raise ValueError(f"a geometric mean needs positive values, got {array.min()}")
    return float(np.exp(np.mean(np.log(array))))


def rise_at(
    record: dict[str, Any],
    horizon: int,
    warmup: float = PAPER_WARMUP,
    fraction: float | None = None,
) -> float:
    """How much the backlog rose over the window of a saved run cut at ``horizon``, as a
    fraction of its mean there: the fitted slope times the window's length over the mean
    backlog (0 for an empty network). About 0.71 for a queue at capacity (``c sqrt(t)``,
    whatever ``c`` or the horizon), 1.33 for a linear rise from empty; it falls with the
    run's length for a settled queue.

    ``fraction``: the run's growth at ``horizon`` where already fitted (:func:`growth_at`).

    Raises:
        ValueError: as :func:`growth_at`.
    """
    if fraction is None:
        fraction = growth_at(record, horizon, warmup)
    trace = np.asarray(record["backlog_trace"], dtype=np.float64)
    slots = np.arange(len(trace)) * TRACE_STRIDE
    mean = float(trace[(slots >= int(horizon * warmup)) & (slots < horizon)].mean())
    span = horizon - int(horizon * warmup)
    return float(fraction * record["arrival_rate"] * span / mean) if mean > 0 else 0.0


def trend_test(
    members: Sequence[dict[str, Any]], horizon: int | None = None, material: float = MATERIAL_RISE
) -> dict[str, Any]:
    """The trend half of verdict v4 on the runs cut at ``horizon`` (``None``: each at its own).

    Returns:
        ``{"growth_half", "trend_excess", "rise", "trend"}``: the mean half-horizon growth,
        the mean of ``d = g(H) - TREND_RATIO g(H / 2)``, the mean relative rise
        (:func:`rise_at`) and the test's outcome (``False``: fails; ``None``: the runs keep
        no trace, are too short to halve, or are one run).
    """
    none: dict[str, Any] = {"growth_half": None, "trend_excess": None, "rise": None, "trend": None}
    cuts = [int(horizon if horizon is not None else m.get("horizon") or 0) for m in members]
    if any(
        not isinstance(m.get("backlog_trace"), list) or h // 2 < min_horizon() or h > m["horizon"]
        for m, h in zip(members, cuts, strict=True)
    ):
        return none
    full = [growth_at(m, h) for m, h in zip(members, cuts, strict=True)]
    half = [growth_at(m, h // 2) for m, h in zip(members, cuts, strict=True)]
    rise = float(
        np.mean([rise_at(m, h, fraction=g) for m, h, g in zip(members, cuts, full, strict=True)])
    )
    result = {**none, "growth_half": float(np.mean(half)), "rise": rise}
    if len(members) > 1:
        excess, spread = pooled([f - TREND_RATIO * h for f, h in zip(full, half, strict=True)])
        # The growth's own significance reads the runs' growths (every slot) where uncut.
        mean, half_width = pooled([m["growth"] for m in members] if horizon is None else full)
        fails = excess - spread > 0.0 and mean - half_width > 0.0 and rise >= material
        result.update(trend_excess=excess, trend=not fails)
    return result


def growth_verdict(
    members: Sequence[dict[str, Any]], material: float = MATERIAL_RISE
) -> dict[str, Any]:
    """Verdict v4 of one policy at one load from its runs (one per seed).

    * **Pooled growth**: the mean of the runs' growth fractions with its 95% confidence
      half-width; the load passes only when the upper end is below ``GROWTH_LIMIT``.
    * **Trend**: cut every run at its full and at half its horizon (from its saved trace)
      and pair the two growths seed by seed: ``d = g(H) - TREND_RATIO * g(H / 2)``. The load
      fails when ``d``'s mean is significantly above 0 (the lower end of its 95% interval
      above 0: the growth did not halve when the run doubled, as for a queue at capacity),
      the growth itself is significantly above 0, and the growth is **material**: the
      backlog rose over the window by at least ``material`` (:data:`MATERIAL_RISE`) of its
      mean level there, seed-mean (:func:`rise_at`; a queue at capacity rises by about 0.71,
      whatever the horizon). A settled queue's two growths are both noise, and the test stays
      quiet; so does one still settling, whose growth halves. v3 had no materiality
      condition: a growth of 0.0003 +- 0.0002, 1/55 of the limit and a rise of a tenth of
      the backlog, failed whenever its half-horizon value came out negative by chance
      (``docs/benchmark.md`` measures both rules on real queues). ``trend`` is ``None``
      when the runs keep no trace, are too short to halve, or are one run (no spread to
      tell growth from noise): then the pooled rule alone decides. ``material=0`` is v3.

    Returns:
        ``{"growth_mean", "growth_half_width", "growth_half", "trend_excess", "rise",
        "trend", "stable"}`` (``trend_excess``: the mean of ``d``; ``rise``: the mean
        relative rise).
    """
    if not members:
        raise ValueError("no runs to judge")
    mean, half_width = pooled([m["growth"] for m in members])
    trend = trend_test(members, material=material)
    return {
        "growth_mean": mean,
        "growth_half_width": half_width,
        **trend,
        "stable": bool(mean + half_width < GROWTH_LIMIT and trend["trend"] is not False),
    }
