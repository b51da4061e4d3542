"""The one validator of a number given by a user: builder parameters, workload-file fields,
workload fields and env arguments all go through :func:`check_number`; score vectors (an
env's action, :func:`mabp_gym.project`'s scores) through :func:`checked_action`."""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number: a Python or numpy int or float, not a bool."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(
        value, (int, float, np.integer, np.floating)
    )


def is_seed(value: Any) -> bool:
    """Whether ``value`` is a seed: a Python or numpy integer >= 0, not a bool."""
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and bool(value >= 0)
    )


def check_number(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    integer: bool = False,
    infinite: bool = False,
) -> Any:
    """The one validator of a number given by a user (a builder parameter, a workload-file
    field, an env argument): a real number (Python or numpy; not a bool, a string, a
    complex or an array), finite (or ``+inf`` too with ``infinite``, e.g. a time-to-live
    that never ends), an integer when asked, within ``[low, high]`` (``(low, high]`` with
    ``low_open``). Returns it as ``int`` or ``float``.

    Raises:
        ValueError: ``"{name}: must be ..., got {value!r}"``.
    """
    if not is_real(value):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    if not math.isfinite(float(value)) and not (infinite and float(value) == math.inf):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    if integer and int(value) != value:
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name}: must be {'>' if low_open else '>='} {low:g}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name}: must be <= {high:g}, got {value!r}")
    return int(value) if integer else float(value)


def as_list(values: Any, name: str, of: str = "numbers") -> list[Any]:
    """``values`` as a list: a list, tuple, range or 1-d array; a lone value (``loads=0.3``
    raised "'float' object is not iterable", ``routers="jsq"`` ran routers ``j``, ``s``,
    ``q``) or a mapping is refused with the fix.

    Raises:
        ValueError: ``"{name} must be a list of {of}, e.g. [...], got ..."``.
    """
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        example = values
        if of == "numbers" and isinstance(values, str):
            for number in (int, float):  # loads="0.5": the number, not the string again
                try:
                    example = number(values)
                    break
                except ValueError:
                    pass
        shown = "..." if values is None else repr(example)
        raise ValueError(f"{name} must be a list of {of}, e.g. [{shown}], got {values!r}")
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(f"{name} must be a list or a 1-d array, got an array of {values.shape}")
    return list(values)


def checked_action(action: Any, what: str = "the action") -> Any:
    """Refuse scores that numpy would silently reinterpret: a masked array (the mask
    would be dropped), complex numbers (the imaginary part would be dropped), strings,
    booleans or objects. Shape and finiteness are checked by the projection
    (:func:`mabp_gym.core.projection.validate_scores`, which calls this too); the envs call
    it first to name what was wrong in their own terms (``what``: the action, each agent's
    action). Returns the action, a torch tensor as a numpy array."""
    if type(action) is np.ndarray:  # the common case: nothing to convert
        dtype = action.dtype
    else:
        action, dtype = _converted(action, what)
    if dtype.kind not in "fiu":
        raise ValueError(f"{what} must be real-valued scores (float or int), got dtype {dtype}")
    return action


def _converted(action: Any, what: str) -> tuple[Any, np.dtype]:
    """An action that is not a plain numpy array: refused where a masked array or a ragged
    list, a torch tensor as a numpy array; with the dtype numpy reads it as."""
    if isinstance(action, np.ma.MaskedArray):
        raise ValueError(
            f"{what} is a masked array; pass a plain array of scores (fill "
            "the masked entries, e.g. with -1 for 'do not act')"
        )
    if hasattr(action, "detach") and hasattr(action, "numpy"):  # a torch tensor
        action = action.detach().cpu()  # one with a gradient was torch's error
        if action.is_floating_point() and action.element_size() < 4:
            action = action.float()  # bfloat16 has no numpy dtype; float16 is widened alike
        action = action.numpy()
    try:
        return action, np.asarray(action).dtype
    except ValueError as error:  # a ragged list: numpy's "inhomogeneous shape"
        raise ValueError(
            f"{what} must be an array of scores, not a ragged list ({error})"
        ) from None


