"""One evaluation harness, one set of metric definitions (SPEC section 5), for every policy.

``evaluate(policy, workload, loads, seeds, ...)`` runs every (policy, load, seed) on the
simulator core — the same slots the policy faced produce every metric — and returns one
flat record per run. Runs are independent and fully determined by their configuration
(the simulator and the policy are both seeded with ``seed``; all randomness comes from the
seeded generator), so serial, process-pool and Ray runs give identical records, apart from
the wall-clock fields (``decision_us_mean``, ``decision_us_p95``, ``wall_s``).

With ``output=path`` records stream to a JSON-lines file as runs finish, and a rerun skips
every run already in the file, so an interrupted sweep loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.metrics import Trace, is_stable, summarize
from mabp_gym.simulator import Simulator
from mabp_gym.workload import Workload
from mabp_gym.workloads import make_workload

TIMING_KEYS = ("decision_us_mean", "decision_us_p95", "wall_s")
"""Record fields measured in wall-clock time: the only fields that differ between reruns."""
METRIC_KEYS = ("stable", "slope", "mean_backlog", "growth", "paper_slope", "paper_backlog",
               "penalty", "p95_delay", "hit_ratio", "churn", "completion_ratio",
               "work_per_request", "compute_cost", "transmission_cost", "memory_cost")
VERDICTS = ("stable", "paper")
"""``stable``: the backlog does not grow (SPEC 9.2, per seed, majority over seeds);
``paper``: the paper's short-horizon rule on seed means (slope < 0.035, backlog < 120)."""
BACKENDS = ("serial", "process", "ray")
TRACE_STRIDE = 5  # the stored backlog trace keeps every 5th slot


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines one run."""

    policy: str
    workload: str
    load: float
    seed: int
    horizon: int = 600
    warmup: float = 0.2
    memory: bool = True
    nu: float = 5.0
    overrides: tuple[tuple[str, Any], ...] = ()
    policy_kw: tuple[tuple[str, Any], ...] = ()
    workload_object: Workload | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        """A stable identifier of the run's configuration (used to skip finished runs)."""
        wl = self.workload_object
        workload = self.workload if wl is None else _workload_digest(wl)
        payload = json.dumps([self.policy, workload, round(self.load, 9), self.seed,
                              self.horizon, self.warmup, self.memory, self.nu,
                              sorted(map(list, self.overrides)),
                              sorted(map(list, self.policy_kw))], default=str)
        return hashlib.sha1(payload.encode()).hexdigest()[:16]

    def build_workload(self) -> Workload:
        if self.workload_object is not None:
            from dataclasses import replace

            return replace(self.workload_object.with_load(self.load), horizon=self.horizon)
        return make_workload(self.workload, **{**dict(self.overrides), "load": self.load,
                                               "horizon": self.horizon})


def _workload_digest(workload: Workload) -> str:
    text = repr((workload.name, workload.nodes, workload.links, workload.commodities,
                 workload.signatures, workload.actions, workload.arrival_mix,
                 workload.replicas, workload.eta, workload.migration_cost, workload.theta,
                 workload.omega, workload.initial_memory, workload.fixed_memory,
                 workload.transit))
    return f"{workload.name}:{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def run(spec: RunSpec) -> dict[str, Any]:
    """Simulate one run and return its record (every SPEC 5 metric)."""
    from agents import make_policy
    from mabp_gym.env import ObservationEncoder

    started = time.perf_counter()
    workload = spec.build_workload()
    sim = Simulator(workload, memory=spec.memory, check_invariants=True)
    sim.reset(spec.seed)
    encoder = ObservationEncoder(workload, memory=spec.memory)
    policy = make_policy(spec.policy, workload, nu=spec.nu, memory=spec.memory,
                         **dict(spec.policy_kw))
    policy.reset(spec.seed)
    if "torch" in sys.modules:
        # A learned policy scores one small graph per slot: one thread is several times
        # faster than several threads fighting over the cores the other runs use.
        sys.modules["torch"].set_num_threads(1)
    exact = hasattr(policy, "control")
    trace = Trace()
    decisions = np.empty(spec.horizon)
    residency = np.zeros((workload.index.num_nodes, workload.index.num_signatures))
    for t in range(spec.horizon):
        obs = encoder.encode(sim.state)
        tick = time.perf_counter()
        if exact:
            control = policy.control(sim.state, obs)
        else:
            control = sim.project(policy.scores(obs))
        decisions[t] = time.perf_counter() - tick
        trace.record(sim.step(control))
        residency += sim.state.holder >= 0
    metrics = summarize(trace, spec.warmup)
    record: dict[str, Any] = {
        "policy": spec.policy, "workload": workload.name, "load": spec.load,
        "seed": spec.seed, **metrics,
        "decision_us_mean": float(decisions.mean() * 1e6),
        "decision_us_p95": float(np.percentile(decisions, 95) * 1e6),
        "horizon": spec.horizon, "warmup": spec.warmup, "memory": spec.memory,
        "nu": spec.nu, "overrides": dict(spec.overrides), "policy_kw": dict(spec.policy_kw),
        "arrival_rate": workload.total_rate, "lambda_ref": workload.lambda_ref,
        "backlog_trace": trace.backlog[::TRACE_STRIDE],
        "residency": (residency / spec.horizon).round(4).tolist(),
        "nodes": [node.name for node in workload.nodes],
        "signatures": [s.name for s in workload.signatures],
        "key": spec.key,
        "wall_s": time.perf_counter() - started,
    }
    return _clean(record)


