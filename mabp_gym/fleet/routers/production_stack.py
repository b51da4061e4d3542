"""vLLM production-stack's routers (prefix-aware and load-aware)."""

from __future__ import annotations

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.fleet.routers.base import (
    PrefixIndex,
    RequestRate,
    RouterBase,
)
from mabp_gym.fleet.simulator import Request, Telemetry


class VLLMProductionStack(RouterBase):
    """vLLM production-stack router, ``prefixaware`` or ``loadaware``.

    Source: vllm-project/production-stack ``src/vllm_router/routers/routing_logic.py`` (the
    load-aware rule from pull request 1035). ``prefixaware``: longest match in the router's
    hash trie of prompt chunks, random among the workers with that match (all workers when
    nothing matches), then insert. ``loadaware``: highest
    ``matched / prompt - beta * (load - mean_load) / max(1, mean_load)``, ``beta = 1``,
    load = the router's own count of requests in flight (its ``request_stats``, recomputed a
    request, as pull request 1035 describes it), ``matched`` from the engines' own KV caches
    (the LMCache controller: ``Telemetry.cached_blocks``); ties to the first worker (the
    lexicographically first URL); when no worker holds any of the prefix, the lowest request
    rate (requests routed per second over the last ``window_s``, the router's 60 s request
    statistics).
    """

    def __init__(self, mode: str = "prefixaware", beta: float = 1.0, window_s: float = 60.0):
        super().__init__()
        if mode not in ("prefixaware", "loadaware"):
            raise ValueError(f"mode must be 'prefixaware' or 'loadaware', got {mode!r}")
        self.mode = mode
        self.beta = check_number(beta, f"vllm-{mode} beta", low=0)
        self.window_s = check_number(window_s, f"vllm-{mode} window_s", low=0, low_open=True)
        self.name = f"vllm-{mode}"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)
        self.rate = RequestRate(num_workers, self.window_s)

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        now = telemetry.now
        if self.mode == "prefixaware":
            matches = self.index.matches(request.hash_ids)
            best = np.flatnonzero(matches == matches.max())
            worker = int(self.rng.choice(best)) if len(best) > 1 else int(best[0])
            self.index.insert(worker, request.hash_ids, now)
        else:
            matches = telemetry.cached_blocks(request.hash_ids)
            if not matches.any():
                worker = int(np.argmin(self.rate.qps(now)))
            else:
                load = telemetry.in_flight.astype(np.float64)
                mean = load.mean()
                score = matches / len(request.hash_ids) - self.beta * (load - mean) / max(1.0, mean)
                worker = int(np.argmax(score))
        self.rate.record(worker, now)
        return worker
