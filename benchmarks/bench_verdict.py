"""How often the stability verdict is wrong, both ways, on real queues: false "grows" on
loads that are clearly stable, false "stable" on queues at or past their capacity.

Every cell (policy, load on ``mixed``) runs ``--seeds`` seeds once at its horizon;
the runs are cut at shorter horizons from their saved traces (``mabp_gym.harness.
verdicts.cut``) and split into disjoint seed sets of 2 and of 5, the sizes ``eval`` and the
learning examples use. Each set is judged by the pooled rule alone (no trend test), by
verdict v3 (the trend test without materiality) and by verdict v4 at several materiality
levels (``mabp_gym.core.metrics.MATERIAL_RISE``). A row gives the fraction of the sets that
fail the load.

    python benchmarks/bench_verdict.py --json results/bench_verdict.json
"""

from __future__ import annotations

import argparse
from typing import Any

from _report import emit

from mabp_gym.core.metrics import MATERIAL_RISE, growth_verdict
from mabp_gym.harness.evaluation import evaluate
from mabp_gym.harness.verdicts import cut

CELLS = (
    # (policy, load, what the load is, slots): the stable ones lie 0.05-0.60 under the
    # policy's stable load (BP 0.40, MABP 0.95, Table I); 0.45 is past BP's (its backlog
    # rises 0.1 a slot, SPEC 9.2) and 1.0 is mixed's occupation bound, where no policy is
    # stable: its growth is under the limit on most seeds from about 8,000 slots on, so it
    # runs 16,000, the longest horizon the board and --until-decided use.
    ("bp", 0.30, "stable", 4000),
    ("bp", 0.35, "stable", 4000),
    ("mabp", 0.35, "stable", 4000),
    ("mabp", 0.50, "stable", 4000),
    ("mabp", 0.85, "stable", 4000),
    ("bp", 0.45, "grows", 4000),
    ("mabp", 1.00, "at capacity", 16000),
)
CUTS = (0.3, 0.6, 1.0)
"""Each cell's runs are judged at these fractions of its horizon (cut from the traces)."""
RULES: dict[str, float] = {"pooled only": float("inf"), "v3": 0.0, "v4 0.1": 0.1}
RULES[f"v4 {MATERIAL_RISE:g} (default)"] = MATERIAL_RISE
RULES["v4 0.5"] = 0.5


def fail_rates(records: list[dict[str, Any]], horizon: int, size: int) -> dict[str, float]:
    """The fraction of disjoint ``size``-seed sets of ``records`` (one cell) that each rule
    fails at ``horizon``."""
    runs = sorted(cut(records, horizon), key=lambda r: r["seed"])
    sets = [runs[k : k + size] for k in range(0, len(runs) - size + 1, size)]
    return {
        rule: sum(not growth_verdict(s, material=material)["stable"] for s in sets) / len(sets)
        for rule, material in RULES.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--seeds", type=int, default=40, help="seeds per cell (from 5000)")
    parser.add_argument("--out", default=None, help="results file the runs stream to (reused)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    seeds = range(5000, 5000 + args.seeds)
    rows = []
    for policy, load, truth, slots in CELLS:
        records = evaluate(
            policy,
            "mixed",
            [load],
            seeds,
            horizon=slots,
            output=args.out,
            workers=args.workers,
        )
        for horizon in (round(slots * fraction) for fraction in CUTS):
            for size in (2, 5):
                rates = fail_rates(records, horizon, size)
                rows.append(
                    {
                        "policy": policy,
                        "load": load,
                        "truth": truth,
                        "horizon": horizon,
                        "seeds_per_set": size,
                        "sets": args.seeds // size,
                        **rates,
                    }
                )
    names = list(RULES)
    head = f"{'policy':6} {'load':>5} {'truth':12} {'slots':>6} {'set':>4} {'sets':>5} "
    print(head + " ".join(f"{name:>18}" for name in names))
    for row in rows:
        cells = " ".join(f"{row[name]:18.2f}" for name in names)
        print(
            f"{row['policy']:6} {row['load']:5.2f} {row['truth']:12} {row['horizon']:6d} "
            f"{row['seeds_per_set']:4d} {row['sets']:5d} {cells}"
        )
    print(
        "fraction of the seed sets that fail the load: on a stable row a false 'grows', "
        "on the others 1 minus it is a false 'stable'"
    )
    emit({"benchmark": "verdict", "seeds": args.seeds, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
