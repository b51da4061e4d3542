"""The evaluation commands: ``eval`` (policies over a grid of loads and seeds), ``table``
(the paper's Table I), ``verdicts`` (the stable load per seed set and horizon, from saved runs)
and ``sweep`` (paper VI-A), with the tables and legends they print."""

from __future__ import annotations

import argparse
import contextlib
import csv
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.cli.common import (
    DEFAULT_GRID,
    SCREEN_HORIZON,
    _distinct_files,
    _fmt,
    _no_grid_overrides,
    _no_repeats,
    _number,
    _parse_grid,
    _parse_overrides,
    _parse_seeds,
    _policies,
    _read_results,
    _writable,
    user_input,
)
from mabp_gym.core.validate import check_number

SUMMARY_LEGEND = (
    "stable: the backlog's growth (slope / arrival rate, after the 20% warm-up), pooled over "
    "the seeds, is under 1.5% of the arrivals with 95% confidence and, where significantly "
    "above zero and material (a rise of a quarter of the backlog), halves when the run doubles "
    "(verdict v4; few seeds give wide intervals); slope: "
    "backlog units per slot; backlog: mean units; "
    "penalty: per completed request (compute + transmission + memory costs); "
    "p95: P95 delay in slots of the requests that completed; p95 all: of every request born "
    "after the warm-up, those still queued at their age so far; hit: hit ratio of served "
    "units; churn: insertions + evictions per served unit; compl: fraction of the requests "
    "born after the warm-up that completed; dec us: mean decision time per slot, the first "
    "slot left out (compilation); slots: the runs' horizon (with --until-decided, the horizon "
    "that settled each row)"
)


def _print_summary(rows: list[dict[str, Any]]) -> None:
    """One line per (policy, load): every metric of :func:`summary_columns` (a metric added
    to the records shows without a change here), the decision time and the horizon."""
    from mabp_gym.harness.runs import summary_columns

    columns = summary_columns()
    wide = max([5, *(len(load_text(row["load"])) for row in rows)])  # 0.2525 takes 6
    print(
        f"{'policy':<20} {'load':>{wide}} "
        + " ".join(f"{column.header:>{column.width}}" for _, column in columns)
        + f" {'dec us':>7} {'slots':>6}"
    )
    for row in rows:
        cells = " ".join(
            f"{_fmt(row.get(key), column.digits):>{column.width}}" for key, column in columns
        )
        horizon = row["horizon"] if row.get("horizon") is not None else "-"
        print(
            f"{row['policy']:<20} {load_text(row['load']):>{wide}} {cells} "
            f"{_fmt(row['decision_us_mean'], 0):>7} {horizon:>6}"
        )


def _grid_args(args: argparse.Namespace) -> dict[str, Any]:
    grid = dict(horizon=args.horizon, warmup=args.warmup, memory=not args.no_memory)
    return grid if args.nu is None else {**grid, "nu": args.nu}  # else plan's default


def _run_args(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        workers=args.workers,
        backend=args.backend,
        address=args.address,
        progress=not args.no_progress,
    )


def _stable_load_line(stable: dict[str, float], loads: list[float]) -> str:
    """``stable load: bp 0.5, sp none of the tested loads (lowest 0.1) (walked up from
    0.1, the lowest load run)``: a stable load says nothing of loads below the grid."""
    lowest = min(loads)
    parts = [
        f"{policy} {value:g}"
        if value > 0 or lowest == 0
        else f"{policy} none of the tested loads (lowest {lowest:g})"
        for policy, value in stable.items()
    ]
    walked = any(value > 0 for value in stable.values()) and lowest > 0
    note = f" (walked up from {lowest:g}, the lowest load run)" if walked else ""
    return "stable load: " + ", ".join(parts) + note


