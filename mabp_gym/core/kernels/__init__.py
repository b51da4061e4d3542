"""The slot's rules, each written once as a kernel function: the projection and the encoding
(:mod:`~mabp_gym.core.kernels.slotcore`), the one-slot transition and its count-based FIFO
(:mod:`~mabp_gym.core.kernels.transition_core`), the feasibility check and the SPEC 6
invariants (:mod:`~mabp_gym.core.kernels.check_core`).

:mod:`~mabp_gym.core.kernels.jit` compiles them with numba where it is there; without numba,
or with ``MABP_GYM_PURE=1``, the same functions run as plain Python, with the same results.
The kernels read the core's description (workload, index, state, control) and the core's
simulator calls them: they live inside the core so that the two never import each other
across packages.
"""
