"""Summaries of records: mean and spread over seeds per (policy, load) with both verdicts
(:func:`summarize_records`), the stable load per policy (:func:`stable_load`,
:func:`paper_load`) below the occupation bound (:func:`occupation_load`), and the cells
that need a longer horizon (:func:`undecided`, :func:`decide_horizons`)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from mabp_gym.core.fileformat import workload_digest_of
from mabp_gym.core.metrics import growth_verdict, is_stable
from mabp_gym.core.validate import is_real
from mabp_gym.core.workloads import make_workload
from mabp_gym.harness.runs import METRIC_KEYS, RunSpec

VERDICTS = ("stable", "paper")
"""``stable``: the backlog does not grow (SPEC 9.2, verdict v4: growth pooled over the
seeds below the limit with 95% confidence, and falling as the run lengthens);
``paper``: the paper's short-horizon rule on seed means (slope < 0.035, backlog < 120)."""


def record_list(records: Any) -> list[dict[str, Any]]:
    """``records`` as a list of run records; a path (or anything else that is not
    records) is refused with the fix: ``'str' object has no attribute 'get'`` came first."""
    if isinstance(records, (str, bytes, os.PathLike)):
        raise ValueError(
            f"records must be run records, got the path {records!r}: read them with "
            "mabp_gym.read_records(path)"
        )
    listed = list(records)
    bad = next((r for r in listed if not isinstance(r, dict)), None)
    if bad is not None:
        raise ValueError(f"records must be run records (dicts), got {type(bad).__name__}")
    return listed


def summarize_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds per (policy, load), with both verdicts.

    A run (its ``key``) given twice counts once. The runs of one (policy, load) must be one
    setting (:data:`SETTING_KEYS`), each seed once; otherwise ``ValueError`` names the cell
    and what differs.

    ``stable``: verdict v4 (:func:`mabp_gym.core.metrics.growth_verdict`): the growth pooled
    over the seeds is below the limit with 95% confidence and, where it is significantly
    positive, falls as the run lengthens (``growth_mean``, ``growth_half_width``,
    ``growth_half`` and ``trend`` say why); ``stable_seeds`` counts the runs that do not
    grow on their own. ``paper_stable``: the seed-mean slope and backlog of the paper's
    window pass its rule.
    """
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    keys: set[str] = set()
    for record in record_list(records):
        key = record.get("key")
        if key is not None:
            if key in keys:
                continue  # the same run (read from two results files, say) counts once
            keys.add(key)
        groups.setdefault((record["policy"], float(record["load"])), []).append(record)
    rows = []
    for (policy, load), members in sorted(groups.items()):
        check_one_setting(policy, load, members)
        row: dict[str, Any] = {"policy": policy, "load": load, "seeds": len(members)}
        row["horizon"] = members[0].get("horizon")  # one setting: every member's
        for key in (*METRIC_KEYS[1:], "decision_us_mean", "decision_us_p95"):
            values = np.array([m[key] for m in members if m.get(key) is not None], dtype=float)
            row[key] = float(values.mean()) if values.size else None
            row[f"{key}_std"] = float(values.std()) if values.size else None
        row["stable_seeds"] = sum(bool(m["stable"]) for m in members)
        row.update(growth_verdict(members))
        slope = row["paper_slope"] if row["paper_slope"] is not None else row["slope"]
        backlog = row["paper_backlog"] if row["paper_backlog"] is not None else row["mean_backlog"]
        row["paper_stable"] = is_stable(slope, backlog)
        rows.append(row)
    return rows


SETTING_KEYS = ("workload", "workload_digest", "overrides", "memory", "horizon", "warmup", "nu")
"""The record keys that make runs of one (policy, load) comparable: a summary pools only
runs that agree on each of them (a key a record lacks, as older records do, agrees with any
value), and ``policy_kw``, which makes a registered policy another policy."""


def setting_of(record: dict[str, Any], *, without: tuple[str, ...] = ()) -> str:
    """The record's setting (:data:`SETTING_KEYS` and ``policy_kw``, but ``without``) as
    one comparable string."""
    keys = [k for k in (*SETTING_KEYS, "policy_kw") if k not in without]
    return json.dumps([record.get(k) for k in keys], sort_keys=True, default=str)


def _difference(members: Iterable[dict[str, Any]], keys: Iterable[str]) -> str | None:
    """The first of ``keys`` on which ``members`` differ, with the values held (a key a
    record lacks agrees with any value), or None."""
    members = list(members)
    for key in keys:
        values = {
            json.dumps(m[key], sort_keys=True, default=str)
            for m in members
            if m.get(key) is not None
        }
        if len(values) > 1:
            return f"{key!r} ({', '.join(sorted(values))})"
    return None


def check_one_grid(records: Iterable[dict[str, Any]]) -> None:
    """Refuse to walk one policy's loads across settings: its stable load is the grid of one
    experiment (a bench file's ``mixed`` at 0.9 and ``mixed`` with ``beta=0.125`` at 0.8 read
    as one grid, 0.8). The horizon may differ by load (``--until-decided`` decides each
    load at its own), and with it the workload's digest."""
    keys = [k for k in (*SETTING_KEYS, "policy_kw") if k not in ("horizon", "workload_digest")]
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_policy.setdefault(r["policy"], []).append(r)
    for policy, runs in by_policy.items():
        differs = _difference(runs, keys)
        if differs:
            raise ValueError(
                f"the runs of {policy} differ in {differs} across loads: a stable load walks "
                "one setting's grid of loads; pass the records of each setting separately"
            )


