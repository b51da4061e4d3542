"""The optional parts of the package and the extra that installs each.

The core (simulator, workloads, env, scripted agents, harness, CLI) needs numpy, scipy,
gymnasium, numba, jsonschema and tqdm only. The rest is an extra:

* ``learn``: torch, torch-geometric, stable-baselines3, tensorboard, rich (the GNN and
  Learn-MABP policies, ``mabp-gym train``, :mod:`mabp_gym.envs.sb3`, :func:`mabp_gym.to_pyg`);
* ``plot``: matplotlib (``mabp-gym plot``, ``capacity --figure``, ``render_mode="rgb_array"``);
* ``marl``: pettingzoo, torchrl (:func:`mabp_gym.parallel_env`);
* ``ray`` / ``rllib``: parallel evaluation on Ray, the RLlib examples.
"""

from __future__ import annotations

import importlib.util
from typing import NoReturn

EXTRAS = {
    "learn": ("torch", "torch_geometric", "stable_baselines3"),
    "plot": ("matplotlib",),
    "marl": ("pettingzoo",),
}
"""The modules each extra provides that the package imports."""


class MissingExtraError(ImportError):
    """A feature needs an extra that is not installed (the message names the command)."""


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` when a module of ``extra`` is missing.

    Args:
        extra: a key of :data:`EXTRAS`.
        feature: what needs it, for the message (``"mabp-gym train"``).
    """
    missing = [m for m in EXTRAS[extra] if _absent(m)]
    if missing:
        raise MissingExtraError(
            f"{feature} needs {', '.join(missing)}: pip install 'mabp-gym[{extra}]'"
        )


def has_extra(extra: str) -> bool:
    """Whether every module of ``extra`` can be imported (without importing it)."""
    return not any(_absent(m) for m in EXTRAS[extra])


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a module set to None in sys.modules, a broken one
        return True


APART = {"rllib": "ray[rllib] pins gymnasium 1.2.2: install it in an environment of its own"}
"""Extras to install apart from the others, and why."""


def exit_without(extra: str, error: ImportError, command: str | None = None) -> NoReturn:
    """End a script whose imports of ``extra`` failed with ``error``: one line naming what
    is missing and the command that installs it (``command``, else the extra's)."""
    install = command or f"pip install 'mabp-gym[{extra}]'"
    note = f" ({APART[extra]})" if extra in APART else ""
    raise SystemExit(f"this needs the {extra} extra ({error}): {install}{note}")