def _clean(value: Any) -> Any:
    """JSON-safe: NaN becomes None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# -- the results file --------------------------------------------------------------------------
def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Records of a JSON-lines file; a torn last line (an interrupted write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _repair(path: Path) -> None:
    """Drop a torn last line so that appended records start on a line of their own."""
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        keep = text[: text.rfind("\n") + 1]
        path.write_text(keep, encoding="utf-8")


# -- running many ------------------------------------------------------------------------------
def plan(policies: Sequence[str], workload: str | Workload, loads: Iterable[float],
         seeds: Iterable[int], *, horizon: int = 600, warmup: float = 0.2,
         memory: bool = True, nu: float = 5.0, policy_kw: dict[str, Any] | None = None,
         **overrides: Any) -> list[RunSpec]:
    """The runs of a grid, validated before anything runs."""
    from agents import POLICIES

    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    if int(horizon) != horizon or horizon < 2:
        raise ValueError(f"horizon must be an integer >= 2, got {horizon!r}")
    for name in policies:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose one of {POLICIES}")
    loads = [float(x) for x in loads]
    seeds = [int(s) for s in seeds]
    if not loads or not seeds:
        raise ValueError("loads and seeds must not be empty")
    from mabp_gym.workloads import is_workload_file

    if isinstance(workload, str) and is_workload_file(workload):
        workload = make_workload(workload, **overrides, horizon=horizon)
        overrides = {}
    if isinstance(workload, Workload):
        if overrides:
            raise ValueError("overrides need a workload name, not a Workload object")
        name, obj = workload.name, workload
        workload.with_load(loads[0])
    else:
        name, obj = workload, None
        make_workload(workload, **{**overrides, "load": loads[0], "horizon": horizon})
    return [RunSpec(policy=p, workload=name, load=load, seed=seed, horizon=int(horizon),
                    warmup=float(warmup), memory=bool(memory), nu=float(nu),
                    overrides=tuple(sorted(overrides.items())),
                    policy_kw=tuple(sorted((policy_kw or {}).items())), workload_object=obj)
            for p in policies for load in loads for seed in seeds]


def execute(specs: Sequence[RunSpec], *, workers: int | None = None, backend: str = "process",
            output: str | os.PathLike | None = None, progress: bool = True,
            address: str | None = None) -> list[dict[str, Any]]:
    """Run ``specs`` (skipping those already in ``output``) and return their records."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if workers is not None and (int(workers) != workers or workers < 1):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    done: dict[str, dict[str, Any]] = {}
    path = Path(output) if output is not None else None
    if path is not None:
        _repair(path)
        done = {r["key"]: r for r in read_records(path) if "key" in r}
    wanted = {spec.key: spec for spec in specs}
    todo = [spec for key, spec in wanted.items() if key not in done]
    sink = path.open("a", encoding="utf-8") if path is not None else None

    def emit(record: dict[str, Any]) -> None:
        done[record["key"]] = record
        if sink is not None:
            sink.write(json.dumps(record) + "\n")
            sink.flush()

    bar = _progress(len(todo), progress)
    try:
        for record in _dispatch(todo, backend, workers, address):
            emit(record)
            bar(record)
    finally:
        bar(None)
        if sink is not None:
            sink.close()
    return [done[key] for key in wanted]


def _progress(total: int, enabled: bool) -> Callable[[dict[str, Any] | None], None]:
    if not enabled or total == 0:
        return lambda record: None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="run", desc="evaluate", leave=False)

    def update(record: dict[str, Any] | None) -> None:
        if record is None:
            bar.close()
        else:
            bar.set_postfix_str(f"{record['policy']} load {record['load']:g}", refresh=False)
            bar.update(1)

    return update


def _dispatch(todo: Sequence[RunSpec], backend: str, workers: int | None,
              address: str | None) -> Iterable[dict[str, Any]]:
    if not todo:
        return
    if backend == "serial" or (backend == "process" and (workers == 1 or len(todo) == 1)):
        for spec in todo:
            yield run(spec)
    elif backend == "process":
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            futures = [pool.submit(run, spec) for spec in todo]
            for future in as_completed(futures):
                yield future.result()
    else:
        yield from _ray(todo, workers, address)


