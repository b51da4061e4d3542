"""One evaluation harness, one set of metric definitions (SPEC section 5), for every policy.

``evaluate(policy, workload, loads, seeds, ...)`` runs every (policy, load, seed) on the
simulator core (the same slots the policy faced produce every metric) and returns one flat
record per run. :func:`~mabp_gym.harness.runs.plan` checks every argument before the first
run and makes the runs; :func:`execute` hands them to :mod:`~mabp_gym.harness.dispatch`
(serial, a process pool or Ray: identical records) and, with ``output=path``, streams them
to the crash-safe :mod:`~mabp_gym.harness.results_file`, which a rerun resumes. A failing
run cancels the pending ones and raises :class:`RunsFailedError`, keeping the finished
ones. :mod:`~mabp_gym.harness.summaries` turns records into verdicts and stable loads. See
``docs/reliability.md``.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.core.validate import as_list
from mabp_gym.core.workload import Workload
from mabp_gym.harness.dispatch import BACKENDS, check_address, dispatch
from mabp_gym.harness.results_file import (
    _repair,
    _ResultsFile,
    check_output_path,
    check_results_kind,
)
from mabp_gym.harness.runs import RunSpec, plan


class RunsFailedError(RuntimeError):
    """Some runs raised; the finished ones were kept. ``details`` holds their tracebacks."""

    def __init__(self, message: str, details: list[str]) -> None:
        super().__init__(message)
        self.details = details


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
    :class:`~mabp_gym.harness.results_file.ResultsFileBusyError`), repaired without losing
    a complete record, and every finished run is appended (and flushed to disk) as it
    completes.

    Raises:
        ValueError: a bad argument or output path (before any run starts), or the file is
            busy.
        RunsFailedError: some runs raised; pending runs were cancelled, finished runs kept.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if address is not None:  # the CLI refused both; the Python API ran on
        if backend != "ray":
            raise ValueError(f"address is for backend='ray', got backend={backend!r}")
        check_address(address)
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1
    ):  # 2.0 passed this check and failed inside multiprocessing, the file already locked
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    path = check_output_path(output, "output file") if output is not None else None
    wanted = {spec.key: spec for spec in specs}
    if path is None:
        return _execute(wanted, None, {}, workers, backend, progress, address)
    check_results_kind(path, "eval", "results file")  # again under the lock, in _repair
    _warn_unkeyed_code(wanted.values(), path)
    with _ResultsFile(path) as results:
        done = _repair(results.path)
        _check_reused(wanted, done, results.path)
        results.open_for_append()
        return _execute(wanted, results, done, workers, backend, progress, address)


def _warn_unkeyed_code(specs: Iterable[RunSpec], path: Path) -> None:
    """Warn where a policy of your own has no source file to key its runs by (made in an
    interactive session, ``python -c`` or from standard input): its runs are then keyed by
    its name and arguments alone, and an edited version would reuse them."""
    for policy, spec in sorted({spec.policy: spec for spec in specs}.items()):
        identity = spec.policy_identity()
        if identity is not None and identity.endswith("source ?"):
            warnings.warn(
                f"policy {policy!r}: its code has no file to be keyed by (defined in a "
                f"notebook, an interactive session or standard input), so its runs in "
                f"{path} are keyed by its name and arguments alone, and an edited version "
                "would reuse them; define it in a module to key it by its code, or write "
                "to a new file after an edit",
                stacklevel=3,
            )


def _check_reused(wanted: dict[str, RunSpec], done: dict[str, dict[str, Any]], path: Path) -> None:
    """Raise ``ValueError`` where a record reused by its key is not that key's run (a
    hand-edited line): its numbers would be reported as another run's."""
    for key, spec in wanted.items():
        record = done.get(key)
        if record is None:
            continue
        said = (record["policy"], float(record["load"]), record["seed"], record["horizon"])
        if said != (spec.policy, float(spec.load), spec.seed, spec.horizon):
            raise ValueError(
                f"{path}: the record of run {key} says policy {said[0]}, load {said[1]:g}, "
                f"seed {said[2]}, horizon {said[3]}, but that key is the run of "
                f"{spec.policy} at load {spec.load:g}, seed {spec.seed}, horizon "
                f"{spec.horizon}: the line was edited; remove it (its run is recomputed) or "
                "write to another file"
            )


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
        for spec, record, error in dispatch(todo, backend, workers, address):
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
        workload_overrides: the workload's parameters; one named like an argument here
            (``multihop``'s ``memory``) goes in a Workload: ``make_workload(name, ...)``.

    Returns:
        One record per (policy, load, seed), in grid order.
    """
    policies = [policy] if isinstance(policy, str) else as_list(policy, "policy", of="names")
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
        workload_overrides=workload_overrides,
    )
    return execute(
        specs, workers=workers, backend=backend, output=output, progress=progress, address=address
    )
