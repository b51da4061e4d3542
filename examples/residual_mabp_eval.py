"""Residual-MABP against MABP and frame-MABP on the benchmark's evaluation seeds.

Evaluates each checkpoint given (one per training seed) with MABP and frame-MABP at a few
loads near the bound, on seeds that training and checkpoint choice never saw, and prints
a Markdown table: P95 delay (all requests), penalty per arrival, backlog, the harness's
verdict (v4) per load, the stable load over the loads run, and the delay ratio to MABP.

    python examples/residual_mabp_eval.py --workload mixed \
        --checkpoints runs/res_mixed_s0/residual_mabp_mixed.pt runs/res_mixed_s1/...

A family-trained checkpoint (``residual_mabp_any.pt``) runs on any network, e.g. a held-out
one: ``--workload multihop --set nodes=100 --loads 0.3``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mabp_gym.harness.evaluation import evaluate
from mabp_gym.harness.summaries import stable_load, summarize_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--checkpoints", nargs="+", required=True)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.85, 0.9, 0.95])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(9000, 9010)))
    parser.add_argument("--horizon", type=int, default=4000)
    parser.add_argument("--out", default="results/residual.jsonl")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE", help="workload overrides (numbers)"
    )
    args = parser.parse_args()
    overrides = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq:
            parser.error(f"--set {item!r}: give KEY=VALUE")
        overrides[key] = float(value) if "." in value or "e" in value else int(value)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    runs = [("mabp", "mabp", {}), ("frame-mabp", "frame-mabp", {})]
    # Each row named by its checkpoint's folder (a training run's), or by its path where
    # two share a folder (two shipped files read as one label).
    folders = [Path(c).parent.name for c in args.checkpoints]
    names = folders if len(set(folders)) == len(folders) else list(args.checkpoints)
    runs += [
        (f"residual-mabp ({name})", "residual-mabp", {"checkpoint": c})
        for name, c in zip(names, args.checkpoints, strict=True)
    ]
    rows = []
    for label, policy, kw in runs:
        records = evaluate(
            policy,
            args.workload,
            loads=args.loads,
            seeds=args.seeds,
            horizon=args.horizon,
            policy_kw=kw,
            output=args.out,
            progress=False,
            **overrides,
        )
        stable = stable_load(records)[policy]
        for row in summarize_records(records):
            rows.append({"label": label, "stable_load": stable, **row})
    setting = "".join(f" {k}={v}" for k, v in overrides.items())
    reference = {r["load"]: r["p95_delay_all"] for r in rows if r["label"] == "mabp"}
    print(
        f"{args.workload}{setting}, seeds {args.seeds[0]}-{args.seeds[-1]}, "
        f"{args.horizon} slots\n\n"
        "| Policy | Load | P95 delay (all) | vs MABP | Penalty / arrival | Backlog | Stable | "
        "Stable load |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for r in rows:
        ratio = r["p95_delay_all"] / reference[r["load"]]
        print(
            f"| {r['label']} | {r['load']:.2f} | {r['p95_delay_all']:.1f} | {ratio:.2f}x | "
            f"{r['penalty_per_arrival']:.4f} | {r['mean_backlog']:.1f} | "
            f"{'yes' if r['stable'] else 'no'} | {r['stable_load']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
