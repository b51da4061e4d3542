"""What a learned router observes (``mabp_gym/Fleet-v1``): router-side and bounded.

Every feature is something a router process can know without reading the engines'
exact state: its own count of requests in flight per worker, its own estimate of the
prefill work it has sent each worker (drained at one second per second since, as
MABP-Route estimates it), the prefix blocks each engine's KV events say it holds (as old
as ``kv_event_delay_s``), and its own record of where it sent each tool state. Each is
squashed into ``[0, 1)`` by ``x / (1 + x)`` after scaling by a natural unit (the TTFT SLO
for seconds, the batch limit for counts), so the observation is bounded whatever the load.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from mabp_gym.fleet.simulator import Request, Telemetry

WORKER_FEATURES = ("backlog", "prefill", "cached", "in_flight", "tool_held")
"""Per worker, in order: the router's estimate of the prefill seconds ahead of the request
and the request's own uncached prefill seconds (both over the TTFT SLO), the cached
fraction of its prompt (KV events), requests in flight over the batch limit, whether the
router last sent the request's tool state there."""
REQUEST_FEATURES = ("prompt", "output", "agentic", "downstream")
"""The request's prompt tokens over 4,096, output tokens over 1,000 (both squashed),
whether it carries a tool state, whether it is a downstream job."""


def squash(x: np.ndarray | float) -> np.ndarray:
    """``x / (1 + x)`` for ``x >= 0``: ``[0, inf)`` onto ``[0, 1)``."""
    x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    return x / (1.0 + x)


class RouterFeatures:
    """The router-side state behind the observation, updated as requests are routed."""

    def __init__(self, num_workers: int) -> None:
        self.backlog = np.zeros(num_workers)  # estimated prefill seconds at ``stamp``
        self.stamp = 0.0
        self.tools: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_workers)]
        self._prefill = np.zeros(num_workers)

    def observe(self, request: Request, telemetry: Telemetry) -> tuple[np.ndarray, np.ndarray]:
        """``(workers (W, 5), request (4,))`` for routing ``request`` now, in ``[0, 1]``."""
        cfg = telemetry.config
        now = telemetry.now
        self.backlog = np.maximum(self.backlog - (now - self.stamp), 0.0)
        self.stamp = now
        blocks = max(len(request.hash_ids), 1)
        hits = telemetry.cached_blocks(request.hash_ids)
        cached = np.minimum(hits * cfg.block_tokens, request.input_length)
        self._prefill = np.asarray(cfg.prefill_s(request.input_length - cached), dtype=float)
        if request.tool_key >= 0:
            held = np.array([request.tool_key in t for t in self.tools], dtype=float)
        else:
            held = np.zeros(telemetry.num_workers)
        slo = cfg.slo_ttft_s
        workers = np.stack(
            [
                squash(self.backlog / slo),
                squash(self._prefill / slo),
                hits / blocks,
                squash(telemetry.in_flight / cfg.max_num_seqs),
                held,
            ],
            axis=1,
        )
        own = np.array(
            [
                float(squash(request.input_length / 4096.0)),
                float(squash(request.output_length / 1000.0)),
                float(request.tool_key >= 0),
                float(request.downstream),
            ]
        )
        return workers, own

    def routed(self, request: Request, worker: int, tool_capacity: int) -> None:
        """Fold the decision just made into the router's own record."""
        self.backlog[worker] += self._prefill[worker]
        if request.tool_key >= 0 and not request.downstream:
            tools = self.tools[worker]
            tools[request.tool_key] = None
            tools.move_to_end(request.tool_key)
            while len(tools) > tool_capacity:
                tools.popitem(last=False)
