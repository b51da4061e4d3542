"""The paper's baselines as routers: JSQ, BP and prefix affinity."""

from __future__ import annotations

import numpy as np

from mabp_gym.fleet.routers.base import (
    RouterBase,
    StreamView,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry


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
