"""Benchmark v3's tasks with headroom (SPEC 9) and the leaderboard over them.

On the headline metric, the stable load, MABP sits at the occupation bound of ``mixed`` and
``rag``: it no longer separates good schedulers. Delay near the bound does (frame-MABP's
P95 is about half MABP's there), and some networks leave MABP far from the bound. A task
is a workload at one load; every policy is run on the published evaluation seeds
(:data:`EVALUATION_SEEDS`, which training, tuning and checkpoint choice must not use) and
judged on the same metrics: P95 delay counting the requests still in the network
(``p95_delay_all``), mean backlog, penalty per arrived request and verdict v4's stability
at the task's load. A policy's score on a task is MABP's P95 delay over its own (above 1:
faster than MABP), and 0 where its backlog grows.

    mabp-gym bench --out results/bench.jsonl            # run what is missing, print the board
    mabp-gym bench --from-results --out results/bench.jsonl   # print the board only
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.core.floor import delay_floor
from mabp_gym.core.held_out import CODEASSIST_FILE, EXAMPLE_FILE, HELD_OUT_NODES
from mabp_gym.core.metrics import geometric_mean, growth_verdict, pooled
from mabp_gym.core.workloads import is_workload_file, make_workload
from mabp_gym.extras import MissingExtraError
from mabp_gym.harness.runs import RunSpec, plan
from mabp_gym.harness.summaries import check_one_setting, occupation_load


@dataclass(frozen=True)
class Task:
    """A workload (with overrides) at one load; ``workload`` is a name or a workload
    file's path. ``track``: ``"main"``, or ``"held-out"`` for a network that training
    never sees (:func:`held_out_reason`)."""

    name: str
    workload: str
    load: float
    overrides: tuple[tuple[str, Any], ...] = ()
    why: str = ""
    track: str = "main"

    @property
    def shown(self) -> str:
        """The workload as the board names it (a file by its file name, not its path)."""
        if is_workload_file(self.workload):
            return f"file {Path(self.workload).name}"
        return self.workload

    @functools.cached_property
    def network(self) -> str:
        """The workload's name in run records (a file's own ``name``)."""
        if is_workload_file(self.workload):
            return make_workload(self.workload, horizon=10).name
        return self.workload

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether a run record is a run of this task at the benchmark's setting (memory
        on, ``nu`` and warm-up at their defaults, the policy's own arguments): a results
        file may hold other runs of the same workload and load, which are not the task's."""
        return (
            record.get("workload") == self.network
            and abs(float(record.get("load", -1.0)) - self.load) < 1e-9
            and dict(record.get("overrides") or {}) == dict(self.overrides)
            and record.get("memory", True) is True
            and record.get("nu", RunSpec.nu) == RunSpec.nu
            and record.get("warmup", RunSpec.warmup) == RunSpec.warmup
            and not record.get("policy_kw")
        )


TASKS: tuple[Task, ...] = (
    Task("mixed-0.90", "mixed", 0.90, why="near the bound: delay separates the schedulers"),
    Task("mixed-0.95", "mixed", 0.95, why="closer still: the queues of the best stable policies"),
    Task("rag-0.90", "rag", 0.90, why="retrieval contexts only"),
    Task("agentic-0.90", "agentic", 0.90, why="tool results and re-planning loops"),
    Task(
        "multihop-0.50",
        "multihop",
        0.50,
        why="a generated 50-node network with memory: MABP grows at half the bound",
    ),
    Task(
        "mixed-tight-0.80",
        "mixed",
        0.80,
        (("beta", 0.125),),
        why="mixed with half its memory budget",
    ),
)
GENERALISATION: tuple[Task, ...] = (
    Task("moe-0.85", "moe", 0.85, why="mixture-of-experts workers", track="held-out"),
    Task(
        "multihop100-0.30",
        "multihop",
        0.30,
        (("nodes", HELD_OUT_NODES),),
        why="a generated network twice the size of multihop's default",
        track="held-out",
    ),
    Task(
        "file-multihop14-0.90",
        EXAMPLE_FILE,
        0.90,
        why="a workload file shipped in mabp_gym/examples: a packet network without memory",
        track="held-out",
    ),
    Task(
        "file-codeassist-0.80",
        CODEASSIST_FILE,
        0.80,
        why="a workload file shipped in mabp_gym/examples: a coding assistant with memory",
        track="held-out",
    ),
)
"""The generalisation track: networks no training may use (every ``moe``, ``multihop``
from :data:`HELD_OUT_NODES` nodes, the shipped example files). A learned policy's result
there is zero-shot."""
MAIN_TASKS = TASKS
"""The main track: the networks training may use."""
TASKS = TASKS + GENERALISATION
TASK_NAMES = tuple(task.name for task in TASKS)
EVALUATION_SEEDS = range(9000, 10000)
"""The published evaluation seeds: training, tuning and checkpoint choice must not use them."""
SEEDS = tuple(range(9000, 9010))
HORIZON = 4000
POLICIES = (
    "bp",
    "mabp",
    "frame-mabp",
    "oracle-sur",
    "gnn",
    "learn-mabp",
    "residual-mabp",
    "residual-mabp-any",
    "residual-frame-mabp",
)
LEARNED = ("gnn", "learn-mabp", "residual-mabp", "residual-mabp-any", "residual-frame-mabp")
ANY_NETWORK = ("residual-mabp-any", "residual-frame-mabp")
"""The learned policies whose one checkpoint runs on every network (zero-shot off the main
track)."""
REFERENCE = "mabp"


