"""Gymnasium adapter of fleet mode: one step routes one request."""

from __future__ import annotations

import functools
import os
from dataclasses import fields
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from mabp_gym.core.validate import is_real
from mabp_gym.fleet.simulator import (
    ENGINES,
    FleetConfig,
    FleetSimulator,
    Request,
    check_engine_config,
    make_config,
    scale_to_load,
)
from mabp_gym.fleet.trace import SHIPPED_TRACES, Trace, load_trace, read_mooncake

WORKER_FEATURES = 6
REQUEST_FEATURES = 4


@functools.lru_cache(maxsize=4)
def _shipped(name: str) -> Trace:
    return load_trace(name)


def _trace(spec: Any, limit: int | None) -> Trace:
    """The episode's trace: a :class:`Trace`, a shipped trace's name (parsed once per
    process) or a Mooncake file, read afresh each time (so a rewritten file is seen) and
    only up to ``limit`` requests."""
    if isinstance(spec, Trace):
        return spec if limit is None else spec.head(limit)
    if isinstance(spec, os.PathLike):
        return read_mooncake(os.fspath(spec), limit)
    if not isinstance(spec, str):
        raise ValueError(
            f"trace must be a shipped trace name {SHIPPED_TRACES}, a Mooncake file path or a "
            f"Trace, got {type(spec).__name__}"
        )
    if spec in SHIPPED_TRACES:
        trace = _shipped(spec)
        return trace if limit is None else trace.head(limit)
    return load_trace(spec, limit)