def check_one_setting(policy: str, load: float, members: list[dict[str, Any]]) -> None:
    """Refuse to pool runs of one (policy, load) that are not one experiment: different
    workloads, horizons, ... (the mean would mix them and the pooled growth interval would
    count each setting's seeds as more evidence), or one seed twice (the same run counted
    twice narrows the interval)."""
    cell = f"{policy} at load {load:g}"
    # The digest last: it covers the horizon and the overrides, which name the difference.
    named = [k for k in SETTING_KEYS if k != "workload_digest"]
    differs = _difference(members, (*named, "policy_kw", "workload_digest"))
    if differs:
        hint = (
            " (a results file of eval --until-decided holds each cell at every horizon it "
            "ran: mabp_gym.harness.verdicts.longest(records) keeps each cell's deciding one)"
            if differs.startswith("'horizon'")
            else ""
        )
        raise ValueError(
            f"the runs of {cell} differ in {differs}: a summary pools the seeds of one "
            f"setting; pass the records of each setting separately{hint}"
        )
    seen: dict[Any, Any] = {}
    for m in members:
        seed = m.get("seed")
        if seed is not None and seed in seen:
            why = ""
            if seen[seed] != m.get("key"):  # two runs that differ in nothing a record names
                why = (
                    ": two different runs (their keys differ), as from a policy of your own "
                    "edited between them or another version of the package; write to a new "
                    "results file after such a change"
                )
            raise ValueError(
                f"the runs of {cell} hold seed {seed} twice{why} (the same run counted "
                "twice would narrow the growth interval); pass each run once"
            )
        seen[seed] = m.get("key")


