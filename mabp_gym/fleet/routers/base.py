"""What every router shares: the base class, the router-side indexes a production rule
keeps of its own routing history, and the request-rate window."""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence

import numpy as np

from mabp_gym.fleet.simulator import Telemetry, leading_hits


def argmin_random(values: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the minimum, ties broken uniformly at random."""
    best = np.flatnonzero(values == values.min())
    return int(best[0]) if len(best) == 1 else int(rng.choice(best))


class RouterBase:
    name = "router"

    def __init__(self) -> None:
        self.num_workers = 0
        self.rng = np.random.default_rng(0)

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        """Forget all state; ``rng`` is the router's only randomness."""
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.rng = rng

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


CHARS_PER_TOKEN = 4
"""Characters per token where an upstream index counts characters (SGLang's tree, AIBrix's
blocks) and ours counts blocks of tokens."""


class PrefixIndex:
    """A router-side approximate prefix index: per worker, block hash -> last-use time.

    Because block hashes are prefix-chained, a radix tree over them reduces to one set per
    worker whose leading-run length is the prefix match. ``born`` keeps, per worker, the
    insertion number of each block it holds (the order of a tree node's tenants): a count,
    not the time, since several requests of a trace arrive at the same instant.
    """

    def __init__(self, num_workers: int) -> None:
        self.tables: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(num_workers)]
        self.born: list[dict[int, int]] = [{} for _ in range(num_workers)]
        self.inserted = 0  # blocks inserted so far, over every worker

    def matches(self, hash_ids: Sequence[int]) -> np.ndarray:
        """Leading matched blocks per worker.  # (W,) int64"""
        return np.array([leading_hits(t, hash_ids) for t in self.tables], dtype=np.int64)

    def first_tenant(self, workers: Sequence[int] | np.ndarray, block: int) -> int:
        """Of ``workers`` (each holding ``block``), the one that inserted it first."""
        return int(min(workers, key=lambda w: (self.born[w].get(block, math.inf), w)))

    def insert(
        self, worker: int, hash_ids: Sequence[int], now: float, capacity: int | None = None
    ) -> None:
        """Record that ``worker`` saw the prompt; with ``capacity``, evict LRU entries now."""
        table, born = self.tables[worker], self.born[worker]
        for block in reversed(hash_ids):
            if block not in table:
                born[block] = self.inserted
                self.inserted += 1
            table[block] = now
            table.move_to_end(block)
        if capacity is not None:
            self.evict(worker, capacity)

    def evict(self, worker: int, capacity: int) -> None:
        """Drop least-recently-used entries of ``worker`` down to ``capacity``."""
        table, born = self.tables[worker], self.born[worker]
        while len(table) > capacity:
            block, _ = table.popitem(last=False)
            born.pop(block, None)

    def expire(self, worker: int, before: float) -> None:
        """Drop entries of ``worker`` last used before ``before`` (a time-to-live)."""
        table, born = self.tables[worker], self.born[worker]
        while table and next(iter(table.values())) < before:
            block, _ = table.popitem(last=False)
            born.pop(block, None)


class GlobalPrefixIndex:
    """One router-wide LRU of blocks, each with the workers that saw it and when (AIBrix's
    ``prefixcacheindexer``): ``capacity`` blocks in all, entries older than ``ttl_s`` count
    as absent."""

    def __init__(self, capacity: int, ttl_s: float) -> None:
        self.capacity, self.ttl_s = capacity, ttl_s
        self.table: OrderedDict[int, dict[int, float]] = OrderedDict()

    def matches(self, hash_ids: Sequence[int], num_workers: int, now: float) -> np.ndarray:
        """Leading blocks of ``hash_ids`` each worker saw within the time-to-live.  # (W,)"""
        result = np.zeros(num_workers, dtype=np.int64)
        alive = np.ones(num_workers, dtype=bool)
        for block in hash_ids:
            seen = self.table.get(block)
            if seen is None:
                break
            for w in range(num_workers):
                if alive[w] and now - seen.get(w, -math.inf) <= self.ttl_s:
                    result[w] += 1
                else:
                    alive[w] = False
            if not alive.any():
                break
        return result

    def insert(self, worker: int, hash_ids: Sequence[int], now: float) -> None:
        for block in reversed(hash_ids):
            self.table.setdefault(block, {})[worker] = now
            self.table.move_to_end(block)
        while len(self.table) > self.capacity:
            self.table.popitem(last=False)


class StreamView:
    """What a router learns from the responses that stream back through it: per worker, its
    own in-flight requests (prompt blocks, and the uncached tokens it expected them to
    prefill until their first token arrives; -1 once it has). Never the engine's state."""

    def __init__(self, num_workers: int) -> None:
        self.where: dict[int, int] = {}
        self.active: list[dict[int, tuple[tuple[int, ...], int]]] = [{} for _ in range(num_workers)]
        self.block_refs: list[dict[int, int]] = [{} for _ in range(num_workers)]
        self.pending_tokens = np.zeros(num_workers, dtype=np.int64)
        self.pending_requests = np.zeros(num_workers, dtype=np.int64)
        """Per worker: requests routed there whose first token has not streamed back."""
        self._first = self._end = 0

    def sync(self, telemetry: Telemetry) -> None:
        """Read the first tokens and stream ends since the last call."""
        firsts, ends = telemetry.first_tokens, telemetry.ended
        for rid in firsts[self._first :]:
            w = self.where.get(rid)
            if w is not None and self.active[w][rid][1] >= 0:
                blocks, tokens = self.active[w][rid]
                self.pending_tokens[w] -= tokens
                self.pending_requests[w] -= 1
                self.active[w][rid] = (blocks, -1)
        self._first = len(firsts)
        for rid in ends[self._end :]:
            w = self.where.pop(rid, None)
            if w is None:
                continue
            blocks, tokens = self.active[w].pop(rid)
            if tokens >= 0:  # ended (dropped) before its first token
                self.pending_tokens[w] -= tokens
                self.pending_requests[w] -= 1
            refs = self.block_refs[w]
            for block in blocks:
                refs[block] -= 1
                if not refs[block]:
                    del refs[block]
        self._end = len(ends)

    def add(self, rid: int, worker: int, blocks: tuple[int, ...], tokens: int) -> None:
        self.where[rid] = worker
        self.active[worker][rid] = (blocks, tokens)
        self.pending_tokens[worker] += tokens
        self.pending_requests[worker] += 1
        refs = self.block_refs[worker]
        for block in blocks:
            refs[block] = refs.get(block, 0) + 1

    def blocks_with(self, hash_ids: Sequence[int]) -> np.ndarray:
        """Per worker: its unique active prompt blocks plus the request's blocks not among
        them (de-duplicated by hash).  # (W,) int64"""
        return np.array(
            [len(refs) + sum(1 for b in hash_ids if b not in refs) for refs in self.block_refs],
            dtype=np.int64,
        )


class RequestRate:
    """Requests routed to each worker per second over a sliding window (production-stack's
    request statistics, ``--request-stats-window`` 60 s)."""

    def __init__(self, num_workers: int, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self.times: list[deque[float]] = [deque() for _ in range(num_workers)]

    def record(self, worker: int, now: float) -> None:
        self.times[worker].append(now)

    def qps(self, now: float) -> np.ndarray:
        for times in self.times:
            while times and times[0] < now - self.window_s:
                times.popleft()
        return np.array([len(t) for t in self.times], dtype=np.float64) / self.window_s
