"""The simulator core stays free of gymnasium, torch and PyG (SPEC 8, STYLE)."""

from __future__ import annotations

import ast
from pathlib import Path

import mabp_gym

CORE = ("workload", "workloads", "state", "control", "projection", "simulator", "capacity",
        "metrics", "scores", "rollout", "evaluation", "fileformat")
FORBIDDEN = ("gymnasium", "torch", "torch_geometric", "stable_baselines3")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules__import_neither_gymnasium_nor_torch():
    package = Path(mabp_gym.__file__).parent
    for module in CORE:
        found = imported_modules(package / f"{module}.py") & set(FORBIDDEN)
        assert not found, f"mabp_gym/{module}.py imports {sorted(found)}"
