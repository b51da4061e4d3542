"""Figures of paper VI-B (Figs. 2-6) drawn from saved evaluation records.

Each figure is drawn only when the records hold what it needs (see ``make_figures``'s
second return value for the reason a figure was skipped):

- ``fig2_backlog_traces.png``: backlog of one policy below, near and above its stable load;
- ``fig3_nu_tradeoff.png``: penalty and mean backlog against ``nu`` (a ``sweep --param nu``);
- ``fig3_separation_gap.png``: BP-minus-MABP penalty per request against ``K`` on the
  ``separation`` workload, with ``(K - 1) / 2``;
- ``fig4_cost_composition.png``: compute, transmission and memory cost per request;
- ``fig4_retention_heatmap.png``: how often each node holds each object;
- ``fig5_memory_sensitivity.png``: MABP's penalty gain over Cost-BP against ``beta`` and
  the Zipf ``skew``;
- ``fig5_tails.png``: P95 delay per workload (mixed, rag, moe, agentic);
- ``fig6_ablations.png``: P95 delay and penalty per arrival of MABP and its ablations,
  a policy that grows at the load hatched and labelled "(grows)".

P95 delays count the requests still queued at their age (``p95_delay_all``, benchmark v3)
where the records have it, so that a growing queue is not flattered by its completions.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

Record = dict[str, Any]


def _figure(width: float = 6.0, height: float = 3.5, cols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, cols)
    return fig, axes


def _mean(records: list[Record], key: str) -> float:
    values = [r[key] for r in records if r.get(key) is not None]
    return float(np.mean(values)) if values else float("nan")


def _mean_v3(records: list[Record], key: str, older: str) -> float:
    """The mean of benchmark v3's ``key``, or of ``older`` where the records predate it."""
    return _mean(records, key if all(r.get(key) is not None for r in records) else older)


def _delay(records: list[Record]) -> float:
    """Mean P95 delay counting the requests still queued at their age."""
    return _mean_v3(records, "p95_delay_all", "p95_delay")


def _per_arrival(records: list[Record]) -> float:
    """Mean penalty per arrived request."""
    return _mean_v3(records, "penalty_per_arrival", "penalty")


def _grows(records: list[Record]) -> bool:
    """Whether verdict v4 finds these runs (one policy at one load) growing."""
    from mabp_gym.core.metrics import growth_verdict

    return bool(records) and not growth_verdict(records)["stable"]


def _main_workload(records: list[Record]) -> str:
    """The workload the single-workload figures draw: ``mixed`` when the results hold it
    (the paper's), else the one with the most runs (a user's own workload included)."""
    names = [str(r["workload"]) for r in records if isinstance(r.get("workload"), str)]
    if not names or "mixed" in names:
        return "mixed"
    return max(dict.fromkeys(names), key=names.count)


def _default(records: list[Record]) -> list[Record]:
    """Runs at the default settings: no overrides, nu = 5, memory on."""
    return [
        r
        for r in records
        if not r.get("overrides") and r.get("nu", 5.0) == 5.0 and r.get("memory", True)
    ]


def _override(record: Record, param: str) -> Any:
    return record["overrides"][param]


def _once(records: list[Record]) -> list[Record]:
    """Each run once: the same run read from two results files counts once."""
    return list({r.get("key", id(r)): r for r in records}.values())


def _one_horizon(records: list[Record]) -> list[Record]:
    """The runs of the horizon that covers the most loads (a grid's, not a sweep's runs at
    one load or the longer reruns of a few cells), each once."""
    records = _once(records)
    if not records:
        return []
    horizons = {r.get("horizon") for r in records}
    best = max(horizons, key=lambda h: len({r["load"] for r in records if r.get("horizon") == h}))
    return [r for r in records if r.get("horizon") == best]


def _one_sweep(records: list[Record], value: Callable[[Record], Any]) -> list[Record]:
    """Of the runs of a sweep, the (workload, load, horizon) setting that holds the most
    distinct ``value``s (ties: the most runs), each run once: a sweep's points are runs that
    differ in the swept parameter alone."""
    groups: dict[tuple, list[Record]] = {}
    for r in _once(records):
        groups.setdefault((r.get("workload"), r.get("load"), r.get("horizon")), []).append(r)
    if not groups:
        return []
    return max(groups.values(), key=lambda g: (len({repr(value(r)) for r in g}), len(g)))


def _fixed_load(records: list[Record]) -> float | None:
    loads = sorted({r["load"] for r in records})
    if not loads:
        return None
    return min(loads, key=lambda x: abs(x - 0.85))


