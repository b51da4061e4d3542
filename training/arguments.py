"""Command lines of the training entry points (and the CLI's parser class): a dataclass of
arguments becomes typed options, and a run records the command that reproduces it.

Imports neither torch nor the training code, so the CLI can build its parser without the
learning stack."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import textwrap
from typing import Any, get_type_hints

from mabp_gym.core.workloads import make_workload


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring: the string right under it in the class body, as CleanRL
    documents its arguments (Python keeps no such docstring at run time, so the class's
    source is read)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(body, ast.ClassDef)
    docs = {}
    for field, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = " ".join(after.value.value.split())
    return docs


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One ``--field`` option per dataclass field, typed, with the field's docstring as help."""
    hints = get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        option = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
        # argparse formats help with %: a literal one ("20%") must be doubled.
        help_text = f"{docs.get(f.name, '')} (default: {default})".replace("%", "%%")
        if kind is bool:
            parser.add_argument(
                option,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=help_text,
            )
        elif kind in (int, float, str):
            parser.add_argument(option, dest=f.name, type=kind, default=default, help=help_text)
        elif kind == (str | None):
            parser.add_argument(option, dest=f.name, type=str, default=default, help=help_text)
        elif kind == list[float]:
            parser.add_argument(
                option, dest=f.name, type=float, nargs="+", default=default, help=help_text
            )
        elif kind == list[str]:
            parser.add_argument(
                option, dest=f.name, type=str, nargs="*", default=default, help=help_text
            )
        elif kind == list[int]:
            parser.add_argument(
                option, dest=f.name, type=int, nargs="+", default=default, help=help_text
            )
        else:  # pragma: no cover - a field type this helper does not know
            raise TypeError(f"unsupported field type {kind} for {f.name}")


def command_line(learner: str, args: Any, unused: tuple[str, ...] = ()) -> str:
    """The ``mabp-gym train`` command that reproduces a run (recorded in checkpoints), less
    the fields ``unused`` that this run's other arguments make irrelevant."""
    parts = []
    defaults = {f.name: f.default for f in dataclasses.fields(args)}
    for key, value in dataclasses.asdict(args).items():
        if isinstance(value, bool):  # a switch: given only where it is not the default
            if value != defaults.get(key):
                parts.append(f"--{'' if value else 'no-'}{key.replace('_', '-')}")
            continue
        if value is None or value in ([], "") or key in unused:  # "": not given, and untypable
            continue
        text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(f"--{key.replace('_', '-')} {text}")
    return f"mabp-gym train {learner} " + " ".join(parts)


def from_namespace(cls: type, namespace: argparse.Namespace) -> Any:
    return cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)})


def parse_into(
    cls: type, prog: str, description: str | None, validate: Any, argv: list[str] | None
) -> Any:
    """Parse ``argv`` into the dataclass ``cls`` (one ``--field`` option each) and run the
    learner's ``validate`` on it: the ``parse`` of every training entry point."""
    parser = OneLineParser(prog=prog, description=description)
    add_dataclass_arguments(parser, cls)
    args = from_namespace(cls, parser.parse_args(argv))
    validate(args)
    return args


def require_at_least(args: Any, minimum: int, *names: str) -> None:
    """Refuse the first of the fields ``names`` of ``args`` below ``minimum``, naming its
    option."""
    for name in names:
        value = getattr(args, name)
        if value < minimum:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {minimum}, got {value}")


def check_loads(args: Any, *names: str) -> None:
    """Refuse a load in the list fields ``names`` of ``args`` that ``args.workload`` does not
    take (``make_workload``'s error names it)."""
    for name in names:
        for load in getattr(args, name):
            make_workload(args.workload, load=load, horizon=10)


def check_out_dir(out: str) -> None:
    """Refuse an ``--out`` that exists and is not a directory."""
    from pathlib import Path

    if Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"--out {out!r} exists and is not a directory")
