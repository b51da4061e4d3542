"""The fleet simulator: W LLM workers behind one dispatcher, in continuous time.

Events live on one heap (completions, downstream-job arrivals); trace arrivals are read in
order. Nothing is simulated token by token: a request's prefill end, first token and completion
times are fixed when it is admitted, so a replay costs O(requests x blocks) dictionary work.

Causal order of one request:
  1. it arrives; the router picks a worker from the telemetry (``Telemetry``);
  2. the worker drops it if ``max_waiting`` requests already wait, else queues it (FIFO);
  3. it is admitted when fewer than ``max_num_seqs`` requests run there (dropped instead when
     it waited longer than ``timeout_s``); the engine's LRU prefix cache is matched over the
     leading block hashes, then all its prompt blocks are touched (tail first, so the prefix
     is the most recent and is evicted last, as vLLM frees blocks in reverse order);
  4. prefill of the uncached tokens runs on the worker's single prefill server (FIFO), then
     decode of ``output_length`` tokens at a per-token step time fixed at admission from the
     batch size then (``decode_base_s + decode_per_seq_s * running``);
  5. at completion, an agentic request whose tool state (``tool_key``) is not in the worker's
     tool cache spawns a downstream tool/verifier job with probability ``p_downstream_miss``,
     else with ``p_downstream_hit`` (the paper's successor shaping); the tool state is then
     cached there (LRU of ``tool_capacity`` keys). The job arrives ``tool_latency_s`` later,
     extends the request's prompt by ``tool_tokens`` and is routed like any request.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, cast

import numpy as np

from mabp_gym.core.validate import check_number
from mabp_gym.fleet.engine import DEFAULT_PROFILE, MAX_BATCHED_TOKENS, PROFILES, StepEngine
from mabp_gym.fleet.engine import Sequence as EngineSequence
from mabp_gym.fleet.trace import BLOCK_TOKENS, Trace

MIN_SCRAPE_INTERVAL_S = 1e-3
"""The shortest scrape interval (1 ms; llm-d scrapes every 50 ms): each event copies the
scraped table, and a finer interval only costs time."""

ENGINES = ("simple", "step")
"""The worker engine models: ``simple`` (the first model, kept for comparison) and ``step``."""


MAX_WORKERS = 100_000
"""The largest fleet :class:`FleetConfig` takes (production fleets are thousands of GPUs)."""


@dataclass(frozen=True)
class FleetConfig:
    """Constants of the fleet; every one overridable (``FleetConfig(**overrides)``).

    The defaults model a 7B model on one 80 GB GPU per worker (Qwen2.5-7B, the paper's
    model): about 12.5k prefill tokens/s, a 12 ms decode step plus 0.4 ms per running sequence,
    and room for about 2,000 cached blocks of 512 tokens (1M tokens of KV).
    """

    num_workers: int = 4
    """Workers (GPUs, engines) behind the dispatcher."""
    cache_blocks: int = 2000
    """Prefix-cache capacity of each worker, in blocks."""
    block_tokens: int = BLOCK_TOKENS
    """Tokens per block: the block size the trace is hashed in (``Trace.block_tokens``; the
    Mooncake traces hash 512-token blocks); a simulator refuses a trace of another size, whose
    every hit it would miscount."""
    max_num_seqs: int = 32
    """Concurrency (batch) limit per worker, vLLM's ``max_num_seqs`` (its default is 256
    or more); more requests wait in the worker's FIFO queue."""
    max_num_batched_tokens: int = MAX_BATCHED_TOKENS
    """Step engine: tokens a step may compute, vLLM's ``max_num_batched_tokens`` (2,048
    with chunked prefill in vLLM 0.8)."""
    block_size: int = 0
    """Step engine: tokens a KV block holds, vLLM's ``block_size`` (its default is 16; 0
    here: ``block_tokens``); it must divide ``block_tokens``: a prefix-cache hit is still a
    whole trace block. The KV memory stays ``cache_blocks * block_tokens`` tokens."""
    enable_chunked_prefill: bool = True
    """Step engine: vLLM's ``enable_chunked_prefill``. Off, a step holds either prefills
    (whole prompts, before any decode) or decodes, as vLLM's scheduler without it."""
    max_waiting: int = 512
    """Waiting requests per worker beyond which an arriving request is dropped."""
    timeout_s: float = 180.0
    """A request that waited longer than this before admission is dropped (the paper: 180 s)."""
    prefill_s_per_token: float = 8e-5
    """Prefill seconds per uncached prompt token."""
    prefill_overhead_s: float = 0.005
    """Fixed prefill seconds per request (scheduling, the last token is always recomputed)."""
    decode_base_s: float = 0.012
    """Decode step time of a batch of one."""
    decode_per_seq_s: float = 0.0004
    """Extra decode step time per running sequence."""
    slo_ttft_s: float = 2.0
    """SLO on the time to first token."""
    slo_tpot_s: float = 0.1
    """SLO on the time per output token after the first."""
    agentic_fraction: float = 0.3
    """Fraction of trace requests that are agentic (carry a tool state), drawn per run."""
    tool_depth: int = 1
    """The tool state of a request is keyed by its block hash at this depth (its session);
    a prompt of fewer blocks is keyed by its last block, so a depth past most prompts makes
    nearly every request its own tool state."""
    tool_capacity: int = 64
    """Tool states each worker keeps (LRU)."""
    p_downstream_hit: float = 0.05
    """Probability of a downstream job when the tool state is cached on the serving worker."""
    p_downstream_miss: float = 0.35
    """Probability of a downstream job when it is not."""
    tool_latency_s: float = 0.5
    """Seconds the tool runs (off the GPU) before the downstream job arrives."""
    tool_tokens: int = 512
    """Prompt tokens the tool result adds to the downstream job."""
    downstream_output: int = 64
    """Output tokens of a downstream job."""
    kv_event_delay_s: float = 0.05
    """Age of the KV events a router sees: ``Telemetry.cached_blocks`` reports each engine's
    prefix cache as it was this long ago (0: exact and instantaneous)."""
    scrape_interval_s: float = 0.05
    """Interval of the scraper that reads each engine's waiting and running requests and KV
    utilization for the routers that read them (``Telemetry.scraped``; llm-d's endpoint
    picker refreshes every 50 ms): a router sees the values of the last multiple of this
    interval, up to one interval old (0: exact and instantaneous; else at least
    :data:`MIN_SCRAPE_INTERVAL_S`)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (np.integer, np.floating, np.bool_)):  # numpy numbers
                value = value.item()
                object.__setattr__(self, f.name, value)
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise TypeError(f"FleetConfig.{f.name} must be True or False, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"FleetConfig.{f.name} must be a number, got {value!r}")
            if f.type == "int" and not isinstance(value, int):
                raise TypeError(f"FleetConfig.{f.name} must be an integer, got {value!r}")
            if f.type == "float" and isinstance(value, int):  # 180 is 180.0: one run key
                object.__setattr__(self, f.name, float(value))
            if not math.isfinite(value):
                raise ValueError(f"FleetConfig.{f.name} must be finite, got {value}")
        positive = (
            "num_workers",
            "cache_blocks",
            "block_tokens",
            "max_num_seqs",
            "max_waiting",  # 0 would drop every request that cannot start at once
            "timeout_s",
            "prefill_s_per_token",
            "decode_base_s",
            "slo_ttft_s",
            "slo_tpot_s",
            "tool_capacity",
            "max_num_batched_tokens",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"FleetConfig.{name} must be > 0, got {getattr(self, name)}")
        for f in fields(self):
            if f.type != "bool" and getattr(self, f.name) < 0:
                raise ValueError(f"FleetConfig.{f.name} must be >= 0, got {getattr(self, f.name)}")
        if self.num_workers > MAX_WORKERS:  # numpy's allocation error came first
            raise ValueError(
                f"FleetConfig.num_workers must be at most {MAX_WORKERS:,} (each worker holds "
                f"its own queues and prefix cache), got {self.num_workers:,}"
            )
        if 0 < self.scrape_interval_s < MIN_SCRAPE_INTERVAL_S:
            raise ValueError(
                f"FleetConfig.scrape_interval_s must be 0 (exact) or at least "
                f"{MIN_SCRAPE_INTERVAL_S:g} s, got {self.scrape_interval_s:g}"
            )
        if self.block_size and self.block_tokens % self.block_size:
            raise ValueError(
                f"FleetConfig.block_size must divide block_tokens ({self.block_tokens}): "
                f"a prefix-cache hit is a whole trace block; got {self.block_size}"
            )
        for name in ("agentic_fraction", "p_downstream_hit", "p_downstream_miss"):
            if getattr(self, name) > 1:
                raise ValueError(
                    f"FleetConfig.{name} is a probability in [0, 1], got {getattr(self, name)}"
                )

    def prefill_s(self, uncached_tokens: int | np.ndarray) -> Any:
        """Prefill seconds for ``uncached_tokens``."""
        return self.prefill_overhead_s + self.prefill_s_per_token * uncached_tokens

    def blocks(self, tokens: int) -> int:
        """Blocks that ``tokens`` tokens occupy."""
        return -(-tokens // self.block_tokens)


SIMPLE_ENGINE_SPEEDS = (
    "prefill_s_per_token",
    "prefill_overhead_s",
    "decode_base_s",
    "decode_per_seq_s",
)
"""The simple engine's step times: the step engine takes its own from its profile
(:data:`mabp_gym.fleet.engine.PROFILES`), so with it they could only mislead the routers'
estimates and the load scaling, not the run."""


STEP_ENGINE_SETTINGS = ("max_num_batched_tokens", "block_size", "enable_chunked_prefill")
"""The step engine's vLLM settings: the simple engine has no steps, blocks or chunks."""


