"""CPU time of one candidate of the residual recipe's search: the quantity its budget counts.

A `mabp-gym train residual-mabp --base frame-mabp --family ...` run scores 97 candidates
(the base, then 8 rounds of 12); each costs one run of every family member on every
training seed (``training.residual_mabp.run_metrics``: 12 runs of 3,000 slots in the
documented recipe). This times that objective for one fixed candidate (the shipped
``residual-frame-mabp`` weights) in CPU seconds of one process, after an untimed warm-up
run of each member (numba's cache, the allocator), and checks the metrics of every run.

With ``--baseline REF`` the same measurement runs in a ``git worktree`` of ``REF`` too,
each measurement in a fresh process whose imports resolve to one tree, the trees taking
turns (``--repeats`` each, the order alternating); the median of the paired ratios is
printed, with the range, and the runs' metrics must be equal between the trees (the same
slots).

    python benchmarks/bench_objective.py --baseline f7d86df --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from _report import emit
from _trees import import_tree, last_json, trees

FAMILY = (
    "mixed@0.9",
    "mixed@0.95",
    "rag@0.9",
    "agentic@0.9",
    "multihop@0.5",
    "mixed@0.8,beta=0.125",
)
"""The documented recipe's family (``docs/learning.md``)."""


def objective_cpu_s(slots: int, seeds: list[int]) -> tuple[float, list[dict]]:
    """CPU seconds of one candidate's runs in this process, and their metrics."""
    from mabp_gym.agents import checkpoint_file
    from mabp_gym.agents.residual_mabp import load
    from mabp_gym.training.residual_mabp import parse_member, run_metrics

    path = checkpoint_file.default_checkpoint("residual-frame-mabp", "mixed")
    weights, _ = load(path, None, base="frame-mabp", policy="residual-frame-mabp")
    members = [parse_member(text) for text in FAMILY]
    for member in members:  # warm: the kernels from numba's cache, the allocator
        run_metrics(member, weights, seeds[0], 200, "frame-mabp")
    started = time.process_time()
    metrics = [
        run_metrics(member, weights, seed, slots, "frame-mabp")
        for member in members
        for seed in seeds
    ]
    return time.process_time() - started, metrics


def _measure_in(tree: Path, slots: int, seeds: list[int]) -> tuple[float, list[dict]]:
    """One measurement in a fresh process whose imports resolve to ``tree``."""
    out = last_json(tree, [str(Path(__file__).resolve()), "--worker", str(slots), *map(str, seeds)])
    return float(out["cpu_s"]), out["metrics"]


def _worker(slots: int, seeds: list[int]) -> None:
    tree = Path(os.environ["PYTHONPATH"]).resolve()
    import_tree(tree)
    from mabp_gym.agents import residual_mabp

    source = Path(residual_mabp.__file__).resolve()
    if not source.is_relative_to(tree):
        raise SystemExit(f"mabp_gym.agents.residual_mabp came from {source}, not {tree}")
    cpu, metrics = objective_cpu_s(slots, seeds)
    print(json.dumps({"cpu_s": cpu, "metrics": metrics}, default=float), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=3000, help="slots a run (the recipe's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[20, 21], help="training seeds")
    parser.add_argument("--baseline", metavar="REF", help="git ref to compare against")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per tree")
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(int(args.worker[0]), [int(s) for s in args.worker[1:]])
        return
    if args.slots < 1 or args.repeats < 1:
        parser.error("--slots and --repeats must be at least 1")
    with tempfile.TemporaryDirectory() as where, trees(args.baseline, Path(where)) as found:
        cpu: dict[str, list[float]] = {name: [] for name in found}
        metrics: dict[str, list[dict]] = {}
        for r in range(args.repeats):
            order = list(found.items())
            for name, tree in order if r % 2 == 0 else order[::-1]:
                seconds, metrics[name] = _measure_in(tree, args.slots, args.seeds)
                cpu[name].append(seconds)
    runs = len(FAMILY) * len(args.seeds)
    result: dict = {
        "benchmark": "objective",
        "slots": args.slots,
        "seeds": args.seeds,
        "runs": runs,
        "cpu_s": {name: statistics.median(v) for name, v in cpu.items()},
        "us_per_slot": {
            name: 1e6 * statistics.median(v) / (runs * args.slots) for name, v in cpu.items()
        },
    }
    print(f"one candidate: {runs} runs of {args.slots} slots")
    for name, values in cpu.items():
        print(f"  {name:9s} {statistics.median(values):7.2f} CPU s (median of {len(values)})")
    if args.baseline:
        ratios = [a / b for a, b in zip(cpu["current"], cpu["baseline"], strict=True)]
        same = metrics["current"] == metrics["baseline"]
        result |= {
            "baseline": args.baseline,
            "ratio": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
            "same_metrics": same,
        }
        print(
            f"  current / {args.baseline}: {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}); the same metrics: {same}"
        )
    emit(result, args.json)


if __name__ == "__main__":
    main()
