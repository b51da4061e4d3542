"""The package's layers (SPEC 8, docs/architecture.md): a gym-free, torch-free core; the env
and the agents over it; evaluation and training over them; the CLI on top; no cycles."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mabp_gym

PACKAGE = Path(mabp_gym.__file__).parent
ROOT = PACKAGE.parent
CORE = (
    "workload",
    "workloads",
    "index",
    "fluid",
    "validate",
    "state",
    "control",
    "projection",
    "simulator",
    "capacity",
    "occupation",
    "metrics",
    "encoding",
    "policy",
    "registry",
    "rollout",
    "evaluation",
    "fileformat",
    "scores",
    "slotcore",
    "transition_core",
    "check_core",
    "ego",
    "verdicts",
    "extras",
    "version",
)
LEARNING = ("torch", "torch_geometric", "stable_baselines3", "tensorboard", "matplotlib")
FORBIDDEN = ("gymnasium", *LEARNING)


def loaded_after(statement: str) -> list[str]:
    """The top-level packages a fresh interpreter holds after running ``statement``."""
    code = (
        f"import json, sys\n{statement}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", CORE)
def test_core_module__import_leaves_gymnasium_and_torch_out(module):
    loaded = set(loaded_after(f"import mabp_gym.{module}"))
    assert not loaded & set(FORBIDDEN), f"mabp_gym.{module} loads {sorted(loaded & set(FORBIDDEN))}"


@pytest.mark.parametrize(
    "statement",
    ["import mabp_gym", "import mabp_gym.agents", "import mabp_gym.cli", "import mabp_gym.env"],
)
def test_package__import_leaves_the_learning_stack_out(statement):
    loaded = set(loaded_after(statement))
    assert not loaded & set(LEARNING), f"{statement} loads {sorted(loaded & set(LEARNING))}"


def test_agents__import_leaves_gymnasium_out():
    """Scripted agents read the observation arrays; they never need the env adapter."""
    assert "gymnasium" not in loaded_after("import mabp_gym.agents")


@pytest.mark.parametrize(
    "order",
    ["import mabp_gym\nimport gymnasium as gym", "import gymnasium as gym\nimport mabp_gym"],
)
def test_registration__ids_exist_whichever_is_imported_first(order):
    loaded = loaded_after(
        f"{order}\nassert gym.spec('mabp_gym/SFMSN-v0').id\nassert gym.spec('mabp_gym/Fleet-v0').id"
    )
    assert "gymnasium" in loaded


def _imports(path: Path) -> set[str]:
    """Modules of ``mabp_gym`` that ``path`` imports anywhere (also inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.startswith("mabp_gym.")}


def _module_files() -> dict[str, Path]:
    files = {}
    for folder, prefix in (
        (PACKAGE, "mabp_gym"),
        (ROOT / "agents", "mabp_gym.agents"),
        (ROOT / "training", "mabp_gym.training"),
    ):
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if prefix == "mabp_gym" and parts[:1] in (("agents",), ("training",)):
                continue  # a worktree's links to the top-level folders
            files[".".join((prefix, *parts))] = path
    return files


def test_import_graph__has_no_cycle():
    """Every import of a package module, lazy ones included, as a graph: acyclic."""
    files = _module_files()
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in _imports(path):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and imported != "mabp_gym":
                targets.add(imported)
        graph[name] = targets
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert len(graph) > 40  # the walk saw the whole package


def test_core__imports_nothing_above_it():
    """The core imports neither the env, the agents, training, evaluation's users nor the
    CLI (the registry names agents by strings, resolved on first use)."""
    above = (
        "mabp_gym.env",
        "mabp_gym.agents",
        "mabp_gym.training",
        "mabp_gym.cli",
        "mabp_gym.parallel",
        "mabp_gym.sb3",
        "mabp_gym.pyg",
        "mabp_gym.plots",
    )
    for module in CORE:
        bad = {n for n in _imports(PACKAGE / f"{module}.py") if n.startswith(above)}
        assert not bad, f"mabp_gym.{module} imports {sorted(bad)}"


def test_install__nothing_top_level_but_mabp_gym():
    """agents/ and training/ install inside the namespace (pyproject's package-dir)."""
    import importlib.util

    assert importlib.util.find_spec("mabp_gym.agents") is not None
    assert importlib.util.find_spec("mabp_gym.training") is not None
    code = "import importlib.util as u; print(u.find_spec('agents'), u.find_spec('training'))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the install alone
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT.parent,
        env=env,
    )
    assert result.stdout.split() == ["None", "None"]
