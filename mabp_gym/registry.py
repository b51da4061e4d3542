"""Policies by name: entry-point strings resolved on first use.

The way ``gymnasium.register`` does it for envs: the harness, the CLI and the training code
name a policy (``"mabp"``) and :func:`make_policy` imports its module only then, so the core
never imports the agents package and a learned policy loads torch only when it is asked for.

``register_policy("mine", "my_package.module:MyPolicy")`` (or a callable) adds a policy for
this process; the harness then runs it by name like a built-in one. A registered entry is
called as ``entry(workload, nu=..., memory=..., **kwargs)`` and must return an object that
follows :class:`mabp_gym.policy.Policy`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mabp_gym.core.validate import (
    check_entry_point,
    entry_identity,
    import_entry_point,
    resolve_entry_point,
)
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import make_workload
from mabp_gym.extras import require


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy: where it lives and the keyword arguments fixed by its name."""

    name: str
    entry_point: str | Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    needs: str | None = None
    """The extra to install when the entry point's module cannot be imported."""
    checkpoint: str | tuple[str, ...] | None = None
    """The shipped checkpoint the policy reads by default, a file name pattern with
    ``{workload}`` in the agents' ``checkpoints`` folder, or several tried in order (the
    first present file; ``None``: it reads none)."""

    def load(self) -> Callable[..., Any]:
        """The callable behind the entry point (``"module:attr.attr"``), imported now."""
        if self.needs is not None and not callable(self.entry_point):
            require(self.needs, f"policy {self.name!r}")
        return resolve_entry_point(self.entry_point)


_REGISTRY: dict[str, PolicySpec] = {}
_AGENTS = "mabp_gym.agents"
RUN_SETTINGS = ("nu", "memory")
"""The keywords every run sets for itself (``evaluate``'s ``nu`` and ``memory``, the env's):
no registered name can fix them."""


class PolicyArgumentError(ValueError):
    """:func:`make_policy` refused its arguments (an unknown name, a keyword the policy does
    not take or its name fixes), as opposed to an error raised while the policy was built."""


