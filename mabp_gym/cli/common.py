"""What the ``mabp-gym`` commands share: :class:`UsageError` and :func:`user_input`, the
checks and parsers of their arguments (all run before any work starts), the default policies,
load grid and sweep parameters, and the formatting of their output (numbers, JSON)."""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.core.workloads import WORKLOADS
from mabp_gym.harness.runs import MAX_SEEDS

TABLE_POLICIES = (
    "sp",
    "jsq",
    "bp",
    "cost-bp",
    "greedycache-bp",
    "mabp",
    "oracle-sur",
    "mabp-no-transition",
    "mabp-no-reuse",
    "mabp-no-retention",
)


DEFAULT_GRID = tuple(round(0.1 * k, 1) for k in range(1, 11))


SWEEPS = ("load", "beta", "K", "nu", "skew")


SCREEN_HORIZON = 4000
"""Below this many slots the growth verdict is a screen (benchmark v2's grid horizon)."""


class UsageError(Exception):
    """A bad command line: reported on one line with exit status 2."""


@contextlib.contextmanager
def user_input(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Within this block a ``ValueError`` or ``TypeError`` is the user's (a bad argument),
    reported as a :class:`UsageError`; outside it, it is a bug and keeps its traceback.
    ``flags`` turns the library's keyword spellings in the message into the command's own
    (``{"engine='step'": "--engine step"}``): the user typed flags, not Python."""
    try:
        yield
    except (ValueError, TypeError) as error:
        text = str(error).strip().splitlines()
        message = text[0] if text else type(error).__name__
        for python, flag in (flags or {}).items():
            message = message.replace(python, flag)
        raise UsageError(message) from error


def _no_repeats(values: list[Any], option: str) -> None:
    """A repeated name or load would count as another independent run."""
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ValueError(f"{option}: {seen[0]!r} is given twice; each must appear once")


def _writable(path: str | None, option: str, results: str | None = None) -> None:
    """Check an output file option before any work starts; ``results``: the kind of results
    file it is (``"eval"``, ``"fleet"``), which one of the other kind must not be. An output
    that is not a results file (a table, a JSON report) never overwrites one."""
    if path is not None:
        from mabp_gym.harness.results_file import (
            check_output_path,
            check_results_kind,
            results_kind,
        )

        check_output_path(path, option)
        if results is not None:
            check_results_kind(path, results, option)
        elif results_kind(path) in ("eval", "fleet"):
            raise ValueError(
                f"{option} {path!r} is a results file (runs' records): writing this output "
                "there would destroy them; give another path"
            )


def _distinct_files(
    args: argparse.Namespace, outputs: tuple[str, ...], inputs: tuple[str, ...] = ()
) -> None:
    """Refuse two of the file options ``outputs`` (``args``' attribute names) naming one
    file, or one naming a file an option of ``inputs`` reads (a path or a list of paths; a
    workload given by name is no file): it would be overwritten before or after it is read."""
    seen: dict[Path, str] = {}
    for name in inputs:
        value = getattr(args, name, None)
        for path in value if isinstance(value, list) else [value]:
            if path is not None and Path(path).is_file():
                seen.setdefault(Path(path).resolve(), _option(name))
    for name in outputs:
        path = getattr(args, name, None)
        if path is None:
            continue
        where = Path(path).resolve()
        if where in seen:
            raise ValueError(
                f"{_option(name)} {path!r} names the file of {seen[where]}: give each output "
                "a file of its own, apart from the files the command reads"
            )
        seen[where] = _option(name)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _no_grid_overrides(overrides: dict[str, Any], command: str, settings: dict[str, str]) -> None:
    """Refuse a ``--set`` the command would ignore or that another option sets."""
    for key, option in settings.items():
        if key in overrides:
            raise ValueError(f"--set {key}={overrides[key]!r}: {command} {option}")


def _number(raw: str) -> Any:
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        return float(raw)
    except ValueError:
        return None if raw.lower() == "none" else raw


def _parse_overrides(pairs: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects NAME=VALUE, got {pair!r}")
        if key in overrides:  # the last would win unseen
            raise ValueError(f"--set: {key} is given twice; give each name once")
        overrides[key] = _number(raw)
    return overrides


def _workload_name(value: str) -> str:
    from mabp_gym.core.workloads import is_workload_file

    if value in WORKLOADS:
        return value
    if is_workload_file(value):
        if not Path(value).is_file():
            raise argparse.ArgumentTypeError(f"no workload file {value!r}")
        return value
    raise argparse.ArgumentTypeError(
        f"{value!r} is neither a built-in workload ({', '.join(WORKLOADS)}) nor a .json / "
        ".yaml workload file"
    )


MAX_GRID = 10_000
"""The most values one ``start:stop:step`` range may give."""


def _parse_grid(tokens: list[str], name: str) -> list[float]:
    """Numbers, or ``start:stop:step`` ranges (stop included)."""
    values: list[float] = []
    for token in tokens:
        for part in token.split(","):
            if not part:
                continue
            if ":" in part:
                pieces = part.split(":")
                if len(pieces) != 3:
                    raise ValueError(f"{name}: a range is start:stop:step, got {part!r}")
                try:
                    start, stop, step = (float(x) for x in pieces)
                except ValueError:
                    raise ValueError(f"{name}: not a number in the range {part!r}") from None
                if not all(map(math.isfinite, (start, stop, step))) or step <= 0 or stop < start:
                    raise ValueError(
                        f"{name}: bad range {part!r}: start:stop:step with finite numbers, "
                        "step > 0 and stop >= start"
                    )
                # Every start + k * step up to stop, stop included when the steps reach it;
                # the tolerance absorbs float error only (0.1:0.3:0.1 has 3 values), it
                # never rounds a partial step up past stop (0.5:1.25:0.5 ends at 1.0).
                count = math.floor((stop - start) / step + 1e-9) + 1
                if count > MAX_GRID:
                    raise ValueError(
                        f"{name}: the range {part!r} has {count:,} values, at most {MAX_GRID:,}"
                    )
                values.extend(round(start + k * step, 10) for k in range(count))
            else:
                try:
                    values.append(float(part))
                except ValueError:
                    raise ValueError(f"{name}: not a number: {part!r}") from None
    if not values:
        raise ValueError(f"{name}: give at least one value")
    return values


def _policies(tokens: list[str]) -> list[str]:
    """The policy names of ``--policies``: registered ones, or your own as
    ``module:Class`` (importable from where the command runs; checked by importing it)."""
    from mabp_gym.registry import named_policy, policy_names

    names = [p for token in tokens for p in token.split(",") if p]
    for name in names:
        named_policy(name)
        if name not in policy_names():
            raise ValueError(
                f"unknown policy {name!r}; choose from {', '.join(policy_names())}, or give "
                "your own as module:Class"
            )
    if not names:
        raise ValueError("give at least one policy")
    return names


def _parse_seeds(token: str, option: str = "--seed-sets") -> list[int]:
    try:
        if ":" in token:
            start, stop = (int(x) for x in token.split(":"))
        else:
            seeds = [int(x) for x in token.split(",") if x]
    except ValueError:
        raise ValueError(f"{option}: {token!r} is not 'a:b' or comma-separated seeds") from None
    if ":" in token:
        if stop - start > MAX_SEEDS:  # list(range(...)) ran out of memory first
            raise ValueError(
                f"{option}: {token!r} holds {stop - start:,} seeds; at most {MAX_SEEDS:,}"
            )
        seeds = list(range(start, stop))
    if not seeds:
        raise ValueError(f"{option}: {token!r} holds no seed")
    return seeds


def _read_results(paths: list[str], option: str = "--results") -> list[dict[str, Any]]:
    """The records of the results files of ``option``; a missing file or no record at all is
    an error."""
    from mabp_gym.harness.results_file import read_records

    records: list[dict[str, Any]] = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{option}: no such file {path!r}")
        records += read_records(path)
    if not records:
        raise ValueError(f"{option}: the files hold no records")
    return records


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}f}"


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON's null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
