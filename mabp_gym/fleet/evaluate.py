"""The Table II analogue: routers x loads x independent runs, mean and 95% half-width."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from mabp_gym.core.validate import as_list, is_seed
from mabp_gym.fleet.routers import (
    ABLATION_ROUTERS,
    COMPETING,
    ROUTERS,
    make_router,
    router_identity,
)
from mabp_gym.fleet.simulator import (
    METRICS,
    FleetConfig,
    check_engine_config,
    replay,
    scale_to_load,
)
from mabp_gym.fleet.trace import Trace

LABELS = {
    "throughput": "Throughput (req/s)",
    "slo_goodput": "SLO goodput (req/s)",
    "p95_ttft_s": "P95 TTFT (s)",
    "p95_tpot_s": "P95 TPOT (s)",
    "p95_e2e_s": "P95 E2E latency (s)",
    "gpu_s_per_request": "GPU seconds/request",
    "kv_hit_ratio": "KV hit ratio (tokens)",
    "downstream_per_request": "Downstream jobs/request",
    "drop_rate": "Drop rate",
    "p95_scheduler_us": "P95 scheduler time (us)",
}
HIGHER_IS_BETTER = {"throughput", "slo_goodput", "kv_hit_ratio"}
MAX_DROP_FOR_BEST = 0.01
"""Routers dropping more than this share of requests are never marked best."""


def evaluate_fleet(
    trace: Trace,
    routers: Sequence[str],
    loads: Sequence[float],
    runs: int,
    config: FleetConfig,
    *,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    engine: str = "simple",
    profile: str | None = None,
    done: dict[str, dict[str, Any]] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One record per (router, load, run): the run's metrics (``engine``: the worker
    model, :data:`mabp_gym.fleet.simulator.ENGINES`; ``profile``: the step engine's
    step-time profile, :data:`mabp_gym.fleet.engine.PROFILES`, default
    :data:`~mabp_gym.fleet.engine.DEFAULT_PROFILE`).

    ``done`` maps run keys (:func:`run_key`, also each record's ``"key"``) to records
    already made, which are reused instead of run again; ``on_record`` gets each new record
    as soon as it is made (the CLI appends it to its results file, so an interrupted sweep
    resumes where it stopped).

    Run ``k`` uses seed ``seed + k`` for every router, so routers face the same agentic
    requests (common random numbers); runs differ in which requests are agentic, in the
    downstream draws and in the routers' own random tie-breaks.
    """
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a positive integer, got {runs!r}")
    if not is_seed(seed):
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    seed = int(seed)  # a numpy integer is no JSON for the run key
    routers, loads = as_list(routers, "routers", of="names"), as_list(loads, "loads")
    profile = check_engine_config(config, engine, profile)
    for name in routers:
        make_router(name)  # fail before any work on an unknown name
    for what, values in (("routers", list(routers)), ("loads", list(loads))):
        twice = [v for k, v in enumerate(values) if v in values[:k]]
        if twice:  # its runs would be pooled as more independent runs of the same seeds
            raise ValueError(f"{what}: {twice[0]!r} is given twice; give each once")
    records = []
    digest = trace_digest(trace)
    done = done or {}
    for load in loads:
        scaled = scale_to_load(trace, load, config)
        for name in routers:
            reused = 0
            for run in range(runs):
                key = run_key(digest, name, load, seed + run, config, engine, profile)
                if key in done:
                    # The same run (the key holds the trace's content, not its name): under
                    # this command's trace name and run index, as if run now (a copy of a
                    # trace, or --requests over all of it, left two names in one table).
                    records.append({**done[key], "trace": trace.name, "run": run})
                    reused += 1
                    continue
                try:
                    metrics = replay(
                        scaled,
                        make_router(name),
                        config,
                        seed=seed + run,
                        engine=engine,
                        profile=profile,
                        exact_state=ROUTERS[name].kind == "reference",
                    )
                except Exception as error:  # its type and traceback stay; the note says where
                    if hasattr(error, "add_note"):  # Python 3.11 on
                        error.add_note(
                            f"(router {name!r} on trace {trace.name} at load {load:g}, run "
                            f"{run}, seed {seed + run})"
                        )
                    raise
                record = {
                    "trace": trace.name,
                    "router": name,
                    "load": load,
                    "run": run,
                    "seed": seed + run,
                    "workers": config.num_workers,
                    "engine": engine,
                    "profile": profile,
                    **metrics,
                    "key": key,
                }
                records.append(record)
                if on_record is not None:
                    on_record(record)
            if progress:
                kept = f" ({reused} from the results file)" if reused else ""
                progress(f"{trace.name} load {load:g} {name}: {runs} runs{kept}")
    return records