class FleetEnv(gymnasium.Env):
    """Route a replayed trace over a fleet of LLM workers (SPEC 11), one request a step.

    ## Action Space
    ``Discrete(num_workers)``: the worker that serves the pending request.

    ## Observation Space
    ``Box(0, inf, (num_workers * 6 + 4,), float32)``: per worker (row-major) requests in
    flight / ``max_num_seqs``, waiting / ``max_num_seqs``, prefill backlog (s), KV used fraction,
    cached fraction of the pending prompt (KV events), whether it holds the request's tool
    state; then the request's prompt blocks / 64, output tokens / 1000, agentic flag,
    downstream flag.

    ## Rewards
    After each routing decision the fleet runs until the next arrival; the reward is the
    number of trace requests that completed within the SLO in that interval minus the number
    of requests dropped in it (so the return is the SLO goodput count minus drops).

    ## Episode End
    Terminated when every request (trace and downstream jobs) has been routed; the last step
    also runs the fleet until it is empty. No truncation.

    ## Arguments
    ``trace``: a shipped trace name (``synthetic``, ``conversation``) or a Mooncake file path;
    ``num_requests``: its first requests used (default 400); ``load``: target nominal load
    (default 0.8, ``None`` keeps the timestamps); ``engine``: the worker model
    (``"simple"``, default, or ``"step"``: continuous batching); ``spread_bursts``: spread
    each run of equal timestamps up to the next one (:meth:`Trace.spread_bursts`; the
    conversation trace's 3-s clock otherwise delivers about ten requests at one instant);
    ``profile``: the step engine's step-time profile (``mabp_gym.fleet.engine.PROFILES``,
    default ``qwen2.5-7b-a100``; refused with the simple engine); any ``FleetConfig`` field
    as a keyword (e.g. ``num_workers=4``, ``max_num_batched_tokens=4096``).

    ## Version History
    * v0: initial version; ``profile`` and the step engine's vLLM settings added without
      changing the defaults' dynamics.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        trace: str = "synthetic",
        num_requests: int | None = 400,
        load: float | None = 0.8,
        engine: str = "simple",
        spread_bursts: bool = False,
        profile: str | None = None,
        **overrides: Any,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if not isinstance(spread_bursts, (bool, np.bool_)):
            raise ValueError(f"spread_bursts must be True or False, got {spread_bursts!r}")
        self.engine = engine
        known = {f.name for f in fields(FleetConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            renamed = " (max_running is now max_num_seqs)" if "max_running" in unknown else ""
            # TypeError, as Python raises for an unknown argument (wrappers rely on it).
            raise TypeError(
                f"FleetEnv.__init__() got an unexpected keyword argument {unknown[0]!r}"
                f"{renamed}; its arguments: trace, num_requests, load, engine, spread_bursts, "
                f"profile and the FleetConfig fields {sorted(known)}"
            )
        self.config = make_config(**overrides)
        self.profile = check_engine_config(self.config, engine, profile)
        self._seen: int = 0  # records and drops already scored
        self._dropped: int = 0
        if num_requests is not None:
            if (
                isinstance(num_requests, (bool, np.bool_))
                or not isinstance(num_requests, (int, np.integer))
                or num_requests < 2
            ):
                raise ValueError(
                    f"num_requests must be an integer >= 2 or None, got {num_requests!r}"
                )
            num_requests = int(num_requests)
        if load is not None and not is_real(load):  # a complex numpy load lost its imaginary part
            raise ValueError(
                f"load must be a number > 0 (the target nominal load) or None (keep the "
                f"trace's timestamps), got {load!r}"
            )
        base = _trace(trace, num_requests)
        if spread_bursts:
            base = base.spread_bursts()
        if num_requests is not None and num_requests > len(base):
            raise ValueError(
                f"num_requests must be at most the trace's {len(base)} requests (None: all of "
                f"them), got {num_requests}"
            )
        try:
            self.trace = base if load is None else scale_to_load(base, float(load), self.config)
        except ValueError as error:
            raise ValueError(
                f"load={load!r} over the first {len(base)} requests (num_requests): {error}"
            ) from None
        w = self.config.num_workers
        self.action_space = spaces.Discrete(w)
        size = w * WORKER_FEATURES + REQUEST_FEATURES
        self._obs_size = size
        self.observation_space = spaces.Box(0.0, np.inf, (size,), np.float32)
        self.sim: FleetSimulator | None = None
        self._request: Request | None = None

    def _observe(self) -> np.ndarray:
        sim, request, cfg = self.sim, self._request, self.config
        assert sim is not None and request is not None
        t = sim.telemetry
        blocks = len(request.hash_ids)
        workers = np.stack(
            [
                t.in_flight / cfg.max_num_seqs,
                t.exact.waiting / cfg.max_num_seqs,
                t.exact.prefill_backlog_s(),
                t.exact.kv_used_fraction(),
                t.cached_blocks(request.hash_ids) / blocks,
                t.exact.tool_cached(request.tool_key)
                if request.tool_key >= 0
                else np.zeros(t.num_workers),
            ],
            axis=1,
        )
        own = np.array(
            [
                blocks / 64.0,
                request.output_length / 1000.0,
                float(request.tool_key >= 0),
                float(request.downstream),
            ]
        )
        return np.concatenate([workers.ravel(), own]).astype(np.float32)

    def _score(self) -> tuple[int, int]:
        assert self.sim is not None
        cfg = self.config
        good = sum(
            int(not down and ttft <= cfg.slo_ttft_s and tpot <= cfg.slo_tpot_s)
            for ttft, _, tpot, down, _ in self.sim.records[self._seen :]
        )
        self._seen = len(self.sim.records)
        dropped = self.sim.dropped - self._dropped
        self._dropped = self.sim.dropped
        return good, dropped

    def _checked_worker(self, action: Any) -> int:
        """The worker ``action`` names, or an error saying what is allowed."""
        if self.sim is None or self._request is None:
            raise RuntimeError("call reset() before step() (and again after the episode ends)")
        if isinstance(action, (bool, np.bool_)) or not self.action_space.contains(action):
            raise ValueError(
                f"action must be a worker index in [0, {self.config.num_workers}), got {action!r}"
            )
        return int(action)

    def _after_step(self, terminated: bool, info: dict[str, Any]) -> np.ndarray:
        """The next observation (zeros once the episode ended, with its metrics in info)."""
        assert self.sim is not None
        if terminated:
            info["metrics"] = self.sim.metrics()
            return np.zeros(self._obs_size, dtype=np.float32)
        return self._observe()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        _check_options(options)  # before anything changes: a refused reset keeps the episode
        super().reset(seed=seed)  # a refused seed raises before anything changes too
        self._new_episode()
        run_seed = int(self.np_random.integers(2**31))
        self.sim = FleetSimulator(
            self.trace, self.config, run_seed, engine=self.engine, profile=self.profile
        )
        self._seen = 0
        self._dropped = 0
        self._request = self.sim.next_request()
        return self._observe(), {}

    def _new_episode(self) -> None:
        """What a subclass starts afresh for an episode, once its reset is accepted."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        worker = self._checked_worker(action)
        assert self.sim is not None
        self.sim.dispatch(worker)
        self._request = self.sim.next_request()
        terminated = self._request is None
        good, dropped = self._score()
        info: dict[str, Any] = {"good": good, "dropped": dropped}
        obs = self._after_step(terminated, info)
        return obs, float(good - dropped), terminated, False, info


