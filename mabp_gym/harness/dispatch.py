"""Runs handed to workers: in this process, a process pool or Ray, yielded as they finish,
the runs not yet started cancelled after the first failure (:func:`dispatch`). A pool
worker exits when its parent is gone; an interrupted sweep terminates its workers."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from mabp_gym.harness.runs import RunSpec, run

BACKENDS = ("serial", "process", "ray")


def _run_safely(spec: RunSpec) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, None)``, or ``(None, traceback)`` when the run raised."""
    try:
        return run(spec), None
    except Exception:  # noqa: BLE001 - reported to the parent with its traceback
        return None, traceback.format_exc()


def _start_worker(parent: int, policies: list[Any]) -> None:
    """Worker initializer: the parent's own policies registered here too (a worker started
    by ``spawn`` or ``forkserver`` knows only the built-in ones), then
    :func:`_watch_parent`."""
    from mabp_gym.registry import register_again

    register_again(policies)
    _watch_parent(parent)


def _watch_parent(parent: int) -> None:
    """Exit when the parent process is gone (a ``kill -9`` of the sweep must not leave
    workers computing for nobody)."""
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


def dispatch(
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
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        from mabp_gym.registry import unsendable, user_registrations

        method = multiprocessing.get_start_method()
        lost = unsendable({spec.policy for spec in todo}) if method != "fork" else []
        if lost:  # each run would fail in its worker with "unknown policy"
            raise ValueError(
                f"policy {lost[0]!r} is registered with a callable that cannot reach worker "
                f"processes started by {method!r} (a lambda, or a function or class made "
                "inside another): register one defined at a module's top level, or "
                "'module:attribute', or run with one worker"
            )
        pool = ProcessPoolExecutor(
            max_workers=min(workers or os.cpu_count() or 1, len(todo)),
            initializer=_start_worker,
            initargs=(os.getpid(), user_registrations()),
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


def check_address(address: str, what: str = "address") -> None:
    """Refuse a Ray ``host:port`` nothing answers at: ``ray.init`` waits on it for minutes
    and then fails with a traceback. ``auto`` and ``ray://`` addresses are left to Ray."""
    import socket

    if not isinstance(address, str):
        raise ValueError(f"{what} must be a string host:port (or 'auto'), got {address!r}")
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address:
        return
    if not host or not port.isdigit():
        raise ValueError(f"{what} {address!r}: give host:port (or 'auto'), say 127.0.0.1:6379")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()  # [::1]
    except OSError as error:
        raise ValueError(
            f"{what} {address!r}: no Ray cluster answers there ({error.strerror or error}); "
            f"start one with `ray start --head`, or leave {what} out to start one here"
        ) from None


class BackendError(ValueError):
    """The execution backend cannot start (a Ray cluster that does not answer)."""


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
        try:
            ray.init(ignore_reinit_error=True, log_to_driver=False, **kwargs)
        except ConnectionError as error:
            raise BackendError(
                f"--address {address!r}: {error}; start a cluster with `ray start --head`, "
                "or drop --address to start one here"
            ) from None
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
