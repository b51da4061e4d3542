"""The ``mabp-gym`` command line.

Subcommands: ``train gnn`` / ``train learn-mabp`` / ``train residual-mabp`` (the learned
schedulers; ``--help`` after the learner lists their options), ``eval`` (policies over a
grid of loads and seeds), ``table`` (the paper's Table I layout, Markdown and CSV),
``sweep`` (load, beta, K, nu or skew sweeps of paper VI-A), ``plot`` (PNG figures from saved
results), ``capacity`` (a workload's no-memory and all-hit capacities), ``simulate`` (the
core under the fixed queue-length score rule), ``verdicts`` (stable load per seed set and
horizon from saved runs) and ``fleet`` (serving-fleet mode: routers over a replayed trace,
SPEC 11). ``--help`` on each. Bad arguments (checked, output paths included, before any work
starts) exit with status 2 and a one-line reason; an internal error keeps its traceback
(status 1); a sweep whose runs fail keeps the finished ones and exits with status 1 and a
summary. Results go to the JSON-lines / CSV / Markdown files named on the command line.

This module dispatches (:data:`COMMANDS`, :func:`main`); the parser is built in
:mod:`mabp_gym.cli.parser`, the commands live in :mod:`mabp_gym.cli.evaluate` (eval, table,
verdicts, sweep), :mod:`mabp_gym.cli.tools` (plot, capacity, simulate, train, bench) and
:mod:`mabp_gym.cli.fleet`, and what they share in :mod:`mabp_gym.cli.common`.
"""

from __future__ import annotations

import argparse
import errno
import sys

from mabp_gym.cli.common import UsageError
from mabp_gym.cli.evaluate import _eval, _sweep, _table, _verdicts
from mabp_gym.cli.fleet import _fleet
from mabp_gym.cli.parser import _build_parser
from mabp_gym.cli.tools import _bench, _capacity, _plot, _simulate, _train
from mabp_gym.extras import MissingExtraError

COMMANDS = {
    "train": _train,
    "bench": _bench,
    "eval": _eval,
    "table": _table,
    "verdicts": _verdicts,
    "sweep": _sweep,
    "plot": _plot,
    "capacity": _capacity,
    "simulate": _simulate,
    "fleet": _fleet,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mabp-gym`` console script."""
    from mabp_gym.harness.dispatch import BackendError
    from mabp_gym.harness.evaluation import RunsFailedError
    from mabp_gym.harness.results_file import ResultsFileError, ResultsWriteError

    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (UsageError, MissingExtraError, ResultsFileError, BackendError) as error:
        _command_parser(parser, args.command).error(str(error))
    except RunsFailedError as error:
        # The failing run's traceback (an internal error keeps it), then the summary.
        sys.stderr.write(error.details[0].rstrip() + "\n")
        sys.stderr.write(f"{parser.prog}: {error}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{parser.prog}: interrupted; {_kept(args)}\n")
        return 130
    except ResultsWriteError as error:  # a full disk: the file holds whole records only
        sys.stderr.write(f"{parser.prog} {args.command}: {error}\n")
        return 1
    except OSError as error:
        if error.errno not in WRITE_FAILURES:
            raise  # an internal error keeps its traceback
        where = f" {error.filename}" if error.filename else ""
        sys.stderr.write(
            f"{parser.prog} {args.command}: could not write{where} ({error.strerror}); "
            f"{_kept(args)}\n"
        )
        return 1
    return 0


WRITE_FAILURES = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EIO") if hasattr(errno, name)
)
"""The ``errno`` values of a write the file system refused (a full disk, a quota, a file
too large, an I/O error): one line and status 1, not a traceback."""


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of ``command``, so that its errors read ``mabp-gym COMMAND: error: ...``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def _kept(args: argparse.Namespace) -> str:
    """What a command cut short (Ctrl-C, a full disk) kept, and how to go on."""
    out = getattr(args, "out", None)
    if out:
        return f"every run that finished is kept in {out}: the same command resumes from there"
    return "no results file was given (--out PATH keeps runs as they finish)"