def register_policy(
    name: str,
    entry_point: str | Callable[..., Any],
    *,
    needs: str | None = None,
    checkpoint: str | tuple[str, ...] | None = None,
    **kwargs: Any,
) -> None:
    """Register ``entry_point`` (``"module:attribute"`` or a callable) as policy ``name``.

    ``kwargs`` are fixed arguments of the name (an ablation is a name with a switch off);
    ``needs`` names the extra whose absence makes the import fail; ``checkpoint`` the
    shipped file the policy reads by default (results are keyed by its content), or
    several patterns: the first whose file is shipped. A ``"module:attribute"`` of your
    own is imported now, unless it ``needs`` an extra (it and the built-in ones load on
    first use).

    Raises:
        ValueError: the name is empty or taken, the entry point is not a
            ``"module:attribute"`` string or a callable or cannot be imported, or
            ``kwargs`` fix ``nu`` or ``memory`` (every run sets them).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"policy name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"policy {name!r} is already registered; choose another name")
    check_entry_point("policy", name, entry_point)
    fixed = sorted(set(kwargs) & set(RUN_SETTINGS))
    if fixed:  # every evaluation passes them, so each run would be refused
        raise ValueError(
            f"policy {name!r} cannot fix {', '.join(fixed)}: every run sets them (evaluate's "
            "nu= and memory=, the env's); pass them when the policy is run instead"
        )
    if needs is None and isinstance(entry_point, str) and not entry_point.startswith(_AGENTS):
        # Yours is imported now: a typo here, not a traceback at the first run with the
        # name taken. The built-in entries and those with an extra (``needs``) wait, so
        # that a heavy or missing extra loads (or is named) when the policy is asked for.
        import_entry_point("policy", entry_point)
    _REGISTRY[name] = PolicySpec(name, entry_point, dict(kwargs), needs, checkpoint)


def named_policy(name: Any) -> None:
    """Register a name of the form ``"module:attribute"`` as the policy it names, on first
    use, after importing it (a typo is refused at once, naming the import's error). The
    name says what it is, so every process resolves it alone: the CLI's, and the workers
    of an evaluation however they were started. Other names are left as they are."""
    if isinstance(name, str) and ":" in name and name not in _REGISTRY:
        import_entry_point("policy", name)
        register_policy(name, name)


def policy_identity(name: str) -> str | None:
    """What a policy registered by the user is (its entry point, fixed arguments and a
    digest of the source file that defines it), for the run key: two processes may
    register one name for two policies, and an edited policy is another policy. ``None``
    for the built-in names, whose keys it leaves as they were."""
    named_policy(name)
    spec = _REGISTRY.get(name)
    if spec is None or name in POLICIES:
        return None
    return entry_identity(spec.entry_point, spec.kwargs)


def user_registrations() -> list[PolicySpec]:
    """The policies registered in this process beyond the built-in ones that another process
    can register again: those named by a ``"module:attribute"`` entry point, or by a
    callable that pickles (a class at a module's top level). A worker process started
    without ``fork`` (``spawn``, ``forkserver``: Python's default from 3.14 on Linux) has
    only the built-in names until it registers these (:func:`register_again`)."""
    import pickle

    specs = []
    for name, spec in _REGISTRY.items():
        if name in POLICIES:
            continue
        try:
            pickle.dumps(spec)
        except Exception:  # noqa: BLE001 - a lambda, a local class: fork-only
            continue
        specs.append(spec)
    return specs


def unsendable(names: set[str]) -> list[str]:
    """Which of ``names`` are registered here in a way a worker process not started by
    ``fork`` cannot register again (:func:`user_registrations`)."""
    sent = {spec.name for spec in user_registrations()}
    return sorted(
        name for name in names if name in _REGISTRY and name not in POLICIES and name not in sent
    )


def register_again(specs: list[PolicySpec]) -> None:
    """Register in this process the :func:`user_registrations` of another that it lacks."""
    for spec in specs:
        if spec.name not in _REGISTRY:
            _REGISTRY[spec.name] = spec


def policy_names() -> tuple[str, ...]:
    """Every registered name: the built-in ones in Table I order, then those added."""
    return tuple(_REGISTRY)


def resolve_workload(env_or_workload: Any) -> tuple[Workload, dict[str, Any]]:
    """The workload behind a workload name, a :class:`Workload` or a (wrapped) env, and the
    env's ``nu`` / ``memory`` settings when there is an env."""
    if isinstance(env_or_workload, Workload):
        return env_or_workload, {}
    if isinstance(env_or_workload, (str, os.PathLike)):  # a name, or a workload file
        return make_workload(os.fspath(env_or_workload)), {}
    unwrapped: Any = getattr(env_or_workload, "unwrapped", None)
    workload = getattr(unwrapped, "workload", None)
    if isinstance(workload, Workload):
        return workload, {"nu": unwrapped.nu, "memory": unwrapped.memory}
    raise ValueError(
        "make_policy needs a workload name, a Workload or an mabp_gym env, got "
        f"{type(env_or_workload).__name__}"
    )


def checkpoint_path(name: str, policy_kw: dict[str, Any], workload_name: str) -> Path | None:
    """The checkpoint file policy ``name`` reads with ``policy_kw`` for a workload: its
    ``checkpoint`` argument, else the shipped default (``None``: it reads none, as a policy
    given its ``weights`` does not)."""
    if policy_kw.get("checkpoint"):
        return Path(policy_kw["checkpoint"])
    spec = _REGISTRY.get(name)
    if spec is None or spec.checkpoint is None or "weights" in policy_kw:
        return None
    patterns = (spec.checkpoint,) if isinstance(spec.checkpoint, str) else spec.checkpoint
    paths = [_checkpoint_dir() / p.format(workload=workload_name) for p in patterns]
    return next((path for path in paths if path.is_file()), paths[0])


def _checkpoint_dir() -> Path:
    """The agents' ``checkpoints`` folder, found without importing the agents package."""
    spec = importlib.util.find_spec(_AGENTS)
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - broken install
        raise ImportError(f"{_AGENTS} is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "checkpoints"


def make_policy(name: str, env_or_workload: Any, **kw: Any) -> Any:
    """Build policy ``name`` for a workload name, a ``Workload`` or an mabp_gym env.

    With an env, the env's ``nu`` and ``memory`` settings are used unless given in ``kw``.

    Raises:
        PolicyArgumentError: (a ``ValueError``) ``name`` is not registered (the message
            lists the names), or ``kw`` holds a keyword the policy does not take or its
            name fixes.
        MissingExtraError: the policy needs an extra that is not installed (an
            ``ImportError`` naming the extra).
    """
    named_policy(name)
    spec = _REGISTRY.get(name) if isinstance(name, str) else None
    if spec is None:
        raise PolicyArgumentError(unknown_policy(name))
    fixed = sorted(set(spec.kwargs) & set(kw))
    if fixed:
        raise PolicyArgumentError(
            f"policy {name!r} is defined by {', '.join(f'{k}={spec.kwargs[k]!r}' for k in fixed)}"
            f"; it takes no {', '.join(fixed)} argument (choose another policy)"
        )
    factory = spec.load()
    workload, settings = resolve_workload(env_or_workload)
    try:
        policy = factory(workload, **{**settings, **spec.kwargs, **kw})
    except TypeError as error:  # a keyword the policy does not take: the user's, by name
        if "unexpected keyword argument" not in str(error):
            raise
        raise PolicyArgumentError(f"policy {name!r} does not take that argument: {error}") from None
    policy.name = name
    return policy


def unknown_policy(name: Any) -> str:
    """The message for a policy name nobody registered."""
    return (
        f"unknown policy {name!r}; choose one of {policy_names()}, or name your own as "
        "'module:Class'"
    )


_BUILT_IN: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("sp", "shortest_path:ShortestPath", {}),
    ("jsq", "shortest_path:JoinShortestQueue", {}),
    ("bp", "backpressure:make_bp", {}),
    ("cost-bp", "backpressure:make_cost_bp", {}),
    ("greedycache-bp", "backpressure:make_greedycache_bp", {}),
    ("mabp", "mabp:MABP", {}),
    ("mabp-no-transition", "mabp:MABP", {"transition": False}),
    ("mabp-no-reuse", "mabp:MABP", {"reuse": False}),
    ("mabp-no-retention", "mabp:MABP", {"retention": False}),
    ("oracle-sur", "oracle:OracleSur", {}),
    ("frame-mabp", "frame_mabp:FrameMABP", {}),
    ("random", "shortest_path:RandomScores", {}),
    ("constant", "shortest_path:ConstantScores", {}),
)
for _name, _entry, _kwargs in _BUILT_IN:
    register_policy(_name, f"{_AGENTS}.{_entry}", **_kwargs)
register_policy("gnn", f"{_AGENTS}.gnn:GNNPolicy", needs="learn", checkpoint="gnn_{workload}.pt")
register_policy(
    "learn-mabp",
    f"{_AGENTS}.learn_mabp:LearnMABP.from_checkpoint",
    needs="learn",
    checkpoint="learn_mabp_{workload}.pt",
)
register_policy(
    "residual-mabp",
    f"{_AGENTS}.residual_mabp:ResidualMABP.from_checkpoint",
    needs="learn",
    checkpoint="residual_mabp_{workload}.pt",
)
register_policy(
    "residual-mabp-any",
    f"{_AGENTS}.residual_mabp:ResidualMABP.any_network",
    needs="learn",
    checkpoint="residual_mabp_any.pt",
)
register_policy(
    "residual-frame-mabp",
    f"{_AGENTS}.residual_mabp:ResidualFrameMABP.from_checkpoint",
    needs="learn",
    checkpoint="residual_frame_mabp_any.pt",
)

POLICIES: tuple[str, ...] = policy_names()
"""The built-in policies (Table I's, the MABP ablations, frame-MABP)."""
