"""Fleet simulator: exact hand-computed runs, drops, downstream jobs, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mabp_gym.fleet import (
    COUNTS,
    METRICS,
    FleetConfig,
    FleetSimulator,
    Trace,
    TraceRequest,
    make_config,
    make_router,
    nominal_load,
    prefix_tree_trace,
    replay,
    scale_to_load,
)
from mabp_gym.fleet.routers.baselines import JSQ

# Block of 4 tokens, 1 ms prefill a token, 10 ms a decode step whatever the batch.
EXACT = dict(
    num_workers=1,
    block_tokens=4,
    prefill_s_per_token=0.001,
    prefill_overhead_s=0.0,
    decode_base_s=0.01,
    decode_per_seq_s=0.0,
    agentic_fraction=0.0,
)


def run_to_end(sim: FleetSimulator, worker=lambda request: 0) -> None:
    while (request := sim.next_request()) is not None:
        sim.dispatch(worker(request))


def test_simulator__second_request_reuses_the_cached_prefix_exactly():
    trace = Trace(
        "t", (TraceRequest(0.0, 16, 10, (1, 2, 3, 4)), TraceRequest(1000.0, 16, 10, (1, 2, 7, 8)))
    )
    sim = FleetSimulator(trace, FleetConfig(**EXACT))
    run_to_end(sim)
    (ttft1, e2e1, step1, *_), (ttft2, e2e2, *_) = sim.records
    assert ttft1 == pytest.approx(0.016 + 0.01) and e2e1 == pytest.approx(0.016 + 0.1)
    # Two of four blocks cached: prefill of 8 tokens.
    assert ttft2 == pytest.approx(0.008 + 0.01) and e2e2 == pytest.approx(0.008 + 0.1)
    assert sim.metrics()["kv_hit_ratio"] == pytest.approx(8 / 32)
    assert sim.metrics()["gpu_s_per_request"] == pytest.approx((0.016 + 0.1 + 0.008 + 0.1) / 2)


def test_simulator__lru_evicts_the_tail_before_the_shared_prefix():
    trace = Trace(
        "t",
        (
            TraceRequest(0.0, 12, 1, (1, 2, 3)),
            TraceRequest(1000.0, 12, 1, (1, 5, 6)),
            TraceRequest(2000.0, 12, 1, (1, 2, 9)),
        ),
    )
    sim = FleetSimulator(trace, FleetConfig(**{**EXACT, "cache_blocks": 4}))
    run_to_end(sim)
    # LRU order after request 1: 3, 2, 1; request 2 evicts 3: 2, 6, 5, 1; request 3 evicts 6.
    assert list(sim.caches[0]) == [5, 9, 2, 1]
    assert sim.cached_tokens == 4 + 8  # request 2 hit block 1; request 3 hit blocks 1 and 2


def test_simulator__concurrency_limit_queues_and_prefill_is_serial():
    trace = Trace("t", tuple(TraceRequest(0.0, 4, 10, (k,)) for k in range(3)))
    sim = FleetSimulator(trace, FleetConfig(**{**EXACT, "max_num_seqs": 2}))
    run_to_end(sim)
    ttfts = sorted(record[0] for record in sim.records)
    # prefill 4 ms each, serial; the third waits for the first to finish at 0.104 s.
    assert ttfts == pytest.approx([0.014, 0.018, 0.104 - 0.0 + 0.004 + 0.01])


def test_simulator__drops_when_the_waiting_room_is_full_or_the_wait_times_out():
    trace = Trace("t", tuple(TraceRequest(0.0, 4, 1000, (k,)) for k in range(4)))
    sim = FleetSimulator(trace, FleetConfig(**{**EXACT, "max_num_seqs": 1, "max_waiting": 2}))
    run_to_end(sim)
    assert sim.dropped == 1 and len(sim.records) == 3
    sim = FleetSimulator(trace, FleetConfig(**{**EXACT, "max_num_seqs": 1, "timeout_s": 5.0}))
    run_to_end(sim)
    # Each request runs 10 s, so everyone queued behind the first waited > 5 s.
    assert sim.dropped == 3 and sim.metrics()["drop_rate"] == pytest.approx(0.75)
    counts = {k: sim.metrics()[k] for k in COUNTS}  # the record's accounting, as ints
    assert counts == {"requests_arrived": 4, "requests_completed": 1, "requests_dropped": 3}
    assert all(type(v) is int for v in counts.values())


def test_simulator__tool_miss_spawns_a_downstream_job_and_a_hit_does_not():
    trace = Trace("t", (TraceRequest(0.0, 8, 2, (1, 2)), TraceRequest(5000.0, 8, 2, (1, 2))))
    config = FleetConfig(
        **{
            **EXACT,
            "agentic_fraction": 1.0,
            "p_downstream_miss": 1.0,
            "p_downstream_hit": 0.0,
            "tool_tokens": 4,
        }
    )
    sim = FleetSimulator(trace, config)
    jobs = []

    def route(request):
        if request.downstream:
            jobs.append(request)
        return 0

    run_to_end(sim, route)
    assert len(jobs) == 1 and jobs[0].tool_key == 2  # tool key: block at depth 1
    assert jobs[0].hash_ids[:2] == (1, 2) and jobs[0].input_length == 8 + 2 + 4
    assert sim.metrics()["downstream_per_request"] == pytest.approx(0.5)


def test_metrics__goodput_needs_both_slos_and_p95_is_the_95th_percentile():
    # Decode step 10 ms + 10 ms a running sequence (fixed at admission): 20 ms alone, 30 ms
    # in a batch of two. SLOs: TTFT <= 50 ms and TPOT <= 25 ms.
    trace = Trace(
        "t",
        (
            TraceRequest(0.0, 4, 10, (1,)),  # ttft 4 + 20 = 24 ms, tpot 20: both met
            TraceRequest(0.0, 40, 10, tuple(range(10, 20))),  # after 4 ms: 4 + 40 + 30 = 74, 30
            TraceRequest(1000.0, 100, 10, tuple(range(100, 125))),  # 100 + 20 = 120 ms, 20
            TraceRequest(2000.0, 4, 10, (200,)),  # 24 ms, 20: both met
            TraceRequest(2000.0, 4, 10, (201,)),  # 4 + 4 + 30 = 38 ms (met), 30 (missed)
        ),
    )
    config = FleetConfig(
        **{**EXACT, "decode_per_seq_s": 0.01, "slo_ttft_s": 0.05, "slo_tpot_s": 0.025}
    )
    sim = FleetSimulator(trace, config)
    run_to_end(sim)
    ttft_e2e_tpot = [(0.024, 0.204, 0.02), (0.074, 0.344, 0.03), (0.12, 0.3, 0.02)]
    ttft_e2e_tpot += [(0.024, 0.204, 0.02), (0.038, 0.308, 0.03)]
    assert np.array([r[:3] for r in sim.records]) == pytest.approx(np.array(ttft_e2e_tpot))
    metrics = sim.metrics()
    span = 2.0 + 0.308  # first arrival to last completion
    assert metrics["throughput"] == pytest.approx(5 / span)
    # Within both SLOs: requests 0 and 3 only (1 misses both, 2 the TTFT, 4 the TPOT).
    assert metrics["slo_goodput"] == pytest.approx(2 / span)
    # TTFTs sorted (24, 24, 38, 74, 120) ms: the 95th percentile interpolates at rank
    # 0.95 * 4 = 3.8, 74 + 0.8 * (120 - 74) = 110.8 ms (the median is 38 ms).
    assert metrics["p95_ttft_s"] == pytest.approx(0.1108)
    assert metrics["p95_tpot_s"] == pytest.approx(0.03)
    assert metrics["p95_e2e_s"] == pytest.approx(0.308 + 0.8 * (0.344 - 0.308))
    # Prefill + output * step / batch: 0.204 + 0.19 + 0.3 + 0.204 + 0.154 over 5 requests.
    assert metrics["gpu_s_per_request"] == pytest.approx(1.052 / 5)


def test_metrics__gpu_seconds_per_request_count_jobs_work_over_trace_requests_only():
    # One agentic trace request whose tool state misses: one downstream job follows.
    trace = Trace("t", (TraceRequest(0.0, 8, 2, (1, 2)),))
    config = FleetConfig(
        **{
            **EXACT,
            "agentic_fraction": 1.0,
            "p_downstream_miss": 1.0,
            "p_downstream_hit": 0.0,
            "tool_tokens": 4,
            "downstream_output": 3,
        }
    )
    sim = FleetSimulator(trace, config)
    run_to_end(sim)
    assert len(sim.records) == 2 and sim.downstream_jobs == 1
    # The request: prefill 8 ms + 2 decode steps of 10 ms. The job (8 + 2 + 4 = 14 tokens,
    # its first 2 blocks cached): prefill 6 ms + 3 decode steps. Both are GPU work; the one
    # completed *trace* request carries it all.
    assert sim.gpu_seconds == pytest.approx(0.028 + 0.036)
    metrics = sim.metrics()
    assert metrics["gpu_s_per_request"] == pytest.approx(0.064)
    assert metrics["downstream_per_request"] == pytest.approx(1.0)


def test_simulator__rejects_a_bad_worker_and_out_of_order_calls():
    sim = FleetSimulator(Trace("t", (TraceRequest(0.0, 8, 2, (1, 2)),)), FleetConfig(**EXACT))
    with pytest.raises(RuntimeError, match="next_request"):
        sim.dispatch(0)
    sim.next_request()
    with pytest.raises(ValueError, match=r"worker must be an integer in \[0, 1\)"):
        sim.dispatch(3)


def test_config__names_a_bad_or_unknown_setting():
    with pytest.raises(ValueError, match="max_num_seqs must be > 0"):
        FleetConfig(max_num_seqs=0)
    with pytest.raises(ValueError, match="p_downstream_miss is a probability"):
        FleetConfig(p_downstream_miss=1.5)
    with pytest.raises(TypeError, match="num_workers must be an integer"):
        FleetConfig(num_workers=2.5)
    with pytest.raises(ValueError, match="unknown fleet setting.*'workerz'"):
        make_config(workerz=3)


def test_scale_to_load__hits_the_target_nominal_load():
    trace = prefix_tree_trace(300, seed=1)
    config = FleetConfig(num_workers=4)
    assert nominal_load(scale_to_load(trace, 0.7, config), config) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="positive"):
        scale_to_load(trace, 0.0, config)


def test_replay__same_seed_same_metrics_and_reports_every_metric():
    trace = scale_to_load(prefix_tree_trace(400, seed=2), 0.9, FleetConfig(num_workers=4))
    config = FleetConfig(num_workers=4)
    for name in ("dynamo-t0.5", "mabp-route", "vllm-prefixaware"):
        first = replay(trace, make_router(name), config, seed=3)
        second = replay(trace, make_router(name), config, seed=3)
        assert set(first) == set(METRICS) | set(COUNTS)
        assert first["requests_arrived"] == first["requests_completed"] + first["requests_dropped"]
        first.pop("p95_scheduler_us"), second.pop("p95_scheduler_us")  # wall-clock time
        assert first == second


def test_replay__prefix_aware_routing_raises_the_hit_ratio_over_jsq():
    # 30 blocks a worker cannot hold the tree's 272 shared blocks: locality decides hits.
    config = FleetConfig(num_workers=4, cache_blocks=30)
    trace = scale_to_load(prefix_tree_trace(800, seed=4), 0.7, config)
    jsq = replay(trace, JSQ(), config, seed=0)
    for name in ("dynamo-t0", "sglang", "mabp-route"):
        assert (
            replay(trace, make_router(name), config, seed=0)["kv_hit_ratio"]
            > jsq["kv_hit_ratio"] + 0.05
        )


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    workers=st.integers(1, 3),
    max_num_seqs=st.integers(1, 3),
    cache_blocks=st.integers(1, 6),
    max_waiting=st.integers(1, 3),  # 0 is refused (it would drop every waiting request)
)
def test_simulator__conserves_requests_and_bounds_caches_for_any_routing(
    data, workers, max_num_seqs, cache_blocks, max_waiting
):
    count = data.draw(st.integers(1, 25))
    gaps = data.draw(st.lists(st.integers(0, 400), min_size=count, max_size=count))
    requests, now = [], 0
    for gap in gaps:
        now += gap
        blocks = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
        output = data.draw(st.integers(1, 50))
        requests.append(TraceRequest(float(now), 4 * len(blocks), output, tuple(blocks)))
    config = FleetConfig(
        **{
            **EXACT,
            "num_workers": workers,
            "max_num_seqs": max_num_seqs,
            "cache_blocks": cache_blocks,
            "max_waiting": max_waiting,
            "agentic_fraction": 0.5,
            "timeout_s": 0.3,
        }
    )
    sim = FleetSimulator(Trace("random", tuple(requests)), config, seed=count)
    while sim.next_request() is not None:
        assert (sim.running <= max_num_seqs).all() and (sim.waiting_count <= max_waiting).all()
        assert all(len(c) <= cache_blocks for c in sim.caches)
        sim.dispatch(data.draw(st.integers(0, workers - 1)))
    assert sim.arrived == count + sim.downstream_jobs
    assert len(sim.records) + sim.dropped == sim.arrived  # every request finished or dropped
    assert not sim.in_flight.any() and not sim.running.any() and not sim.active_blocks.any()
    assert 0 <= sim.cached_tokens <= sim.prompt_tokens
    for ttft, e2e, *_ in sim.records:
        assert 0 < ttft <= e2e + 1e-12


def test_fleet_core__imports_neither_gymnasium_nor_torch():
    import ast
    from pathlib import Path

    import mabp_gym.fleet

    package = Path(mabp_gym.fleet.__file__).parent
    files = [package / f"{m}.py" for m in ("__init__", "simulator", "trace", "evaluate")]
    files += sorted((package / "routers").glob("*.py"))  # one module per family
    assert len(files) > 8
    for module in files:
        tree = ast.parse(module.read_text())
        names = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        names |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert not names & {"gymnasium", "torch", "torch_geometric"}, module.name


def test_kv_events_reach_the_router_after_their_delay():
    from mabp_gym.fleet import FleetConfig, FleetSimulator, Trace, TraceRequest

    trace = Trace(
        "hand",
        (TraceRequest(0.0, 1024, 5, (1, 2)), TraceRequest(100.0, 1024, 5, (3, 4))),
    )
    cfg = FleetConfig(num_workers=1, agentic_fraction=0.0, kv_event_delay_s=0.05)
    sim = FleetSimulator(trace, cfg)
    sim.next_request()
    sim.dispatch(0)  # admitted at t = 0: blocks 1, 2 enter the cache
    tel = sim.telemetry
    assert tel.cached_blocks((1, 2)).tolist() == [0]  # the event is not 50 ms old yet
    assert tel.exact.cached_blocks((1, 2)).tolist() == [2]
    sim.now = 0.06
    assert tel.cached_blocks((1, 2)).tolist() == [2]
    # An eviction is also seen late: with a two-block cache the next admission evicts.
    small = FleetConfig(num_workers=1, agentic_fraction=0.0, cache_blocks=2)
    sim = FleetSimulator(trace, small)
    for _ in range(2):
        sim.next_request()
        sim.dispatch(0)
    # The second request, admitted at t = 0.1 s, evicted blocks 1 and 2 just now.
    assert sim.telemetry.exact.cached_blocks((1, 2)).tolist() == [0]
    assert sim.telemetry.cached_blocks((1, 2)).tolist() == [2]
    no_delay = FleetSimulator(trace, FleetConfig(num_workers=1, kv_event_delay_s=0.0))
    no_delay.next_request()
    no_delay.dispatch(0)
    assert no_delay.telemetry.cached_blocks((1, 2)).tolist() == [2]


def test_scraped_metrics_are_those_of_the_last_scrape_tick():
    from mabp_gym.fleet import FleetConfig, FleetSimulator, Trace, TraceRequest

    # Arrivals at 0, 10 and 70 ms; long outputs, so nothing completes within the test.
    trace = Trace(
        "hand",
        tuple(TraceRequest(t, 1024, 500, (10 * k + 1,)) for k, t in enumerate((0.0, 10.0, 70.0))),
    )
    cfg = FleetConfig(num_workers=1, agentic_fraction=0.0, max_num_seqs=1)
    sim = FleetSimulator(trace, cfg)
    scraped, exact = sim.telemetry.scraped, sim.telemetry.exact
    sim.next_request()
    sim.dispatch(0)  # t = 0: runs at once
    sim.next_request()  # t = 10 ms: no tick since t = 0
    assert exact.running.tolist() == [1]
    assert scraped.running.tolist() == [0] and scraped.taken_at == 0.0
    sim.dispatch(0)  # waits: the batch limit is 1
    sim.next_request()  # t = 70 ms: the tick at 50 ms read both
    assert scraped.taken_at == pytest.approx(0.05)
    assert (scraped.running.tolist(), scraped.waiting.tolist()) == ([1], [1])
    assert scraped.kv_used_fraction() == pytest.approx(exact.kv_used_fraction())
    # Interval 0: the live arrays.
    live = FleetSimulator(trace, FleetConfig(num_workers=1, scrape_interval_s=0.0))
    live.next_request()
    live.dispatch(0)
    assert live.telemetry.scraped.running.tolist() == [1]


def test_trace__block_size_order_and_limits_are_checked():
    # A trace read or generated here hashes 512-token blocks: a fleet that counts another
    # size per hit is refused (block_tokens=16 cut the KV hit ratio 30-fold, unseen).
    from mabp_gym.fleet import load_trace

    trace = load_trace("synthetic", 50)
    assert trace.block_tokens == 512 and trace.scaled(2.0).block_tokens == 512
    with pytest.raises(ValueError, match="hashes 512-token blocks and the fleet's block_tokens"):
        FleetSimulator(trace, FleetConfig(block_tokens=16))
    # A trace built by hand leaves the block size to the fleet, and is held to arrival order.
    hand = (TraceRequest(0.0, 16, 2, (1, 2)), TraceRequest(5.0, 16, 2, (1, 3)))
    FleetSimulator(Trace("t", hand), FleetConfig(**EXACT))
    with pytest.raises(ValueError, match=r"requests\[1\]: timestamp 0.0 is earlier"):
        Trace("t", hand[::-1])
    with pytest.raises(ValueError, match="count >= 1"):
        trace.head(0)
    with pytest.raises(ValueError, match="whole number >= 1"):
        load_trace("synthetic", -5)


def test_scraper__a_fine_interval_is_refused_and_ticks_never_stall_far_from_zero():
    with pytest.raises(ValueError, match="scrape_interval_s must be 0 .exact. or at least"):
        FleetConfig(scrape_interval_s=1e-12)
    # Ticks by index: far from 0 an added interval rounds to nothing (at 1e8 s, 1e-9 s
    # did, and the scraper's loop never ended); forced past the check, the run ends.
    config = FleetConfig(num_workers=2, agentic_fraction=0.0)
    object.__setattr__(config, "scrape_interval_s", 1e-9)
    requests = tuple(TraceRequest(t, 600, 5, (1,)) for t in (0.0, 1e11, 1e11 + 1000.0))
    sim = FleetSimulator(Trace("far", requests), config)
    run_to_end(sim)
    assert len(sim.records) == 3 and sim.dropped == 0


def test_evaluate_fleet__runs_are_pooled_only_within_one_setting():
    from mabp_gym.fleet.evaluate import evaluate_fleet, summarize

    trace = prefix_tree_trace(40, seed=1)
    config = FleetConfig(num_workers=2)
    with pytest.raises(ValueError, match="routers: 'jsq' is given twice"):
        evaluate_fleet(trace, ["jsq", "jsq"], [0.5], 1, config)
    with pytest.raises(ValueError, match="loads: 0.5 is given twice"):
        evaluate_fleet(trace, ["jsq"], [0.5, 0.5], 1, config)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        evaluate_fleet(trace, ["jsq"], [0.5], 1, config, seed=-1)
    simple = evaluate_fleet(trace, ["jsq"], [0.5], 2, config, engine="simple")
    step = evaluate_fleet(trace, ["jsq"], [0.5], 2, config, engine="step")
    assert [r["seed"] for r in simple] == [0, 1]
    with pytest.raises(ValueError, match="differ in 'engine'"):
        summarize(simple + step)
    assert summarize(simple + simple)[(0.5, "jsq")]["runs"] == 2  # one run read twice
    more = evaluate_fleet(trace, ["jsq"], [0.5], 2, FleetConfig(num_workers=2, cache_blocks=9))
    with pytest.raises(ValueError, match="hold seed 0 twice"):
        summarize(simple + more)
    later = evaluate_fleet(trace, ["jsq"], [0.5], 2, config, seed=2)  # seeds 2, 3: independent
    assert summarize(simple + later)[(0.5, "jsq")]["runs"] == 4


def test_evaluate_fleet__a_reused_run_takes_this_commands_name_and_index():
    # The key holds the trace's content: a run reused from a copy of the trace (or from
    # --requests over all of it) kept the other name, and summarize then refused the table
    # ("differ in 'trace'") after the new runs were written; its run index was its old one.
    from dataclasses import replace

    from mabp_gym.fleet.evaluate import evaluate_fleet, summarize

    trace = prefix_tree_trace(40, seed=1)
    config = FleetConfig(num_workers=2)
    first = evaluate_fleet(trace, ["jsq"], [0.5], 1, config, seed=1)
    done = {r["key"]: r for r in first}
    copy = replace(trace, name="copy")
    records = evaluate_fleet(copy, ["jsq"], [0.5], 2, config, done=done)
    assert [(r["trace"], r["run"], r["seed"]) for r in records] == [("copy", 0, 0), ("copy", 1, 1)]
    assert records[1]["key"] == first[0]["key"]  # reused, not run again
    assert summarize(records)[(0.5, "jsq")]["runs"] == 2


def test_evaluate_fleet__settings_spelled_as_integers_and_numpy_seeds_are_the_same_run():
    from mabp_gym.fleet.evaluate import evaluate_fleet

    trace = prefix_tree_trace(40, seed=1)
    spelled = FleetConfig(num_workers=2, timeout_s=180, decode_base_s=0.012)
    assert isinstance(spelled.timeout_s, float) and spelled == FleetConfig(num_workers=2)
    a = evaluate_fleet(trace, ["jsq"], [0.5], 1, FleetConfig(num_workers=2))
    b = evaluate_fleet(trace, ["jsq"], [0.5], 1, spelled, seed=np.int64(0))  # was a TypeError
    assert a[0]["key"] == b[0]["key"] and b[0]["seed"] == 0
    for what, kwargs in (("loads", {"loads": 0.5}), ("routers", {"routers": "jsq"})):
        grid = {"routers": ["jsq"], "loads": [0.5], **kwargs}
        with pytest.raises(ValueError, match=f"{what} must be a list"):
            evaluate_fleet(trace, grid["routers"], grid["loads"], 1, FleetConfig(num_workers=2))


def test_step_engine__refuses_the_simple_engines_step_times():
    # It takes its step times from its profile: a "2x slower GPU" stretched the trace (load
    # scaling) and left the engine as fast, so the fleet looked better.
    from mabp_gym.fleet.evaluate import evaluate_fleet

    trace = prefix_tree_trace(40, seed=1)
    for name in ("prefill_s_per_token", "prefill_overhead_s", "decode_base_s", "decode_per_seq_s"):
        config = FleetConfig(num_workers=2, **{name: 2 * getattr(FleetConfig(), name)})
        with pytest.raises(ValueError, match=f"FleetConfig.{name} is the simple engine's"):
            FleetSimulator(trace, config, engine="step")
        with pytest.raises(ValueError, match="the simple engine's step time"):
            evaluate_fleet(trace, ["jsq"], [0.5], 1, config, engine="step")
        FleetSimulator(trace, config)  # the simple engine uses them


def test_replay__takes_a_router_by_name_and_refuses_what_is_none():
    import mabp_gym.fleet as fleet

    trace = Trace("t", tuple(fleet.shipped_trace("synthetic").requests[:40]))
    config = FleetConfig(num_workers=2)

    def routed(router) -> dict:  # the run's metrics but its decision times
        return {k: v for k, v in replay(trace, router, config, seed=3).items() if "us" not in k}

    assert routed("jsq") == routed(JSQ())
    with pytest.raises(ValueError, match="unknown router 'jsk'"):
        replay(trace, "jsk", config)
    with pytest.raises(TypeError, match="router must be a router name.*got the class JSQ"):
        replay(trace, JSQ, config)  # the class, not a router
    for bad in (-1, 1.5, "0"):
        with pytest.raises(ValueError, match="seed: must be"):
            replay(trace, "jsq", config, seed=bad)
    assert routed("jsq") == {  # a whole float is the integer (numpy refused 3.0 before)
        k: v for k, v in replay(trace, "jsq", config, seed=3.0).items() if "us" not in k
    }
    assert fleet.evaluate_fleet.__module__ == "mabp_gym.fleet.evaluate"  # where documented