def check_engine_config(config: FleetConfig, engine: str, profile: str | None = None) -> str | None:
    """The step-time profile of a run (``None`` for the simple engine), after refusing what
    the engine would ignore: a simple-engine step time changed for the step engine (a "2x
    slower GPU" made the step-engine fleet look better: the trace was stretched, the engine
    was not slowed), or a profile or a step-engine setting for the simple engine."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    default = FleetConfig()
    if profile is not None and profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    if engine == "simple":
        if profile is not None:
            raise ValueError(
                f"profile={profile!r} sets the step engine's step times; the simple engine "
                "takes FleetConfig's: use engine='step' or leave profile out"
            )
        changed = [n for n in STEP_ENGINE_SETTINGS if getattr(config, n) != getattr(default, n)]
        if changed:
            raise ValueError(
                f"FleetConfig.{changed[0]} is a step-engine setting that the simple engine "
                "ignores: use engine='step' or leave it at the default"
            )
        return None
    if profile is None:
        profile = DEFAULT_PROFILE
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    changed = [n for n in SIMPLE_ENGINE_SPEEDS if getattr(config, n) != getattr(default, n)]
    if changed:
        raise ValueError(
            f"FleetConfig.{changed[0]} is the simple engine's step time; the step engine "
            "takes its step times from its profile (mabp_gym.fleet.engine.PROFILES), so "
            f"leave {', '.join(changed)} at the default with engine='step'"
        )
    return profile


def check_block_size(trace: Trace, config: FleetConfig) -> None:
    """Refuse a trace hashed in blocks of another size than the fleet's ``block_tokens``
    (each cache hit would count the wrong number of tokens)."""
    if trace.block_tokens is not None and trace.block_tokens != config.block_tokens:
        raise ValueError(
            f"trace {trace.name!r} hashes {trace.block_tokens}-token blocks and the fleet's "
            f"block_tokens is {config.block_tokens}: each cache hit would count "
            f"{config.block_tokens} tokens; use block_tokens={trace.block_tokens}"
        )


def make_config(**overrides: Any) -> FleetConfig:
    """A ``FleetConfig`` with overrides, naming any unknown key."""
    known = {f.name for f in fields(FleetConfig)}
    unknown = sorted(set(overrides) - known)
    if "max_running" in unknown:
        raise ValueError("the fleet setting max_running is now max_num_seqs (vLLM's name)")
    if unknown:
        raise ValueError(f"unknown fleet setting(s) {unknown}; known: {sorted(known)}")
    return FleetConfig(**overrides)


def nominal_load(trace: Trace, config: FleetConfig) -> float:
    """Offered load: prefill seconds per second with *no* prefix cache, per worker.

    Load 1 saturates the prefill servers if nothing were ever cached; with reuse the fleet
    carries more, so loads above 1 separate cache-aware routers from load-only ones.
    """
    if len(trace) < 2 or trace.duration_s <= 0:
        raise ValueError("a trace needs at least two distinct arrival times to have a load")
    inputs = np.array([r.input_length for r in trace.requests], dtype=np.float64)
    work = float(config.prefill_s(inputs).sum())
    return work / trace.duration_s / config.num_workers


def scale_to_load(trace: Trace, load: float, config: FleetConfig) -> Trace:
    """The trace with its time axis stretched or squeezed to ``nominal_load == load``."""
    if not (math.isfinite(load) and load > 0):
        raise ValueError(f"target load must be a positive number, got {load}")
    return trace.scaled(nominal_load(trace, config) / load)


class Request:
    """A request in flight (trace request or downstream job)."""

    __slots__ = (
        "rid",
        "arrival",
        "input_length",
        "output_length",
        "hash_ids",
        "tool_key",
        "downstream",
        "worker",
    )

    def __init__(
        self,
        rid: int,
        arrival: float,
        input_length: int,
        output_length: int,
        hash_ids: tuple[int, ...],
        tool_key: int,
        downstream: bool,
    ) -> None:
        self.rid = rid
        self.arrival = arrival  # s
        self.input_length = input_length
        self.output_length = output_length
        self.hash_ids = hash_ids
        self.tool_key = tool_key  # -1: not agentic
        self.downstream = downstream
        self.worker = -1

    def __repr__(self) -> str:
        return (
            f"Request(rid={self.rid}, arrival={self.arrival:.3f}, in={self.input_length}, "
            f"out={self.output_length}, blocks={len(self.hash_ids)}, tool={self.tool_key}, "
            f"downstream={self.downstream})"
        )


def leading_hits(cache: dict[int, Any], hash_ids: Sequence[int]) -> int:
    """Leading blocks of ``hash_ids`` present in ``cache`` (a prefix match over block hashes)."""
    count = 0
    for block in hash_ids:
        if block not in cache:
            break
        count += 1
    return count


class _EngineMetrics:
    """Waiting and running requests and KV blocks held per worker, and the KV use they give."""

    config: FleetConfig
    running_blocks: np.ndarray  # (W,) int64
    kv_capacity: int  # KV blocks a worker holds, in the units of running_blocks

    def kv_used_fraction(self) -> np.ndarray:
        """KV blocks held by running requests over capacity, as vLLM reports it (cached but
        unreferenced blocks count as free).  # (W,) float64"""
        return np.minimum(1.0, self.running_blocks / self.kv_capacity)


