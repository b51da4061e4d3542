"""Fluid capacity LPs (SPEC section 2).

``capacity(workload, reference)`` is the largest ``theta`` such that the arrival vector
``theta * mix`` satisfies the fluid flow LP:

* flow conservation at every admissible node-commodity pair, with expected successor rates:
  ``theta * mix + inflow + successors = outflow + service``;
* link capacities: ``sum_c f_e^c <= C_e``;
* compute capacities: ``sum_a s_a w(a) <= mu_i``, and at a node whose every work fits
  ``mu_i`` with some ``mu_i / w`` not whole, the hull of its one-slot whole-unit service
  vectors (:func:`mabp_gym.core.fluid.whole_unit_hull`: a slot serves whole units, so
  ``mu = 1.5`` carries one unit of work 1). A node with work above ``mu_i`` keeps the fluid
  row, an outer bound (its multi-slot units take their compute first).

``reference="full"`` evaluates every memory-assisted action as a hit (the all-hit system;
its value is ``lambda_ref``, the normalizer of ``load``); ``"nomem"`` evaluates every action
as a miss (the paper's ``Lambda_no-mem``). Both use the realized successor laws (with
transition noise), the laws the simulator samples. ``"occ"`` is the per-node relaxation of
the occupation-measure bound (paper Thm. 1, SPEC 9.1; :mod:`mabp_gym.core.occupation`), which
lies between the two.
"""

from __future__ import annotations

from typing import Literal

from mabp_gym.core.fluid import fluid_capacity
from mabp_gym.core.workload import Workload

REFERENCES = ("full", "nomem", "occ")


def capacity(
    workload: Workload | str, reference: Literal["full", "nomem", "occ"] = "full"
) -> float:
    """Fluid capacity in requests per slot (``inf`` if no resource binds).

    Args:
        workload: the network, or a workload's name or file (its defaults).
        reference: ``"full"`` (every memory-assisted action a hit), ``"nomem"``
            (every action a miss) or ``"occ"`` (the occupation-measure relaxation, see
            :func:`mabp_gym.core.occupation.occupation_bound`).

    Returns:
        The largest total arrival rate the fluid network carries with the workload's mix.
    """
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if isinstance(workload, str):
        from mabp_gym.core.workloads import make_workload

        workload = make_workload(workload)
    if not isinstance(workload, Workload):
        raise ValueError(
            f"workload must be a Workload or a workload's name, got {type(workload).__name__}"
        )
    if reference == "occ":
        from mabp_gym.core.occupation import occupation_bound

        return occupation_bound(workload, exact=False)
    return fluid_capacity(workload.index, hit=reference == "full", name=workload.name)
