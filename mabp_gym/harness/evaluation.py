"""One evaluation harness, one set of metric definitions (SPEC section 5), for every policy.

``evaluate(policy, workload, loads, seeds, ...)`` runs every (policy, load, seed) on the
simulator core — the same slots the policy faced produce every metric — and returns one
flat record per run. Runs are independent and fully determined by their configuration
(the simulator and the policy are both seeded with ``seed``; all randomness comes from the
seeded generator), so serial, process-pool and Ray runs give identical records, apart from
the wall-clock fields (``decision_us_mean``, ``decision_us_p95``, ``decision_us_first``,
``wall_s``).

With ``output=path`` records stream to a JSON-lines file as runs finish (each flushed to
disk), and a rerun skips every run already in the file, so an interrupted sweep loses
nothing. The file is locked for the whole sweep (a second writer is refused), repaired
without ever rewriting a complete record in place (a torn tail is truncated; lines that
are not records go to a ``.rejected`` sidecar and the cleaned file replaces the old one by
an atomic rename), and runs are keyed on everything that determines them (:attr:`RunSpec.key`).
Every argument is validated before the first run; a failing run cancels the pending ones
and raises :class:`RunsFailedError`, keeping the finished ones. See ``docs/reliability.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.core.fileformat import file_digest, workload_digest_of
from mabp_gym.core.metrics import TRACE_STRIDE, Trace, growth_verdict, is_stable, summarize
from mabp_gym.core.simulator import Simulator
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import WORKLOADS, make_workload
from mabp_gym.registry import checkpoint_path, make_policy, policy_names
from mabp_gym.rollout import episode
from mabp_gym.version import __version__

TIMING_KEYS = ("decision_us_mean", "decision_us_p95", "decision_us_first", "wall_s")
"""Record fields measured in wall-clock time: the only fields that differ between reruns.
The mean and P95 of the decision time leave out the first slot, whose decision includes
one-off work (numba's compilation or cache load, a checkpoint's first forward):
``decision_us_first`` reports it apart."""
METRIC_KEYS = (
    "stable",
    "slope",
    "mean_backlog",
    "growth",
    "paper_slope",
    "paper_backlog",
    "penalty",
    "p95_delay",
    "p95_delay_all",
    "penalty_per_arrival",
    "hit_ratio",
    "churn",
    "completion_ratio",
    "work_per_request",
    "compute_cost",
    "transmission_cost",
    "memory_cost",
)
LATER_METRIC_KEYS = ("p95_delay_all", "penalty_per_arrival")
"""Metrics added after results files were first written: a record without them is still a
record (its summaries show them as missing)."""
VERDICTS = ("stable", "paper")
"""``stable``: the backlog does not grow (SPEC 9.2, verdict v3: growth pooled over the
seeds below the limit with 95% confidence, and falling as the run lengthens);
``paper``: the paper's short-horizon rule on seed means (slope < 0.035, backlog < 120)."""
BACKENDS = ("serial", "process", "ray")
KEY_VERSION = 2  # bumped whenever what the run key covers changes
RECORD_FIELDS = {
    "key": str,
    "policy": str,
    "workload": str,
    "load": (int, float),
    "seed": int,
    "horizon": int,
}
"""Fields (and types) without which a line of a results file is not a record."""


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines one run.

    ``workload_digest`` (the workload's whole description, the load excepted) and
    ``checkpoint_digest`` (the content of the checkpoint a learned policy reads) are filled
    in by :func:`plan`; a hand-made spec without them computes them when its key is asked.
    """

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
    workload_digest: str = field(default="", compare=False, repr=False)
    checkpoint_digest: str | None = field(default=None, compare=False, repr=False)

    @cached_property
    def key(self) -> str:
        """Identifier of everything that determines the run's record: the whole workload,
        the policy and its parameters (a checkpoint by its content, not its path), the
        exact load (no rounding), seed, horizon, warm-up, memory, ``nu`` and the package
        version. A rerun skips a run whose key is already in the results file."""
        return self.key_with(self.workload_digest or workload_digest_of(self.build_workload()))

    def key_with(self, workload_digest: str) -> str:
        """:attr:`key` given the digest of the workload this spec builds."""
        checkpoint = self.checkpoint_digest
        if checkpoint is None:
            checkpoint = checkpoint_digest_of(
                self.policy,
                dict(self.policy_kw),
                self.workload if self.workload_object is None else self.workload_object.name,
            )
        policy_kw = {k: v for k, v in self.policy_kw if k != "checkpoint"}
        payload = json.dumps(
            {
                "key_version": KEY_VERSION,
                "package": __version__,
                "policy": self.policy,
                "policy_kw": sorted(map(list, policy_kw.items())),
                "checkpoint": checkpoint,
                "workload": self.workload,
                "workload_digest": workload_digest,
                "overrides": sorted(map(list, self.overrides)),
                "load": float(self.load).hex(),
                "seed": int(self.seed),
                "horizon": int(self.horizon),
                "warmup": float(self.warmup).hex(),
                "memory": bool(self.memory),
                "nu": float(self.nu).hex(),
            },
            sort_keys=True,
            default=repr,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def build_workload(self) -> Workload:
        if self.workload_object is not None:
            from dataclasses import replace

            return replace(self.workload_object.with_load(self.load), horizon=self.horizon)
        overrides = (*self.overrides, ("load", self.load), ("horizon", self.horizon))
        if self.workload in WORKLOADS:
            try:
                return _built_in_workload(self.workload, overrides)
            except TypeError:  # an override that cannot be a cache key (a list): built anew
                pass
        return make_workload(self.workload, **dict(overrides))


@lru_cache(maxsize=32)
def _built_in_workload(name: str, overrides: tuple[tuple[str, Any], ...]) -> Workload:
    """A built-in workload, built once per process and parameters: workloads are frozen
    and their index arrays read-only, so runs can share one (a table runs many seeds and
    policies on each load; building ``mixed`` costs about 10 ms)."""
    return make_workload(name, **dict(overrides))


def checkpoint_digest_of(policy: str, policy_kw: dict[str, Any], workload_name: str) -> str | None:
    """The content digest of the checkpoint ``policy`` reads (``None``: it reads none).

    Raises:
        ValueError: the policy reads a checkpoint and there is no such file.
    """
    path = checkpoint_path(policy, policy_kw, workload_name)
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"policy {policy!r}: no checkpoint file at {str(path)!r}")
    return file_digest(path)


def run(spec: RunSpec) -> dict[str, Any]:
    """Simulate one run and return its record (every SPEC 5 metric)."""
    started = time.perf_counter()
    workload = spec.build_workload()
    sim = Simulator(workload, memory=spec.memory, check_invariants=True)
    sim.reset(spec.seed)
    policy = make_policy(
        spec.policy, workload, nu=spec.nu, memory=spec.memory, **dict(spec.policy_kw)
    )
    policy.reset(spec.seed)
    if "torch" in sys.modules:
        # A learned policy scores one small graph per slot: one thread is several times
        # faster than several threads fighting over the cores the other runs use.
        sys.modules["torch"].set_num_threads(1)
    key = spec.key_with(spec.workload_digest or workload_digest_of(workload))
    trace = Trace()
    decisions = np.empty(spec.horizon)
    residency = np.zeros((workload.index.num_nodes, workload.index.num_signatures))
    for t, slot in enumerate(episode(sim, policy, spec.horizon, check=True)):
        decisions[t] = slot.decision_s
        trace.record(slot.outcome)
        residency += sim.state.holder >= 0
    metrics = summarize(trace, spec.warmup)
    steady = decisions[1:] if len(decisions) > 1 else decisions
    record: dict[str, Any] = {
        "policy": spec.policy,
        "workload": workload.name,
        "load": spec.load,
        "seed": spec.seed,
        **metrics,
        # The first slot's decision includes compilation and first-call work: apart.
        "decision_us_mean": float(steady.mean() * 1e6),
        "decision_us_p95": float(np.percentile(steady, 95) * 1e6),
        "decision_us_first": float(decisions[0] * 1e6),
        "horizon": spec.horizon,
        "warmup": spec.warmup,
        "memory": spec.memory,
        "nu": spec.nu,
        "overrides": dict(spec.overrides),
        "policy_kw": dict(spec.policy_kw),
        "arrival_rate": workload.total_rate,
        "lambda_ref": workload.lambda_ref,
        "backlog_trace": trace.backlog[::TRACE_STRIDE],
        "residency": (residency / spec.horizon).round(4).tolist(),
        "nodes": [node.name for node in workload.nodes],
        "signatures": [s.name for s in workload.signatures],
        "key": key,
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
class ResultsFileBusyError(ValueError):
    """Another process holds the results file (two writers would duplicate runs)."""


class RunsFailedError(RuntimeError):
    """Some runs raised; the finished ones were kept. ``details`` holds their tracebacks."""

    def __init__(self, message: str, details: list[str]) -> None:
        super().__init__(message)
        self.details = details


def _record_problem(value: Any) -> str | None:
    """Why a parsed line is not a record (``None`` when it is one)."""
    if not isinstance(value, dict):
        return f"a JSON {type(value).__name__}, not an object"
    for name, kind in RECORD_FIELDS.items():
        if name not in value:
            return f"no {name!r} field"
        if isinstance(value[name], bool) or not isinstance(value[name], kind):  # type: ignore[arg-type]
            return f"field {name!r} is {value[name]!r}"
    missing = [k for k in METRIC_KEYS if k not in value and k not in LATER_METRIC_KEYS]
    if missing:
        return f"no {missing[0]!r} field"
    return None


def _scan(data: bytes) -> tuple[list[tuple[bytes, dict[str, Any]]], list[tuple[bytes, str]]]:
    """Split the complete lines of a results file into records (first of each key kept)
    and rejected lines with the reason; a torn last line is left out of both."""
    records: list[tuple[bytes, dict[str, Any]]] = []
    rejected: list[tuple[bytes, str]] = []
    seen: set[str] = set()
    complete = data[: data.rfind(b"\n") + 1]
    for raw in complete.splitlines(keepends=True):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            rejected.append((raw, "not JSON"))
            continue
        problem = _record_problem(value)
        if problem is None and value["key"] in seen:
            problem = f"a second record of run {value['key']}"
        if problem is not None:
            rejected.append((raw, problem))
            continue
        seen.add(value["key"])
        records.append((raw, value))
    return records, rejected


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSON-lines results file (read only; never modifies it).

    A torn last line (a write cut by a kill) is ignored; a complete line that is not a
    record (``42``, ``null``, a record missing fields, bad JSON) or repeats a run already
    read is skipped with a warning. A missing file has no records.
    """
    path = Path(path)
    if not path.exists():
        return []
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    records, rejected = _scan(path.read_bytes())
    if rejected:
        warnings.warn(
            f"{path}: skipped {len(rejected)} line(s) that are not records "
            f"(first: {rejected[0][1]})",
            stacklevel=2,
        )
    return [value for _, value in records]


def _sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _fsync_directory(path: Path) -> None:
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _set_aside(path: Path, rejected: list[tuple[bytes, str]]) -> None:
    """Append rejected lines to the ``.rejected`` sidecar, each after a reason line."""
    with _sidecar(path, ".rejected").open("ab") as sidecar:
        for raw, reason in rejected:
            note = json.dumps({"rejected_from": path.name, "reason": reason})
            sidecar.write(note.encode() + b"\n" + raw.rstrip(b"\n") + b"\n")
        sidecar.flush()
        os.fsync(sidecar.fileno())


def _repair(path: Path) -> dict[str, dict[str, Any]]:
    """Make ``path`` a file of whole, distinct records and return them by key.

    Never loses a complete record, whenever it is killed: a torn last line is cut off by
    truncating the file in place (one system call; the complete lines before it are never
    rewritten), and lines that are not records are copied to the ``.rejected`` sidecar
    before a cleaned copy is written to a temporary file and renamed over the original
    (atomic: a kill leaves either the old file or the new one). The caller holds the lock.
    """
    if not path.exists():
        return {}
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        _set_aside(path, [(data[keep:], "torn last line (an interrupted write)")])
        with path.open("r+b") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        data = data[:keep]
    records, rejected = _scan(data)
    if rejected:
        warnings.warn(
            f"{path}: set aside {len(rejected)} line(s) that are not records in "
            f"{_sidecar(path, '.rejected').name} (first: {rejected[0][1]}); their "
            "runs are recomputed",
            stacklevel=3,
        )
        _set_aside(path, rejected)
        cleaned = _sidecar(path, ".repair")
        with cleaned.open("wb") as handle:
            handle.writelines(raw for raw, _ in records)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(cleaned, path)
        _fsync_directory(path)
    return {value["key"]: value for _, value in records}


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Raise ``ValueError`` unless ``path`` can be written as a regular file: not a
    directory or a device, in an existing directory, writable."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        if path.is_dir():
            raise ValueError(f"{what} {str(path)!r} is a directory; give a file path")
        if not path.is_file():
            raise ValueError(
                f"{what} {str(path)!r} is not a regular file (a device, a pipe or a broken link)"
            )
        if not os.access(path, os.W_OK):
            raise ValueError(f"{what} {str(path)!r} is not writable")
        return path
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{what} {str(path)!r}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {str(path)!r}: the directory {str(parent)!r} is not writable")
    return path


class _ResultsFile:
    """A results file held under an exclusive ``fcntl`` lock (on a ``.lock`` sidecar, so
    that the atomic rename of a repair keeps it) for as long as a sweep writes to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: Any = None
        self.sink: Any = None

    def __enter__(self) -> _ResultsFile:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks
            fcntl = None  # type: ignore[assignment]
        self._lock = _sidecar(self.path, ".lock").open("a+")
        if fcntl is not None:
            try:
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock.seek(0)
                holder = self._lock.read().strip() or "unknown"
                self._lock.close()
                raise ResultsFileBusyError(
                    f"{self.path} is being written by another process (pid {holder}); two "
                    "writers would duplicate runs: wait for it to finish, or write to "
                    "another file"
                ) from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        return self

    def open_for_append(self) -> None:
        self.sink = self.path.open("ab")

    def write(self, record: dict[str, Any]) -> None:
        self.sink.write(json.dumps(record).encode() + b"\n")
        self.sink.flush()
        os.fsync(self.sink.fileno())

    def __exit__(self, *exc: Any) -> None:
        if self.sink is not None:
            self.sink.close()
        self._lock.close()  # closing the descriptor releases the lock


# -- running many ------------------------------------------------------------------------------
def _check_seeds(seeds: Iterable[Any]) -> list[int]:
    checked = []
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seeds must be integers >= 0, got {seed!r}")
        checked.append(int(seed))
    return checked


def _check_loads(loads: Iterable[Any]) -> list[float]:
    checked = []
    for load in loads:
        if isinstance(load, bool) or not isinstance(load, (int, float, np.integer, np.floating)):
            raise ValueError(f"loads must be numbers, got {load!r}")
        if not math.isfinite(float(load)):
            raise ValueError(f"loads must be finite, got {load!r}")
        checked.append(float(load))
    return checked


def plan(
    policies: Sequence[str],
    workload: str | Workload,
    loads: Iterable[float],
    seeds: Iterable[int],
    *,
    horizon: int = 600,
    warmup: float = 0.2,
    memory: bool = True,
    nu: float = 5.0,
    policy_kw: dict[str, Any] | None = None,
    **overrides: Any,
) -> list[RunSpec]:
    """The runs of a grid, every argument validated before anything runs.

    Builds the workload at every load and each policy once (a missing or mismatched
    checkpoint, an unknown policy keyword fail here, not in the middle of a sweep).

    Raises:
        ValueError: naming the bad argument and what is allowed.
    """
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 2:
        raise ValueError(f"horizon must be an integer >= 2, got {horizon!r}")
    if isinstance(nu, bool) or not isinstance(nu, (int, float)) or not math.isfinite(nu) or nu < 0:
        raise ValueError(f"nu must be a finite number >= 0, got {nu!r}")
    if not isinstance(memory, (bool, np.bool_)):
        raise ValueError(f"memory must be True or False, got {memory!r}")
    if isinstance(policies, str):
        policies = [policies]
    for name in policies:
        if name not in policy_names():
            raise ValueError(f"unknown policy {name!r}; choose one of {policy_names()}")
    loads = _check_loads(loads)
    seeds = _check_seeds(seeds)
    if not loads or not seeds or not policies:
        raise ValueError("policies, loads and seeds must not be empty")
    for key in ("load", "horizon"):
        if key in overrides:
            raise ValueError(
                f"{key} is set by the {key}s/horizon argument of the grid, not "
                f"as a workload override (got {key}={overrides[key]!r})"
            )
    from mabp_gym.core.workloads import is_workload_file

    if isinstance(workload, str) and is_workload_file(workload):
        workload = make_workload(workload, **overrides, horizon=horizon)
        overrides = {}
    if isinstance(workload, Workload):
        if overrides:
            raise ValueError("overrides need a workload name, not a Workload object")
        name, obj = workload.name, workload
        base = [workload.with_load(load) for load in loads][0]
    elif isinstance(workload, str):
        from mabp_gym.core.workloads import workload_params

        name, obj = workload, None
        base = make_workload(workload, **{**overrides, "load": loads[0], "horizon": horizon})
        for load in loads[1:]:
            workload_params(workload)["load"].check("load", load)
    else:
        raise ValueError(
            f"workload must be a workload name, a workload file or a Workload, got {workload!r}"
        )
    policy_kw = dict(policy_kw or {})
    digests = {}
    for policy in dict.fromkeys(policies):
        try:
            make_policy(policy, base, nu=float(nu), memory=bool(memory), **policy_kw)
        except TypeError as error:
            raise ValueError(f"policy {policy!r}: {error}") from None
        digests[policy] = checkpoint_digest_of(policy, policy_kw, name)
    workload_digest = workload_digest_of(base)
    return [
        RunSpec(
            policy=p,
            workload=name,
            load=load,
            seed=seed,
            horizon=int(horizon),
            warmup=float(warmup),
            memory=bool(memory),
            nu=float(nu),
            overrides=tuple(sorted(overrides.items())),
            policy_kw=tuple(sorted(policy_kw.items())),
            workload_object=obj,
            workload_digest=workload_digest,
            checkpoint_digest=digests[p],
        )
        for p in policies
        for load in loads
        for seed in seeds
    ]


def execute(
    specs: Sequence[RunSpec],
    *,
    workers: int | None = None,
    backend: str = "process",
    output: str | os.PathLike | None = None,
    progress: bool = True,
    address: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``specs`` (skipping those already in ``output``) and return their records.

    With ``output``: the file is locked for the whole sweep (a second writer gets
    :class:`ResultsFileBusyError`), repaired without losing a complete record, and every
    finished run is appended (and flushed to disk) as it completes.

    Raises:
        ValueError: a bad argument or output path (before any run starts), or the file is
            busy.
        RunsFailedError: some runs raised; pending runs were cancelled, finished runs kept.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if workers is not None and (
        isinstance(workers, bool) or int(workers) != workers or workers < 1
    ):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    path = check_output_path(output, "output file") if output is not None else None
    wanted = {spec.key: spec for spec in specs}
    if path is None:
        return _execute(wanted, None, {}, workers, backend, progress, address)
    with _ResultsFile(path) as results:
        done = _repair(path)
        results.open_for_append()
        return _execute(wanted, results, done, workers, backend, progress, address)


def _execute(
    wanted: dict[str, RunSpec],
    results: _ResultsFile | None,
    done: dict[str, dict[str, Any]],
    workers: int | None,
    backend: str,
    progress: bool,
    address: str | None,
) -> list[dict[str, Any]]:
    todo = [spec for key, spec in wanted.items() if key not in done]
    failures: list[tuple[RunSpec, str]] = []
    if progress and len(wanted) > 1:
        # The size up front; the progress bar then shows the rate and an ETA.
        kept = f", {len(wanted) - len(todo)} already in {results.path}" if results else ""
        slots = sum(spec.horizon for spec in todo)
        sys.stderr.write(f"{len(todo)} runs to do ({slots:,} slots{kept})\n")
    bar = _progress(len(todo), progress)
    try:
        for spec, record, error in _dispatch(todo, backend, workers, address):
            if error is not None or record is None:
                failures.append((spec, error or "no record"))
                continue
            done[record["key"]] = record
            if results is not None:
                results.write(record)
            bar(record)
    finally:
        bar(None)
    if failures:
        finished = sum(key in done for key in wanted)
        spec, error = failures[0]
        last = error.strip().splitlines()[-1] if error.strip() else "unknown error"
        where = (
            f" ({finished} finished runs are in {results.path}; rerun to resume)"
            if results is not None
            else ""
        )
        cancelled = len(wanted) - finished - len(failures)
        raise RunsFailedError(
            f"{len(failures)} of {len(wanted)} runs failed, {cancelled} cancelled{where}; "
            f"first failure: policy {spec.policy}, load {spec.load:g}, seed {spec.seed}: "
            f"{last}",
            [error for _, error in failures],
        )
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


def _run_safely(spec: RunSpec) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)``, or ``(None, traceback)`` when the run raised."""
    try:
        return run(spec), None
    except Exception:  # noqa: BLE001 - reported to the parent with its traceback
        return None, traceback.format_exc()


def _watch_parent(parent: int) -> None:
    """Worker initializer: exit when the parent process is gone (a ``kill -9`` of the
    sweep must not leave workers computing for nobody)."""
    import threading

    adopted_by = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.25)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # pragma: no cover - a reused pid of another user
                os._exit(1)
            if os.getppid() != adopted_by:
                os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _dispatch(
    todo: Sequence[RunSpec], backend: str, workers: int | None, address: str | None
) -> Iterable[tuple[RunSpec, dict[str, Any] | None, str | None]]:
    """Yield ``(spec, record, None)`` or ``(spec, None, traceback)`` as runs finish. After
    the first failure the runs not yet started are cancelled."""
    if not todo:
        return
    if backend == "serial" or (backend == "process" and (workers == 1 or len(todo) == 1)):
        for spec in todo:
            record, error = _run_safely(spec)
            yield spec, record, error
            if error is not None:
                return
    elif backend == "process":
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        pool = ProcessPoolExecutor(
            max_workers=min(workers or os.cpu_count() or 1, len(todo)),
            initializer=_watch_parent,
            initargs=(os.getpid(),),
        )
        clean = False
        try:
            pending = {pool.submit(_run_safely, spec): spec for spec in todo}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                failed = False
                for future in finished:
                    spec = pending.pop(future)
                    if future.cancelled():
                        continue
                    try:
                        record, error = future.result()
                    except Exception:  # noqa: BLE001 - a worker died (BrokenProcessPool)
                        record, error = None, traceback.format_exc()
                    failed = failed or error is not None
                    yield spec, record, error
                if failed:
                    for future in pending:
                        future.cancel()
            clean = True
        finally:
            if clean:
                pool.shutdown(wait=True)
            else:
                # Interrupted (Ctrl-C, an exception in the caller): stop the workers now
                # instead of waiting for every queued run.
                processes = list(getattr(pool, "_processes", {}).values())
                pool.shutdown(wait=False, cancel_futures=True)
                for process in processes:
                    process.terminate()
    else:
        for spec, (record, error) in _ray(todo, workers, address):
            yield spec, record, error


