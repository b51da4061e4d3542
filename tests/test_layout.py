"""The package's layers (SPEC 8, docs/architecture.md), as the tree shows them: the core
(``mabp_gym/core/``, its compiled kernels in ``core/kernels/``) free of gymnasium and torch;
the policy seam at the top of the package (``policy``, ``registry``, ``rollout``); the envs
(``mabp_gym/envs/``) and the agents over them; the harness (``mabp_gym/harness/``) and
training over those; the CLI (``mabp_gym/cli/``) on top; no cycles."""

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
    "core.workload",
    "core.workloads",
    "core.workloads_parts",
    "core.workloads_theory",
    "core.workloads_service",
    "core.workloads_multihop",
    "core.index",
    "core.fluid",
    "core.floor",
    "core.validate",
    "core.state",
    "core.control",
    "core.projection",
    "core.simulator",
    "core.capacity",
    "core.occupation",
    "core.metrics",
    "core.encoding",
    "core.fileformat",
    "core.held_out",
    "core.scores",
    "core.ego",
    "core.render",
    "core.kernels.jit",
    "core.kernels.rules",
    "core.kernels.slotcore",
    "core.kernels.transition_core",
    "core.kernels.batch",
    "core.kernels.check_core",
)
"""Every module of ``mabp_gym/core/`` (:func:`test_core__lists_every_module_of_its_folder`)."""
SEAM = ("policy", "registry", "rollout", "extras", "version")
"""The modules at the top of the package beside ``__init__``: the policy seam and its helpers."""
FLEET_CORE = (
    "fleet",
    "fleet.simulator",
    "fleet.engine",
    "fleet.trace",
    "fleet.evaluate",
    "fleet.features",
    *(f"fleet.routers.{m}" for m in ("base", "baselines", "sglang", "dynamo", "llmd")),
    *(f"fleet.routers.{m}" for m in ("production_stack", "aibrix", "oracle", "mabp_route")),
)
"""Serving-fleet mode without its Gymnasium env (``fleet.env``): gym-free like the core."""
GYM_FREE = (
    *CORE,
    *SEAM,
    "harness.evaluation",
    "harness.runs",
    "harness.results_file",
    "harness.dispatch",
    "harness.summaries",
    "harness.verdicts",
    *FLEET_CORE,
)
"""Modules whose import leaves gymnasium and the learning stack out."""
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


@pytest.mark.parametrize("module", GYM_FREE)
def test_core_module__import_leaves_gymnasium_and_torch_out(module):
    loaded = set(loaded_after(f"import mabp_gym.{module}"))
    assert not loaded & set(FORBIDDEN), f"mabp_gym.{module} loads {sorted(loaded & set(FORBIDDEN))}"


@pytest.mark.parametrize(
    "statement",
    [
        "import mabp_gym",
        "import mabp_gym.agents",
        "import mabp_gym.cli",
        "import mabp_gym.envs.env",
    ],
)
def test_package__import_leaves_the_learning_stack_out(statement):
    loaded = set(loaded_after(statement))
    assert not loaded & set(LEARNING), f"{statement} loads {sorted(loaded & set(LEARNING))}"


def test_package__import_leaves_scipys_solvers_out_until_a_program_is_built():
    """scipy.optimize and scipy.sparse cost about 0.1 s of an import; only the fluid LP
    (a workload's load scale) and Oracle-Sur's programs use them."""
    code = (
        "import sys, mabp_gym, mabp_gym.agents, mabp_gym.cli\n"
        "print(sorted({'scipy.optimize', 'scipy.sparse'} & set(sys.modules)))\n"
        "mabp_gym.make_workload('mixed')\n"
        "print(sorted({'scipy.optimize', 'scipy.sparse'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "['scipy.optimize', 'scipy.sparse']"]


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


def test_core__lists_every_module_of_its_folder():
    """A module added to ``mabp_gym/core/`` falls under the core's checks."""
    files = {
        ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for path in (PACKAGE / "core").rglob("*.py")
        if path.name != "__init__.py"
    }
    assert files == set(CORE)


def test_top_of_package__holds_the_face_and_the_policy_seam_alone():
    """The layers are folders: the top of ``mabp_gym/`` keeps ``__init__`` and the seam."""
    top = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == set(SEAM)


LAYERS = {
    "mabp_gym.core": ("mabp_gym.core", "mabp_gym.extras", "mabp_gym.version"),
    # Fleet mode stands beside the envs on the core: its simulator, routers and env import
    # the core's validators and themselves, never the SFMSN envs, agents or harness.
    "mabp_gym.fleet": ("mabp_gym.core", "mabp_gym.fleet", "mabp_gym.extras", "mabp_gym.version"),
    **{
        f"mabp_gym.{module}": ("mabp_gym.core", *(f"mabp_gym.{m}" for m in SEAM)) for module in SEAM
    },
}
"""What each lower layer may import (prefixes): the core only itself and the package's
helpers; fleet mode the core and itself; the policy seam only the core and itself (the
registry names agents by strings, resolved on first use)."""
NEVER = {
    "mabp_gym.envs": ("mabp_gym.harness", "mabp_gym.cli", "mabp_gym.training"),
    "mabp_gym.harness": ("mabp_gym.cli", "mabp_gym.training"),
    "mabp_gym.agents": ("mabp_gym.harness", "mabp_gym.cli", "mabp_gym.training"),
    "mabp_gym.training": ("mabp_gym.cli",),
    "mabp_gym.fleet": ("mabp_gym.cli",),
}
"""What a higher layer never imports: nothing but the CLI imports the CLI; the envs and the
agents import neither the harness nor training."""


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_core__imports_nothing_above_it():
    """The core imports only itself (kernels included) and the package's helpers; the
    policy seam only the core: neither imports the envs, the agents, training, the harness
    or the CLI. The gym-free harness modules import neither the envs, the agents, training
    nor the CLI."""
    files = _module_files()
    checked = 0
    for name, path in files.items():
        for layer, allowed in LAYERS.items():
            if _within(name, (layer,)):
                bad = {n for n in _imports(path) if not _within(n, allowed)}
                assert not bad, f"{name} imports {sorted(bad)}"
                checked += 1
    assert checked >= len(CORE) + len(SEAM)
    above = (
        "mabp_gym.envs",
        "mabp_gym.agents",
        "mabp_gym.training",
        "mabp_gym.cli",
        "mabp_gym.harness.plots",
    )
    for module in GYM_FREE:
        bad = {n for n in _imports(files[f"mabp_gym.{module}"]) if _within(n, above)}
        assert not bad, f"mabp_gym.{module} imports {sorted(bad)}"


def test_layers__no_import_runs_down_from_the_top():
    """The envs, the agents and the harness never import the CLI or training; the envs
    and the agents never the harness."""
    for name, path in _module_files().items():
        for layer, forbidden in NEVER.items():
            if _within(name, (layer,)):
                bad = {n for n in _imports(path) if _within(n, forbidden)}
                assert not bad, f"{name} imports {sorted(bad)}"


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
