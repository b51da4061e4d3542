"""AIBrix's prefix-cache router."""

from __future__ import annotations

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.fleet.routers.base import (
    CHARS_PER_TOKEN,
    GlobalPrefixIndex,
    RouterBase,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry

AIBRIX_INDEX_BLOCKS = 200_000
"""AIBrix's global prefix index: 200,000 blocks of 4 characters."""
AIBRIX_BLOCK_CHARS = 4


class AIBrixPrefixCache(RouterBase):
    """AIBrix ``prefix-cache`` routing.

    Source: vllm-project/aibrix ``pkg/plugins/gateway/algorithms/prefix_cache.go``
    (``getTargetPodListOnLoadImbalance``; index in ``pkg/utils/prefixcacheindexer/hash.go``).
    Load = requests in flight. Load gate: if ``max - min > 8`` (strictly) only the
    least-loaded workers are eligible. Among eligible workers sort by prefix-match
    percentage (descending) then load (ascending), ties at random, and take the first whose
    load is at most ``mean + 1 * std``; if none, the least-loaded. The index is one global
    LRU of 200,000 blocks of 4 characters (here ``200,000 * 4 / (CHARS_PER_TOKEN *
    block_tokens)`` blocks: 390 of 512 tokens) whose entries live 20 minutes.
    (AIBrix sorts only the workers with a match > 0 and falls back to the least-loaded one;
    the least-loaded worker always passes the bound, so both orders choose the same.)
    """

    name = "aibrix"

    def __init__(
        self, imbalance_abs: int = 8, std_factor: float = 1.0, ttl_s: float = 1200.0
    ) -> None:
        super().__init__()
        self.imbalance_abs = check_number(
            imbalance_abs, "aibrix imbalance_abs", low=0, integer=True
        )
        self.std_factor = check_number(std_factor, "aibrix std_factor", low=0)
        self.ttl_s = check_number(ttl_s, "aibrix ttl_s", low=0, low_open=True, infinite=True)

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index: GlobalPrefixIndex | None = None

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        if self.index is None:
            chars = CHARS_PER_TOKEN * telemetry.config.block_tokens
            capacity = max(1, AIBRIX_INDEX_BLOCKS * AIBRIX_BLOCK_CHARS // chars)
            self.index = GlobalPrefixIndex(capacity, self.ttl_s)
        load = telemetry.in_flight
        mean, std = float(load.mean()), float(load.std())
        low, high = int(load.min()), int(load.max())
        if high - low > self.imbalance_abs:
            eligible = np.flatnonzero(load == low)
        else:
            eligible = np.arange(self.num_workers)
        # Shuffled first, then a stable sort: equal (match, load) pairs are broken at random.
        eligible = self.rng.permutation(eligible)
        matches = self.index.matches(request.hash_ids, self.num_workers, telemetry.now)
        percent = matches[eligible] / len(request.hash_ids)
        order = eligible[np.lexsort((load[eligible], -percent))]
        fits = order[load[order] <= mean + self.std_factor * std]
        worker = int(fits[0]) if len(fits) else argmin_random(load, self.rng)
        self.index.insert(worker, request.hash_ids, telemetry.now)
        return worker
