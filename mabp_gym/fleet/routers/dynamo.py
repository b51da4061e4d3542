"""NVIDIA Dynamo's KV router."""

from __future__ import annotations

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.fleet.routers.base import (
    PrefixIndex,
    RouterBase,
    StreamView,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry


class DynamoKV(RouterBase):
    """NVIDIA Dynamo KV router, the documented cost.

    Source: ai-dynamo/dynamo ``docs/router/kv_cache_routing.md``,
    ``lib/kv-router/src/scheduling/selector.rs`` and ``sequence.rs``
    (``potential_blocks_and_tokens``), defaults in ``config.rs``. Cost of a worker =
    ``overlap_score_weight * prefill_blocks + decode_blocks`` (weight 1), where
    ``prefill_blocks = (pending_prefill_tokens_w + new_tokens) / block_size``: the tokens the
    router sent the worker that have not produced a first token yet, plus this request's
    uncached tokens; ``decode_blocks`` = the worker's unique active prompt blocks plus this
    request's blocks not among them, de-duplicated by hash (``router_assume_kv_reuse``);
    output blocks are not counted (``router_track_output_blocks = false``). Both are the
    router's own bookkeeping of what it routed and what streamed back (:class:`StreamView`).
    At temperature 0 the lowest cost wins (ties random); at ``T > 0`` costs are min-max
    normalized and sampled with probability ``exp(-cost / T)``. With ``kv_events`` (the
    default) the cached blocks come from the engines (``Telemetry.cached_blocks``); without,
    the router predicts each worker's cache from its own routing history, each block living
    ``ttl_s`` (120 s) after its last routing there. (The newer tiered credits, pending-token
    decay and active-request term are not modelled.)
    """

    def __init__(
        self,
        temperature: float = 0.0,
        overlap_score_weight: float = 1.0,
        kv_events: bool = True,
        ttl_s: float = 120.0,
    ) -> None:
        super().__init__()
        self.temperature = check_number(temperature, "dynamo temperature", low=0)
        self.weight = check_number(overlap_score_weight, "dynamo overlap_score_weight", low=0)
        self.kv_events = kv_events
        self.ttl_s = check_number(ttl_s, "dynamo ttl_s", low=0, low_open=True, infinite=True)
        self.name = f"dynamo-t{temperature:g}" + ("" if kv_events else "-approx")

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)
        self.streams = StreamView(num_workers)
        self._new_tokens = np.zeros(num_workers, dtype=np.int64)

    def costs(self, request: Request, telemetry: Telemetry) -> np.ndarray:
        """The documented cost per worker.  # (W,) float64"""
        self.streams.sync(telemetry)
        if self.kv_events:
            cached = telemetry.cached_blocks(request.hash_ids)
        else:
            for w in range(self.num_workers):
                self.index.expire(w, telemetry.now - self.ttl_s)
            cached = self.index.matches(request.hash_ids)
        size = telemetry.config.block_tokens
        self._new_tokens = np.maximum(request.input_length - cached * size, 0)
        prefill = (self.streams.pending_tokens + self._new_tokens) / size
        return self.weight * prefill + self.streams.blocks_with(request.hash_ids)

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        cost = self.costs(request, telemetry).astype(np.float64)
        if self.temperature == 0:
            worker = argmin_random(cost, self.rng)
        else:
            span = cost.max() - cost.min()
            norm = (cost - cost.min()) / span if span > 0 else np.zeros_like(cost)
            weights = np.exp(-norm / self.temperature)
            worker = int(self.rng.choice(len(cost), p=weights / weights.sum()))
        self.streams.add(request.rid, worker, request.hash_ids, int(self._new_tokens[worker]))
        if not self.kv_events:
            self.index.insert(worker, request.hash_ids, telemetry.now)
        return worker
