"""Routers for fleet mode: the paper's baselines, five production rules and MABP-Route.

Every router is a small object with ``reset(num_workers, rng)`` and
``choose(request, telemetry) -> worker`` that an asynchronous dispatcher could call as is.
Production rules reimplement the rule (not the code) of the file their docstring cites; they
keep their own approximate indexes where the real router does (SGLang, llm-d, vLLM
production-stack, AIBrix learn which worker saw which prefix from their own routing history),
and read the engines' cache through ``Telemetry.cached_blocks`` where the real router
subscribes to KV events (Dynamo). Block hashes stand in for tokens and prompt text.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mabp_gym.fleet.simulator import Request, Telemetry, leading_hits


def _argmin_random(values: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the minimum, ties broken uniformly at random."""
    best = np.flatnonzero(values == values.min())
    return int(best[0]) if len(best) == 1 else int(rng.choice(best))


class _RouterBase:
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


class PrefixIndex:
    """A router-side approximate prefix index: per worker, block hash -> last-use time.

    Because block hashes are prefix-chained, a radix tree over them reduces to one set per
    worker whose leading-run length is the prefix match. ``born`` keeps, per worker, when
    each block it holds was first inserted (the order of a tree node's tenants).
    """

    def __init__(self, num_workers: int) -> None:
        self.tables: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(num_workers)]
        self.born: list[dict[int, float]] = [{} for _ in range(num_workers)]

    def matches(self, hash_ids: Sequence[int]) -> np.ndarray:
        """Leading matched blocks per worker.  # (W,) int64"""
        return np.array([leading_hits(t, hash_ids) for t in self.tables], dtype=np.int64)

    def first_tenant(self, workers: Sequence[int] | np.ndarray, block: int) -> int:
        """Of ``workers`` (each holding ``block``), the one that inserted it first (ties to
        the lower index)."""
        return int(min(workers, key=lambda w: (self.born[w].get(block, math.inf), w)))

    def insert(
        self, worker: int, hash_ids: Sequence[int], now: float, capacity: int | None = None
    ) -> None:
        """Record that ``worker`` saw the prompt; with ``capacity``, evict LRU entries now."""
        table, born = self.tables[worker], self.born[worker]
        for block in reversed(hash_ids):
            if block not in table:
                born[block] = now
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


# -- the paper's baselines ---------------------------------------------------------------------
class JSQ(_RouterBase):
    """Join the shortest queue: fewest requests in flight from this dispatcher (ties random)."""

    name = "jsq"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        return _argmin_random(telemetry.in_flight, self.rng)


class BP(_RouterBase):
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


class PrefixAffinity(_RouterBase):
    """Prefix affinity (locality first): the longest cached prefix wins, whatever the load;
    ties (including no match anywhere) go to the fewest requests in flight."""

    name = "affinity"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        hits = telemetry.cached_blocks(request.hash_ids)
        best = np.flatnonzero(hits == hits.max())
        load = telemetry.in_flight[best]
        return int(best[_argmin_random(load, self.rng)])


# -- production rules (each read from the upstream file its docstring cites) --------------------
CHARS_PER_TOKEN = 4
"""Characters per token where an upstream index counts characters (SGLang's tree, AIBrix's
blocks) and ours counts blocks of tokens."""


@dataclass(frozen=True)
class SGLangPreset:
    """Defaults of SGLang's cache-aware policy."""

    cache_threshold: float
    balance_abs_threshold: float
    balance_rel_threshold: float
    eviction_interval_s: float
    max_tree_size: int  # characters, as SGLang counts them


SGLANG_PRESETS = {
    # router_args.py (the Python CLI; the Rust command line uses the same values): deployed.
    "deployed": SGLangPreset(0.3, 64, 1.5, 60.0, 2**26),
    # CacheAwareConfig::default() in sgl-model-gateway/src/policies/mod.rs: a library
    # default that few deploy, kept as a labelled ablation.
    "lib-default": SGLangPreset(0.5, 32, 1.1, 30.0, 10_000),
}


