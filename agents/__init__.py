"""Scheduling policies for mabp-gym.

The paper's agents (SP, JSQ, BP, Cost-BP, GreedyCache-BP, MABP and its ablations,
Oracle-Sur, the GNN scheduler and Learn-MABP) are not implemented yet: ``POLICIES`` is
empty until they land. Every agent will produce scores for the shared projection
``mabp_gym.project``.
"""

from __future__ import annotations

POLICIES: tuple[str, ...] = ()
