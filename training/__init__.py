"""Training entry points for the learned schedulers, installed as ``mabp_gym.training``:
``mabp-gym train gnn``, ``learn-mabp``, ``residual-mabp`` and ``select`` (``docs/learning.md``)."""