def _checkpoints(items: list[str], policies: list[str]) -> dict[str, str]:
    """``--checkpoint POLICY=PATH`` as ``{policy: path}``, each a learned policy of
    ``policies`` given once, each file there.

    Raises:
        ValueError: naming the bad item and what is allowed.
    """
    from mabp_gym.registry import checkpoint_path

    chosen: dict[str, str] = {}
    for item in items:
        policy, eq, path = item.partition("=")
        if not eq or not policy or not path:
            raise ValueError(f"--checkpoint {item!r}: give POLICY=PATH")
        if policy not in policies:
            raise ValueError(f"--checkpoint {item!r}: {policy} is not one of --policies {policies}")
        if checkpoint_path(policy, {}, "mixed") is None:
            raise ValueError(f"--checkpoint {item!r}: {policy} reads no checkpoint")
        if policy in chosen:
            raise ValueError(f"--checkpoint names {policy} twice: give one file a policy")
        if not Path(path).is_file():
            raise ValueError(f"--checkpoint {item!r}: no such file")
        chosen[policy] = path
    return chosen


def _eval(args: argparse.Namespace) -> None:
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import (
        occupation_load,
        stable_load,
        summarize_records,
        undecided,
    )

    with user_input():
        loads = _parse_grid(args.loads, "--loads") if args.loads else list(DEFAULT_GRID)
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "eval",
            {"load": "sets the loads with --loads", "horizon": "sets it with --horizon"},
        )
        _distinct_files(args, ("out",), ("workload",))
        _writable(args.out, "--out", results="eval")
        _check_run_args(args)
        if args.until_decided is not None and args.until_decided < 2 * args.horizon:
            # Undecided cells rerun at twice the horizon: below that nothing would rerun.
            raise ValueError(
                f"--until-decided must be at least twice --horizon ({2 * args.horizon}: the "
                f"first rerun doubles it), got {args.until_decided}"
            )
        policies = _policies(args.policy)
        checkpoints = _checkpoints(args.checkpoint, policies)
        specs = [
            spec
            for policy in policies
            for spec in plan(
                [policy],
                args.workload,
                loads,
                args.seeds,
                **_grid_args(args),
                workload_overrides=overrides,
                policy_kw={"checkpoint": checkpoints[policy]} if policy in checkpoints else None,
            )
        ]
    for policy, path in checkpoints.items():
        print(f"{policy}: checkpoint {path}")
    if args.until_decided is None:
        records = execute(specs, output=args.out, **_run_args(args))
    else:
        from mabp_gym.harness.summaries import decide_horizons

        records, used = decide_horizons(
            specs,
            args.until_decided,
            lambda batch: execute(batch, output=args.out, **_run_args(args)),
        )
        still = set(undecided(records))
        longer = {c: h for c, h in used.items() if h > args.horizon and c not in still}
        for (policy, load), horizon in sorted(longer.items()):
            print(f"{policy} at load {load:g}: decided at {horizon:,} slots")
        for policy, load in sorted(still):
            print(
                f"{policy} at load {load:g}: still undecided at {used[(policy, load)]:,} "
                "slots (its failure not confirmed, or its growth still falling): not credited"
            )
    _print_summary(summarize_records(records))
    print(SUMMARY_LEGEND)
    print(_stable_load_line(stable_load(records), loads))
    _verdict_caveats([records], args.horizon, screened=args.until_decided is None)
    bound = occupation_load(records)
    if bound is not None and max(loads) >= bound - 1e-6:
        which = "no-memory capacity" if args.no_memory else "occupation bound"
        print(
            f"(the {which} is load {bound:.3g}: no load at or above it is credited, "
            "whatever the backlog's slope; paper Thm. 1)"
        )


def _verdict_caveats(settings: list[list[dict[str, Any]]], horizon: int, screened: bool) -> None:
    """What the 'stable' column cannot say at this horizon or with this few seeds
    (``settings``: the runs of each setting a summary pools, e.g. each sweep value's)."""
    if screened and horizon < SCREEN_HORIZON:
        print(
            f"({horizon} slots: read 'stable' as a screen; near a boundary queues settle "
            f"slowly, and the benchmark decides at {SCREEN_HORIZON:,} slots or more: "
            "--horizon 4000, docs/results.md)"
        )
    from mabp_gym.harness.summaries import undecided

    records = [record for runs in settings for record in runs]
    # With --until-decided, eval has rerun and named them itself.
    open_cells = [cell for runs in settings if runs for cell in undecided(runs)] if screened else []
    if open_cells:
        print(
            f"({len(open_cells)} 'no' cell(s) undecided at this horizon: the growth's 95% "
            "interval or its trend cannot yet tell a settling queue from a growing one, so "
            "'no' there means not shown stable; eval --until-decided reruns them longer)"
        )
    seeds = len({record["seed"] for record in records})
    if seeds == 1:
        print(
            "(one seed: 'stable' compares that run's growth with the limit, with no interval "
            "across seeds behind it; 3 or more seeds give the verdict its 95% confidence)"
        )
    elif seeds == 2 and screened:  # rerun until decided, a 'no' is a confirmed growth
        print(
            "(two seeds: the 95% interval is 12.7 standard errors wide on each side, so 'no' "
            "mostly says 'not shown stable'; 3 or more seeds narrow it)"
        )


