"""The ``mabp-gym`` command line (the console script ``mabp_gym.cli:main``; also
``python -m mabp_gym.cli``). :mod:`mabp_gym.cli.commands` dispatches (``main``); the parser
is in :mod:`mabp_gym.cli.parser`, the commands in :mod:`mabp_gym.cli.evaluate` (eval, table,
verdicts, sweep), :mod:`mabp_gym.cli.tools` (plot, capacity, simulate, train, bench) and
:mod:`mabp_gym.cli.fleet`, what they share in :mod:`mabp_gym.cli.common`."""

from mabp_gym.cli.commands import main

__all__ = ["main"]