class SGLangCacheAware(_RouterBase):
    """SGLang model gateway ``cache_aware`` policy.

    Source: sgl-project/sglang ``sgl-model-gateway/src/policies/cache_aware.rs`` (defaults in
    ``sgl-model-gateway/src/policies/mod.rs`` and ``router_args.py``; older tree
    ``sgl-router/src/policies/cache_aware.rs``). Load = requests in flight from the gateway.
    If ``max - min > balance_abs`` and ``max > balance_rel * min`` the least-loaded worker
    wins. Otherwise the worker whose approximate tree has the longest prefix match wins if
    ``match / prompt > cache_threshold``, else the least-loaded one; a tie at the deepest
    matched node goes to that node's first tenant (the worker that inserted it first), not
    the least-loaded one. The prompt is inserted into the chosen worker's tree; every
    ``eviction_interval`` the trees are cut (LRU) to ``max_tree_size`` characters, here
    ``max_tree_size / (CHARS_PER_TOKEN * block_tokens)`` blocks (at least one). Upstream
    counts the match in characters; here in blocks (the same ratio for whole blocks).

    Presets: ``deployed`` (the CLI defaults deployments run; the ``sglang`` router) and
    ``lib-default`` (the library's ``CacheAwareConfig::default()``; ``sglang-lib-default``,
    an ablation).
    """

    def __init__(self, preset: str = "deployed") -> None:
        super().__init__()
        if preset not in SGLANG_PRESETS:
            raise ValueError(
                f"unknown SGLang preset {preset!r}; choose one of {sorted(SGLANG_PRESETS)}"
            )
        self.preset = SGLANG_PRESETS[preset]
        self.name = "sglang" if preset == "deployed" else f"sglang-{preset}"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)
        self.next_eviction = self.preset.eviction_interval_s

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        p = self.preset
        now = telemetry.now
        if now >= self.next_eviction:
            cap = max(1, p.max_tree_size // (CHARS_PER_TOKEN * telemetry.config.block_tokens))
            for w in range(self.num_workers):
                self.index.evict(w, cap)
            self.next_eviction = now + p.eviction_interval_s
        load = telemetry.in_flight
        low, high = int(load.min()), int(load.max())
        ids = request.hash_ids
        if high - low > p.balance_abs_threshold and high > p.balance_rel_threshold * low:
            worker = _argmin_random(load, self.rng)
        else:
            matches = self.index.matches(ids)
            top = int(matches.max())
            if top / len(ids) > p.cache_threshold:
                worker = self.index.first_tenant(np.flatnonzero(matches == top), ids[top - 1])
            else:
                worker = _argmin_random(load, self.rng)
        self.index.insert(worker, ids, now)
        return worker


class DynamoKV(_RouterBase):
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
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self.temperature = temperature
        self.weight = overlap_score_weight
        self.kv_events = kv_events
        self.ttl_s = ttl_s
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
            worker = _argmin_random(cost, self.rng)
        else:
            span = cost.max() - cost.min()
            norm = (cost - cost.min()) / span if span > 0 else np.zeros_like(cost)
            weights = np.exp(-norm / self.temperature)
            worker = int(self.rng.choice(len(cost), p=weights / weights.sum()))
        self.streams.add(request.rid, worker, request.hash_ids, int(self._new_tokens[worker]))
        if not self.kv_events:
            self.index.insert(worker, request.hash_ids, telemetry.now)
        return worker


LLMD_PREFIX_TOKENS = 4096
"""llm-d's prefix scorer hashes the first 256 blocks of 16 tokens; longer prompts are cut."""


class LLMD(_RouterBase):
    """llm-d inference scheduler: weighted scorers, the highest total wins (ties random).

        Sources: kubernetes-sigs/gateway-api-inference-extension
        ``pkg/epp/scheduling/framework/plugins/multi/prefix/plugin.go`` (prefix-cache scorer:
        matched blocks / prompt blocks over the first 4,096 tokens, here
        ``LLMD_PREFIX_TOKENS // block_tokens`` blocks, from the scheduler's own LRU index of which
        server saw which block; its size per server is the engine's own block count, the
        auto-tuned default, or ``lru_blocks_per_server``: the fixed default is 31,250 blocks of
        16 tokens, 976 of 512), ``.../scorer/queue.go`` (``(q_max - q) / (q_max - q_min)``, 1
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
    ) -> None:
        super().__init__()
        self.weights = (prefix_weight, queue_weight, kv_weight, load_aware_weight)
        if lru_blocks_per_server is not None and lru_blocks_per_server < 1:
            raise ValueError(f"lru_blocks_per_server must be >= 1, got {lru_blocks_per_server}")
        self.capacity = lru_blocks_per_server

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)

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
        worker = _argmin_random(-self.scores(request, telemetry), self.rng)
        capacity = self.capacity or telemetry.config.cache_blocks
        ids = self.window(request.hash_ids, telemetry.config.block_tokens)
        self.index.insert(worker, ids, telemetry.now, capacity)
        return worker


class VLLMProductionStack(_RouterBase):
    """vLLM production-stack router, ``prefixaware`` or ``loadaware``.

    Source: vllm-project/production-stack ``src/vllm_router/routers/routing_logic.py`` (the
    load-aware rule from pull request 1035). ``prefixaware``: longest match in the router's
    hash trie of prompt chunks, random among the workers with that match (all workers when
    nothing matches), then insert. ``loadaware``: highest
    ``matched / prompt - beta * (load - mean_load) / max(1, mean_load)``, ``beta = 1``,
    load = requests in flight, ``matched`` from the engines' own KV caches (the LMCache
    controller: ``Telemetry.cached_blocks``); ties to the first worker (the lexicographically
    first URL); when no worker holds any of the prefix, the lowest request rate (requests
    routed per second over the last ``window_s``, the router's 60 s request statistics).
    """

    def __init__(self, mode: str = "prefixaware", beta: float = 1.0, window_s: float = 60.0):
        super().__init__()
        if mode not in ("prefixaware", "loadaware"):
            raise ValueError(f"mode must be 'prefixaware' or 'loadaware', got {mode!r}")
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.mode = mode
        self.beta = beta
        self.window_s = window_s
        self.name = f"vllm-{mode}"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)
        self.rate = RequestRate(num_workers, self.window_s)

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        now = telemetry.now
        if self.mode == "prefixaware":
            matches = self.index.matches(request.hash_ids)
            best = np.flatnonzero(matches == matches.max())
            worker = int(self.rng.choice(best)) if len(best) > 1 else int(best[0])
            self.index.insert(worker, request.hash_ids, now)
        else:
            matches = telemetry.cached_blocks(request.hash_ids)
            if not matches.any():
                worker = int(np.argmin(self.rate.qps(now)))
            else:
                load = telemetry.in_flight.astype(np.float64)
                mean = load.mean()
                score = matches / len(request.hash_ids) - self.beta * (load - mean) / max(1.0, mean)
                worker = int(np.argmax(score))
        self.rate.record(worker, now)
        return worker


AIBRIX_INDEX_BLOCKS = 200_000
"""AIBrix's global prefix index: 200,000 blocks of 4 characters."""
AIBRIX_BLOCK_CHARS = 4


class AIBrixPrefixCache(_RouterBase):
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
        self.imbalance_abs = imbalance_abs
        self.std_factor = std_factor
        self.ttl_s = ttl_s

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
        worker = int(fits[0]) if len(fits) else _argmin_random(load, self.rng)
        self.index.insert(worker, request.hash_ids, telemetry.now)
        return worker


# -- the upper reference ------------------------------------------------------------------------
class OracleTTFT(_RouterBase):
    """``oracle-ttft``: the greedy earliest-first-token rule on the exact engine state, an
    upper reference and not a router anyone can run.

    It picks ``argmin(prefill backlog + prefill of the uncached tokens)``, the simulator's
    own TTFT equation fed with the engines' exact prefill backlog (``prefill_free``) and
    exact caches, which no production router sees; ties go to the fewest in flight.
    """

    name = "oracle-ttft"

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        cfg = telemetry.config
        exact = telemetry.exact
        cached = np.minimum(
            exact.cached_blocks(request.hash_ids) * cfg.block_tokens, request.input_length
        )
        cost = exact.prefill_backlog_s() + cfg.prefill_s(request.input_length - cached)
        best = np.flatnonzero(cost <= cost.min() + 1e-12)
        if len(best) == 1:
            return int(best[0])
        return int(best[_argmin_random(telemetry.in_flight[best], self.rng)])


# -- MABP-Route --------------------------------------------------------------------------------
class MABPRoute(_RouterBase):
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
    - ``damping_w``: ``damping * (busy_w / max_running)^2 * prefill(r)``, ``busy_w`` the
      router's in-flight count capped at the batch limit, grows as a worker nears its batch
      limit, so reuse never piles requests onto a saturated worker.

    Ties go to the fewest requests in flight. ``exact=True`` (``mabp-route-exact``, a
    labelled reference) reads the engines' exact prefill backlog, batch occupancy, waiting
    queues and tool caches instead: what the estimate costs.
    """

    name = "mabp-route"

    def __init__(self, tool_weight: float = 1.0, damping: float = 1.0, exact: bool = False):
        super().__init__()
        self.tool_weight = tool_weight
        self.damping = damping
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
        exact = telemetry.exact
        hits = (exact if self.exact else telemetry).cached_blocks(request.hash_ids)
        cached = np.minimum(hits * cfg.block_tokens, request.input_length)
        prefill = cfg.prefill_s(request.input_length - cached)
        self._prefill = prefill
        if self.exact:
            backlog = exact.prefill_backlog_s()
            excess = (exact.running >= cfg.max_running) * exact.waiting
            busy = exact.running
        else:
            backlog = self._estimated_backlog(telemetry.now)
            excess = np.maximum(telemetry.in_flight - cfg.max_running, 0)
            busy = np.minimum(telemetry.in_flight, cfg.max_running)
        cost = backlog + excess * self.mean_prefill + prefill
        if request.tool_key >= 0 and not request.downstream:
            gap = max(cfg.p_downstream_miss - cfg.p_downstream_hit, 0.0)
            job = cfg.prefill_s(cfg.tool_tokens + request.output_length) + (
                cfg.downstream_output * cfg.decode_base_s
            )
            if self.exact:
                held = exact.tool_cached(request.tool_key)
            else:
                held = np.array([request.tool_key in t for t in self.tools], dtype=bool)
            cost = cost + self.tool_weight * gap * job * ~held
        fill = busy / cfg.max_running
        return cost + self.damping * fill * fill * full

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        cost = self.costs(request, telemetry)
        best = np.flatnonzero(cost <= cost.min() + 1e-12)
        if len(best) == 1:
            worker = int(best[0])
        else:
            worker = int(best[_argmin_random(telemetry.in_flight[best], self.rng)])
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


ROUTERS: dict[str, Callable[[], Any]] = {
    "jsq": JSQ,
    "bp": BP,
    "affinity": PrefixAffinity,
    "sglang": lambda: SGLangCacheAware("deployed"),
    "sglang-lib-default": lambda: SGLangCacheAware("lib-default"),
    "dynamo-t0": lambda: DynamoKV(0.0),
    "dynamo-t0.5": lambda: DynamoKV(0.5),
    "dynamo-t0-approx": lambda: DynamoKV(0.0, kv_events=False),
    "llm-d": LLMD,
    "vllm-prefixaware": lambda: VLLMProductionStack("prefixaware"),
    "vllm-loadaware": lambda: VLLMProductionStack("loadaware"),
    "aibrix": AIBrixPrefixCache,
    "mabp-route": MABPRoute,
    "mabp-route-exact": lambda: MABPRoute(exact=True),
    "oracle-ttft": OracleTTFT,
}
"""Every router by name; ``make_router(name)`` builds a fresh one."""

PRODUCTION_ROUTERS = (
    "sglang",
    "dynamo-t0",
    "dynamo-t0.5",
    "dynamo-t0-approx",
    "llm-d",
    "vllm-prefixaware",
    "vllm-loadaware",
    "aibrix",
)


ABLATION_ROUTERS = ("sglang-lib-default",)
"""Rules kept for comparison, not production rows: SGLang's library default."""
REFERENCE_ROUTERS = ("oracle-ttft", "mabp-route-exact")
"""References on the exact engine state, which no deployable router sees."""


def make_router(name: str) -> Any:
    """A fresh router by name (see ``ROUTERS``)."""
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; choose from {sorted(ROUTERS)}")
    return ROUTERS[name]()
