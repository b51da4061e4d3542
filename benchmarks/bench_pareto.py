"""A policy against frame-MABP on the benchmark's tasks, paired seed by seed.

Reads the board's results file (``mabp-gym bench --out results/bench.jsonl``) and, for
every task where both policies ran on the same evaluation seeds, prints the per-seed
ratios of the policy's P95 delay (all) and penalty per arrival to frame-MABP's: their mean
with a 95% interval (Student t over the seeds), and whether the task counts as a
**Pareto win**: both policies stable (verdict v4), the delay ratio at most 0.9 with its
interval wholly below 1 (the two apart), and the penalty ratio at most 1.0.

    python benchmarks/bench_pareto.py --out results/bench.jsonl --policy residual-frame-mabp
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mabp_gym.harness import bench
from mabp_gym.harness.pareto import REFERENCE, compare
from mabp_gym.harness.results_file import read_records


def paired(
    records: list[dict], policy: str, task: bench.Task, horizon: int = bench.HORIZON
) -> dict | None:
    """The paired comparison on one task at one horizon (``None`` where the two share no
    seed there): a P95 delay counting queued requests depends on the run's length, so runs
    of two horizons are never paired."""
    mine = [r for r in records if task.matches(r) and int(r["horizon"]) == horizon]
    by_seed = {
        name: {r["seed"]: r for r in mine if r["policy"] == name} for name in (policy, REFERENCE)
    }
    seeds = sorted(set(by_seed[policy]) & set(by_seed[REFERENCE]))
    if not seeds:
        return None
    ours = [by_seed[policy][s] for s in seeds]
    theirs = [by_seed[REFERENCE][s] for s in seeds]
    return {"task": task.name, **compare(ours, theirs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench.jsonl", help="the board's results file")
    parser.add_argument("--policy", default="residual-frame-mabp")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument(
        "--horizon", type=int, default=bench.HORIZON, help="the runs' horizon (the board's)"
    )
    args = parser.parse_args()
    if not Path(args.out).is_file():
        parser.error(f"--out {args.out!r}: no such results file (mabp-gym bench --out writes it)")
    # Only the runs of the checkpoints shipped now: retraining appends to the same file.
    try:
        specs, _ = bench.plan_bench(
            bench.TASKS, [args.policy, REFERENCE], bench.SEEDS, args.horizon
        )
    except ValueError as error:
        parser.error(f"--policy {args.policy!r}: {error}")
    records = bench.current_runs(read_records(args.out), specs, bench.TASKS)
    rows = [
        row for task in bench.TASKS if (row := paired(records, args.policy, task, args.horizon))
    ]
    print(f"{args.policy} against {REFERENCE}, paired by seed ({args.out})\n")
    print("| Task | Seeds | P95 delay ratio | Penalty ratio | Both stable | Pareto win |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['task']} | {r['seeds']} | {r['delay_ratio']:.2f} ± {r['delay_half_width']:.2f} "
            f"| {r['penalty_ratio']:.2f} ± {r['penalty_half_width']:.2f} | "
            f"{'yes' if r['both_stable'] else 'no'} | {'**yes**' if r['pareto_win'] else 'no'} |"
        )
    main_track = [r for r in rows if r["task"] in {t.name for t in bench.MAIN_TASKS}]
    wins = sum(r["pareto_win"] for r in main_track)
    print(f"\nPareto wins on the main track: {wins} of {len(main_track)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "main_track_wins": wins}, indent=2))


if __name__ == "__main__":
    main()
