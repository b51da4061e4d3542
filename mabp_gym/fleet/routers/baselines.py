"""The paper's baselines as routers (JSQ, BP, prefix affinity) and round-robin."""

from __future__ import annotations

import numpy as np

from mabp_gym.fleet.routers.base import (
    RouterBase,
    StreamView,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry


class RoundRobin(RouterBase):
    """Round-robin: the workers in turn, 0, 1, ..., W - 1, 0, ..., whatever their load.

    The default global scheduler of the reference simulators (Vidur's ``round_robin``:
    ``request counter % replicas``) and of vLLM production-stack's router
    (``roundrobin`` in ``src/vllm_router/routers/routing_logic.py``); it reads nothing, so
    it is the floor a load- or cache-aware rule must beat.
    """

    name = "round-robin"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.turn = 0

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        worker = self.turn
        self.turn = (worker + 1) % self.num_workers
        return worker


class JSQ(RouterBase):
    """Join the shortest queue: fewest requests in flight from this dispatcher (ties random)."""

    name = "jsq"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        return argmin_random(telemetry.in_flight, self.rng)


class BP(RouterBase):
    """Backpressure on queue pressure with a completion tie-break (the paper's BP), on what
    the router itself knows.

    Pressure of a worker = the prefill seconds of the requests the router sent it whose first
    token has not streamed back (their whole prompts: BP ignores caches), in units of this
    request's own prefill; among equal pressure, the worker with the fewest unique active
    prompt blocks (the one that completes work soonest) wins, ties at random. Both come from
    the router's record of what it routed and what streamed back (:class:`StreamView`),
    never from the engines' state.
    """

    name = "bp"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.streams = StreamView(num_workers)

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        cfg = telemetry.config
        streams = self.streams
        streams.sync(telemetry)
        queued = (
            cfg.prefill_overhead_s * streams.pending_requests
            + cfg.prefill_s_per_token * streams.pending_tokens
        )
        pressure = queued / cfg.prefill_s(request.input_length)
        best = np.flatnonzero(pressure <= pressure.min() + 1e-12)
        if len(best) > 1:
            blocks = np.array([len(streams.block_refs[w]) for w in best])
            best = best[blocks == blocks.min()]
        worker = int(best[0]) if len(best) == 1 else int(self.rng.choice(best))
        streams.add(request.rid, worker, request.hash_ids, request.input_length)
        return worker


class PrefixAffinity(RouterBase):
    """Prefix affinity (locality first): the longest cached prefix wins, whatever the load;
    ties (including no match anywhere) go to the fewest requests in flight."""

    name = "affinity"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        hits = telemetry.cached_blocks(request.hash_ids)
        best = np.flatnonzero(hits == hits.max())
        load = telemetry.in_flight[best]
        return int(best[argmin_random(load, self.rng)])
