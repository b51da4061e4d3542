"""The ``mabp-gym`` command line (the console script ``mabp_gym.cli:main``; also
``python -m mabp_gym.cli``). The commands live in :mod:`mabp_gym.cli.commands`."""

from mabp_gym.cli.commands import main

__all__ = ["main"]
