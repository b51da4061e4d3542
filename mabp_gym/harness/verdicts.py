"""How the stability verdicts depend on the horizon and the seeds (SPEC 9.2), from saved runs.

A record keeps its backlog every ``TRACE_STRIDE`` slots, so the growth verdict of the same
run cut at any shorter horizon ``H`` (window ``[0.2 H, H)``) can be recomputed without
simulating again; so can the stable load of any subset of its seeds. This is how the
horizon of the ``stable load`` verdict was chosen: the shortest horizon at which every
Table I policy gets the same stable load on three disjoint sets of five seeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mabp_gym.core.metrics import (  # noqa: F401  (the cut's helpers live with the metrics)
    MIN_TRACE_POINTS,
    TRACE_STRIDE,
    check_record_trace,
    does_not_grow,
    growth_at,
    min_horizon,
)
from mabp_gym.harness.summaries import setting_of, stable_load


def cut(records: Iterable[dict[str, Any]], horizon: int) -> list[dict[str, Any]]:
    """The records as if every run had stopped after ``horizon`` slots (growth verdict;
    the trace is cut too, so that verdict v4's trend check halves the cut)."""
    result = []
    for record in records:
        fraction = growth_at(record, horizon)
        kept = record["backlog_trace"][: -(-horizon // TRACE_STRIDE)]
        result.append(
            {
                **record,
                "growth": fraction,
                "stable": does_not_grow(fraction),
                "horizon": horizon,
                "backlog_trace": kept,
            }
        )
    return result


def _longest_per_seed(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per (policy, load, seed) of one setting: its longest (an ``--until-decided``
    file holds the same seed at several horizons, and counting each would shrink the
    interval; runs of other settings stay, for the summary to refuse)."""
    best: dict[tuple[str, float, int, str], dict[str, Any]] = {}
    for r in records:
        key = (
            r["policy"],
            round(float(r["load"]), 9),
            int(r["seed"]),
            setting_of(r, without=("horizon", "workload_digest")),  # the digest holds the horizon
        )
        if key not in best or r["horizon"] > best[key]["horizon"]:
            best[key] = r
    return list(best.values())


def longest(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of each (policy, load), the runs of its longest horizon: the horizon at which
    ``mabp-gym eval --until-decided`` decided it."""
    records = list(records)
    top: dict[tuple[str, float], int] = {}
    for r in records:
        cell = (r["policy"], round(float(r["load"]), 9))
        top[cell] = max(top.get(cell, 0), int(r["horizon"]))
    return [r for r in records if r["horizon"] == top[(r["policy"], round(float(r["load"]), 9))]]


def long_run_stable_load(
    records: Iterable[dict[str, Any]],
    long_records: Iterable[dict[str, Any]],
    horizon: int | None,
    bound: float | None = None,
) -> dict[str, float]:
    """Stable load per policy where the longest runs decide each load they cover.

    ``long_records`` (cut at ``horizon``; ``None``: each load's runs of its own longest
    horizon, as ``--until-decided`` leaves them) decide the loads they were run at,
    typically the loads around each policy's boundary; ``records`` (a whole grid at a
    shorter horizon) decide the others. ``bound``: see
    :func:`mabp_gym.harness.summaries.stable_load`.

    Raises:
        ValueError: a long run is shorter than ``horizon``.
    """
    once = _longest_per_seed(long_records)
    longer = longest(once) if horizon is None else cut(once, horizon)
    covered = {(r["policy"], round(float(r["load"]), 9)) for r in longer}
    merged = [r for r in records if (r["policy"], round(float(r["load"]), 9)) not in covered]
    return stable_load(merged + longer, bound=bound)


def seed_set_stable_loads(
    records: Iterable[dict[str, Any]],
    seed_sets: Sequence[Sequence[int]],
    bound: float | None = None,
) -> list[dict[str, float]]:
    """The stable load of every policy on each set of seeds (``bound``: see
    :func:`mabp_gym.harness.summaries.stable_load`)."""
    records = list(records)
    return [
        stable_load([r for r in records if r["seed"] in set(seeds)], bound=bound)
        for seeds in seed_sets
    ]


def horizon_sensitivity(
    records: Iterable[dict[str, Any]],
    horizons: Sequence[int],
    seed_sets: Sequence[Sequence[int]],
    bound: float | None = None,
) -> list[dict[str, Any]]:
    """Per policy and horizon: the stable load on each seed set, and whether they agree.

    Returns:
        Rows ``{"policy", "horizon", "stable_loads": [...], "lowest": [...], "agree": bool}``,
        where ``lowest`` is the smallest load run on each set (a stable load of 0 on a set
        whose lowest load is above the grid's start means "below the loads run").
    """
    records = _longest_per_seed(records)  # a seed run at two horizons counts once
    lowest: dict[tuple[str, int | None], float] = {}
    for record in records:
        key = (
            record["policy"],
            next((k for k, seeds in enumerate(seed_sets) if record["seed"] in set(seeds)), None),
        )
        lowest[key] = min(lowest.get(key, np.inf), record["load"])
    rows = []
    for horizon in horizons:
        per_set = seed_set_stable_loads(cut(records, horizon), seed_sets, bound)
        for policy in sorted({r["policy"] for r in records}):
            loads = [result.get(policy, 0.0) for result in per_set]
            lows = [float(lowest.get((policy, k), np.nan)) for k in range(len(seed_sets))]
            rows.append(
                {
                    "policy": policy,
                    "horizon": int(horizon),
                    "stable_loads": loads,
                    "lowest": lows,
                    "agree": _agree(loads, lows),
                }
            )
    return rows


def _agree(loads: list[float], lows: list[float]) -> bool:
    """Whether the seed sets' verdicts agree. A set run only from load ``x`` up whose
    stable load is 0 says "below ``x``", which agrees with any stable load under ``x``;
    a set without runs says nothing."""
    seen = [(load, low) for load, low in zip(loads, lows, strict=True) if not np.isnan(low)]
    known = {load for load, low in seen if load > 0 or low <= min(lows_ for _, lows_ in seen)}
    if len(known) > 1:
        return False
    value = next(iter(known), None)
    return all(
        load == value or (load == 0 and value is not None and value < low) for load, low in seen
    )