def resolve_entry_point(entry_point: str | Callable[..., Any]) -> Callable[..., Any]:
    """The callable behind a registered entry point: the callable itself, or the attribute
    path of a ``"module:attr.attr"`` string, its module imported now (checked at
    registration by :func:`check_entry_point`)."""
    if callable(entry_point):
        return entry_point
    module_name, _, attribute = entry_point.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def import_entry_point(what: str, text: str) -> Callable[..., Any]:
    """The callable that ``"module:attribute"`` names, imported now; a ``ValueError`` naming
    ``what`` (``"--routers"``, ``"policy"``) and the import's own error where it cannot be
    imported or is not callable. A module found nowhere on the path is looked for in the
    working folder too, last (a console script's path does not hold it, ``python -m``'s
    does): ``my_policies.py`` beside you is importable as ``my_policies:Mine``."""
    check_entry_point(what, text, text)
    try:
        try:
            target = resolve_entry_point(text)
        except ModuleNotFoundError:
            if os.getcwd() in sys.path or "" in sys.path:
                raise
            sys.path.append(os.getcwd())
            target = resolve_entry_point(text)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"{what} {text!r}: cannot import it ({error})") from None
    if not callable(target):
        raise ValueError(f"{what} {text!r}: {text.partition(':')[2]} is not a class or a function")
    return target


def entry_identity(entry: str | Callable[..., Any], kwargs: dict[str, Any]) -> str:
    """What a registered entry point of your own is, for the keys of results files: its
    name, fixed arguments and a digest of the files that make it (two processes may
    register one name for two things, and an edited one is another)."""
    source = _source_digest(entry)
    if callable(entry):
        entry = f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', entry)}"
    text = f"{entry} {sorted(kwargs.items())!r} source {source}"
    # A spawned worker imports the parent's script as __mp_main__, and a repr with an
    # address (a functools.partial, an object as a fixed argument) differs in every
    # process: the same policy would be another in each worker and each rerun.
    return _ADDRESS.sub("", text.replace("__mp_main__", "__main__"))


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _source_digest(entry: str | Callable[..., Any]) -> str:
    """A digest of the files that make ``entry``: the module it is named from and the file
    that defines it, as they are on disk now ("?" for neither: a policy made in an
    interactive session). What those files import from others is not in it."""
    import hashlib
    import importlib.util
    import inspect
    from pathlib import Path

    digest = hashlib.sha256()
    found = False
    paths: set[str | None] = set()
    try:
        target = resolve_entry_point(entry)
        paths.add(inspect.getsourcefile(target))
        module = entry.partition(":")[0] if isinstance(entry, str) else target.__module__
        spec = importlib.util.find_spec(module)  # a ValueError for __main__
        paths.add(spec.origin if spec is not None else None)
    except (TypeError, ImportError, AttributeError, ValueError, OSError):
        pass
    for path in sorted(p for p in paths if p and Path(p).is_file()):
        digest.update(Path(path).read_bytes())
        found = True
    return digest.hexdigest()[:16] if found else "?"


def check_entry_point(what: str, name: str, entry_point: Any) -> None:
    """Refuse an entry point of a registered ``what`` (``"policy"``, ``"router"``) that is
    neither a ``"module:attribute"`` string nor a callable, naming ``name``."""
    if isinstance(entry_point, str):
        module_name, colon, attribute = entry_point.partition(":")
        if not (module_name and colon and attribute):
            raise ValueError(
                f"entry point of {what} {name!r} must look like 'module:attribute', "
                f"got {entry_point!r}"
            )
    elif not callable(entry_point):
        raise ValueError(
            f"entry point of {what} {name!r} must be a 'module:attribute' string or a "
            f"callable, got {type(entry_point).__name__}"
        )