TRACK_TITLES = {
    "main": "Main track",
    "held-out": "Generalisation track (networks no training saw: a learned policy is zero-shot)",
}


def list_text() -> str:
    """What ``mabp-gym bench --list`` prints: the tasks by track, and the held-out rule."""
    lines = []
    for track, title in TRACK_TITLES.items():
        lines.append(f"{title}:")
        for task in TASKS:
            if task.track != track:
                continue
            extra = ", ".join(f"{k}={v}" for k, v in task.overrides)
            lines.append(
                f"  {task.name}: {task.shown}{f' ({extra})' if extra else ''} at load "
                f"{task.load:g}; {task.why}"
            )
    lines.append(
        "Rule: training never sees a generalisation-track network (every moe, multihop from "
        f"{HELD_OUT_NODES} nodes, the example files; `mabp-gym train` refuses them), and no "
        f"training, tuning or checkpoint choice uses the evaluation seeds "
        f"{EVALUATION_SEEDS.start}-{EVALUATION_SEEDS.stop - 1}."
    )
    return "\n".join(lines) + "\n"


def tasks_named(names: Iterable[str] | None) -> list[Task]:
    """The tasks of ``names`` in the suite's order (``None``: every task).

    Raises:
        ValueError: a name that is not a task (the message lists them).
    """
    if names is None:
        return list(TASKS)
    names = list(names)
    for name in names:
        if name not in TASK_NAMES:
            raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASK_NAMES)}")
    if not names:
        raise ValueError("give at least one task")
    return [task for task in TASKS if task.name in names]


