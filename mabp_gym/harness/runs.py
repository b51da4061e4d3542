"""A run of the harness: everything that determines it (:class:`RunSpec` and its key), the
runs of a grid with every argument checked first (:func:`plan`), and one run simulated into
its record (:func:`run`).

Runs are independent and fully determined by their configuration (the simulator and the
policy are both seeded with ``seed``; all randomness comes from the seeded generator), so
serial, process-pool and Ray runs give identical records, apart from the wall-clock fields
(:data:`TIMING_KEYS`). A run is keyed on everything that determines it (:attr:`RunSpec.key`):
a results file skips a run whose key it holds.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from mabp_gym.core.fileformat import file_digest, workload_digest_of
from mabp_gym.core.metrics import (
    TRACE_STRIDE,
    Trace,
    check_window,
    summarize,
)
from mabp_gym.core.simulator import Simulator
from mabp_gym.core.validate import as_list, is_real, is_seed
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import WORKLOADS, make_workload
from mabp_gym.registry import (
    PolicyArgumentError,
    checkpoint_path,
    make_policy,
    named_policy,
    policy_identity,
    policy_names,
    unknown_policy,
)
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
RECORD_ONLY_METRICS = (
    "growth",
    "paper_slope",
    "paper_backlog",
    "penalty_per_arrival",
    "work_per_request",
    "compute_cost",
    "transmission_cost",
    "memory_cost",
)
"""Metrics of :data:`METRIC_KEYS` that records and summaries hold but ``mabp-gym eval``'s
printed table leaves out (the verdict's inputs, the penalty's parts); every other metric,
a new one included, is a column of that table."""


@dataclass(frozen=True)
class MetricColumn:
    """How ``mabp-gym eval`` prints a metric: its column ``header``, ``digits`` after the
    point and the column's ``width``."""

    header: str
    digits: int = 3
    width: int = 7


METRIC_COLUMNS = {
    "stable": MetricColumn("stable", width=6),
    "mean_backlog": MetricColumn("backlog", 1, 8),
    "penalty": MetricColumn("penalty", 4, 8),
    "p95_delay": MetricColumn("p95", 1),
    "p95_delay_all": MetricColumn("p95 all", 1),
    "hit_ratio": MetricColumn("hit", 2, 5),
    "churn": MetricColumn("churn", 3, 6),
    "completion_ratio": MetricColumn("compl", 3, 6),
}
"""Short headers of the printed metrics; a metric without one prints under its own name."""


def summary_columns() -> list[tuple[str, MetricColumn]]:
    """The metrics ``mabp-gym eval`` prints, in :data:`METRIC_KEYS`' order, with their
    columns: every metric not in :data:`RECORD_ONLY_METRICS`."""
    return [
        (key, METRIC_COLUMNS.get(key, MetricColumn(key, width=max(7, len(key)))))
        for key in METRIC_KEYS
        if key not in RECORD_ONLY_METRICS
    ]