def _check_run_args(args: argparse.Namespace) -> None:
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be a positive integer, got {args.workers}")
    if args.address is not None and args.backend != "ray":
        raise ValueError("--address is for --backend ray")
    if args.address is not None:
        from mabp_gym.harness.dispatch import check_address

        check_address(args.address, "--address")


TABLE_COLUMNS = (
    "Policy",
    "Stable load",
    "Paper load",
    "Penalty",
    "P95 delay",
    "P95 delay (all)",
    "Hit ratio",
    "Churn",
    "Completion",
)


UNSTABLE_MARK = " (grows)"
"""Appended to the delay cells of a policy whose backlog grows at the table's load: its
completed requests' P95 is then set by the run length (``P95 delay (all)`` counts the
requests left in the network at their age)."""


TABLE_LEGEND = (
    "Stable load: the largest grid load at which it and every smaller grid load pass verdict "
    "v4 (growth pooled over the seeds under 1.5% of the arrivals with 95% confidence and, "
    "where significantly above zero and material (a rise of a quarter of the backlog), "
    "halving when the run doubles), below the occupation "
    "bound; '<x': not even the lowest load run, x; '(partial: y not run)': capped before a "
    "load missing from the grid. "
    "Paper load: the paper's rule (slots 120-600: slope < 0.035 and mean backlog < 120). The "
    "other columns at the --at load, mean +- std over seeds: penalty per completed request; "
    "P95 delay (slots) of completed requests and, '(all)', of every request born after the "
    "warm-up, still-queued ones at their age; '(grows)': the policy is not stable at that "
    "load, so its delays are set by the run length; hit ratio of served units; churn: "
    "insertions + evictions per served unit; completion: fraction of the window's requests "
    "completed."
)


def table_rows(
    records: list[dict[str, Any]],
    policies: list[str],
    grid: list[float],
    at: float,
    long: tuple[list[dict[str, Any]], int | None] | None = None,
) -> list[list[str]]:
    """Paper Table I rows: both verdicts over ``grid`` (SPEC 9.2), the other metrics as
    mean +- std over seeds at load ``at``. ``long``: longer runs and the horizon to cut
    them at; they decide the loads they cover in an extra first verdict column
    (:func:`mabp_gym.harness.verdicts.long_run_stable_load`)."""
    from mabp_gym.core.metrics import growth_verdict
    from mabp_gym.harness.summaries import occupation_load, paper_load, stable_load
    from mabp_gym.harness.verdicts import long_run_stable_load

    on_grid = [r for r in records if any(abs(r["load"] - x) < 1e-9 for x in grid)]
    bound = occupation_load(on_grid)
    stable = stable_load(on_grid, bound=bound)
    paper = paper_load(on_grid)
    longer = None if long is None else long_run_stable_load(on_grid, long[0], long[1], bound)
    rows = []
    for policy in policies:
        fixed = [r for r in records if r["policy"] == policy and abs(r["load"] - at) < 1e-9]
        ran = [r["load"] for r in on_grid if r["policy"] == policy]
        lowest = min(ran) if ran else float("nan")
        cells = [policy]
        verdicts = [stable, paper] if longer is None else [longer, stable, paper]
        covered = set(ran)
        if long is not None:
            covered |= {r["load"] for r in long[0] if r["policy"] == policy}
        for verdict in verdicts:
            # A load never run caps every column (the long runs' too): no credit unseen.
            value, gap = _capped_at_gap(verdict.get(policy, 0.0), covered, grid)
            cell = _verdict_cell(value, lowest)
            cells.append(cell if gap is None else f"{cell} (partial: {gap:g} not run)")
        grows = bool(fixed) and not growth_verdict(fixed)["stable"]
        for key, digits in (
            ("penalty", 4),
            ("p95_delay", 1),
            ("p95_delay_all", 1),
            ("hit_ratio", 2),
            ("churn", 3),
            ("completion_ratio", 3),
        ):
            values = np.array([r[key] for r in fixed if r.get(key) is not None], dtype=float)
            cell = f"{values.mean():.{digits}f} ± {values.std():.{digits}f}" if values.size else "-"
            if grows and key.startswith("p95") and values.size:
                cell += UNSTABLE_MARK
            cells.append(cell)
        rows.append(cells)
    return rows