def check_seeds(seeds: Iterable[int]) -> list[int]:
    """The seeds, each one of the published evaluation seeds.

    Raises:
        ValueError: a seed outside 9000-9999, or none.
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("give at least one seed")
    twice = [s for k, s in enumerate(seeds) if s in seeds[:k]]
    if twice:  # counted twice it would narrow the growth interval
        raise ValueError(f"seed {twice[0]} is given twice; give each seed once")
    outside = [s for s in seeds if s not in EVALUATION_SEEDS]
    if outside:
        raise ValueError(
            f"seeds {outside[:5]} are not evaluation seeds; the benchmark runs on "
            f"{EVALUATION_SEEDS.start}-{EVALUATION_SEEDS.stop - 1} only (training and tuning "
            "use others)"
        )
    return seeds


def plan_bench(
    tasks: Sequence[Task],
    policies: Sequence[str],
    seeds: Iterable[int],
    horizon: int = HORIZON,
) -> tuple[list[RunSpec], list[tuple[str, str, str]]]:
    """The runs of the suite, and ``(task, policy, why)`` for every learned policy left
    out (no checkpoint for the task's workload, or the learning extra not installed).

    Raises:
        ValueError: a bad argument, or a scripted policy that cannot run on a task.
    """
    seeds = check_seeds(seeds)
    specs: list[RunSpec] = []
    skipped: list[tuple[str, str, str]] = []
    for task in tasks:
        for policy in policies:
            try:
                specs += plan(
                    [policy],
                    task.workload,
                    [task.load],
                    seeds,
                    horizon=horizon,
                    workload_overrides=dict(task.overrides),
                )
            except MissingExtraError:
                if policy not in LEARNED:
                    raise
                skipped.append((task.name, policy, "needs the learning extra (mabp-gym[learn])"))
            except ValueError as error:
                if policy not in LEARNED or "checkpoint" not in str(error):
                    raise
                skipped.append((task.name, policy, _no_checkpoint(policy, task)))
    return specs, skipped


def current_runs(
    records: Iterable[dict[str, Any]], specs: Sequence[RunSpec], tasks: Sequence[Task]
) -> list[dict[str, Any]]:
    """The records a board of ``specs`` reads from a results file: where the file holds a
    task's run of a policy on a seed as the suite would make it now (its key: the
    workload's and the checkpoint's content), that one; runs of an earlier checkpoint of
    the same policy are set aside (retraining appends the new runs to the old). A run with
    no current twin is kept, so a file made elsewhere still prints its board."""
    keys = {spec.key for spec in specs}
    records = list(records)
    current = {
        (task.name, r["policy"], r.get("seed"))
        for task in tasks
        for r in records
        if r.get("key") in keys and task.matches(r)
    }
    return [
        r
        for r in records
        if r.get("key") in keys
        or not any((t.name, r["policy"], r.get("seed")) in current for t in tasks if t.matches(r))
    ]


def _no_checkpoint(policy: str, task: Task) -> str:
    if task.track == "held-out":
        return (
            "a held-out network, on which no training may run: only the policies whose one "
            f"checkpoint runs on every network ({', '.join(ANY_NETWORK)}) are evaluated here, "
            "zero-shot"
        )
    if task.overrides:
        return (
            f"its shipped checkpoint for {task.workload} was made without "
            f"{', '.join(f'{k}={v}' for k, v in task.overrides)}"
        )
    return (
        f"no shipped checkpoint for {task.workload} (the board runs the shipped checkpoints "
        f"in agents/checkpoints/ only; `mabp-gym train {policy} --workload {task.workload}` "
        "makes one, to ship there or to evaluate with mabp_gym.evaluate(..., "
        "policy_kw={'checkpoint': PATH}))"
    )


def leaderboard(
    records: Iterable[dict[str, Any]], tasks: Sequence[Task] = TASKS
) -> list[dict[str, Any]]:
    """One row per (task, policy) with runs: the metrics over seeds, verdict v4 at the
    task's load and the score relative to MABP (``None`` where MABP did not run).

    Row keys: ``task``, ``policy``, ``seeds``, ``bound`` (the occupation bound as a load),
    ``p95_delay_all`` and ``p95_delay_all_half_width`` (95%), ``mean_backlog``,
    ``penalty_per_arrival``, ``stable``, ``growth_mean``, ``score``, ``reference_grows``,
    ``floor_p95`` (:func:`task_floor`) and ``over_floor`` (the P95 delay over it).
    """
    records = list(records)
    rows = []
    for task in tasks:
        mine = list({r.get("key", id(r)): r for r in records if task.matches(r)}.values())  # once
        by_policy: dict[str, list[dict[str, Any]]] = {}
        for record in mine:
            by_policy.setdefault(record["policy"], []).append(record)
        for policy, members in by_policy.items():
            check_one_setting(policy, task.load, members)  # one seed twice, say
        bound = occupation_load(mine) if mine else None
        floor = task_floor(task) if mine else math.nan
        summaries = {p: _summary(members) for p, members in by_policy.items()}
        reference = summaries.get(REFERENCE)
        order = [p for p in POLICIES if p in summaries] + sorted(set(summaries) - set(POLICIES))
        for policy in order:
            row = {"task": task.name, "policy": policy, "bound": bound, **summaries[policy]}
            row["score"] = _score(row, reference)
            row["reference_grows"] = None if reference is None else not reference["stable"]
            row["floor_p95"] = floor
            row["over_floor"] = row["p95_delay_all"] / floor
            rows.append(row)
    return rows


@functools.cache
def task_floor(task: Task) -> float:
    """The P95 of the task's delay floor over its arrival mix, in slots
    (:func:`mabp_gym.core.floor.delay_floor`: every request's shortest possible path, no
    waiting and every assisted service a hit)."""
    workload = make_workload(task.workload, load=task.load, **dict(task.overrides))
    return delay_floor(workload).p95


def _summary(members: list[dict[str, Any]]) -> dict[str, Any]:
    delays = [m["p95_delay_all"] for m in members if m.get("p95_delay_all") is not None]
    delay, half = pooled(delays) if delays else (math.nan, math.nan)
    verdict = growth_verdict(members)
    return {
        "seeds": len(members),
        "p95_delay_all": delay,
        "p95_delay_all_half_width": half,
        "mean_backlog": float(np.mean([m["mean_backlog"] for m in members])),
        "penalty_per_arrival": _mean(m.get("penalty_per_arrival") for m in members),
        "stable": verdict["stable"],
        "growth_mean": verdict["growth_mean"],
    }


def _mean(values: Iterable[Any]) -> float:
    kept = [float(v) for v in values if v is not None]
    return float(np.mean(kept)) if kept else math.nan


def _score(row: dict[str, Any], reference: dict[str, Any] | None) -> float | None:
    if reference is None:
        return None
    if not row["stable"]:
        return 0.0
    return float(reference["p95_delay_all"] / row["p95_delay_all"])


def standings(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy over the tasks it ran: how many it is stable on, and the geometric mean
    of its scores over those (``None`` where it is stable on none, or MABP did not run),
    best first: most tasks stable, then the higher mean score."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    result: list[dict[str, Any]] = []
    for policy, mine in by_policy.items():
        scores = [r["score"] for r in mine if r["score"]]
        geo = geometric_mean(scores) if scores else None
        result.append(
            {
                "policy": policy,
                "tasks": len(mine),
                "stable": sum(bool(r["stable"]) for r in mine),
                "score": geo,
            }
        )
    result.sort(key=lambda r: (-r["stable"], -(r["score"] or 0.0), r["policy"]))
    return result


def track_standings(
    rows: Sequence[dict[str, Any]], tasks: Sequence[Task] = TASKS
) -> dict[str, list[dict[str, Any]]]:
    """:func:`standings` of each track apart (``"main"``, ``"held-out"``), as the board
    prints them: a policy's main-track score never averages in a held-out network."""
    track_of = {task.name: task.track for task in tasks}
    result = {}
    for track in TRACK_TITLES:
        mine = [r for r in rows if track_of.get(r["task"]) == track]
        if mine:
            result[track] = standings(mine)
    return result


