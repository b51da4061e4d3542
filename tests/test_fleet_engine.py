"""The step-level engine on hand-built cases: the step-time model,
batching, chunked prefill, prefix hits in the shared KV memory, and preemption."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym.fleet import FleetConfig, FleetSimulator, Trace, TraceRequest, make_router
from mabp_gym.fleet.engine import MAX_BATCHED_TOKENS, PROFILES, KVCache, Sequence, StepEngine
from mabp_gym.fleet.simulator import Request

P = PROFILES["qwen2.5-7b-a100"]


def step(prefill: int = 0, decodes: int = 0, context: int = 0) -> float:
    return (
        P.beta0_s
        + P.prefill_s_per_token * prefill
        + P.decode_s_per_token * decodes
        + P.attention_s_per_context_token * context
    )


def replay_on_worker_0(requests, **config) -> FleetSimulator:
    cfg = FleetConfig(num_workers=1, agentic_fraction=0.0, **config)
    sim = FleetSimulator(Trace("hand", tuple(requests)), cfg, engine="step")
    while sim.next_request() is not None:
        sim.dispatch(0)
    return sim


def by_rid(sim: FleetSimulator) -> dict[int, tuple[float, float, float]]:
    return {rid: (ttft, e2e, tpot) for ttft, e2e, tpot, _, rid in sim.records}


def test_one_request__prefill_step_then_decode_steps_with_their_context():
    sim = replay_on_worker_0([TraceRequest(0.0, 1024, 3, (1, 2))])
    ((ttft, e2e, tpot),) = by_rid(sim).values()
    first = step(prefill=1024)  # the step that completes the prefill emits token 1
    assert ttft == pytest.approx(first)
    # Tokens 2 and 3: one decode each, reading 1024 + 1 and 1024 + 2 tokens of context.
    rest = step(decodes=1, context=1025) + step(decodes=1, context=1026)
    assert e2e == pytest.approx(first + rest)
    assert tpot == pytest.approx(rest / 2)
    assert sim.gpu_seconds == pytest.approx(first + rest)


def test_chunked_prefill_splits_a_long_prompt_and_shares_steps_with_decodes():
    long_prompt = 5000  # 10 blocks; 2048 + 2048 + 904 under the token budget
    assert MAX_BATCHED_TOKENS == 2048
    sim = replay_on_worker_0(
        [
            TraceRequest(0.0, 512, 50, (1,)),
            TraceRequest(1.0, long_prompt, 2, tuple(range(100, 110))),
        ]
    )
    times = by_rid(sim)
    short_first = step(prefill=512)
    # The long request arrives during the short one's decodes: each of its three chunks
    # shares a step with one decode of the short request.
    ttft_long, _, _ = times[1]
    assert ttft_long > step(prefill=2048) + step(prefill=2048) + step(prefill=904)
    # The short request's decodes slowed down in those steps: its TPOT is above a pure
    # decode step's and the SLO-relevant P95 TPOT reflects prefill interference.
    _, _, tpot_short = times[0]
    assert tpot_short > step(decodes=1, context=512)
    assert times[0][0] == pytest.approx(short_first)


def test_a_cached_prefix_is_hit_and_only_the_last_token_is_recomputed():
    prompt = (7, 8, 9, 10)  # 2,048 tokens
    sim = replay_on_worker_0(
        [TraceRequest(0.0, 2048, 2, prompt), TraceRequest(60_000.0, 2048, 2, prompt)]
    )
    first, second = by_rid(sim)[0], by_rid(sim)[1]
    assert first[0] == pytest.approx(step(prefill=2048))
    assert second[0] == pytest.approx(step(prefill=1))  # all blocks cached: 1 token recomputed
    assert sim.cached_tokens == 2047 and sim.prompt_tokens == 4096
    kv = sim.engines[0].kv
    assert not kv.refs and all(block in kv for block in prompt)  # cached, unreferenced


def test_kv_memory_is_shared_referenced_blocks_are_never_evicted():
    kv = KVCache(3)
    kv.acquire(1)
    kv.acquire(2)
    kv.release(2)  # idle: cached, evictable
    kv.acquire(3)
    kv.acquire(4)  # memory full: the idle block 2 is evicted, not the held 1
    assert 1 in kv and 2 not in kv and kv.free() == 0
    with pytest.raises(MemoryError):
        kv.acquire(5)
    own = kv.own_block() if kv.free() else None
    assert own is None
    kv.release(3)
    own = kv.own_block()
    kv.release(own)
    assert own not in kv  # generated blocks are freed, not cached


def test_preemption_recomputes_the_youngest_and_everything_finishes():
    # 4 blocks of memory; two 1-block prompts whose outputs need 2 more blocks each
    # (300 + 1,000 tokens = 3 blocks of 512): both cannot run to the end side by side.
    requests = [
        TraceRequest(0.0, 300, 1000, (1,)),
        TraceRequest(0.0, 300, 1000, (2,)),
    ]
    sim = replay_on_worker_0(requests, cache_blocks=4)
    engine = sim.engines[0]
    assert engine.preemptions >= 1
    assert sorted(by_rid(sim)) == [0, 1] and sim.dropped == 0
    assert not engine.kv.refs and not engine.running and not engine.waiting
    # The preempted request had to prefill its prompt and generated tokens again: it
    # finishes after the other.
    assert by_rid(sim)[1][1] > by_rid(sim)[0][1]


def test_a_run_of_decodes__gpu_seconds_count_the_context_growing_a_token_a_step():
    # A 300-token prompt in one 512-token block: its 199 decodes after the first token
    # need no new block, so they run as one coalesced run of steps, summed in closed form
    # for the GPU seconds. Decode k reads 300 + k tokens of context.
    sim = replay_on_worker_0([TraceRequest(0.0, 300, 200, (1,))])
    ((ttft, e2e, _),) = by_rid(sim).values()
    decodes = sum(step(decodes=1, context=300 + k) for k in range(1, 200))
    assert ttft == pytest.approx(step(prefill=300), rel=1e-12)
    assert e2e == pytest.approx(step(prefill=300) + decodes, rel=1e-12)
    # One request on one worker: the GPU is busy exactly from its arrival to its end. The
    # growth of the context (1 + ... + 198 tokens beyond the first decode's) is ~5e-4 s.
    assert sim.gpu_seconds == pytest.approx(e2e, rel=1e-9)


def test_preemption__takes_the_youngest_of_three_and_recomputes_its_generated_tokens():
    # 3 blocks of memory, each sequence holds one. The oldest (500 tokens) fills its block
    # first, at 12 generated tokens: with no block free, the youngest running sequence
    # (the third) is preempted, not the second, and must prefill 300 + 12 tokens again.
    engine = StepEngine(3, 512, 32, P)
    for rid, tokens in enumerate((500, 300, 300)):
        engine.waiting.append(Sequence(Request(rid, 0.0, tokens, 100, (rid + 1,), -1, False)))
    for _ in range(1_000):  # bounded: a change that ends preemption must fail, not hang
        engine.form_batch()
        engine.finish_step()
        if engine.preemptions:
            break
    else:
        pytest.fail("no sequence was preempted")
    assert [seq.request.rid for seq in engine.running] == [0, 1]
    (preempted,) = engine.waiting
    assert preempted.request.rid == 2 and preempted.generated == 12
    assert (preempted.target, preempted.computed) == (312, 0)
    assert engine.pending_prefill_tokens() == 312  # the others are decoding


def test_a_prompt_larger_than_the_whole_memory_is_dropped_not_hung():
    sim = replay_on_worker_0([TraceRequest(0.0, 5 * 512, 2, (1, 2, 3, 4, 5))], cache_blocks=4)
    assert sim.dropped == 1 and not sim.records and sim.end_log == [0]


@pytest.mark.parametrize("router", ["jsq", "dynamo-t0", "llm-d", "mabp-route", "oracle-ttft"])
def test_routers_run_on_the_step_engine_and_the_tpot_slo_binds(router):
    from mabp_gym.fleet import shipped_trace

    base = shipped_trace("synthetic")
    trace = Trace(base.name, tuple(base.requests[:400]))
    sim = FleetSimulator(trace, FleetConfig(num_workers=2), seed=0, engine="step")
    chooser = make_router(router)
    chooser.reset(2, np.random.default_rng(0))
    while (request := sim.next_request()) is not None:
        sim.dispatch(chooser.choose(request, sim.telemetry))
    metrics = sim.metrics()
    assert metrics["throughput"] > 0 and np.isfinite(metrics["p95_tpot_s"])
    assert all(0 <= r < 2 for r in sim.in_flight.tolist())
    assert int(sim.in_flight.sum()) == 0  # everything finished or was dropped


def test_unknown_engine_or_profile_is_refused():
    trace = Trace("hand", (TraceRequest(0.0, 10, 1, (0,)),))
    with pytest.raises(ValueError, match="engine must be one of"):
        FleetSimulator(trace, engine="vidur")
    with pytest.raises(ValueError, match="profile must be one of"):
        FleetSimulator(trace, engine="step", profile="gpt-9")


def test_an_arrival_during_a_run_of_decodes_joins_the_step_after_the_one_in_progress():
    # A decodes alone (one event for its run of steps); B arrives at 0.5 s, mid-run. B's
    # prefill shares the step after the one in progress at 0.5 s with A's next decode.
    sim = replay_on_worker_0([TraceRequest(0.0, 512, 100, (1,)), TraceRequest(500.0, 512, 2, (2,))])
    end, generated = step(prefill=512), 1  # A's prefill step emits its first token
    while end <= 0.5:
        end += step(decodes=1, context=512 + generated)
        generated += 1
    joined = end + step(prefill=512, decodes=1, context=512 + generated)
    times = by_rid(sim)
    assert times[1][0] == pytest.approx(joined - 0.5, rel=1e-12)
    assert times[0][1] > times[1][1] + 0.5  # A, 100 tokens long, ends after B