def _capped_at_gap(value: float, ran: set[float], grid: list[float]) -> tuple[float, float | None]:
    """A stable load credited over an incomplete grid: the first grid load at or below it
    that has no runs caps it at the grid load before (a partial results file must not
    credit loads it never tested); ``(value, the missing load or None)``."""
    done = {round(load, 9) for load in ran}
    below = [x for x in sorted(grid) if x <= value + 1e-9]
    for k, load in enumerate(below):
        if round(load, 9) not in done:
            return (below[k - 1] if k else 0.0), load
    return value, None


def _file_runs(
    args: argparse.Namespace, policies: list[str], overrides: dict[str, Any]
) -> list[dict[str, Any]]:
    """``table --from-results``: the runs in ``--out`` of the table's policies, of the
    setting the options given name (each option left at its default selects nothing); an
    option no run matches is refused with what the file holds."""
    from mabp_gym.harness.results_file import read_records

    if not Path(args.out).is_file():
        raise ValueError(f"--from-results: no results file {args.out!r}")
    records = [r for r in read_records(args.out) if r["policy"] in policies]
    if not records:
        raise ValueError(f"--from-results: {args.out!r} holds no run of {policies}")
    # Each option given: the values a run's field may take, and how to read the field.
    wanted: dict[str, tuple[Collection[Any], Callable[[dict[str, Any]], Any]]] = {
        "--workload": ({_record_workload(args.workload)}, lambda r: r["workload"]),
        "--seeds": (set(args.seeds), lambda r: r["seed"]),
        "--horizon": ({args.horizon}, lambda r: r["horizon"]),
        "--warmup": ({args.warmup}, lambda r: r.get("warmup")),
        "--nu": ({args.nu}, lambda r: r.get("nu")),
        "--no-memory": ({False}, lambda r: r.get("memory", True)),
    }
    from mabp_gym.cli.parser import FROM_RESULTS_SELECTS

    given = [flag for flag, dest in FROM_RESULTS_SELECTS if dest in args.given]
    for flag in given:
        values, read = wanted[flag]
        chosen = [r for r in records if read(r) in values]
        if not chosen:
            held = sorted({str(read(r)) for r in records})
            raise ValueError(
                f"{flag}: {args.out!r} holds no run of these policies with it (its runs have "
                f"{flag.lstrip('-')} {held}); give the setting the file holds"
            )
        records = chosen
    horizons = sorted({int(r["horizon"]) for r in records})
    if len(horizons) > 1:
        raise ValueError(
            f"--from-results: {args.out!r} holds runs of the horizons {horizons} (an "
            "--until-decided file, say); pick one with --horizon, or give the longer runs as "
            "--long with --long-horizon longest"
        )
    for name, value in overrides.items():
        chosen = [r for r in records if r.get("overrides", {}).get(name) == value]
        if not chosen:
            raise ValueError(f"--set {name}={value}: {args.out!r} holds no run with it")
        records = chosen
    return records


def _record_workload(workload: str) -> str:
    """The name a run of ``--workload`` records: a built-in workload's, or the one a
    workload file gives inside it."""
    from mabp_gym.core.workloads import is_workload_file, make_workload

    return make_workload(workload).name if is_workload_file(workload) else workload