def markdown(
    rows: Sequence[dict[str, Any]],
    skipped: Sequence[tuple[str, str, str]] = (),
    tasks: Sequence[Task] = TASKS,
) -> str:
    """The leaderboard: the standings of each track, then one table per task, then what
    was left out."""
    lines: list[str] = []
    for track, ranked in track_standings(rows, tasks).items():
        title = TRACK_TITLES[track]
        lines += [
            *([""] if lines else []),
            f"{title}:",
            "",
            "| Policy | Tasks stable | Score where stable (geo-mean vs MABP) |",
            "| --- | --- | --- |",
        ]
        for entry in ranked:
            score = "-" if entry["score"] is None else f"{entry['score']:.2f}"
            lines.append(f"| {entry['policy']} | {entry['stable']} of {entry['tasks']} | {score} |")
    for task in tasks:
        mine = [r for r in rows if r["task"] == task.name]
        if not mine:
            continue
        bound = mine[0]["bound"]
        where = f"bound {bound:.2f}" if bound is not None else "bound not computed"
        floor = mine[0]["floor_p95"]
        lines += [
            "",
            f"**{task.name}** ({task.shown} at load {task.load:g}, {where}, delay floor "
            f"P95 {floor:g} slots; {task.why})",
            "",
            "| Policy | Seeds | P95 delay (all) | Over floor | Backlog | Penalty / arrival | "
            "Stable | Score |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in mine:
            grows = " (MABP not stable)" if row["reference_grows"] else ""
            score = "-" if row["score"] is None else f"{row['score']:.2f}{grows}"
            lines.append(
                f"| {row['policy']} | {row['seeds']} | {row['p95_delay_all']:.1f} ± "
                f"{row['p95_delay_all_half_width']:.1f} | {row['over_floor']:.1f}x | "
                f"{row['mean_backlog']:.1f} | "
                f"{row['penalty_per_arrival']:.4f} | {'yes' if row['stable'] else 'no'} | "
                f"{score} |"
            )
    if skipped:
        lines += ["", "Left out:"]
        lines += [f"- {policy} on {task}: {why}" for task, policy, why in skipped]
    lines += [
        "",
        "P95 delay (all): of the requests born after the warm-up, counting those still in "
        "the network at their age (± a 95% half-width over seeds). Stable: verdict v4 at the "
        "task's load (the growth pooled over seeds below 0.015 of the arrivals with 95% "
        "confidence and, where significantly above zero and material, halving when the run "
        "doubles). Score: "
        "MABP's P95 delay (all) over the policy's, 0 where it is not stable; where MABP "
        "itself is not, its delay grows with the run length and the score with it. "
        "Delay floor: the P95 over the arrival mix of every request's shortest possible "
        "delay (no waiting, every assisted service a hit, its luckiest outcomes), under "
        "every completed request's delay whatever the scheduler; over floor: the P95 "
        "delay (all) over it, the headroom.",
    ]
    return "\n".join(lines) + "\n"