class ScrapedMetrics(_EngineMetrics):
    """The engines' own metrics as a router's scraper last read them.

    vLLM exports each engine's waiting and running requests and its KV-cache usage
    (``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``);
    a router that reads them (llm-d's endpoint picker refreshes them every 50 ms) polls them.
    Here a scraper reads every engine at each multiple of ``FleetConfig.scrape_interval_s``,
    and a router sees the values of the last such tick: between 0 and one interval old
    (0: exact and instantaneous). Arrays (read, never write): ``waiting``, ``running``
    (int64, (W,)), ``running_blocks`` (KV blocks held by running requests, int64, (W,)).
    """

    def __init__(self, sim: FleetSimulator) -> None:
        self.config = sim.config
        self.kv_capacity = sim.kv_capacity
        # One (3, W) table, so that a scrape is one copy: waiting, running, running blocks.
        live = sim.engine_metrics
        self.table = live.copy() if sim.config.scrape_interval_s > 0 else live  # 0: live
        self.waiting: np.ndarray = self.table[0]  # (W,) int64 views on the table
        self.running: np.ndarray = self.table[1]
        self.running_blocks: np.ndarray = self.table[2]
        self.taken_at = 0.0
        """When the values were read (s)."""


class ExactState(_EngineMetrics):
    """The engines' exact state now, which no production router sees: for the labelled
    references (``oracle-ttft``, ``mabp-route-exact``), Fleet-v0's observation and tests.

    Arrays are views on the simulator's state (read, never write): ``waiting``, ``running``
    (int64, (W,)), ``active_blocks`` (blocks of the in-flight requests' prompts and
    outputs), ``running_blocks`` (int64, (W,)), ``prefill_free`` (s, when each prefill
    server frees up; the step engine's pending prefill priced the same way).
    """

    def __init__(self, sim: FleetSimulator) -> None:
        self._sim = sim
        self.config = sim.config
        self.kv_capacity = sim.kv_capacity
        self.waiting = sim.waiting_count  # (W,) int64
        self.running = sim.running  # (W,) int64
        self.active_blocks = sim.active_blocks  # (W,) int64
        self.running_blocks = sim.running_blocks  # (W,) int64
        self.prefill_free = sim.prefill_free  # (W,) float64

    def prefill_backlog_s(self) -> np.ndarray:
        """Seconds of admitted prefill work left on each worker.  # (W,) float64"""
        self._sim._settle_prefill_free()
        return np.maximum(self.prefill_free - self._sim.now, 0.0)

    def cached_blocks(self, hash_ids: Sequence[int]) -> np.ndarray:
        """Leading blocks of ``hash_ids`` in each engine's prefix cache now.  # (W,) int64"""
        return np.array([leading_hits(c, hash_ids) for c in self._sim.caches], dtype=np.int64)

    def tool_cached(self, tool_key: int) -> np.ndarray:
        """Whether each worker holds the tool state ``tool_key``.  # (W,) bool"""
        return np.array([tool_key in t for t in self._sim.tools], dtype=bool)