def backlog_traces(records: list[Record], out: Path, policy: str) -> str | None:
    from mabp_gym.core.metrics import TRACE_STRIDE
    from mabp_gym.harness.summaries import stable_load

    name = _main_workload(records)
    mine = _one_horizon(
        [r for r in _default(records) if r["policy"] == policy and r["workload"] == name]
    )
    loads = sorted({r["load"] for r in mine})
    if len(loads) < 2:
        return f"needs {policy} on {name} at two or more loads"
    boundary = stable_load(mine).get(policy, 0.0)
    above = [x for x in loads if x > boundary + 1e-9]
    below = [x for x in loads if x < boundary - 0.1 + 1e-9]
    chosen = [
        x
        for x in (
            below[-1] if below else None,
            boundary if boundary in loads else None,
            above[0] if above else None,
            loads[-1],
        )
        if x is not None
    ]
    fig, ax = _figure()
    for load in dict.fromkeys(chosen):
        run = min((r for r in mine if r["load"] == load), key=lambda r: r["seed"])
        trace = run["backlog_trace"]
        ax.plot(np.arange(len(trace)) * TRACE_STRIDE, trace, label=f"load {load:g}")
    ax.set_xlabel("slot")
    ax.set_ylabel("backlog (units)")
    ax.set_title(
        f"{policy} on {name}: below, at and above its stable load {boundary:g}", fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    return None


def nu_points(records: list[Record], policy: str) -> list[tuple[float, float, float]]:
    """``(nu, penalty, mean backlog)`` of ``policy``'s nu sweep: the runs of the one
    setting (:func:`_one_sweep`) that holds the most values of nu, so that a file of
    other runs at nu = 5 (Table I's, at every load) does not pull that point."""
    mine = [r for r in records if r["policy"] == policy and not r.get("overrides")]
    mine = _one_sweep(mine, lambda r: r.get("nu"))
    nus = sorted({r["nu"] for r in mine})
    return [
        (
            nu,
            _mean([r for r in mine if r["nu"] == nu], "penalty"),
            _mean([r for r in mine if r["nu"] == nu], "mean_backlog"),
        )
        for nu in nus
    ]


def nu_tradeoff(records: list[Record], out: Path, policy: str) -> str | None:
    points = nu_points(records, policy)
    if len(points) < 2:
        return f"needs {policy} at two or more values of nu (mabp-gym sweep --param nu)"
    nus, penalty, backlog = (list(column) for column in zip(*points, strict=True))
    fig, ax = _figure()
    ax.plot(nus, penalty, "o-", color="tab:blue")
    ax.set_xlabel("nu")
    ax.set_ylabel("penalty per request", color="tab:blue")
    twin = ax.twinx()
    twin.plot(nus, backlog, "s--", color="tab:red")
    twin.set_ylabel("mean backlog", color="tab:red")
    ax.set_title(f"{policy}: the drift-plus-penalty trade-off", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return None


def separation_gap(records: list[Record], out: Path, policy: str) -> str | None:
    sep = _one_sweep(
        [r for r in records if r["workload"] == "separation"],
        lambda r: r.get("overrides", {}).get("K", 4.0),
    )
    ks = sorted({float(r.get("overrides", {}).get("K", 4.0)) for r in sep})
    gaps = []
    for k in ks:
        at_k = [r for r in sep if float(r.get("overrides", {}).get("K", 4.0)) == k]
        bp = [r for r in at_k if r["policy"] == "bp"]
        mabp = [r for r in at_k if r["policy"] == "mabp"]
        if bp and mabp:
            gaps.append((k, _mean(bp, "penalty") - _mean(mabp, "penalty")))
    if len(gaps) < 2:
        return "needs bp and mabp on separation at two or more K (sweep --param K)"
    fig, ax = _figure()
    k_values, gap = zip(*gaps, strict=True)
    ax.plot(k_values, gap, "o-", label="BP - MABP (measured)")
    ax.plot(k_values, [(x - 1) / 2 for x in k_values], "k--", label="(K - 1) / 2")
    ax.set_xlabel("K")
    ax.set_ylabel("penalty gap per request")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    return None


def cost_composition(records: list[Record], out: Path, policy: str) -> str | None:
    name = _main_workload(records)
    mixed = [r for r in _default(records) if r["workload"] == name]
    load = _fixed_load(mixed)
    at = [r for r in mixed if r["load"] == load]
    policies = list(dict.fromkeys(r["policy"] for r in at))
    if len(policies) < 2:
        return f"needs two or more policies on {name} at one load"
    parts = ("compute_cost", "transmission_cost", "memory_cost")
    fig, ax = _figure(width=7.0)
    bottom = np.zeros(len(policies))
    for part in parts:
        values = np.array([_mean([r for r in at if r["policy"] == p], part) for p in policies])
        values = np.nan_to_num(values)
        ax.bar(policies, values, bottom=bottom, label=part.replace("_", " "))
        bottom += values
    ax.set_ylabel("penalty per completed request")
    ax.set_title(f"cost composition on {name} at load {load:g}", fontsize=9)
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    return None


def retention_heatmap(records: list[Record], out: Path, policy: str) -> str | None:
    name = _main_workload(records)
    mine = [
        r
        for r in _default(records)
        if r["policy"] == policy and r["workload"] == name and r.get("residency")
    ]
    load = _fixed_load(mine)
    if load is None:
        return f"needs a {policy} run on {name}"
    run = min((r for r in mine if r["load"] == load), key=lambda r: r["seed"])
    residency = np.asarray(run["residency"])
    rows = np.flatnonzero(residency.sum(axis=1) > 0)
    if rows.size == 0:
        return f"{policy} held no memory in that run"
    fig, ax = _figure(width=9.0, height=3.0)
    image = ax.imshow(residency[rows], aspect="auto", cmap="magma", vmin=0, vmax=1)
    ax.set_yticks(range(rows.size), [run["nodes"][i] for i in rows], fontsize=7)
    ax.set_xticks(range(len(run["signatures"])), run["signatures"], fontsize=5, rotation=90)
    ax.set_title(f"{policy} at load {load:g}: fraction of slots each object is held", fontsize=9)
    ax.figure.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(out)
    return None


def memory_sensitivity(records: list[Record], out: Path, policy: str) -> str | None:
    fig, axes = _figure(width=8.0, cols=2)
    drawn = 0
    for ax, param in zip(axes, ("beta", "skew"), strict=True):
        swept = _one_sweep(
            [r for r in records if param in r.get("overrides", {})],
            partial(_override, param=param),
        )
        values = sorted({float(r["overrides"][param]) for r in swept})
        gains = []
        for v in values:
            at = [r for r in swept if float(r["overrides"][param]) == v]
            base = _mean([r for r in at if r["policy"] == "cost-bp"], "penalty")
            ours = _mean([r for r in at if r["policy"] == policy], "penalty")
            gains.append(100 * (base - ours) / base if base else float("nan"))
        if len(values) >= 2 and np.isfinite(gains).any():
            ax.plot(values, gains, "o-")
            drawn += 1
        ax.set_xlabel(param)
        ax.set_ylabel(f"penalty gain of {policy} over cost-bp (%)")
    if not drawn:
        return "needs cost-bp and the policy over beta or skew (sweep --param beta / skew)"
    fig.tight_layout()
    fig.savefig(out)
    return None


def tails(records: list[Record], out: Path, policy: str) -> str | None:
    mine = [r for r in _default(records) if r["policy"] == policy]
    workloads = [
        w for w in ("mixed", "rag", "moe", "agentic") if any(r["workload"] == w for r in mine)
    ]
    if len(workloads) < 2:
        return f"needs {policy} on two or more of mixed, rag, moe, agentic"
    fig, ax = _figure()
    values = []
    for w in workloads:
        at = [r for r in mine if r["workload"] == w]
        load = _fixed_load(at)
        values.append(_delay([r for r in at if r["load"] == load]))
    ax.bar(workloads, values)
    ax.set_ylabel("P95 delay (slots), queued requests counted")
    ax.set_title(f"{policy}: tail delay per workload", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return None


def ablations(records: list[Record], out: Path, policy: str) -> str | None:
    names = ("mabp", "mabp-no-transition", "mabp-no-reuse", "mabp-no-retention")
    name = _main_workload(records)
    mixed = [r for r in _default(records) if r["workload"] == name and r["policy"] in names]
    load = _fixed_load(mixed)
    present = [n for n in names if any(r["policy"] == n and r["load"] == load for r in mixed)]
    if len(present) < 2:
        return f"needs MABP and its ablations on {name} at one load"
    cells = {n: [r for r in mixed if r["policy"] == n and r["load"] == load] for n in present}
    # A growing policy's delay is set by the run length: hatched and labelled so.
    labels = [f"{n} (grows)" if _grows(cells[n]) else n for n in present]
    hatch = ["//" if label.endswith("(grows)") else "" for label in labels]
    fig, axes = _figure(width=8.0, cols=2)
    measures = (("P95 delay (queued counted)", _delay), ("penalty / arrival", _per_arrival))
    for ax, (label, measure) in zip(axes, measures, strict=True):
        bars = ax.bar(labels, [measure(cells[n]) for n in present])
        for bar, pattern in zip(bars, hatch, strict=True):
            bar.set_hatch(pattern)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    axes[0].set_title(f"ablations on {name} at load {load:g}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    return None


FIGURES: dict[str, Callable[[list[Record], Path, str], str | None]] = {
    "fig2_backlog_traces.png": backlog_traces,
    "fig3_nu_tradeoff.png": nu_tradeoff,
    "fig3_separation_gap.png": separation_gap,
    "fig4_cost_composition.png": cost_composition,
    "fig4_retention_heatmap.png": retention_heatmap,
    "fig5_memory_sensitivity.png": memory_sensitivity,
    "fig5_tails.png": tails,
    "fig6_ablations.png": ablations,
}


def make_figures(
    records: list[Record], out_dir: Path, *, policy: str = "mabp"
) -> tuple[list[Path], dict[str, str]]:
    """Draw every figure the records support; return the files written and, for each
    figure not drawn, why."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made, skipped = [], {}
    for name, draw in FIGURES.items():
        reason = draw(records, out_dir / name, policy)
        if reason is None:
            made.append(out_dir / name)
        else:
            skipped[name] = reason
    return made, skipped
