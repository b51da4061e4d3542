"""Fixtures shared by the test modules."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest


def _run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``mabp-gym ARGS`` in a fresh interpreter, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "mabp_gym.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    """Run the CLI as a user would: ``run_cli("eval", "--policy", "bp", ...)``."""
    return _run_cli