class Telemetry:
    """What a router sees of the fleet, as a real router has it.

    - ``in_flight`` (int64, (W,)): requests it routed to each worker whose stream has not
      ended: its own count (a view, read, never write);
    - ``first_tokens`` and ``ended``: the responses that stream back through it;
    - ``cached_blocks``: the engines' prefix caches through their KV events, which arrive
      ``FleetConfig.kv_event_delay_s`` late;
    - ``scraped``: the engines' queue and KV-utilization metrics as of the last scrape
      (:class:`ScrapedMetrics`, every ``FleetConfig.scrape_interval_s``).

    ``exact`` (:class:`ExactState`) is the engines' exact state, which no production router
    sees: only the labelled references read it. Where ``exact_allowed`` is false (a router
    that competes on a table, run by :func:`mabp_gym.fleet.evaluate_fleet`), reading it
    raises ``PermissionError``.
    """

    def __init__(self, sim: FleetSimulator) -> None:
        self._sim = sim
        self.config = sim.config
        self.num_workers = sim.config.num_workers
        self.in_flight = sim.in_flight  # (W,) int64
        self.scraped = ScrapedMetrics(sim)
        self._exact = ExactState(sim)
        self.exact_allowed = True
        self.reader = "this router"  # named in the refusal

    @property
    def exact(self) -> ExactState:
        """The engines' exact state (references only; see the class docstring)."""
        if not self.exact_allowed:
            raise PermissionError(
                f"{self.reader} read telemetry.exact, the engines' exact state, which no "
                "production router sees; a router that competes on the table reads what a "
                "router sees (in_flight, first_tokens, ended, cached_blocks, scraped). "
                "Register it with kind='reference' to read it (it then never competes for "
                "the best cell)"
            )
        return self._exact

    @property
    def now(self) -> float:
        """Current time (s)."""
        return self._sim.now

    def cached_blocks(self, hash_ids: Sequence[int]) -> np.ndarray:
        """Leading blocks of ``hash_ids`` in each engine's prefix cache as its KV events
        have told the router: as it was ``config.kv_event_delay_s`` ago.  # (W,) int64"""
        sim = self._sim
        delay = self.config.kv_event_delay_s
        if delay <= 0:
            return self._exact.cached_blocks(hash_ids)
        then = sim.now - delay
        counts = np.zeros(self.num_workers, dtype=np.int64)
        for w, (cache, journal) in enumerate(zip(sim.caches, sim.journals, strict=True)):
            while journal and journal[0][0] <= then:
                journal.popleft()  # older than the delay: the router has seen it
            if not journal:  # nothing changed within the delay: the cache as it is
                counts[w] = leading_hits(cache, hash_ids)
                continue
            before: dict[int, bool] = {}
            for _, block, was_present in journal:
                before.setdefault(block, was_present)
            count = 0
            for block in hash_ids:
                present = before.get(block, block in cache)
                if not present:
                    break
                count += 1
            counts[w] = count
        return counts

    @property
    def first_tokens(self) -> list[int]:
        """Request ids whose first token has streamed back through the router, in time
        order (read from a cursor of your own; never write)."""
        return self._sim.first_token_log

    @property
    def ended(self) -> list[int]:
        """Request ids whose stream has ended (completed, or dropped by the worker), in
        time order (read from a cursor of your own; never write)."""
        return self._sim.end_log


class Router(Protocol):
    """A routing rule: one worker per request, from the telemetry (and its own state)."""

    name: str

    def reset(self, num_workers: int, rng: np.random.Generator) -> None: ...

    def choose(self, request: Request, telemetry: Telemetry) -> int: ...


METRICS = (
    "throughput",
    "slo_goodput",
    "p95_ttft_s",
    "p95_tpot_s",
    "p95_e2e_s",
    "gpu_s_per_request",
    "kv_hit_ratio",
    "downstream_per_request",
    "drop_rate",
    "p95_scheduler_us",
)
"""Metric names of a run, in the order of SPEC 11's table."""

COUNTS = ("requests_arrived", "requests_completed", "requests_dropped")
"""What a run's record counts beside its metrics: requests (trace requests and downstream
jobs) that arrived, completed and were dropped. Once a replay ends every arrival has
completed or been dropped, which a reader of the record can check."""


