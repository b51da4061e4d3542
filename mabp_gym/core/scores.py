"""A fixed, memory-oblivious score rule: the queue-length policy used by benchmarks and tests.

It is not one of the paper's agents (those live in ``agents``); it exists so that the core
can be exercised and measured without them.
"""

from __future__ import annotations

import numpy as np

from mabp_gym.core.state import SimState
from mabp_gym.core.workload import Workload


def queue_length_scores(workload: Workload, state: SimState) -> np.ndarray:
    """Scores in ``[-1, 1]``: serve long queues, route down queue differentials, keep memory.

    Service candidates score their queue length, route candidates the differential
    ``Q_i^c - Q_j^c``, transfers are never made and every object is retained while it fits.
    """
    ix = workload.index
    queue = state.queue_len.astype(np.float64)
    service = queue[ix.action_pair]
    route = queue[ix.route_src_pair] - queue[ix.route_dst_pair]
    scale = 1.0 + max(float(queue.max(initial=0.0)), 0.0)
    return np.concatenate(
        [
            service / scale,
            route / scale,
            np.full(ix.num_transfers, -1.0),
            np.ones(ix.num_retains),
        ]
    )
