"""MABP-Route: the paper's routing-only MABP on the telemetry a router has."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.fleet.routers.base import (
    RouterBase,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry


class MABPRoute(RouterBase):
    """MABP-Route: queue pressure + prefix/KV reuse + downstream tool-state reuse + overload
    damping (the paper's routing-only MABP, section VI-C), all in seconds of GPU delay, on
    the telemetry a router has.

    Cost of worker ``w`` for request ``r``:

    ``pressure_w + prefill_w(r) + p_gap * E[job] * [tool state of r not on w] + damping_w``

    - ``pressure_w``: seconds before ``r``'s prefill could start there, estimated by the
      router: the prefill seconds of what it sent ``w`` (uncached tokens at routing time),
      drained at one second per second since (the work must have been served at that rate
      at best), plus, when ``w`` holds more requests in flight than its batch limit, the
      excess times the fleet's mean request prefill (the backpressure weight);
    - ``prefill_w(r)``: prefill seconds of ``r``'s blocks *not* cached on ``w`` (KV events,
      as Dynamo's router reads them) — the reuse credit, the paper's work term;
    - the successor term: a miss on the tool state raises the odds of a downstream job by
      ``p_gap = p_miss - p_hit``, each costing about ``E[job]`` seconds of prefill and decode;
      which worker holds a tool state is the router's own record of where it sent that
      state's requests (an LRU of ``tool_capacity`` keys a worker);
    - ``damping_w``: ``damping * (busy_w / max_num_seqs)^2 * prefill(r)``, ``prefill(r)``
      the full prefill of r's prompt (not the uncached ``prefill_w(r)``), ``busy_w`` the
      router's in-flight count capped at the batch limit, grows as a worker nears its batch
      limit, so reuse never piles requests onto a saturated worker.

    Ties go to the fewest requests in flight. ``exact=True`` (``mabp-route-exact``, a
    labelled reference) reads the engines' exact prefill backlog, batch occupancy, waiting
    queues and tool caches instead: what the estimate costs.
    """

    name = "mabp-route"

    def __init__(self, tool_weight: float = 1.0, damping: float = 1.0, exact: bool = False):
        super().__init__()
        self.tool_weight = check_number(tool_weight, "mabp-route tool_weight", low=0)
        self.damping = check_number(damping, "mabp-route damping", low=0)
        self.exact = exact
        if exact:
            self.name = "mabp-route-exact"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.mean_prefill = 0.0
        self.seen = 0
        self.backlog = np.zeros(num_workers)  # estimated prefill seconds at self.stamp
        self.stamp = 0.0
        self.tools: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_workers)]
        self._prefill = np.zeros(num_workers)

    def _estimated_backlog(self, now: float) -> np.ndarray:
        self.backlog = np.maximum(self.backlog - (now - self.stamp), 0.0)
        self.stamp = now
        return self.backlog

    def costs(self, request: Request, telemetry: Telemetry) -> np.ndarray:
        """The cost per worker (seconds).  # (W,) float64

        Also folds the request into the running mean prefill used to price waiting requests.
        """
        cfg = telemetry.config
        full = cfg.prefill_s(request.input_length)
        self.seen += 1
        self.mean_prefill += (full - self.mean_prefill) / self.seen
        # Only the labelled reference reads the engines' exact state.
        exact = telemetry.exact if self.exact else None
        hits = (exact or telemetry).cached_blocks(request.hash_ids)
        cached = np.minimum(hits * cfg.block_tokens, request.input_length)
        prefill = cfg.prefill_s(request.input_length - cached)
        self._prefill = prefill
        if exact is not None:
            backlog = exact.prefill_backlog_s()
            excess = (exact.running >= cfg.max_num_seqs) * exact.waiting
            busy = exact.running
        else:
            backlog = self._estimated_backlog(telemetry.now)
            excess = np.maximum(telemetry.in_flight - cfg.max_num_seqs, 0)
            busy = np.minimum(telemetry.in_flight, cfg.max_num_seqs)
        cost = backlog + excess * self.mean_prefill + prefill
        if request.tool_key >= 0 and not request.downstream:
            gap = max(cfg.p_downstream_miss - cfg.p_downstream_hit, 0.0)
            job = cfg.prefill_s(cfg.tool_tokens + request.output_length) + (
                cfg.downstream_output * cfg.decode_base_s
            )
            if exact is not None:
                held = exact.tool_cached(request.tool_key)
            else:
                held = np.array([request.tool_key in t for t in self.tools], dtype=bool)
            cost = cost + self.tool_weight * gap * job * ~held
        fill = busy / cfg.max_num_seqs
        return cost + self.damping * fill * fill * full

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        cost = self.costs(request, telemetry)
        best = np.flatnonzero(cost <= cost.min() + 1e-12)
        if len(best) == 1:
            worker = int(best[0])
        else:
            worker = int(best[argmin_random(telemetry.in_flight[best], self.rng)])
        if not self.exact:
            self.backlog[worker] += self._prefill[worker]
            if request.tool_key >= 0 and not request.downstream:
                # As the engine does: a request's tool step installs its state where it
                # ran; a downstream job (the tool call's follow-up) installs none.
                tools = self.tools[worker]
                tools[request.tool_key] = None
                tools.move_to_end(request.tool_key)
                if len(tools) > telemetry.config.tool_capacity:
                    tools.popitem(last=False)
        return worker
