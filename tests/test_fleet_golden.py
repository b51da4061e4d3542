"""The step engine's runs of coalesced decode steps change no record: the same replays as
the engine with one event a step (the commit before them, digests in
``tests/data/fleet_step_golden.json``), and as this engine with coalescing switched off."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from mabp_gym.fleet import FleetConfig, FleetSimulator, make_router, scale_to_load, shipped_trace

GOLDEN = json.loads((Path(__file__).parent / "data" / "fleet_step_golden.json").read_text())
CASES = {
    "jsq-0.7": ("jsq", 0.7, {}, 0),
    "llm-d-0.7": ("llm-d", 0.7, {}, 1),
    "mabp-route-exact-0.7": ("mabp-route-exact", 0.7, {}, 2),
    "dynamo-t0-tight-memory-1.2": (
        "dynamo-t0",
        1.2,
        {"cache_blocks": 60, "max_waiting": 40, "timeout_s": 20.0},
        3,
    ),
}


def run(router: str, load: float, overrides: dict, seed: int, requests: int = 1200):
    cfg = FleetConfig(num_workers=4, **overrides)
    trace = scale_to_load(shipped_trace("conversation").head(requests), load, cfg)
    sim = FleetSimulator(trace, cfg, seed, engine="step")
    chooser = make_router(router)
    chooser.reset(cfg.num_workers, np.random.default_rng([seed, 1]))
    while (request := sim.next_request()) is not None:
        sim.dispatch(chooser.choose(request, sim.telemetry))
    return sim


def digest(values) -> str:
    return hashlib.sha256(repr(values).encode()).hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_engine__records_are_those_of_one_event_a_step(case):
    sim = run(*CASES[case])
    expected = GOLDEN["cases"][case]
    assert digest(sorted(sim.records, key=lambda r: r[4])) == expected["sha256"]
    assert len(sim.records) == expected["records"]
    assert digest(sim.first_token_log) == expected["first_tokens"]
    assert sim.dropped == expected["dropped"]
    assert sum(e.preemptions for e in sim.engines) == expected["preemptions"]
    assert sim.downstream_jobs == expected["downstream_jobs"]
    # Summed in another order: equal to the last bits.
    assert sim.gpu_seconds == pytest.approx(expected["gpu_seconds"], rel=1e-12)


@pytest.mark.parametrize("case", ["mabp-route-exact-0.7", "dynamo-t0-tight-memory-1.2"])
def test_step_engine__a_router_sees_the_same_fleet_with_coalescing_off(case):
    router, load, overrides, seed = CASES[case]
    cfg = FleetConfig(num_workers=4, **overrides)
    trace = scale_to_load(shipped_trace("conversation").head(400), load, cfg)
    fast, slow = (FleetSimulator(trace, cfg, seed, engine="step") for _ in range(2))
    for engine in slow.engines:
        engine.coalescible = lambda: 1  # one event a step
    chooser = make_router(router)
    chooser.reset(cfg.num_workers, np.random.default_rng(seed))
    while (request := fast.next_request()) is not None:
        assert slow.next_request().rid == request.rid
        assert fast.now == slow.now
        for sim in (fast, slow):
            sim.telemetry.exact.prefill_backlog_s()
        assert np.array_equal(fast.prefill_free, slow.prefill_free)
        assert np.array_equal(fast.engine_metrics, slow.engine_metrics)
        assert np.array_equal(fast.telemetry.scraped.table, slow.telemetry.scraped.table)
        assert fast.telemetry.scraped.taken_at == slow.telemetry.scraped.taken_at
        assert np.array_equal(
            fast.telemetry.cached_blocks(request.hash_ids),
            slow.telemetry.cached_blocks(request.hash_ids),
        )
        worker = chooser.choose(request, fast.telemetry)
        fast.dispatch(worker)
        slow.dispatch(worker)
    assert slow.next_request() is None
    assert fast.records == slow.records and fast.end_log == slow.end_log
    assert fast.first_token_times == slow.first_token_times
    assert sum(len(e.run_ends) for e in fast.engines) == 0