LATER_METRIC_KEYS = ("p95_delay_all", "penalty_per_arrival")
"""Metrics added after results files were first written: a record without them is still a
record (its summaries show them as missing)."""
KEY_VERSION = 2  # bumped whenever what the run key covers changes


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
    workload_file: str = field(default="", compare=False, repr=False)
    identity: str = field(default="", compare=False, repr=False)
    """What a policy of your own was when :func:`plan` ran (:func:`policy_identity`; ``"-"``
    for a built-in one): the key holds it, and :func:`run` refuses a policy whose code
    changed since (its record would be filed under the old code's key)."""

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
        identity = self.policy_identity()  # a policy of your own: what it is
        payload = json.dumps(
            {
                **({} if identity is None else {"policy_identity": identity}),
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

    def policy_identity(self) -> str | None:
        """What the policy is, as planned (else as it is now); ``None`` for a built-in."""
        if not self.identity:
            return policy_identity(self.policy)
        return None if self.identity == "-" else self.identity

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


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """The versions a record was made with: the package, Python and the numerical stack."""
    import importlib.metadata
    import platform

    def installed(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # numba: the kernels run as Python
            return "absent"

    return {
        "mabp_gym": __version__,
        "python": platform.python_version(),
        **{name: installed(name) for name in ("numpy", "scipy", "numba")},
    }


def _check_checkpoint_unchanged(spec: RunSpec) -> None:
    """Refuse a run whose checkpoint file changed since the sweep was planned: the key holds
    the planned content, and the run read the new one (a training run rewriting the file
    mid-sweep filed its results under the old checkpoint's key, which a rerun reused)."""
    if spec.checkpoint_digest is None:
        return
    name = spec.workload if spec.workload_object is None else spec.workload_object.name
    now = checkpoint_digest_of(spec.policy, dict(spec.policy_kw), name)
    if now != spec.checkpoint_digest:
        path = checkpoint_path(spec.policy, dict(spec.policy_kw), name)
        raise ValueError(
            f"policy {spec.policy!r}: its checkpoint {path} changed while the sweep ran, so "
            "this run would be filed under the old file's key; run the command again once "
            "the file is final (it keeps every finished run)"
        )


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
    _check_checkpoint_unchanged(spec)  # after the load: a file changed before it shows too
    if spec.identity not in ("", "-") and policy_identity(spec.policy) != spec.identity:
        raise ValueError(
            f"policy {spec.policy!r} changed while the sweep ran: it was {spec.identity} "
            f"and is {policy_identity(spec.policy)} now, so this run would be filed under "
            "the old code's key; run the command again (it keeps every finished run)"
        )
    if "torch" in sys.modules:
        # A learned policy scores one small graph per slot: one thread is several times
        # faster than several threads fighting over the cores the other runs use.
        sys.modules["torch"].set_num_threads(1)
    digest = workload_digest_of(workload)  # the workload simulated, its horizon included
    key = spec.key_with(spec.workload_digest or digest)
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
        "workload_digest": digest,  # the whole workload, so that it is never mistaken
        **({"workload_file": spec.workload_file} if spec.workload_file else {}),
        # What a rerun needs beyond the settings above: the checkpoint read (by content)
        # and the versions (scipy's HiGHS breaks Oracle-Sur's ties; numpy's last bits).
        "checkpoint_digest": spec.checkpoint_digest,
        "versions": versions(),
        "key_version": KEY_VERSION,
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


def _json_values(policy_kw: dict[str, Any]) -> dict[str, Any]:
    """``policy_kw`` as JSON values, paths as strings and numpy arrays as lists: every
    record holds them, so one that JSON cannot write would lose each run's record after it
    ran."""

    def convert(value: Any) -> Any:
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if isinstance(value, (np.ndarray, np.generic)):
            return value.tolist()
        raise TypeError(type(value).__name__)

    plain = {}
    for key, value in policy_kw.items():
        try:
            plain[key] = json.loads(json.dumps(value, default=convert))
        except (TypeError, ValueError, RecursionError):
            raise ValueError(
                f"policy_kw[{key!r}] must be a JSON value (numbers, strings, lists, dicts; "
                f"paths and numpy arrays are converted), got {value!r}"
            ) from None
    return plain


MAX_SEEDS = 100_000
"""The most seeds one grid takes (``range(10**9)`` ran out of memory making its list)."""


def _check_seeds(seeds: Iterable[Any]) -> list[int]:
    if isinstance(seeds, range) and len(seeds) > MAX_SEEDS:
        raise ValueError(f"seeds holds {len(seeds):,} seeds; at most {MAX_SEEDS:,} in one grid")
    checked = []
    listed = as_list(seeds, "seeds")
    if len(listed) > MAX_SEEDS:
        raise ValueError(f"seeds holds {len(listed):,} seeds; at most {MAX_SEEDS:,} in one grid")
    for seed in listed:
        if not is_seed(seed):
            raise ValueError(f"seeds must be integers >= 0, got {seed!r}")
        checked.append(int(seed))
    return checked


def _check_loads(loads: Iterable[Any]) -> list[float]:
    checked = []
    for load in as_list(loads, "loads"):
        if isinstance(load, bool) or not isinstance(load, (int, float, np.integer, np.floating)):
            raise ValueError(f"loads must be numbers, got {load!r}")
        if not math.isfinite(float(load)):
            raise ValueError(f"loads must be finite, got {load!r}")
        checked.append(float(load))
    return checked


def _merged_overrides(
    mapping: Mapping[str, Any] | None, keywords: dict[str, Any]
) -> dict[str, Any]:
    """One dict of workload overrides from ``plan``'s mapping and its keywords."""
    if mapping is None:
        return keywords
    if not isinstance(mapping, Mapping):
        raise ValueError(
            f"workload_overrides must be a mapping of names to values, got {mapping!r}"
        )
    both = sorted(set(mapping) & set(keywords))
    if both:
        raise ValueError(
            f"workload override(s) {both} given both as keywords and in workload_overrides; "
            "give each once"
        )
    return {**mapping, **keywords}


def _typed(workload: Any, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with an integer given for a built-in workload's real-valued parameter
    as that real number: ``K=2`` and ``K=2.0`` build one network, and are one run's key
    (``--set K=2`` and ``sweep --param K --values 2`` computed it twice)."""
    from mabp_gym.core.workloads import BUILDERS

    if not isinstance(workload, str) or workload not in BUILDERS:
        return overrides
    params = BUILDERS[workload][1]
    return {
        key: float(value)
        if key in params
        and isinstance(params[key].default, float)
        and isinstance(value, (int, np.integer))
        and not isinstance(value, bool)
        else value
        for key, value in overrides.items()
    }


def _check_run_settings(horizon: Any, warmup: Any, memory: Any, nu: Any) -> None:
    """Refuse a bad horizon, warm-up, memory switch or penalty weight of ``plan``, by name."""
    if not is_real(warmup) or not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup must be in [0, 1), got {warmup!r}")
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 2:
        raise ValueError(f"horizon must be an integer >= 2, got {horizon!r}")
    check_window(int(horizon), float(warmup))
    if not is_real(nu) or not math.isfinite(nu) or nu < 0:
        raise ValueError(f"nu must be a finite number >= 0, got {nu!r}")
    if not isinstance(memory, (bool, np.bool_)):
        raise ValueError(
            f"memory (the no-memory switch) must be True or False, got {memory!r}; a workload "
            "parameter of that name (multihop's) goes in workload_overrides, or build the "
            "Workload: make_workload('multihop', memory=0)"
        )


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
    workload_overrides: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> list[RunSpec]:
    """The runs of a grid, every argument validated before anything runs.

    Builds the workload at every load and each policy once (a missing or mismatched
    checkpoint, an unknown policy keyword fail here, not in the middle of a sweep).
    The workload's parameters come as keywords or in ``workload_overrides``; the mapping
    also takes the names this function keeps for itself (``multihop``'s ``memory`` is not
    the ``memory`` switch of the no-memory system).

    Raises:
        ValueError: naming the bad argument and what is allowed.
    """
    _check_run_settings(horizon, warmup, memory, nu)
    overrides = _typed(workload, _merged_overrides(workload_overrides, overrides))
    if isinstance(policies, str):
        policies = [policies]
    for name in policies:
        named_policy(name)  # "module:Class" names register themselves, as make_policy's do
        if name not in policy_names():
            raise ValueError(unknown_policy(name))
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

    if isinstance(workload, os.PathLike):  # a workload file
        workload = os.fspath(workload)
    source = ""  # a workload file, recorded so that its capacity bound can be rebuilt
    if isinstance(workload, str) and is_workload_file(workload):
        source = os.path.abspath(workload)
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
    if policy_kw is not None and not isinstance(policy_kw, Mapping):
        raise ValueError(f"policy_kw must be a dict of keyword arguments, got {policy_kw!r}")
    policy_kw = _json_values(dict(policy_kw or {}))
    digests, identities = {}, {}
    for policy in dict.fromkeys(policies):
        identities[policy] = policy_identity(policy) or "-"
        _build_once(policy, base, identities[policy] != "-", nu, memory, policy_kw)
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
            workload_file=source,
            identity=identities[p],
        )
        for p in policies
        for load in loads
        for seed in seeds
    ]


def _build_once(
    policy: str, workload: Workload, yours: bool, nu: float, memory: bool, kw: dict[str, Any]
) -> None:
    """Build ``policy`` once before any run, so that a bad argument fails here. A built-in
    policy's ``ValueError`` or ``TypeError`` is about its arguments (a missing checkpoint, a
    keyword it does not take); one raised inside a policy of your own is an error of its
    code, which keeps its traceback (a ``RuntimeError`` naming the policy, not a one-line
    refusal of the command's arguments)."""
    try:
        make_policy(policy, workload, nu=float(nu), memory=bool(memory), **kw)
    except PolicyArgumentError:
        raise
    except (TypeError, ValueError) as error:
        if yours:
            raise RuntimeError(
                f"policy {policy!r} raised {type(error).__name__} while it was built for "
                f"{workload.name} (the traceback above is in its code): {error}"
            ) from error
        if isinstance(error, TypeError):
            raise ValueError(f"policy {policy!r}: {error}") from None
        raise
