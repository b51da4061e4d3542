"""The core's rules compiled with numba: the projection and the encoding
(:mod:`~mabp_gym.core.kernels.slotcore`), the one-slot transition and its count-based FIFO
(:mod:`~mabp_gym.core.kernels.transition_core`), the feasibility check and the SPEC 6
invariants (:mod:`~mabp_gym.core.kernels.check_core`).

Each kernel states a rule whose readable reference is a core module (``projection.py``,
``simulator.py``, ``control.py``); the tests hold the two identical, and
``MABP_GYM_PURE=1`` runs the reference alone. The kernels read the core's description
(workload, index, state, control) and the core's simulator calls them: they live inside the
core so that the two never import each other across packages.
"""
