"""mabp-gym: stateful foundation-model service networks (SFMSN) for scheduling research.

The layers are folders: ``core/`` (workloads, state, controls, the one-slot transition,
the shared projection, the capacity LPs, observation encoding; its compiled kernels in
``core/kernels/``), the policy seam beside this file (``policy``, ``registry``,
``rollout``), ``envs/`` (the Gymnasium, PettingZoo, PyG and SB3 adapters), ``harness/``
(evaluation) and ``cli/``. The core, the seam and the evaluation harness import neither
gymnasium nor torch; ``docs/architecture.md`` draws the layers.

Importing the package registers the Gymnasium ids without importing gymnasium: at once
when gymnasium is already imported, otherwise as soon as it is (a one-shot import hook).
``SFMSNEnv`` loads gymnasium on first use, ``to_pyg`` torch and PyG, ``parallel_env`` (the
decentralized PettingZoo view, extra ``marl``) PettingZoo; the last is left out of
``__all__`` so that ``import *`` works without PettingZoo.

A process that never imported the package (an RLlib remote env runner, a subprocess
vector env) makes the env from the module-qualified id ``"mabp_gym:mabp_gym/SFMSN-v0"``:
Gymnasium imports ``mabp_gym`` first. Gymnasium 1.x has no plugin entry points.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from mabp_gym.core.capacity import capacity
from mabp_gym.core.control import Control, InfeasibleControlError, check_control
from mabp_gym.core.projection import project
from mabp_gym.core.simulator import InvariantError, Simulator, SlotOutcome
from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Action, Commodity, Link, Node, Signature, Workload
from mabp_gym.core.workloads import WORKLOADS, make_workload, workload_params
from mabp_gym.harness.evaluation import evaluate
from mabp_gym.harness.results_file import read_records
from mabp_gym.harness.summaries import paper_load, stable_load, summarize_records
from mabp_gym.registry import make_policy, policy_names, register_policy
from mabp_gym.version import __version__ as __version__

ENV_IDS = {
    "work_reuse": "mabp_gym/WorkReuse-v0",
    "successor": "mabp_gym/Successor-v0",
    "separation": "mabp_gym/Separation-v0",
    "boundary": "mabp_gym/Boundary-v0",
    "mixed": "mabp_gym/Mixed-v0",
    "rag": "mabp_gym/Rag-v0",
    "moe": "mabp_gym/Moe-v0",
    "agentic": "mabp_gym/Agentic-v0",
    "multihop": "mabp_gym/Multihop-v0",
}
"""Registered id of each workload; ``mabp_gym/SFMSN-v0`` takes ``workload=`` (default mixed)."""

FLEET_ENV_ID = "mabp_gym/Fleet-v0"
FLEET_ROUTER_ENV_ID = "mabp_gym/Fleet-v1"
"""Registered id of fleet mode for learned routers (``mabp_gym.fleet.env.FleetRouterEnv``:
per-request reward credited to its routing step, router-side bounded observation)."""
"""Registered id of serving-fleet mode (``mabp_gym.fleet.env.FleetEnv``)."""


def _register() -> None:
    import gymnasium

    entry = "mabp_gym.envs.env:SFMSNEnv"
    ids = {"mabp_gym/SFMSN-v0": "mixed", **{v: k for k, v in ENV_IDS.items()}}
    for env_id, workload in ids.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(
                id=env_id,
                entry_point=entry,
                vector_entry_point="mabp_gym.envs.worker_vector_env:batched_vector_env",
                # No max_episode_steps: the env's horizon is the one truncation rule, so
                # make(id, horizon=H) runs H slots (a registered TimeLimit would cut at 600).
                kwargs={"workload": workload},
            )
    if FLEET_ENV_ID not in gymnasium.registry:
        # Serving-fleet mode (SPEC 11): one step routes one request of a replayed trace.
        gymnasium.register(id=FLEET_ENV_ID, entry_point="mabp_gym.fleet.env:FleetEnv")
    if FLEET_ROUTER_ENV_ID not in gymnasium.registry:
        gymnasium.register(id=FLEET_ROUTER_ENV_ID, entry_point="mabp_gym.fleet.env:FleetRouterEnv")


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Runs :func:`_register` right after gymnasium's own module has executed.

    It finds gymnasium's real spec (skipping itself) and wraps its loader, so the import is
    gymnasium's own. It stays on ``sys.meta_path`` until gymnasium is really imported: a
    mere ``importlib.util.find_spec("gymnasium")`` (TorchRL runs one at import) executes
    nothing, and the import after it must still be seen (it was not: the ids were never
    registered)."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "gymnasium" or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader, self)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    """gymnasium's own loader, then :func:`_register`; the finder leaves ``sys.meta_path``."""

    def __init__(self, loader: Any, finder: _RegisterAfterImport) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert module.__spec__ is not None
        module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._loader.exec_module(module)
        _register()


if "gymnasium" in sys.modules:
    _register()
elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterImport())


def __getattr__(name: str) -> Any:
    if name == "SFMSNEnv":
        from mabp_gym.envs.env import SFMSNEnv

        return SFMSNEnv
    if name == "to_pyg":
        from mabp_gym.envs.pyg import to_pyg

        return to_pyg
    if name == "parallel_env":  # PettingZoo loads only when the decentralized view is asked for
        try:
            from mabp_gym.envs.parallel import parallel_env
        except ModuleNotFoundError as error:
            if error.name != "pettingzoo":
                raise
            raise ImportError(
                "mabp_gym.parallel_env needs PettingZoo: pip install 'mabp-gym[marl]'"
            ) from error
        return parallel_env
    raise AttributeError(f"module 'mabp_gym' has no attribute {name!r}")


__all__ = [
    "ENV_IDS",
    "FLEET_ENV_ID",
    "FLEET_ROUTER_ENV_ID",
    "WORKLOADS",
    "Action",
    "Commodity",
    "Control",
    "InfeasibleControlError",
    "InvariantError",
    "Link",
    "Node",
    "SFMSNEnv",
    "Signature",
    "SimState",
    "Simulator",
    "SlotOutcome",
    "Workload",
    "capacity",
    "check_control",
    "evaluate",
    "make_policy",
    "make_workload",
    "policy_names",
    "project",
    "paper_load",
    "read_records",
    "register_policy",
    "stable_load",
    "summarize_records",
    "to_pyg",
    "workload_params",
]
