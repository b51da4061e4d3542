"""Vidur's least-outstanding-requests global scheduler (``lor``)."""

from __future__ import annotations

import numpy as np

from mabp_gym.fleet.routers.base import RouterBase
from mabp_gym.fleet.simulator import Request, Telemetry


class LeastOutstandingRequests(RouterBase):
    """Vidur's ``lor``: the worker with the fewest requests waiting in its engine's queue,
    ties to the lowest index.

    Vidur (microsoft/vidur: ``vidur/scheduler/global_scheduler/lor_global_scheduler.py``)
    reads each replica scheduler's ``num_pending_requests``, the length of its request
    queue (requests not yet running), and takes the minimum (the first replica among
    equals). Here the queue lengths are the engines' ``num_requests_waiting`` as last
    scraped (``Telemetry.scraped``), as a deployed router would read them; running requests
    do not count, so a worker with a full batch and an empty queue looks idle.
    """

    name = "lor"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        return int(np.argmin(telemetry.scraped.waiting))
