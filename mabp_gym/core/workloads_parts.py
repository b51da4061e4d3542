"""The parts every workload builder assembles: noisy successor laws, actions, budgets, costs.

A builder reads its validated parameters ``p`` (see :mod:`mabp_gym.core.workloads`) and
turns them into :class:`~mabp_gym.core.workload.Action` objects, per-node budgets and the
penalty weights of a :class:`~mabp_gym.core.workload.Workload` with these helpers.
"""

from __future__ import annotations

from typing import Any

from mabp_gym.core.workload import Action, Signature

Law = dict[int, float]  # successor commodity -> nominal probability (the rest exits)


def noisy_law(hit: Law, miss: Law, eps: float) -> tuple[tuple[tuple[int, float], ...], ...]:
    """Mix each nominal law with the uniform law over the action's outcomes (SPEC 1).

    The support is the union of both laws' outcomes (exit included when either law exits
    with positive probability), so noise makes a memory-shaped law less sharp.
    """
    support = sorted(c for c in set(hit) | set(miss) if hit.get(c, 0) > 0 or miss.get(c, 0) > 0)
    exits = any(1.0 - sum(law.values()) > 1e-12 for law in (hit, miss))
    outcomes = len(support) + int(exits)
    realized = []
    for law in (hit, miss):
        uniform = eps / outcomes if outcomes else 0.0
        realized.append(tuple((c, (1 - eps) * law.get(c, 0.0) + uniform) for c in support))
    return tuple(realized)


def _budgets(
    n_nodes: int, actions: list[Action], signatures: list[Signature], beta: float
) -> list[float]:
    eligible: list[set[int]] = [set() for _ in range(n_nodes)]
    for action in actions:
        if action.signature >= 0:
            eligible[action.node].add(action.signature)
    return [beta * sum(signatures[s].size for s in sigs) for sigs in eligible]


def _primitive(
    p: dict[str, Any],
    *,
    signature: int,
    hit_law: Law,
    miss_law: Law,
    node: int,
    commodity: int,
    work: float = 1.0,
) -> Action:
    """An action whose miss costs ``K_w`` times the work and ``K`` times the loss."""
    scale = p["penalty_scale"]
    k_w = p["K"] if p["K_w"] is None else p["K_w"]
    law_hit, law_miss = noisy_law(hit_law, miss_law, p["eps"])
    if signature < 0:
        return Action(
            node=node,
            commodity=commodity,
            signature=-1,
            work_hit=work,
            work_miss=work,
            loss_hit=p["loss"] * scale,
            loss_miss=p["loss"] * scale,
            credit_hit=0.0,
            successors_hit=law_hit,
            successors_miss=law_miss,
            gen_prob=0.0,
        )
    return Action(
        node=node,
        commodity=commodity,
        signature=signature,
        work_hit=work,
        work_miss=k_w * work,
        loss_hit=p["loss"] * scale,
        loss_miss=p["K"] * p["loss"] * scale,
        credit_hit=p["credit"] * scale,
        successors_hit=law_hit,
        successors_miss=law_miss,
        gen_prob=p.get("gen_prob", 1.0),
    )


def _costs(p: dict[str, Any]) -> dict[str, Any]:
    scale = p["penalty_scale"]
    return {
        "eta": p["eta"],
        "migration_cost": p["migration_cost"] * scale,
        "theta": p["theta"] * scale,
        "omega": p["omega"] * scale,
    }
