"""``python -m mabp_gym.cli``: the ``mabp-gym`` command line."""

from mabp_gym.cli.commands import main

raise SystemExit(main())
