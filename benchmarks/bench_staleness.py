"""Stable load of BP and MABP run as one agent per node, against telemetry staleness.

Every (policy, staleness, load, seed) is one episode of the decentralized view
(:func:`mabp_gym.harness.decentralized.run_decentralized`); the stable load is
:func:`mabp_gym.stable_load` with verdict v4 (the largest grid load such that it and every
smaller grid load are stable: growth pooled over the seeds under the limit with 95%
confidence and no material rising trend, SPEC 9.2). Records stream
to ``--out`` (JSON lines; a rerun skips finished runs). Prints a markdown table and a JSON
line, and draws the figure of ``docs/decentralized.md``:

    python benchmarks/bench_staleness.py --horizon 2000 --seeds 0 1 2 3 4 \
        --policy-loads bp=0.25,0.3,0.35,0.4,0.45,0.5,0.55 \
        mabp=0.75,0.8,0.85,0.9,0.95,1.0 --probe bp:0.4 mabp:0.8 \
        --out results/staleness.jsonl --figure docs/figures/decentralized_staleness.png
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _report import emit

from mabp_gym import make_workload, read_records, stable_load, summarize_records
from mabp_gym.harness.decentralized import run_decentralized


def _run(job: tuple[str, int, float, int, int, str]) -> dict[str, Any]:
    name, staleness, load, seed, horizon, workload = job
    return run_decentralized(
        name, workload, load=load, seed=seed, staleness=staleness, horizon=horizon
    )


def _key(record: dict[str, Any]) -> tuple:
    return (
        record["local_policy"],
        int(record["staleness"]),
        round(record["load"], 6),
        record["seed"],
        record["horizon"],
        record["workload"],
    )


def _arguments() -> tuple[argparse.Namespace, dict[str, list[float]]]:
    """The command line, and each policy's load grid."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mixed", help="a workload name or a workload file")
    parser.add_argument("--policies", nargs="+", default=["bp", "mabp"])
    parser.add_argument("--staleness", nargs="+", type=int, default=[0, 1, 2, 5, 10])
    parser.add_argument(
        "--loads", nargs="+", type=float, default=[round(0.1 * k, 1) for k in range(1, 11)]
    )
    parser.add_argument(
        "--policy-loads",
        nargs="*",
        default=[],
        help="POLICY=L1,L2,... : that policy's load grid instead of --loads "
        "(a grid around each policy's boundary)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--horizon", type=int, default=600)
    parser.add_argument(
        "--probe",
        nargs="*",
        default=["bp:0.4", "mabp:0.6"],
        help="policy:load pairs run at every --probe-staleness (the "
        "figure's right panel: backlog against staleness at one load)",
    )
    parser.add_argument("--probe-staleness", nargs="+", type=int, default=[0, 1, 2, 5, 10, 20, 50])
    parser.add_argument("--probe-seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default="results/staleness.jsonl")
    parser.add_argument("--figure", default=None, help="write the figure (PNG) here")
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    args = parser.parse_args()
    grids = {p: list(args.loads) for p in args.policies}
    for item in args.policy_loads:
        policy, _, values = item.partition("=")
        if policy not in grids or not values:
            parser.error(
                f"--policy-loads takes POLICY=L1,L2,... with POLICY one of "
                f"{args.policies}, got {item!r}"
            )
        grids[policy] = [float(v) for v in values.split(",")]
    return args, grids


def _simulate(
    args: argparse.Namespace, grids: dict[str, list[float]], path: Path, name: str
) -> None:
    """Append the runs not yet in ``path``: each (policy, staleness) series over its loads
    in ascending order, stopping at its first load whose seed-mean is unstable (the stable
    load never looks further, and unstable runs, with growing queues, are the slow ones);
    then the probes."""
    series = [(p, d) for p in args.policies for d in args.staleness]
    with (
        path.open("a", encoding="utf-8") as sink,
        ProcessPoolExecutor(max_workers=args.workers) as pool,
    ):
        for p, d in series:
            for load in sorted(grids[p]):
                done = {_key(r): r for r in read_records(path)}
                keys = [(p, d, round(load, 6), seed, args.horizon, name) for seed in args.seeds]
                jobs = [
                    (p, d, load, seed, args.horizon, args.workload)
                    for seed, key in zip(args.seeds, keys, strict=True)
                    if key not in done
                ]
                for record in pool.map(_run, jobs):
                    sink.write(json.dumps(record) + "\n")
                    sink.flush()
                    done[_key(record)] = record
                if not summarize_records([done[key] for key in keys])[0]["stable"]:
                    break
        probes = [(p, float(load)) for p, load in (x.split(":") for x in args.probe)]
        finished = {_key(r) for r in read_records(path)}
        jobs = [
            (p, d, load, seed, args.horizon, args.workload)
            for p, load in probes
            for d in args.probe_staleness
            for seed in args.probe_seeds
            if (p, d, round(load, 6), seed, args.horizon, name) not in finished
        ]
        for record in pool.map(_run, jobs):
            sink.write(json.dumps(record) + "\n")
            sink.flush()


def main() -> None:
    args, grids = _arguments()
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    workload = make_workload(args.workload)
    if workload.index.num_links == 0:
        raise SystemExit(
            f"bench_staleness: workload {workload.name!r} has no links, so telemetry "
            "staleness changes nothing there; pick one with links (mixed, multihop14, ...)"
        )
    name = workload.name
    _simulate(args, grids, path, name)
    wanted = {
        (p, d, round(load, 6), seed, args.horizon, name)
        for p in args.policies
        for d in args.staleness
        for load in grids[p]
        for seed in args.seeds
    }
    records = [r for r in read_records(path) if _key(r) in wanted]
    stable = stable_load(records)
    telemetry = {int(r["staleness"]): r["telemetry_per_agent"] for r in records}
    table: dict[str, dict[str, Any]] = {}
    print(
        f"{name}, {len(args.seeds)} seeds, {args.horizon} slots, loads "
        + ", ".join(f"{p} {min(g):g}-{max(g):g}" for p, g in grids.items())
    )
    print(
        "| staleness | "
        + " | ".join(f"{p} stable load" for p in args.policies)
        + " | telemetry numbers per agent per slot |"
    )
    print("|" + " --- |" * (len(args.policies) + 2))
    for d in args.staleness:
        entry = {p: stable.get(f"{p}@{d}", 0.0) for p in args.policies}
        table[str(d)] = {"stable_load": entry}
        print(
            f"| {d} | "
            + " | ".join(f"{entry[p]:.2f}" for p in args.policies)
            + f" | {telemetry.get(d, float('nan')):.1f} |"
        )
    probe_rows = _probe_table(args, name, read_records(path))
    emit(
        {
            "benchmark": "staleness_stable_load",
            "workload": name,
            "seeds": args.seeds,
            "horizon": args.horizon,
            "loads": grids,
            "table": table,
            "probe": probe_rows,
        },
        args.json,
    )
    if args.figure:
        _figure(args, stable, probe_rows, Path(args.figure))


def _probe_table(
    args: argparse.Namespace, name: str, records: list[dict[str, Any]]
) -> dict[str, dict[str, dict[str, float]]]:
    """Mean backlog, its std over seeds, stability and hit ratio per probe and staleness."""
    result: dict[str, dict[str, dict[str, float]]] = {}
    print(f"\nprobes: {len(args.probe_seeds)} seeds, {args.horizon} slots")
    print("| policy | load | staleness | mean backlog | std over seeds | stable | hit ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for probe in args.probe:
        p, load = probe.split(":")
        result[probe] = {}
        for d in args.probe_staleness:
            keys = {
                (p, d, round(float(load), 6), seed, args.horizon, name) for seed in args.probe_seeds
            }
            chosen = [r for r in records if _key(r) in keys]
            if not chosen:
                continue
            row = summarize_records(chosen)[0]
            result[probe][str(d)] = {
                "mean_backlog": row["mean_backlog"],
                "std": row["mean_backlog_std"],
                "stable": row["stable"],
                "hit_ratio": row["hit_ratio"],
            }
            print(
                f"| {p} | {load} | {d} | {row['mean_backlog']:.1f} | "
                f"{row['mean_backlog_std']:.1f} | {'yes' if row['stable'] else 'no'} | "
                f"{row['hit_ratio']:.2f} |"
            )
    return result


def _figure(
    args: argparse.Namespace,
    stable: dict[str, float],
    probes: dict[str, dict[str, dict[str, float]]],
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), dpi=90)
    for p in args.policies:
        left.plot(
            args.staleness,
            [stable.get(f"{p}@{d}", 0.0) for d in args.staleness],
            "o-",
            label=p.upper(),
        )
    left.set_xlabel("telemetry staleness (slots)")
    left.set_ylabel("stable load")
    left.set_ylim(0, 1)
    left.legend()
    left.set_title(f"stable load ({len(args.seeds)} seeds)", fontsize=10)
    for probe, rows in probes.items():
        p, load = probe.split(":")
        stale = [int(d) for d in rows]
        right.errorbar(
            stale,
            [rows[d]["mean_backlog"] for d in rows],
            yerr=[rows[d]["std"] for d in rows],
            fmt="o-",
            capsize=3,
            label=f"{p.upper()} at load {load}",
        )
    right.set_xscale("symlog", linthresh=1)
    right.set_xlabel("telemetry staleness (slots)")
    right.set_ylabel("mean backlog")
    right.legend(fontsize=8)
    right.set_title(f"backlog at one load ({len(args.probe_seeds)} seeds)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


if __name__ == "__main__":
    main()