def _ray(todo: Sequence[RunSpec], workers: int | None,
         address: str | None) -> Iterable[dict[str, Any]]:
    try:
        import ray
    except ImportError as error:  # pragma: no cover - depends on the optional extra
        raise ValueError("backend 'ray' needs the optional extra: pip install '.[ray]'") \
            from error
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"address": address} if address else {
            "num_cpus": workers or os.cpu_count() or 1, "include_dashboard": False}
        ray.init(ignore_reinit_error=True, log_to_driver=False, **kwargs)
    try:
        remote = ray.remote(num_cpus=1)(run)
        pending = [remote.remote(spec) for spec in todo]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        if started_here:
            ray.shutdown()


def evaluate(policy: str | Sequence[str], workload: str | Workload, loads: Iterable[float],
             seeds: Iterable[int], horizon: int = 600, warmup: float = 0.2, *,
             workers: int | None = None, backend: str = "process",
             output: str | os.PathLike | None = None, progress: bool = False,
             address: str | None = None, memory: bool = True, nu: float = 5.0,
             policy_kw: dict[str, Any] | None = None,
             **workload_overrides: Any) -> list[dict[str, Any]]:
    """Evaluate policies on a workload over a grid of loads and seeds (SPEC 5).

    Args:
        policy: a registered policy name or several.
        workload: a workload name (with ``workload_overrides``) or a ``Workload``.
        loads: normalized loads ``rho``.
        seeds: seeds; each run seeds the simulator and the policy with its seed.
        horizon: slots per run. warmup: discarded leading fraction of the slots.
        workers: processes (default: all cores). backend: ``"process"``, ``"serial"`` or
            ``"ray"`` (``address`` of a Ray cluster, else a local instance).
        output: JSON-lines file that records stream to; finished runs are skipped.
        memory: ``False`` evaluates the no-memory system. nu: the penalty weight.

    Returns:
        One record per (policy, load, seed), in grid order.
    """
    policies = [policy] if isinstance(policy, str) else list(policy)
    specs = plan(policies, workload, loads, seeds, horizon=horizon, warmup=warmup,
                 memory=memory, nu=nu, policy_kw=policy_kw, **workload_overrides)
    return execute(specs, workers=workers, backend=backend, output=output,
                   progress=progress, address=address)


# -- summaries ---------------------------------------------------------------------------------
def summarize_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds per (policy, load), with both verdicts.

    ``stable``: more than half of the seeds' runs do not grow (``stable_seeds`` counts
    them); ``paper_stable``: the seed-mean slope and backlog of the paper's window pass its
    rule.
    """
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["policy"], float(record["load"])), []).append(record)
    rows = []
    for (policy, load), members in sorted(groups.items()):
        row: dict[str, Any] = {"policy": policy, "load": load, "seeds": len(members)}
        for key in (*METRIC_KEYS[1:], "decision_us_mean", "decision_us_p95"):
            values = np.array([m[key] for m in members if m.get(key) is not None], dtype=float)
            row[key] = float(values.mean()) if values.size else None
            row[f"{key}_std"] = float(values.std()) if values.size else None
        row["stable_seeds"] = sum(bool(m["stable"]) for m in members)
        row["stable"] = 2 * row["stable_seeds"] > len(members)
        slope = row["paper_slope"] if row["paper_slope"] is not None else row["slope"]
        backlog = (row["paper_backlog"] if row["paper_backlog"] is not None
                   else row["mean_backlog"])
        row["paper_stable"] = is_stable(slope, backlog)
        rows.append(row)
    return rows


def stable_load(records: Iterable[dict[str, Any]], verdict: str = "stable") -> dict[str, float]:
    """Largest grid load per policy such that it and every smaller grid load pass
    ``verdict`` (0.0 when the smallest does not).

    Args:
        records: evaluation records (any mix of policies, loads and seeds).
        verdict: ``"stable"`` (the backlog does not grow, SPEC 9.2; decide it at a long
            horizon, see docs/results.md) or ``"paper"`` (the paper's rule; see
            :func:`paper_load`).
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    flag = "stable" if verdict == "stable" else "paper_stable"
    result: dict[str, float] = {}
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for row in summarize_records(records):
        by_policy.setdefault(row["policy"], []).append(row)
    for policy, rows in by_policy.items():
        best = 0.0
        for row in sorted(rows, key=lambda r: r["load"]):
            if not row[flag]:
                break
            best = row["load"]
        result[policy] = best
    return result


def paper_load(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The paper's stable load: horizon 600, warm-up 20%, seed-mean slope < 0.035 and
    seed-mean backlog < 120 (SPEC 9.2), from each run's first 600 slots."""
    return stable_load(records, verdict="paper")
