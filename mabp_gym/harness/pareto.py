"""A policy against frame-MABP on delay and penalty together, paired by seed.

A task counts as a **Pareto win** when both policies are stable there (verdict v4), the
policy's P95 delay (all) is at most :data:`DELAY_TARGET` of frame-MABP's with its 95%
interval wholly below 1 (the two apart), and its penalty per arrival at most
:data:`PENALTY_TARGET` of frame-MABP's: the ratios are taken seed by seed and pooled
(Student t over the seeds). ``benchmarks/bench_pareto.py`` reads the board's runs this way;
``mabp-gym train select`` uses it to choose among training seeds' checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mabp_gym.core.metrics import growth_verdict, pooled

REFERENCE = "frame-mabp"
DELAY_TARGET = 0.9
PENALTY_TARGET = 1.0


def compare(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The paired comparison of two policies' runs of one task, the lists aligned by seed.

    Raises:
        ValueError: the lists differ in length or seeds, or are empty.
    """
    seeds = [r["seed"] for r in ours]
    if not seeds or seeds != [r["seed"] for r in theirs]:
        raise ValueError("compare needs the two policies' runs on the same seeds, in order")
    delay, delay_half = pooled(
        [a["p95_delay_all"] / b["p95_delay_all"] for a, b in zip(ours, theirs, strict=True)]
    )
    penalty, penalty_half = pooled(
        [
            a["penalty_per_arrival"] / b["penalty_per_arrival"]
            for a, b in zip(ours, theirs, strict=True)
        ]
    )
    stable = all(growth_verdict(list(runs))["stable"] for runs in (ours, theirs))
    win = (
        stable and delay <= DELAY_TARGET and delay + delay_half < 1.0 and penalty <= PENALTY_TARGET
    )
    return {
        "seeds": len(seeds),
        "delay_ratio": delay,
        "delay_half_width": delay_half,
        "penalty_ratio": penalty,
        "penalty_half_width": penalty_half,
        "both_stable": stable,
        "pareto_win": win,
    }