def _ray(
    todo: Sequence[RunSpec], workers: int | None, address: str | None
) -> Iterable[tuple[RunSpec, tuple[dict[str, Any] | None, str | None]]]:
    try:
        import ray
    except ImportError as error:  # pragma: no cover - depends on the optional extra
        raise ValueError("backend 'ray' needs the optional extra: pip install '.[ray]'") from error
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = (
            {"address": address}
            if address
            else {"num_cpus": workers or os.cpu_count() or 1, "include_dashboard": False}
        )
        ray.init(ignore_reinit_error=True, log_to_driver=False, **kwargs)
    try:
        remote = ray.remote(num_cpus=1)(_run_safely)
        pending = {remote.remote(spec): spec for spec in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(ready[0])
            outcome = ray.get(ready[0])
            yield spec, outcome
            if outcome[1] is not None:
                for ref in pending:
                    ray.cancel(ref)
                return
    finally:
        if started_here:
            ray.shutdown()


def evaluate(
    policy: str | Sequence[str],
    workload: str | Workload,
    loads: Iterable[float],
    seeds: Iterable[int],
    horizon: int = 600,
    warmup: float = 0.2,
    *,
    workers: int | None = None,
    backend: str = "process",
    output: str | os.PathLike | None = None,
    progress: bool = False,
    address: str | None = None,
    memory: bool = True,
    nu: float = 5.0,
    policy_kw: dict[str, Any] | None = None,
    **workload_overrides: Any,
) -> list[dict[str, Any]]:
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
    specs = plan(
        policies,
        workload,
        loads,
        seeds,
        horizon=horizon,
        warmup=warmup,
        memory=memory,
        nu=nu,
        policy_kw=policy_kw,
        **workload_overrides,
    )
    return execute(
        specs, workers=workers, backend=backend, output=output, progress=progress, address=address
    )


# -- summaries ---------------------------------------------------------------------------------
def summarize_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds per (policy, load), with both verdicts.

    ``stable``: verdict v3 (:func:`mabp_gym.core.metrics.growth_verdict`): the growth pooled
    over the seeds is below the limit with 95% confidence and, where it is significantly
    positive, falls as the run lengthens (``growth_mean``, ``growth_half_width``,
    ``growth_half`` and ``trend`` say why); ``stable_seeds`` counts the runs that do not
    grow on their own. ``paper_stable``: the seed-mean slope and backlog of the paper's
    window pass its rule.
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
        row.update(growth_verdict(members))
        slope = row["paper_slope"] if row["paper_slope"] is not None else row["slope"]
        backlog = row["paper_backlog"] if row["paper_backlog"] is not None else row["mean_backlog"]
        row["paper_stable"] = is_stable(slope, backlog)
        rows.append(row)
    return rows


def stable_load(
    records: Iterable[dict[str, Any]],
    verdict: str = "stable",
    bound: float | str | None = "auto",
) -> dict[str, float]:
    """Largest grid load per policy such that it and every smaller grid load pass
    ``verdict`` (0.0 when the smallest does not).

    Args:
        records: evaluation records (any mix of policies, loads and seeds).
        verdict: ``"stable"`` (the backlog does not grow, SPEC 9.2; decide it at a long
            horizon, see docs/results.md) or ``"paper"`` (the paper's rule; see
            :func:`paper_load`).
        bound: the occupation bound as a load: a load at or above it (within 1e-6: two
            LPs) is never stable. There the network is critically loaded or overloaded for
            every policy (paper Thm. 1); at the bound itself its backlog grows like the
            square root of time, which a finite run's slope cannot tell from no growth.
            ``"auto"`` (the default) computes it from the records
            (:func:`occupation_load`; no bound where it cannot: records of several
            workloads, the no-memory system, a workload file that moved); ``None`` applies
            none.
    """
    records = list(records)
    if isinstance(bound, str):
        if bound != "auto":
            raise ValueError(f"bound must be a load > 0, 'auto' or None, got {bound!r}")
        bound = occupation_load(records) if records else None
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if bound is not None and not (isinstance(bound, (int, float)) and bound > 0):
        raise ValueError(f"bound must be a load > 0, 'auto' or None, got {bound!r}")
    flag = "stable" if verdict == "stable" else "paper_stable"
    result: dict[str, float] = {}
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for row in summarize_records(records):
        by_policy.setdefault(row["policy"], []).append(row)
    for policy, rows in by_policy.items():
        best = 0.0
        for row in sorted(rows, key=lambda r: r["load"]):
            if not row[flag] or (bound is not None and row["load"] >= bound - 1e-6):
                break
            best = row["load"]
        result[policy] = best
    return result


FALLING = 0.9
""":func:`undecided`: growth at the full horizon below this fraction of the half-horizon
growth counts as still falling."""


def undecided(records: Iterable[dict[str, Any]]) -> list[tuple[str, float]]:
    """The ``(policy, load)`` cells whose verdict v3 the runs cannot decide yet: not shown
    stable, below the occupation bound, and either the trend check passes (no evidence that
    the growth fails to halve: early in a run a settling queue rises like a growing one),
    or the growth is still falling (under ``FALLING`` times its half-horizon value: a queue
    settling over several thousand slots, which one horizon cannot tell from a queue at
    capacity), or, without a trace to cut, the pooled growth's 95% interval contains the
    limit. A cell whose growth neither halves nor falls is decided: it grows.
    :func:`decide_horizons` reruns the undecided cells longer."""
    from mabp_gym.core.metrics import GROWTH_LIMIT

    records = list(records)
    bound = occupation_load(records)
    cells = []
    for row in summarize_records(records):
        if row["stable"] or (bound is not None and row["load"] >= bound - 1e-6):
            continue
        mean, half = row["growth_mean"], row["growth_half_width"]
        if row["growth_half"] is None:
            still = mean < GROWTH_LIMIT <= mean + half
        else:
            falling = row["growth_half"] > 0 and mean < FALLING * row["growth_half"]
            still = row["trend"] is True or falling
        if still:
            cells.append((row["policy"], row["load"]))
    return cells


def decide_horizons(
    specs: Sequence[RunSpec],
    max_horizon: int,
    run: Callable[[list[RunSpec]], list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], dict[tuple[str, float], int]]:
    """Run ``specs``, then rerun every undecided cell (:func:`undecided`) on the same seeds
    at twice the horizon, until each is decided or the next horizon would pass
    ``max_horizon`` (verdict v3's horizon chosen per policy and load by the trend check).

    Args:
        specs: the grid (one horizon).
        max_horizon: the longest horizon to try.
        run: executes specs and returns their records (:func:`execute` with its options).

    Returns:
        The records of every cell at its deciding horizon (the longest it ran), and that
        horizon per cell.

    Raises:
        ValueError: ``max_horizon`` below the grid's horizon.
    """
    horizon = max(spec.horizon for spec in specs)
    if not isinstance(max_horizon, int) or max_horizon < horizon:
        raise ValueError(
            f"max_horizon must be an integer >= the grid's {horizon}, got {max_horizon!r}"
        )
    from dataclasses import replace

    records = run(list(specs))
    used = {(spec.policy, float(spec.load)): spec.horizon for spec in specs}
    while 2 * horizon <= max_horizon:
        open_cells = set(undecided(records))
        if not open_cells:
            break
        horizon *= 2
        longer = [
            replace(spec, horizon=horizon)
            for spec in specs
            if (spec.policy, float(spec.load)) in open_cells
        ]
        fresh = run(longer)
        records = [r for r in records if (r["policy"], float(r["load"])) not in open_cells]
        records += fresh
        used.update({cell: horizon for cell in open_cells})
    return records, used


def occupation_load(records: Iterable[dict[str, Any]]) -> float | None:
    """The occupation bound (:func:`mabp_gym.capacity`, ``"occ"``) of the records' workload
    as a load (bound / ``lambda_ref``); ``None`` when they mix workloads or settings, or the
    workload cannot be rebuilt from its name (a workload file that moved)."""
    from mabp_gym.core.capacity import capacity

    settings = {
        (
            r.get("workload"),
            json.dumps(r.get("overrides", {}), sort_keys=True),
            r.get("memory", True),
        )
        for r in records
    }
    if len(settings) != 1:
        return None
    name, overrides, memory = settings.pop()
    if not memory or not isinstance(name, str):
        return None
    try:
        workload = make_workload(name, **json.loads(overrides))
    except (ValueError, TypeError):
        return None
    reference = workload.lambda_ref
    return capacity(workload, "occ") / reference if reference else None


def paper_load(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """The paper's stable load: horizon 600, warm-up 20%, seed-mean slope < 0.035 and
    seed-mean backlog < 120 (SPEC 9.2), from each run's first 600 slots."""
    return stable_load(records, verdict="paper")
