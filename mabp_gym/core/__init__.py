"""The simulator core: the network and workload description, the state, the control, the
one-slot transition, the shared projection, the capacity LPs, the metrics and the
observation encoding, with their compiled kernels in :mod:`mabp_gym.core.kernels`.

It imports numpy, scipy and numba only: never gymnasium, torch, the envs, the harness or
the CLI (``tests/test_layout.py`` holds it to that). Import from its modules
(``from mabp_gym.core.simulator import Simulator``), or the public names from
:mod:`mabp_gym`.
"""
