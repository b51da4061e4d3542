"""The upper reference on the exact engine state (no deployable router sees it)."""

from __future__ import annotations

import numpy as np

from mabp_gym.fleet.routers.base import (
    RouterBase,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry


class OracleTTFT(RouterBase):
    """``oracle-ttft``: the greedy earliest-first-token rule on the exact engine state, an
    upper reference and not a router anyone can run.

    It picks ``argmin(prefill backlog + prefill of the uncached tokens)``, the simulator's
    own TTFT equation fed with the engines' exact prefill backlog (``prefill_free``) and
    exact caches, which no production router sees; ties go to the fewest in flight.
    """

    name = "oracle-ttft"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        cfg = telemetry.config
        exact = telemetry.exact
        cached = np.minimum(
            exact.cached_blocks(request.hash_ids) * cfg.block_tokens, request.input_length
        )
        cost = exact.prefill_backlog_s() + cfg.prefill_s(request.input_length - cached)
        best = np.flatnonzero(cost <= cost.min() + 1e-12)
        if len(best) == 1:
            return int(best[0])
        return int(best[argmin_random(telemetry.in_flight[best], self.rng)])
