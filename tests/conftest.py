"""Fixtures shared by the test modules."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
import zlib
from collections.abc import Callable

import pytest


@pytest.fixture(autouse=True)
def _spaces_seeded_by_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A gymnasium space nobody seeded draws from a seed of the test's name, not the OS's
    entropy: a test stepping with ``action_space.sample()`` then takes the same actions on
    every run (one such test failed in CI on one draw in many). A space seeded on purpose
    keeps its seed."""
    from gymnasium.spaces import Space

    named = zlib.crc32(request.node.nodeid.encode())
    unseeded = Space.seed

    def seed(self, seed=None):
        return unseeded(self, named if seed is None else seed)

    monkeypatch.setattr(Space, "seed", seed)


def _run_cli_process(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``mabp-gym ARGS`` in a fresh interpreter, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "mabp_gym.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _run_cli_here(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``mabp-gym ARGS`` through :func:`mabp_gym.cli.commands.main` in this interpreter:
    what a process would print and return (an uncaught exception: its traceback and status
    1, as Python's own handler), without the second or more a fresh interpreter costs."""
    from mabp_gym.cli.commands import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if not isinstance(stop.code, (int, type(None))):
                    err.write(f"{stop.code}\n")
            except Exception:  # noqa: BLE001  (what the interpreter would print)
                traceback.print_exc(file=err)
                code = 1
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(
        ["mabp-gym", *args], code, stdout=out.getvalue(), stderr=err.getvalue()
    )


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    """Run the CLI as a user would, ``run_cli("eval", "--policy", "bp", ...)``: its output
    and exit status, in this interpreter (:func:`_run_cli_here`)."""
    return _run_cli_here


@pytest.fixture
def run_cli_process() -> Callable[..., subprocess.CompletedProcess]:
    """The CLI in a fresh interpreter: for what only a process shows (start-up, imports,
    the console script's own exit)."""
    return _run_cli_process