def _table(args: argparse.Namespace) -> None:
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan

    with user_input():
        loads = _parse_grid(args.loads, "--loads") if args.loads else list(DEFAULT_GRID)
        check_number(args.at, "--at", low=0.0, low_open=True)  # nan was taken
        policies = _policies(args.policies)
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "table",
            {"load": "sets the loads with --loads and --at", "horizon": "sets it with --horizon"},
        )
        _distinct_files(args, ("out", "markdown", "csv"), ("long", "workload"))
        _writable(args.markdown, "--markdown")
        _writable(args.csv, "--csv")
        long = _long_runs(args, policies)
        if args.from_results:
            records = _file_runs(args, policies, overrides)
            held = sorted({float(r["load"]) for r in records})
            if not args.loads:  # the file's own grid, not the default one it may not hold
                loads = held
            if not any(abs(load - args.at) < 1e-9 for load in held):  # a table of "-" cells
                raise ValueError(
                    f"--at {args.at:g}: {args.out} holds no run at that load; its loads: "
                    f"{', '.join(f'{load:g}' for load in held)}"
                )
        else:
            _check_run_args(args)
            grid = dict(**_grid_args(args), workload_overrides=overrides)
            specs = plan(
                policies, args.workload, sorted(set(loads) | {args.at}), args.seeds, **grid
            )
            out = Path(args.out)
            if not out.parent.exists():  # the default, results/, is made on first use
                out.parent.mkdir(parents=True, exist_ok=True)
            _writable(args.out, "--out", results="eval")
    if args.search and not args.from_results:
        records = _search_loads(policies, args, sorted(loads), grid)
        # The --at load's runs, where the search already ran them, come back from the file:
        # keep each run once (counted twice, it would narrow the growth interval).
        searched = {r["key"] for r in records}
        records += [
            r
            for r in execute(
                plan(policies, args.workload, [args.at], args.seeds, **grid),
                output=args.out,
                **_run_args(args),
            )
            if r["key"] not in searched
        ]
    elif not args.from_results:
        records = execute(specs, output=args.out, **_run_args(args))
    with user_input() if args.from_results else contextlib.nullcontext():
        rows = table_rows(records, policies, loads, args.at, long)  # one setting's runs
    columns = list(TABLE_COLUMNS)
    if long is not None:
        top = max(r["horizon"] for r in long[0])
        label = f"{long[1]:,} slots" if long[1] is not None else f"decided, up to {top:,} slots"
        columns.insert(1, f"Stable load (--long runs, {label})")
        short = min((r["horizon"] for r in records), default=args.horizon)
        columns[2] = f"Stable load ({short:,} slots)"
    markdown = [
        "| " + " | ".join(columns) + " |",
        "| " + " | ".join("---" for _ in columns) + " |",
    ]
    markdown += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(markdown)
    print(text)
    print(TABLE_LEGEND)
    if long is None and records:
        _verdict_caveats([records], min(r["horizon"] for r in records), screened=True)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n", encoding="utf-8")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(columns)
            writer.writerows(rows)


def _long_runs(
    args: argparse.Namespace, policies: list[str]
) -> tuple[list[dict[str, Any]], int | None] | None:
    """The ``--long`` records of ``policies`` and the horizon to cut them at, checked."""
    if not args.long:
        if args.long_horizon is not None:
            raise ValueError("--long-horizon needs --long")
        return None
    records = [r for r in _read_results(args.long, "--long") if r["policy"] in policies]
    if not records:
        raise ValueError(f"--long: no runs of the policies {policies}")
    workloads = {r["workload"] for r in records}
    if workloads != {_record_workload(args.workload)}:
        raise ValueError(
            f"--long: the runs are of {sorted(workloads)}, the table of {args.workload!r}"
        )
    from mabp_gym.harness.verdicts import check_record_trace

    for record in records:
        check_record_trace(record)
    shortest = min(r["horizon"] for r in records)
    if args.long_horizon == "longest":
        return records, None
    horizon = shortest if args.long_horizon is None else _long_horizon(args.long_horizon)
    if not 0 < horizon <= shortest:
        raise ValueError(
            f"--long-horizon: must be in 1..{shortest} (the shortest --long run), got {horizon}"
        )
    _check_cut_horizons([horizon], "--long-horizon")
    return records, horizon


