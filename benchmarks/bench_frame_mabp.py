"""Frame-MABP against MABP on ``mixed``: stable load, backlog growth, decision time.

Runs ``mabp_gym.evaluate`` (the shared harness) for both policies over a load grid and
seeds at one horizon and prints, per policy: the stable load under the harness's verdict
(:func:`mabp_gym.stable_load`, verdict v4: the growth pooled over seeds under the limit
with 95% confidence, and no material rising trend), the largest load whose seed-median slope
stays below 0.035 relative to nothing else (growth only), the mean decision time, and the
fraction of the gap between MABP and the occupation bound (load 1.0) that frame-MABP
closes. Records stream to ``--out`` (JSON lines) so a rerun resumes.

    nice -n 10 python benchmarks/bench_frame_mabp.py --horizon 600 --seeds 100 101 102 103 104
"""

from __future__ import annotations

import argparse
import json
import statistics

from mabp_gym import evaluate, stable_load

POLICIES = ("mabp", "frame-mabp")


def growth_load(records: list[dict], threshold: float = 0.035) -> dict[str, float]:
    """Largest grid load (with every smaller one) whose seed-median slope is below
    ``threshold`` units/slot: the queues do not grow, however long they are."""
    result: dict[str, float] = {}
    for policy in POLICIES:
        best = 0.0
        loads = sorted({r["load"] for r in records if r["policy"] == policy})
        for load in loads:
            slopes = [r["slope"] for r in records if r["policy"] == policy and r["load"] == load]
            if statistics.median(slopes) >= threshold:
                break
            best = load
        result[policy] = best
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=600)
    parser.add_argument(
        "--loads",
        type=float,
        nargs="+",
        default=[0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0],
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102, 103, 104])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="results/frame_mabp.jsonl")
    args = parser.parse_args()
    records = evaluate(
        list(POLICIES),
        "mixed",
        args.loads,
        args.seeds,
        horizon=args.horizon,
        workers=args.workers,
        output=args.out,
    )
    stable = stable_load(records)
    growth = growth_load(records)
    print(f"mixed, horizon {args.horizon}, seeds {args.seeds}")
    print(
        "| policy | stable load (harness) | no-growth load | decision us (mean) | "
        "mean backlog by load |"
    )
    print("| --- | --- | --- | --- | --- |")
    for policy in POLICIES:
        mine = [r for r in records if r["policy"] == policy]
        decision = statistics.mean(r["decision_us_mean"] for r in mine)
        backlog = " ".join(
            f"{load:g}:{statistics.mean(r['mean_backlog'] for r in mine if r['load'] == load):.0f}"
            for load in args.loads
        )
        print(
            f"| {policy} | {stable[policy]:.2f} | {growth[policy]:.2f} | {decision:.0f} | "
            f"{backlog} |"
        )
    for name, verdict in (("harness", stable), ("no-growth", growth)):
        gap = 1.0 - verdict["mabp"]
        closed = (verdict["frame-mabp"] - verdict["mabp"]) / gap if gap > 0 else float("nan")
        print(f"{name}: frame-mabp closes {closed:.0%} of MABP's gap to the bound (load 1.0)")
    print(
        json.dumps(
            {"horizon": args.horizon, "seeds": args.seeds, "stable": stable, "no_growth": growth}
        )
    )


if __name__ == "__main__":
    main()