def _check_options(options: dict[str, Any] | None) -> None:
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {options!r}")
    if options:
        raise ValueError(f"options are not supported, got {sorted(options)}")


TTFT_CAP = 4.0
"""Fleet-v1's reward saturates at this many TTFT SLOs (and a drop costs as much)."""


class FleetRouterEnv(FleetEnv):
    """Fleet-v1: :class:`FleetEnv` for learned routers, with each request's reward credited
    to the routing decision that caused it and an observation a router really has.

    ## Observation Space
    ``Box(0, 1, (num_workers * 5 + 4,), float32)``: per worker (row-major) the router-side
    features of :data:`mabp_gym.fleet.features.WORKER_FEATURES` (its own estimate of the
    prefill ahead, the request's uncached prefill, the cached fraction of its prompt by
    delayed KV events, requests in flight, the tool state's last worker), then the
    request's :data:`~mabp_gym.fleet.features.REQUEST_FEATURES`; all in ``[0, 1]``. No
    exact engine state (backlog, waiting queue, cache) is in it.

    ## Rewards
    Every routed request earns ``-min(TTFT / slo_ttft, 4) / 4`` when its first token streams
    back (0 for an instant first token, -1 at four SLOs or more) and -1 when it is dropped.
    A step's reward is the sum of those that resolved during it, and ``info["credit"]``
    lists them as ``(routing step, reward)`` pairs: a learner that assigns each to its
    routing step (``examples/ppo_router.py`` does) credits the decision that caused it. By
    the last step of an episode every request has resolved, so the credits of an episode
    sum to its return.

    ## Arguments, Episode End
    As :class:`FleetEnv`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from mabp_gym.fleet.features import REQUEST_FEATURES, WORKER_FEATURES

        size = self.config.num_workers * len(WORKER_FEATURES) + len(REQUEST_FEATURES)
        self._obs_size = size
        self.observation_space = spaces.Box(0.0, 1.0, (size,), np.float32)

    def _new_episode(self) -> None:
        # Only once the reset is accepted (a refused seed had wiped a running episode).
        from mabp_gym.fleet.features import RouterFeatures

        self._features = RouterFeatures(self.config.num_workers)
        self._step = 0
        self._routed: dict[int, tuple[int, float]] = {}  # rid -> (routing step, arrival)
        self._cursors = [0, 0]  # first tokens, ended streams already credited

    def _observe(self) -> np.ndarray:
        assert self.sim is not None and self._request is not None
        workers, own = self._features.observe(self._request, self.sim.telemetry)
        return np.concatenate([workers.ravel(), own]).astype(np.float32)

    def _credits(self) -> list[tuple[int, float]]:
        """``(routing step, reward)`` of every request that resolved since the last call."""
        sim, slo = self.sim, self.config.slo_ttft_s
        assert sim is not None
        credits = []
        firsts, ends = self._cursors
        for rid, when in zip(
            sim.first_token_log[firsts:], sim.first_token_times[firsts:], strict=True
        ):
            step, arrival = self._routed.pop(rid)
            credits.append((step, -min((when - arrival) / slo, TTFT_CAP) / TTFT_CAP))
        for rid in sim.end_log[ends:]:
            if rid in self._routed:  # ended without a first token: dropped
                credits.append((self._routed.pop(rid)[0], -1.0))
        self._cursors = [len(sim.first_token_log), len(sim.end_log)]
        return credits

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        worker = self._checked_worker(action)
        request = self._request
        assert self.sim is not None and request is not None
        self._features.routed(request, worker, self.config.tool_capacity)
        self._routed[request.rid] = (self._step, request.arrival)
        self.sim.dispatch(worker)
        self._request = self.sim.next_request()
        terminated = self._request is None
        credits = self._credits()
        info: dict[str, Any] = {"credit": credits, "step": self._step}
        self._step += 1
        obs = self._after_step(terminated, info)
        return obs, float(sum(r for _, r in credits)), terminated, False, info