def _long_horizon(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(
            f"--long-horizon: must be a whole number of slots or 'longest', got {text!r}"
        ) from None


def _search_loads(
    policies: list[str], args: argparse.Namespace, loads: list[float], grid: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run the loads in ascending order; a policy stops at its first load that grows."""
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import summarize_records

    records: list[dict[str, Any]] = []
    active = list(policies)
    for load in loads:
        batch = execute(
            plan(active, args.workload, [load], args.seeds, **grid),
            output=args.out,
            **_run_args(args),
        )
        records += batch
        verdict = {row["policy"]: row["stable"] for row in summarize_records(batch)}
        active = [p for p in active if verdict.get(p)]
        if not active:
            break
    return records


VERDICTS_LEGEND = (
    "Each cell: the stable load (verdict v4) on each seed set, separated by '/', of the runs "
    "cut at H slots; bold where the sets disagree; '<x': not even the lowest load run on that "
    "set, x."
)


def _verdicts(args: argparse.Namespace) -> None:
    from mabp_gym.harness.verdicts import check_record_trace, horizon_sensitivity

    with user_input():
        _distinct_files(args, ("markdown",), ("results",))
        _writable(args.markdown, "--markdown")
        records = _read_results(args.results)
        seed_sets = [_parse_seeds(token) for token in args.seed_sets]
        _check_seed_sets(seed_sets, records)
        shortest = min(r["horizon"] for r in records)
        if max(args.horizons) > shortest:
            raise ValueError(f"--horizons: the shortest saved run has {shortest} slots")
        _check_cut_horizons(args.horizons, "--horizons")
        for record in records:
            check_record_trace(record)
        from mabp_gym.harness.summaries import check_one_grid, occupation_load

        check_one_grid(records)  # the files' runs, one setting a policy
    bound = occupation_load(records)
    if bound is not None:
        print(f"loads at or above the occupation bound ({bound:.3f}) are not credited")
    rows = horizon_sensitivity(records, args.horizons, seed_sets, bound)
    header = ["policy", *(f"H={h}" for h in args.horizons)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for policy in sorted({row["policy"] for row in rows}):
        cells = [policy]
        for horizon in args.horizons:
            (row,) = [r for r in rows if r["policy"] == policy and r["horizon"] == horizon]
            text = " / ".join(
                _verdict_cell(load, low)
                for load, low in zip(row["stable_loads"], row["lowest"], strict=True)
            )
            cells.append(text if row["agree"] else f"**{text}**")
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    print(VERDICTS_LEGEND)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n", encoding="utf-8")


def _verdict_cell(load: float, lowest: float) -> str:
    """A stable load; ``<x`` when even the lowest load run, ``x``, fails (a user grid from
    0.30 whose 0.30 fails printed 0.00, a load never tested); ``-`` when the policy has no
    run."""
    if np.isnan(lowest):
        return "-"
    return f"<{load_text(lowest)}" if load == 0.0 else load_text(load)


def load_text(load: float) -> str:
    """A load as the tables print it: two decimals, more where two would round it (0.2525
    printed as 0.25 read as the same load as 0.25 in the next row)."""
    return f"{load:.2f}" if abs(load - round(load, 2)) < 1e-9 else f"{load:g}"


def _check_cut_horizons(horizons: list[int], option: str) -> None:
    """Each horizon must leave enough stored trace points after the warm-up to fit a
    slope, and none may repeat."""
    from mabp_gym.harness.verdicts import MIN_TRACE_POINTS, min_horizon

    shortest = min_horizon()
    for horizon in horizons:
        if horizon < shortest:
            raise ValueError(
                f"{option}: {horizon} slots keep fewer than {MIN_TRACE_POINTS} stored backlog "
                f"points after the 20% warm-up (one every 5 slots); use {shortest} or more"
            )
    _no_repeats(list(horizons), option)


def _check_seed_sets(seed_sets: list[list[int]], records: list[dict[str, Any]]) -> None:
    """Seed sets must be disjoint, and each must hold records."""
    seen: dict[int, int] = {}
    for k, seeds in enumerate(seed_sets):
        for seed in seeds:
            if seed in seen and seen[seed] != k:
                raise ValueError(
                    f"--seed-sets: seed {seed} is in set {seen[seed] + 1} and set {k + 1}; the "
                    "sets must be disjoint"
                )
            seen[seed] = k
    have = {r["seed"] for r in records}
    for k, seeds in enumerate(seed_sets):
        if not have & set(seeds):
            raise ValueError(
                f"--seed-sets: set {k + 1} ({seeds[0]}..{seeds[-1]}) has no record in the "
                "results files"
            )


def _sweep(args: argparse.Namespace) -> None:
    from mabp_gym.harness.evaluation import execute
    from mabp_gym.harness.runs import plan
    from mabp_gym.harness.summaries import summarize_records

    with user_input():
        values = _parse_grid(args.values, "--values")
        _no_repeats(values, "--values")  # 2 and 2.0 too: one row printed twice
        policies = _policies(args.policies)
        overrides = _parse_overrides(args.overrides)
        _no_grid_overrides(
            overrides,
            "sweep",
            {
                "load": "sets the load with --values (--param load) or --at",
                "horizon": "sets it with --horizon",
                args.param: "sweeps it with --param and --values",
            },
        )
        _distinct_files(args, ("out",), ("workload",))
        _writable(args.out, "--out", results="eval")
        _check_run_args(args)
        at = _sweep_load(args)
        base = _grid_args(args)
        specs = []
        if args.param == "load":
            specs = plan(
                policies, args.workload, values, args.seeds, **base, workload_overrides=overrides
            )
        else:
            for value in values:
                if args.param == "nu":
                    specs += plan(
                        policies,
                        args.workload,
                        [at],
                        args.seeds,
                        **{**base, "nu": value},
                        workload_overrides=overrides,
                    )
                else:
                    specs += plan(
                        policies,
                        args.workload,
                        [at],
                        args.seeds,
                        **base,
                        workload_overrides={**overrides, args.param: _number(str(value))},
                    )
    records = execute(specs, output=args.out, **_run_args(args))
    print(
        f"{args.param:>8} {'policy':<20} {'stable':>6} {'backlog':>8} {'penalty':>8} "
        f"{'p95':>7} {'hit':>5}"
    )
    for value in values:
        chosen = [r for r in records if _sweep_value(r, args.param) == value]
        for row in summarize_records(chosen):
            print(
                f"{value:>8g} {row['policy']:<20} {_fmt(row['stable']):>6} "
                f"{_fmt(row['mean_backlog'], 1):>8} {_fmt(row['penalty'], 4):>8} "
                f"{_fmt(row['p95_delay'], 1):>7} {_fmt(row['hit_ratio'], 2):>5}"
            )
    print("stable: as in `mabp-gym eval` (verdict v4: the backlog's growth, pooled over the seeds)")
    settings = [[r for r in records if _sweep_value(r, args.param) == v] for v in values]
    _verdict_caveats(settings, args.horizon, screened=True)


SWEEP_AT = 0.85
"""The load of a sweep over beta, K, nu or skew when ``--at`` does not set it."""


def _sweep_load(args: argparse.Namespace) -> float:
    """The one load of a sweep over another parameter; ``--param load`` takes none. A
    sweep over nu takes no ``--nu`` either: it sets nu with ``--values``."""
    if args.param == "nu" and args.nu is not None:
        raise ValueError("--nu: sweep --param nu sets nu with --values, so drop --nu")
    if args.param == "load":
        if args.at is not None:
            raise ValueError(
                "--at sets the load of a beta, K, nu or skew sweep; --param load sweeps the "
                "load over --values, so drop --at"
            )
        return SWEEP_AT
    return SWEEP_AT if args.at is None else check_number(args.at, "--at", low=0.0, low_open=True)


def _sweep_value(record: dict[str, Any], param: str) -> float | None:
    if param == "load":
        return record["load"]
    if param == "nu":
        return record["nu"]
    value = record.get("overrides", {}).get(param)
    return None if value is None else float(value)