def stable_load(
    records: Iterable[dict[str, Any]],
    verdict: str = "stable",
    bound: float | str | None = "auto",
) -> dict[str, float]:
    """Largest grid load per policy such that it and every smaller grid load pass
    ``verdict`` (0.0 when the smallest does not).

    Args:
        records: evaluation records (any mix of policies, loads and seeds).
        verdict: ``"stable"`` (the backlog does not grow, SPEC 9.2; decide it at a long
            horizon, see docs/results.md) or ``"paper"`` (the paper's rule; see
            :func:`paper_load`).
        bound: the occupation bound as a load: a load at or above it (within 1e-6: two
            LPs) is never stable. There the network is critically loaded or overloaded for
            every policy (paper Thm. 1); at the bound itself its backlog grows like the
            square root of time, which a finite run's slope cannot tell from no growth.
            ``"auto"`` (the default) computes it from the records
            (:func:`occupation_load`: the no-memory capacity for runs without memory; no
            bound where it cannot: records of several workloads, a workload file that
            moved); ``None`` applies none. A bool is not a bound.
    """
    records = record_list(records)
    if isinstance(bound, str):
        if bound != "auto":
            raise ValueError(f"bound must be a load > 0, 'auto' or None, got {bound!r}")
        bound = occupation_load(records) if records else None
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if bound is not None and not (is_real(bound) and math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound must be a load > 0, 'auto' or None, got {bound!r}")
    check_one_grid(records)
    flag = "stable" if verdict == "stable" else "paper_stable"
    result: dict[str, float] = {}
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for row in summarize_records(records):
        by_policy.setdefault(row["policy"], []).append(row)
    for policy, rows in by_policy.items():
        best = 0.0
        for row in sorted(rows, key=lambda r: r["load"]):
            if not row[flag] or (bound is not None and row["load"] >= bound - 1e-6):
                break
            best = row["load"]
        result[policy] = best
    return result


FALLING = 0.9
""":func:`undecided`: growth at the full horizon below this fraction of the half-horizon
growth counts as still falling."""


def undecided(records: Iterable[dict[str, Any]]) -> list[tuple[str, float]]:
    """The ``(policy, load)`` cells whose verdict the runs cannot decide yet: not shown
    stable, below the occupation bound, and either the trend check passes (no evidence that
    the growth fails to halve: early in a run a settling queue rises like a growing one),
    or the growth is still falling (under ``FALLING`` times its half-horizon value: a queue
    settling over several thousand slots, which one horizon cannot tell from a queue at
    capacity), or the failure is not yet confirmed, or, without a trace to cut, the pooled
    growth's 95% interval contains the limit.

    A failure is confirmed where the pooled growth's interval lies wholly above the limit,
    or where the trend test fails on the same runs cut at half their horizon too: the
    growth then failed to halve over two doublings of the run. One failing trend is not
    enough early in a run: near a boundary a queue's excursions last about as long as the
    run, and BP on ``mixed`` at 0.41 (seeds 975-979) failed the trend at 1,200 slots, its
    half-horizon growth 0.000 against 0.025, and passed at 4,800 and 9,600 slots.
    A confirmed cell is decided: it grows. :func:`decide_horizons` reruns the undecided
    cells longer."""
    from mabp_gym.core.metrics import GROWTH_LIMIT, trend_test

    records = list(records)
    bound = occupation_load(records)
    members: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for record in {r.get("key") or id(r): r for r in records}.values():
        members.setdefault((record["policy"], float(record["load"])), []).append(record)
    cells = []
    for row in summarize_records(records):
        if row["stable"] or (bound is not None and row["load"] >= bound - 1e-6):
            continue
        mean, half = row["growth_mean"], row["growth_half_width"]
        if row["growth_half"] is None:
            still = mean < GROWTH_LIMIT <= mean + half
        else:
            falling = row["growth_half"] > 0 and mean < FALLING * row["growth_half"]
            runs = members[(row["policy"], row["load"])]
            earlier = min(int(r["horizon"]) for r in runs) // 2
            confirmed = mean - half > GROWTH_LIMIT or (
                row["trend"] is False and trend_test(runs, earlier)["trend"] is False
            )
            still = row["trend"] is True or falling or not confirmed
        if still:
            cells.append((row["policy"], row["load"]))
    return cells


def decide_horizons(
    specs: Sequence[RunSpec],
    max_horizon: int,
    run: Callable[[list[RunSpec]], list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], dict[tuple[str, float], int]]:
    """Run ``specs``, then rerun every undecided cell (:func:`undecided`) on the same seeds
    at twice the horizon, until each is decided or the next horizon would pass
    ``max_horizon`` (verdict v4's horizon chosen per policy and load by the trend check).

    Args:
        specs: the grid (one horizon).
        max_horizon: the longest horizon to try.
        run: executes specs and returns their records
            (:func:`~mabp_gym.harness.evaluation.execute` with its options).

    Returns:
        The records of every cell at its deciding horizon (the longest it ran), and that
        horizon per cell.

    Raises:
        ValueError: ``max_horizon`` below the grid's horizon.
    """
    horizon = max(spec.horizon for spec in specs)
    if not isinstance(max_horizon, int) or max_horizon < horizon:
        raise ValueError(
            f"max_horizon must be an integer >= the grid's {horizon}, got {max_horizon!r}"
        )
    from dataclasses import replace

    records = run(list(specs))
    used = {(spec.policy, float(spec.load)): spec.horizon for spec in specs}
    while 2 * horizon <= max_horizon:
        open_cells = set(undecided(records))
        if not open_cells:
            break
        horizon *= 2
        longer = [
            # The plan's digest describes the workload at the old horizon: dropped, the key
            # is that of the same run planned at this one (a later run of it reuses this).
            replace(spec, horizon=horizon, workload_digest="")
            for spec in specs
            if (spec.policy, float(spec.load)) in open_cells
        ]
        fresh = run(longer)
        records = [r for r in records if (r["policy"], float(r["load"])) not in open_cells]
        records += fresh
        used.update({cell: horizon for cell in open_cells})
    return records, used


def occupation_load(records: Iterable[dict[str, Any]]) -> float | None:
    """The capacity bound of the system the records ran, as a load (bound / ``lambda_ref``):
    the occupation bound (:func:`mabp_gym.capacity`, ``"occ"``) with memory, the no-memory
    capacity (``"nomem"``, the fluid LP of a network without memory) without it; ``None``
    when they mix workloads or settings, or the workload cannot be rebuilt: from its name,
    or from the workload file the runs record (``workload_file``), the runs' digests
    confirming it (a file that moved or changed gives none)."""
    from mabp_gym.core.capacity import capacity

    settings = {
        (
            r.get("workload"),
            json.dumps(r.get("overrides", {}), sort_keys=True),
            r.get("memory", True),
        )
        for r in records
    }
    if len(settings) != 1:
        return None
    name, overrides, memory = settings.pop()
    files = {r.get("workload_file") for r in records} - {None}
    if not isinstance(name, str) or len(files) > 1:
        return None
    source = str(files.pop()) if files else name
    try:
        workload = make_workload(source, **json.loads(overrides))
        if workload.name != name:
            return None
        # A Workload object or file keeps its name: the runs' digests say whether the
        # name (or the file) rebuilds it (records written before the digest was recorded
        # are trusted).
        for horizon, digest in {(r.get("horizon"), r.get("workload_digest")) for r in records}:
            if digest is not None and digest != workload_digest_of(
                make_workload(source, **json.loads(overrides), horizon=horizon)
            ):
                return None
    except (ValueError, TypeError):
        return None
    reference = workload.lambda_ref
    return capacity(workload, "occ" if memory else "nomem") / reference if reference else None


def paper_load(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The paper's stable load: horizon 600, warm-up 20%, seed-mean slope < 0.035 and
    seed-mean backlog < 120 (SPEC 9.2), from each run's first 600 slots."""
    return stable_load(records, verdict="paper")
