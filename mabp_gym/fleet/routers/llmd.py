"""llm-d's inference scheduler."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.fleet.routers.base import (
    PrefixIndex,
    RouterBase,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry

LLMD_PREFIX_TOKENS = 4096
"""llm-d's prefix scorer hashes the first 256 blocks of 16 tokens; longer prompts are cut."""


class LLMD(RouterBase):
    """llm-d inference scheduler: weighted scorers, the highest total wins (ties random).

        Sources: kubernetes-sigs/gateway-api-inference-extension
        ``pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go`` (prefix-cache scorer:
        matched blocks / prompt blocks over the first 4,096 tokens, here
        ``LLMD_PREFIX_TOKENS // block_tokens`` blocks, from the scheduler's own LRU index of which
        server saw which block; its size per server is the engine's own block count, the
        auto-tuned default, or ``lru_blocks_per_server`` blocks, or ``lru_tokens_per_server``
        tokens: the fixed default is 31,250 blocks of 16 tokens, 500,000 tokens, the
        ``llm-d-fixed-index`` preset), ``.../scorer/queue.go`` (``(q_max - q) / (q_max - q_min)``, 1
        when all equal; q = waiting requests), ``.../scorer/kvcache_utilization.go``
        (``1 - kv_used``), both metrics as the scheduler last scraped them from the engines
    (``Telemetry.scraped``, refreshed every 50 ms by default); weights of llm-d/llm-d
        ``guides/inference-scheduling/scheduler/inference-scheduling.values.yaml``: prefix 3,
        queue 2, kv-cache-utilization 2. The load-aware scorer of llm-d-inference-scheduler
        ``pkg/plugins/scorer/load_aware.go`` is ``load_aware_scorer`` (weight 0 in the guide).
    """

    name = "llm-d"

    def __init__(
        self,
        prefix_weight: float = 3.0,
        queue_weight: float = 2.0,
        kv_weight: float = 2.0,
        load_aware_weight: float = 0.0,
        lru_blocks_per_server: int | None = None,
        lru_tokens_per_server: int | None = None,
    ) -> None:
        super().__init__()
        self.weights = tuple(
            check_number(weight, f"llm-d {label}", low=0)
            for label, weight in (
                ("prefix_weight", prefix_weight),
                ("queue_weight", queue_weight),
                ("kv_weight", kv_weight),
                ("load_aware_weight", load_aware_weight),
            )
        )
        for label, size in (
            ("lru_blocks_per_server", lru_blocks_per_server),
            ("lru_tokens_per_server", lru_tokens_per_server),
        ):
            if size is not None:
                check_number(size, f"llm-d {label}", low=1, integer=True)
        if lru_blocks_per_server is not None and lru_tokens_per_server is not None:
            raise ValueError("give lru_blocks_per_server or lru_tokens_per_server, not both")
        self.capacity = lru_blocks_per_server
        self.capacity_tokens = lru_tokens_per_server

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)

    def index_blocks(self, block_tokens: int, cache_blocks: int) -> int:
        """Blocks a server's LRU index holds: as given, or the tokens given in the fleet's
        blocks (at least one), else the engine's own block count (auto-tuned)."""
        if self.capacity is not None:
            return self.capacity
        if self.capacity_tokens is not None:
            return max(1, self.capacity_tokens // block_tokens)
        return cache_blocks

    @staticmethod
    def queue_scorer(queue: np.ndarray) -> np.ndarray:
        """``(q_max - q) / (q_max - q_min)``; 1 when all are equal."""
        low, high = queue.min(), queue.max()
        if high == low:
            return np.ones(len(queue))
        return (high - queue) / (high - low)

    @staticmethod
    def load_aware_scorer(queue: np.ndarray) -> np.ndarray:
        """0.5 for an empty queue, else ``0.5 * (1 - min(q, 128) / 128)``."""
        return np.where(queue == 0, 0.5, 0.5 * (1.0 - np.minimum(queue, 128) / 128.0))

    @staticmethod
    def window(hash_ids: Sequence[int], block_tokens: int) -> Sequence[int]:
        """The blocks the prefix scorer hashes: those of the first 4,096 tokens."""
        return hash_ids[: max(1, LLMD_PREFIX_TOKENS // block_tokens)]

    def scores(self, request: Request, telemetry: Telemetry) -> np.ndarray:
        """The weighted score per worker.  # (W,) float64"""
        ids = self.window(request.hash_ids, telemetry.config.block_tokens)
        prefix = self.index.matches(ids) / len(ids)
        metrics = telemetry.scraped
        queue = metrics.waiting
        wp, wq, wk, wl = self.weights
        score = wp * prefix + wq * self.queue_scorer(queue)
        score = score + wk * (1.0 - metrics.kv_used_fraction())
        if wl:
            score = score + wl * self.load_aware_scorer(queue)
        return score

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        worker = argmin_random(-self.scores(request, telemetry), self.rng)
        capacity = self.index_blocks(telemetry.config.block_tokens, telemetry.config.cache_blocks)
        ids = self.window(request.hash_ids, telemetry.config.block_tokens)
        self.index.insert(worker, ids, telemetry.now, capacity)
        return worker