class FleetSimulator:
    """Replay one trace over a fleet; ``next_request`` / ``dispatch`` for step-wise control.

    Args:
        trace: the requests (timestamps in ms).
        config: fleet constants.
        seed: draws which requests are agentic and the downstream jobs.
        engine: ``"simple"`` (one FIFO prefill server a worker, decode time fixed at
            admission; the module docstring) or ``"step"`` (vLLM-style continuous batching
            with chunked prefill, shared KV memory and preemption:
            :mod:`mabp_gym.fleet.engine`).
        profile: the step engine's step-time profile (:data:`mabp_gym.fleet.engine.PROFILES`;
            ``None``: :data:`~mabp_gym.fleet.engine.DEFAULT_PROFILE`); refused with the
            simple engine, which takes its step times from ``config``.
    """

    def __init__(
        self,
        trace: Trace,
        config: FleetConfig | None = None,
        seed: int = 0,
        engine: str = "simple",
        profile: str | None = None,
    ) -> None:
        seed = check_number(seed, "seed", low=0, integer=True)
        self.config = config or FleetConfig()
        self.engine = engine
        cfg = self.config
        self.profile = check_engine_config(cfg, engine, profile)
        check_block_size(trace, cfg)
        self.trace = trace
        self.rng = np.random.default_rng(seed)
        w = cfg.num_workers
        self.in_flight = np.zeros(w, dtype=np.int64)
        # What an engine's metrics export (a scraper copies the table at once): requests
        # waiting and running, and KV blocks held by running requests.
        self.engine_metrics = np.zeros((3, w), dtype=np.int64)
        self.waiting_count: np.ndarray = self.engine_metrics[0]  # (W,) int64 views
        self.running: np.ndarray = self.engine_metrics[1]
        self.running_blocks: np.ndarray = self.engine_metrics[2]
        self.active_blocks = np.zeros(w, dtype=np.int64)
        self.prefill_free = np.zeros(w, dtype=np.float64)
        self.caches: list[Any] = [OrderedDict() for _ in range(w)]
        self.engines: list[StepEngine] = []
        self.kv_capacity = cfg.cache_blocks  # KV memory in the units of running_blocks
        if self.profile is not None:
            self.engines = [
                StepEngine(
                    cfg.cache_blocks,
                    cfg.block_tokens,
                    cfg.max_num_seqs,
                    PROFILES[self.profile],
                    block_size=cfg.block_size,
                    max_batched_tokens=cfg.max_num_batched_tokens,
                    chunked_prefill=cfg.enable_chunked_prefill,
                )
                for _ in range(w)
            ]
            self.caches = [e.kv for e in self.engines]  # KV events read the shared memory
            self.kv_capacity = self.engines[0].kv.capacity
        self.tools: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(w)]
        # Per worker, the prefix cache's recent membership changes: (time, block, whether
        # it was present before), so that KV events can be read with a delay.
        self.journals: list[deque[tuple[float, int, bool]]] = [deque() for _ in range(w)]
        self.queues: list[deque[Request]] = [deque() for _ in range(w)]
        self.telemetry = Telemetry(self)
        interval = cfg.scrape_interval_s
        self._next_scrape = interval if interval > 0 else math.inf
        self.now = 0.0
        self._times = trace.timestamps_s()
        self._origin = float(self._times[0]) if len(self._times) else 0.0
        self._agentic = self.rng.random(len(trace)) < cfg.agentic_fraction
        self._next_trace = 0
        self._events: list[tuple[float, int, float, int, Any]] = []
        self._seq = 0
        self._next_rid = len(trace)
        self._fresh_block = -1  # downstream jobs' new blocks get negative ids: never in a trace
        self._pending: Request | None = None
        # One tuple per completion: ttft (s), e2e (s), time per output token (s), downstream, rid.
        self.records: list[tuple[float, float, float, bool, int]] = []
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.gpu_seconds = 0.0
        self.downstream_jobs = 0
        self.dropped = 0
        self.arrived = 0
        self.last_time = 0.0
        self.choose_ns: list[int] = []
        # What a router sees come back through it, in time order: the first token of each
        # request (rid) and the end of its stream (completion or drop).
        self.first_token_log: list[int] = []
        self.first_token_times: list[float] = []  # when each of first_token_log streamed
        self.end_log: list[int] = []

    # -- the event loop ------------------------------------------------------------------------
    def _push(self, when: float, kind: int, payload: Any, pushed_at: float | None = None) -> None:
        # kind 0 (completion) sorts before kind 1 (arrival) at equal times: a finishing request
        # frees its slot before a simultaneous arrival is routed. Equal times and kinds go
        # in the order the events were pushed: by the time of the push (``pushed_at``, now
        # unless an event stands for one a run of coalesced steps would have pushed later),
        # then by the push itself.
        self._seq += 1
        at = self.now if pushed_at is None else pushed_at
        heapq.heappush(self._events, (when, kind, at, self._seq, payload))

    def next_request(self) -> Request | None:
        """Advance to the next arrival (trace request or downstream job), handling earlier
        completions; None once every request has arrived and every event has run, so the
        fleet is empty when it returns None."""
        if self._pending is not None:
            raise RuntimeError("dispatch the pending request before asking for the next one")
        events = self._events
        while True:
            if self._next_trace < len(self._times):
                t_trace = self._times[self._next_trace] - self._origin
            else:
                t_trace = math.inf
            if events and (
                events[0][0] < t_trace or (events[0][0] == t_trace and events[0][1] == 0)
            ):
                when, kind, _, _, payload = heapq.heappop(events)
                if kind == 0 and type(payload) is tuple and len(payload) == 2:
                    engine = self.engines[payload[0]]
                    if payload[1] != engine.run_version:
                        continue  # a run of steps cut short by an arrival: superseded
                if when >= self._next_scrape:
                    self._scrape(when)
                self.now = when
                if kind == 0:
                    if isinstance(payload, int):  # a first token streams back
                        self.first_token_log.append(payload)
                        self.first_token_times.append(when)
                    elif len(payload) == 2:  # a step (or run of steps) of the step engine ends
                        self._end_step(payload[0])
                    else:
                        self._complete(*payload)
                    continue
                request = payload
            elif t_trace < math.inf:
                k = self._next_trace
                self._next_trace += 1
                if t_trace >= self._next_scrape:
                    self._scrape(t_trace)
                self.now = t_trace
                r = self.trace.requests[k]
                tool = -1
                if self._agentic[k]:
                    tool = r.hash_ids[min(self.config.tool_depth, len(r.hash_ids) - 1)]
                request = Request(
                    k, t_trace, r.input_length, r.output_length, r.hash_ids, tool, False
                )
            else:
                return None
            self.arrived += 1
            self._pending = request
            if self.engines:
                self._settle_prefill_free()
            return request

    def _scrape(self, when: float) -> None:
        """The scraper's reads at the ticks up to ``when``, before the event at ``when`` runs.

        Nothing changed since the last event, so every tick in between read the state as it
        is now; the router sees the last of them.
        """
        interval = self.config.scrape_interval_s
        k = math.floor(when / interval)
        scraped = self.telemetry.scraped
        np.copyto(scraped.table, self.engine_metrics)
        scraped.taken_at = k * interval
        # The next tick by its index (an added interval can round to nothing far from 0).
        self._next_scrape = (k + 1) * interval
        if self._next_scrape <= when:  # rounding: the next tick comes after ``when``
            self._next_scrape = (k + 2) * interval

    def dispatch(self, worker: int) -> None:
        """Send the pending request to ``worker``."""
        request = self._pending
        if request is None:
            raise RuntimeError("no pending request: call next_request first")
        whole = isinstance(worker, (int, np.integer)) and not isinstance(worker, bool)
        w = int(worker) if whole else -1  # True is no worker
        if not 0 <= w < self.config.num_workers:
            raise ValueError(
                f"worker must be an integer in [0, {self.config.num_workers}), got {worker!r}"
            )
        self._pending = None
        request.worker = w
        if self.engines:
            self._dispatch_step(request, w)
            return
        if self.waiting_count[w] >= self.config.max_waiting:
            self.dropped += 1
            self.end_log.append(request.rid)
            return
        self.in_flight[w] += 1
        self.active_blocks[w] += self.config.blocks(request.input_length + request.output_length)
        if self.running[w] < self.config.max_num_seqs:
            self._admit(request, w)
        else:
            self.queues[w].append(request)
            self.waiting_count[w] += 1

    def _admit(self, request: Request, w: int) -> None:
        cfg = self.config
        cache = self.caches[w]
        ids = request.hash_ids
        hits = leading_hits(cache, ids)
        journal = self.journals[w]
        for block in reversed(ids):
            if block in cache:
                cache.move_to_end(block)
            else:
                cache[block] = None
                journal.append((self.now, block, False))
        while len(cache) > cfg.cache_blocks:
            evicted, _ = cache.popitem(last=False)
            journal.append((self.now, evicted, True))
        self._prune_journal(w)
        cached = min(hits * cfg.block_tokens, request.input_length)
        self.prompt_tokens += request.input_length
        self.cached_tokens += cached
        prefill = cfg.prefill_s(request.input_length - cached)
        start = max(self.now, self.prefill_free[w])
        end = start + prefill
        self.prefill_free[w] = end
        self.running[w] += 1
        batch = int(self.running[w])
        step = cfg.decode_base_s + cfg.decode_per_seq_s * batch
        self.running_blocks[w] += cfg.blocks(request.input_length + request.output_length)
        self.gpu_seconds += prefill + request.output_length * step / batch
        first = end + step
        done = end + request.output_length * step
        self._push(first, 0, request.rid)
        self._push(done, 0, (request, w, first - request.arrival, step))

    def _complete(self, request: Request, w: int, ttft: float, step: float) -> None:
        cfg = self.config
        self.running[w] -= 1
        self.in_flight[w] -= 1
        blocks = cfg.blocks(request.input_length + request.output_length)
        self.running_blocks[w] -= blocks
        self.active_blocks[w] -= blocks
        self._finished(request, w, ttft, step)
        self._admit_waiting(w)

    def _finished(self, request: Request, w: int, ttft: float, tpot: float) -> None:
        """Record a completed request and run its tool step (both engines)."""
        cfg = self.config
        self.records.append(
            (ttft, self.now - request.arrival, tpot, request.downstream, request.rid)
        )
        self.end_log.append(request.rid)
        self.last_time = max(self.last_time, self.now)
        if request.tool_key >= 0 and not request.downstream:
            tools = self.tools[w]
            hit = request.tool_key in tools
            if hit:
                tools.move_to_end(request.tool_key)
            else:
                tools[request.tool_key] = None
                if len(tools) > cfg.tool_capacity:
                    tools.popitem(last=False)
            p = cfg.p_downstream_hit if hit else cfg.p_downstream_miss
            if self.rng.random() < p:
                self._spawn(request)

    # -- the step engine -----------------------------------------------------------------------
    def _dispatch_step(self, request: Request, w: int) -> None:
        cfg = self.config
        engine = self.engines[w]
        if len(engine.waiting) >= cfg.max_waiting:
            self.dropped += 1
            self.end_log.append(request.rid)
            return
        self.in_flight[w] += 1
        self.active_blocks[w] += cfg.blocks(request.input_length + request.output_length)
        engine.waiting.append(EngineSequence(request))
        if not engine.busy:
            self._begin_step(w)
        else:
            self._cut_run(w)
            self._sync_step_telemetry(w)

    def _drop_waiting(self, w: int, seq: EngineSequence) -> None:
        request = seq.request
        self.dropped += 1
        self.end_log.append(request.rid)
        self.in_flight[w] -= 1
        self.active_blocks[w] -= self.config.blocks(request.input_length + request.output_length)

    def _begin_step(self, w: int) -> None:
        cfg = self.config
        engine = self.engines[w]
        # Requests that waited past the timeout before their first admission are dropped.
        if engine.waiting:
            kept: deque[EngineSequence] = deque()
            for seq in engine.waiting:
                never_ran = seq.first < 0 and seq.generated == 0
                if never_ran and self.now - seq.request.arrival > cfg.timeout_s:
                    self._drop_waiting(w, seq)
                else:
                    kept.append(seq)
            engine.waiting = kept
        while True:
            duration, admitted = engine.form_batch()
            if engine.batch or not engine.waiting or engine.running:
                break
            # Nothing runs and the first waiting request does not fit the whole memory.
            self._drop_waiting(w, engine.waiting.popleft())
        if engine.kv.journal:  # the prefix cache changed: KV events, then forget old ones
            journal = self.journals[w]
            for block, was_present in engine.kv.journal:
                journal.append((self.now, block, was_present))
            engine.kv.journal.clear()
            self._prune_journal(w)
        for seq, hit in admitted:
            if seq.first < 0 and seq.generated == 0:  # first admission (not a recompute)
                self.prompt_tokens += seq.request.input_length
                self.cached_tokens += hit
        engine.busy = bool(engine.batch)
        if engine.busy:
            self.gpu_seconds += duration
            self._plan_run(w, duration)
        self._sync_step_telemetry(w)

    def _plan_run(self, w: int, duration: float) -> None:
        """Schedule the end of the step just formed, or of the run of identical decode steps
        it starts (:meth:`StepEngine.coalescible`), as one event.

        The steps of a run change nothing a router or the records see until the last one
        ends: the same batch, no first token, completion, block, admission or timeout drop
        (a run stops before the step at whose start a waiting request would time out).
        Their end times are summed one by one as separate events would be, so the records
        are the same to the last bit; an arrival at the engine cuts the run after the step
        in progress (:meth:`_cut_run`)."""
        engine = self.engines[w]
        steps = engine.coalescible()
        end = self.now + duration
        ends = [end]
        if steps > 1:
            timeout, oldest = self.config.timeout_s, math.inf
            for seq in engine.waiting:
                if seq.first < 0 and seq.generated == 0:
                    oldest = min(oldest, seq.request.arrival)
            profile = engine.profile
            _, decodes, context = engine.shape
            # profile.step_s(0, decodes, context) term by term: (beta0 + 0.0) + decode
            # term is exactly beta0 + decode term, so the sum is the same to the bit.
            fixed = profile.beta0_s + profile.decode_s_per_token * decodes
            attention = profile.attention_s_per_context_token
            add_end = ends.append
            for _ in range(steps - 1):
                if end - oldest > timeout:
                    break  # the next step's start drops a waiting request: a real step
                context += decodes
                end = end + (fixed + attention * context)
                add_end(end)
        engine.run_start = self.now
        engine.run_ends = ends
        engine.run_version += 1
        pushed = ends[-2] if len(ends) > 1 else self.now
        self._push(end, 0, (w, engine.run_version), pushed)

    def _cut_run(self, w: int) -> None:
        """An arrival at a busy engine: its run of steps ends with the step in progress (a
        step ending now has ended: completions come before arrivals at equal times)."""
        engine = self.engines[w]
        ends = engine.run_ends
        if len(ends) < 2:
            return
        done = bisect.bisect_right(ends, self.now)  # steps ended by now
        if done + 1 >= len(ends):
            return  # the step in progress is the run's last
        del ends[done + 1 :]
        engine.run_version += 1
        pushed = ends[-2] if len(ends) > 1 else engine.run_start
        self._push(ends[-1], 0, (w, engine.run_version), pushed)

    def _settle_prefill_free(self) -> None:
        """``prefill_free`` of the engines inside a run, as the run's steps would have set it
        at their starts (the pending prefill of a blocked waiting queue, priced from the
        start of the step in progress)."""
        for w, engine in enumerate(self.engines):
            ends = engine.run_ends
            if len(ends) < 2:
                continue
            done = bisect.bisect_right(ends, self.now, 0, len(ends) - 1)
            start = ends[done - 1] if done else engine.run_start
            if start > engine.synced_at:
                engine.synced_at = start
                if not engine.waiting:  # a run's batch only decodes: nothing pending
                    self.prefill_free[w] = start
                    continue
                self.prefill_free[w] = start + (
                    engine.pending_prefill_tokens() * engine.profile.prefill_s_per_token
                )

    def _end_step(self, w: int) -> None:
        engine = self.engines[w]
        steps = len(engine.run_ends)
        if steps > 1:
            engine.advance(steps - 1)
            self.gpu_seconds += engine.run_seconds(steps)
        engine.run_ends = []
        firsts, done = engine.finish_step()
        for seq in firsts:
            seq.first = self.now
            self.first_token_log.append(seq.request.rid)
            self.first_token_times.append(self.now)
        for seq in done:
            request = seq.request
            self.in_flight[w] -= 1
            self.active_blocks[w] -= self.config.blocks(
                request.input_length + request.output_length
            )
            out = request.output_length
            tpot = (self.now - seq.first) / (out - 1) if out > 1 else 0.0
            self._finished(request, w, seq.first - request.arrival, tpot)
        self._begin_step(w)

    def _sync_step_telemetry(self, w: int) -> None:
        engine = self.engines[w]
        self.running[w] = len(engine.running)
        self.waiting_count[w] = len(engine.waiting)
        self.running_blocks[w] = engine.kv.held
        # The exact prefill backlog in seconds, for BP and the exact-state references.
        engine.synced_at = self.now
        self.prefill_free[w] = self.now + (
            engine.pending_prefill_tokens() * engine.profile.prefill_s_per_token
        )

    def _prune_journal(self, w: int) -> None:
        """Forget cache changes older than the KV-event delay (routers have seen them)."""
        journal, then = self.journals[w], self.now - self.config.kv_event_delay_s
        while journal and journal[0][0] <= then:
            journal.popleft()

    def _spawn(self, parent: Request) -> None:
        cfg = self.config
        tokens = parent.input_length + parent.output_length + cfg.tool_tokens
        new_blocks = max(0, cfg.blocks(tokens) - len(parent.hash_ids))
        extra = tuple(range(self._fresh_block, self._fresh_block - new_blocks, -1))
        self._fresh_block -= new_blocks
        job = Request(
            self._next_rid,
            self.now + cfg.tool_latency_s,
            tokens,
            cfg.downstream_output,
            parent.hash_ids + extra,
            parent.tool_key,
            True,
        )
        self._next_rid += 1
        self.downstream_jobs += 1
        self._push(job.arrival, 1, job)

    def _admit_waiting(self, w: int) -> None:
        queue = self.queues[w]
        while queue and self.running[w] < self.config.max_num_seqs:
            request = queue.popleft()
            self.waiting_count[w] -= 1
            if self.now - request.arrival > self.config.timeout_s:
                self.dropped += 1
                self.end_log.append(request.rid)
                self.in_flight[w] -= 1
                self.active_blocks[w] -= self.config.blocks(
                    request.input_length + request.output_length
                )
                continue
            self._admit(request, w)

    # -- results -------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """SPEC 11's metrics of the run so far (see ``docs/fleet.md`` for definitions), and
        its :data:`COUNTS`."""
        cfg = self.config
        rec = np.array([(a, b, c, d) for a, b, c, d, _ in self.records], dtype=np.float64).reshape(
            -1, 4
        )
        main = rec[rec[:, 3] == 0]
        span = max(self.last_time, self.now, 1e-9)
        if len(main):
            tpot = main[:, 2]
            good = (main[:, 0] <= cfg.slo_ttft_s) & (tpot <= cfg.slo_tpot_s)
            p95_ttft = float(np.percentile(main[:, 0], 95))
            p95_tpot = float(np.percentile(tpot, 95))
            p95_e2e = float(np.percentile(main[:, 1], 95))
        else:
            good = np.zeros(0, dtype=bool)
            p95_ttft = p95_e2e = p95_tpot = math.nan
        total = self.arrived
        values = {
            "throughput": len(main) / span,
            "slo_goodput": float(good.sum()) / span,
            "p95_ttft_s": p95_ttft,
            "p95_tpot_s": p95_tpot,
            "p95_e2e_s": p95_e2e,
            # Per *completed* trace request: a router that drops work must not look frugal.
            "gpu_s_per_request": self.gpu_seconds / max(len(main), 1),
            "kv_hit_ratio": self.cached_tokens / max(self.prompt_tokens, 1),
            "downstream_per_request": self.downstream_jobs / max(len(main), 1),
            "drop_rate": self.dropped / max(total, 1),
            "p95_scheduler_us": (
                float(np.percentile(self.choose_ns, 95)) / 1000.0 if self.choose_ns else math.nan
            ),
        }
        counts = dict(zip(COUNTS, (self.arrived, len(self.records), self.dropped), strict=True))
        return {name: float(value) for name, value in values.items()} | counts


def replay(
    trace: Trace,
    router: Router | str,
    config: FleetConfig | None = None,
    seed: int = 0,
    engine: str = "simple",
    profile: str | None = None,
    exact_state: bool = True,
) -> dict[str, float]:
    """Route every request of ``trace`` with ``router`` (a router, or a name
    :func:`~mabp_gym.fleet.routers.make_router` knows); the run's metrics (``engine`` and
    ``profile`` as :class:`FleetSimulator`'s). With ``exact_state=False`` the router may
    not read ``telemetry.exact`` (:func:`~mabp_gym.fleet.evaluate_fleet` runs every router
    but the references so).

    The router is reset with a generator seeded from ``seed``; its decision time is measured
    with ``time.perf_counter_ns`` around each ``choose`` call.

    Raises:
        ValueError: an unknown router name, or a ``seed`` that is not an integer >= 0.
        TypeError: ``router`` is neither a name nor an object with ``reset`` and ``choose``.
    """
    seed = check_number(seed, "seed", low=0, integer=True)
    if isinstance(router, str):
        from mabp_gym.fleet.routers import make_router

        router = cast(Router, make_router(router))
    elif isinstance(router, type) or not all(
        callable(getattr(router, name, None)) for name in ("reset", "choose")
    ):
        name = type(router).__name__
        given = f"the class {router.__name__}" if isinstance(router, type) else name
        raise TypeError(
            "router must be a router name (mabp_gym.fleet.router_names()) or an object with "
            f"reset(num_workers, rng) and choose(request, telemetry), got {given}"
        )
    sim = FleetSimulator(trace, config, seed, engine=engine, profile=profile)
    router.reset(sim.config.num_workers, np.random.default_rng([seed, 1]))
    telemetry = sim.telemetry
    telemetry.exact_allowed = exact_state
    telemetry.reader = f"router {type(router).__name__}"
    clock = time.perf_counter_ns
    timings = sim.choose_ns
    while (request := sim.next_request()) is not None:
        start = clock()
        worker = router.choose(request, telemetry)
        timings.append(clock() - start)
        sim.dispatch(worker)
    return sim.metrics()