def trace_digest(trace: Trace) -> str:
    """A digest of the trace's requests (a rewritten file with the same name differs)."""
    import hashlib

    digest = hashlib.sha256()
    for r in trace.requests:
        digest.update(repr((r.timestamp, r.input_length, r.output_length, r.hash_ids)).encode())
    return digest.hexdigest()[:16]


REVISION = 1
"""Bumped whenever a built-in router or the engine changes what a run gives, so that a
results file made before runs again (the package's version stays between releases).
1: SGLang's first tenant by insertion order, not by time."""


def run_key(
    digest: str,
    router: str,
    load: float,
    seed: int,
    config: FleetConfig,
    engine: str,
    profile: str | None = None,
) -> str:
    """What determines a fleet run's record: the trace's content, the router (a router of
    your own by its code too: an edited one is another router), the load, the seed, every
    fleet constant, the engine and its profile, the package's version and :data:`REVISION`
    (a fix to a built-in router or the engine makes its runs again)."""
    import dataclasses
    import hashlib
    import json

    from mabp_gym.version import __version__

    payload = json.dumps(
        [digest, router, float(load).hex(), seed, dataclasses.asdict(config), engine, profile]
        + [router_identity(router), __version__, REVISION],
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def half_width(values: Sequence[float]) -> float:
    """Two-sided 95% Student-t half-width of the mean (NaN for one value: undefined, and a
    table shows none rather than a "±0.000" that reads as exact)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return math.nan
    return float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def summarize(records: Sequence[dict[str, Any]]) -> dict[tuple[float, str], dict[str, Any]]:
    """(load, router) -> {metric: (mean, half-width)}, plus ``runs``. A metric a record
    lacks (records written before it existed: ``p95_tpot_s``) counts as NaN, shown "-".

    A run (its ``key``) given twice counts once. The runs of one (load, router) must be of
    one trace, engine and fleet size, each seed once; otherwise ``ValueError`` names what
    differs (pooled, the half-width would count them as more independent runs)."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    seen: set[str] = set()
    for record in records:
        if record.get("key") is not None:
            if record["key"] in seen:
                continue
            seen.add(record["key"])
        groups.setdefault((record["load"], record["router"]), []).append(record)
    out: dict[tuple[float, str], dict[str, Any]] = {}
    for key, rows in groups.items():
        _check_one_setting(key, rows)
        summary: dict[str, Any] = {"runs": len(rows)}
        for metric in METRICS:
            values = [r.get(metric, math.nan) for r in rows]
            summary[metric] = (float(np.mean(values)), half_width(values))
        out[key] = summary
    return out


def _check_one_setting(cell: tuple[float, str], rows: list[dict[str, Any]]) -> None:
    where = f"the runs of {cell[1]} at load {cell[0]:g}"
    for field in ("trace", "engine", "profile", "workers"):
        values = {repr(r[field]) for r in rows if r.get(field) is not None}
        if len(values) > 1:
            raise ValueError(
                f"{where} differ in {field!r} ({', '.join(sorted(values))}); summarize each "
                "setting on its own"
            )
    seeds = [r["seed"] for r in rows if r.get("seed") is not None]
    twice = [s for k, s in enumerate(seeds) if s in seeds[:k]]
    if twice:
        raise ValueError(
            f"{where} hold seed {twice[0]} twice with different settings (fleet constants); "
            "summarize each setting on its own"
        )


def _cell(mean: float, hw: float, metric: str) -> str:
    if not math.isfinite(mean):
        return "-"
    digits = 1 if metric in ("p95_scheduler_us",) else 3
    if metric == "drop_rate":
        return f"{100 * mean:.2f}%" if math.isnan(hw) else f"{100 * mean:.2f}±{100 * hw:.2f}%"
    return f"{mean:.{digits}f}" if math.isnan(hw) else f"{mean:.{digits}f}±{hw:.{digits}f}"


SHORT = {
    "throughput": "Thr. (req/s)",
    "slo_goodput": "Goodput (req/s)",
    "p95_ttft_s": "P95 TTFT (s)",
    "p95_tpot_s": "P95 TPOT (s)",
    "p95_e2e_s": "P95 E2E (s)",
    "gpu_s_per_request": "GPU s/req",
    "kv_hit_ratio": "KV hit",
    "downstream_per_request": "Jobs/req",
    "drop_rate": "Drops",
    "p95_scheduler_us": "P95 sched. (us)",
}


def format_table(
    records: Sequence[dict[str, Any]], routers: Sequence[str], layout: str = "metrics"
) -> str:
    """Markdown tables, one per load, the best point estimate of each metric in bold.

    Scheduler time is never bold, and only routers dropping at most ``MAX_DROP_FOR_BEST``
    compete. ``layout="metrics"``: metrics as rows, routers as columns (the paper's
    Table II); ``"routers"``: one row a router (narrower for many routers).
    """
    if layout not in ("metrics", "routers"):
        raise ValueError(f"layout must be 'metrics' or 'routers', got {layout!r}")
    summary = summarize(records)
    loads = sorted({load for load, _ in summary})
    blocks = []
    for load in loads:
        present = [r for r in routers if (load, r) in summary]
        runs = min(summary[(load, r)]["runs"] for r in present)
        spread = "one run: no interval" if runs == 1 else "mean ± 95% half-width"
        # A router that drops work can look frugal (GPU seconds, hit ratio of what it
        # served), so only routers dropping at most MAX_DROP_FOR_BEST compete for bold.
        # The upper reference (exact engine state) and the ablations never compete either.
        fair = np.array(
            [
                summary[(load, r)]["drop_rate"][0] <= MAX_DROP_FOR_BEST
                and (r not in ROUTERS or ROUTERS[r].kind in COMPETING)
                for r in present
            ]
        )
        cells: dict[tuple[str, str], str] = {}
        for metric in METRICS:
            means = np.array([summary[(load, r)][metric][0] for r in present])
            best = None
            if metric != "p95_scheduler_us" and fair.any() and np.all(np.isfinite(means)):
                pool = means[fair]
                best = pool.max() if metric in HIGHER_IS_BETTER else pool.min()
            for r, mean, ok in zip(present, means, fair, strict=True):
                text = _cell(mean, summary[(load, r)][metric][1], metric)
                cells[(r, metric)] = f"**{text}**" if ok and mean == best else text
        lines = [
            f"Load {load:g} ({runs} runs, {spread}; bold: best point "
            f"estimate among routers dropping at most {100 * MAX_DROP_FOR_BEST:g}%; "
            "the references on the exact engine state (oracle-ttft, mabp-route-exact) and "
            f"the ablations ({', '.join(ABLATION_ROUTERS)}) are not ranked)",
            "",
        ]
        if layout == "metrics":
            lines += [
                "| Metric | " + " | ".join(present) + " |",
                "| --- |" + " --- |" * len(present),
            ]
            lines += [
                f"| {LABELS[m]} | " + " | ".join(cells[(r, m)] for r in present) + " |"
                for m in METRICS
            ]
        else:
            lines += [
                "| Router | " + " | ".join(SHORT[m] for m in METRICS) + " |",
                "| --- |" + " --- |" * len(METRICS),
            ]
            lines += [
                f"| {r} | " + " | ".join(cells[(r, m)] for m in METRICS) + " |" for r in present
            ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
