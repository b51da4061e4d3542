"""What the benchmarks that compare two trees share: a ``git worktree`` of the baseline ref
for the length of a run, and importing ``mabp_gym`` from exactly one tree in a worker."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def trees(baseline: str | None, where: Path) -> Iterator[dict[str, Path]]:
    """``{"current": ROOT}``, plus ``"baseline"``: a worktree of ``baseline`` made under
    ``where`` and removed again on exit."""
    found = {"current": ROOT}
    if baseline:
        found["baseline"] = where / "baseline"
        subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "worktree",
                "add",
                "--detach",
                "-f",
                str(found["baseline"]),
                baseline,
            ],
            check=True,
            capture_output=True,
        )
    try:
        yield found
    finally:
        if baseline:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(found["baseline"])],
                check=False,
                capture_output=True,
            )


def import_tree(tree: Path) -> None:
    """Import ``mabp_gym`` and its ``agents`` / ``training`` subpackages from ``tree`` only.

    An editable install's finder resolves any ``mabp_gym.*`` module a tree lacks to the
    installed checkout (and maps ``mabp_gym.agents`` / ``mabp_gym.training`` onto its
    top-level folders): without removing it, a baseline tree would run the current tree's
    encoder and policies over its own core. A tree whose ``agents/`` installs as
    ``mabp_gym.agents`` gets that mapping here, from its own folders.
    """
    sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in repr(f)]
    import mabp_gym

    project = tree / "pyproject.toml"
    installs = project.read_text() if project.exists() else ""
    for name in ("agents", "training"):
        folder = tree / name
        init = folder / "__init__.py"
        if not init.exists() or f'"mabp_gym.{name}" = "{name}"' not in installs:
            continue  # an older tree imports them as the top-level package
        spec = importlib.util.spec_from_file_location(
            f"mabp_gym.{name}", folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        setattr(mabp_gym, name, module)
        spec.loader.exec_module(module)


def last_json(tree: Path, argv: list[str], **env: str) -> Any:
    """Run ``python *argv`` in a fresh process whose imports resolve to ``tree`` (its
    ``PYTHONPATH``, with ``env`` added) and return the JSON of its last line of output; a
    failure ends the benchmark naming the tree and the end of the error output."""
    done = subprocess.run(
        [sys.executable, *argv],
        env={**os.environ, "PYTHONPATH": str(tree), **env},
        text=True,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the measurement in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
