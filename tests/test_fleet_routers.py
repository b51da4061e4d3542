"""Each fleet router's rule, checked on a fleet state built by hand (the rules of the upstream
files each router's docstring cites, as docs/fleet.md tabulates them)."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym.fleet import ROUTERS, FleetConfig, FleetSimulator, Request, Trace, TraceRequest
from mabp_gym.fleet.routers import make_router
from mabp_gym.fleet.routers.aibrix import AIBrixPrefixCache
from mabp_gym.fleet.routers.dynamo import DynamoKV
from mabp_gym.fleet.routers.llmd import LLMD
from mabp_gym.fleet.routers.mabp_route import MABPRoute
from mabp_gym.fleet.routers.production_stack import VLLMProductionStack
from mabp_gym.fleet.routers.sglang import SGLangCacheAware

PROMPT = (10, 11, 12, 13)  # a 4-block prompt


def fleet(
    num_workers: int = 3,
    *,
    in_flight=None,
    waiting=None,
    running=None,
    active_blocks=None,
    running_blocks=None,
    backlog=None,
    caches=None,
    tools=None,
    now: float = 100.0,
    **config,
):
    """A simulator whose state is set by hand; returns its telemetry."""
    cfg = FleetConfig(num_workers=num_workers, **config)
    sim = FleetSimulator(Trace("hand", (TraceRequest(0.0, 10, 1, (0,)),)), cfg)
    sim.now = now
    for name, values in (
        ("in_flight", in_flight),
        ("waiting_count", waiting),
        ("running", running),
        ("active_blocks", active_blocks),
        ("running_blocks", running_blocks),
    ):
        if values is not None:
            getattr(sim, name)[:] = values
    if backlog is not None:
        sim.prefill_free[:] = now + np.asarray(backlog, dtype=float)
    for w, ids in (caches or {}).items():
        for block in ids:
            sim.caches[w][block] = None
    for w, keys in (tools or {}).items():
        for key in keys:
            sim.tools[w][key] = None
    sim._scrape(now)  # the routers' scrapers have read the state as built
    return sim.telemetry


def request(ids=PROMPT, tokens=None, tool=-1, output=100) -> Request:
    return Request(0, 100.0, tokens or 512 * len(ids), output, tuple(ids), tool, False)


def fresh(name: str, num_workers: int = 3, seed: int = 0):
    router = make_router(name)
    router.reset(num_workers, np.random.default_rng(seed))
    return router


def choices(name: str, telemetry, req, seeds=range(40)) -> set[int]:
    return {fresh(name, telemetry.num_workers, s).choose(req, telemetry) for s in seeds}


# -- the paper's baselines ---------------------------------------------------------------------
def test_round_robin__takes_the_workers_in_turn_whatever_their_load():
    router = fresh("round-robin", num_workers=3)
    tel = fleet(in_flight=[0, 9, 9], waiting=[0, 5, 5], caches={2: PROMPT})
    assert [router.choose(request(), tel) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    router.reset(3, np.random.default_rng(1))  # a new run starts at worker 0 again
    assert router.choose(request(), tel) == 0


def test_round_robin__spreads_a_replay_evenly():
    from mabp_gym.fleet import replay, shipped_trace

    trace = Trace("t", tuple(shipped_trace("synthetic").requests[:90]))
    router = make_router("round-robin")
    cfg = FleetConfig(num_workers=3, agentic_fraction=0.0)
    sim = FleetSimulator(trace, cfg)
    router.reset(3, np.random.default_rng(0))
    counts = [0, 0, 0]
    while (req := sim.next_request()) is not None:
        worker = router.choose(req, sim.telemetry)
        counts[worker] += 1
        sim.dispatch(worker)
    assert counts == [30, 30, 30]
    assert replay(trace, make_router("round-robin"), cfg)["drop_rate"] == 0.0


def test_lor__fewest_waiting_as_scraped_running_ignored_ties_to_lowest():
    # Worker 0 runs a full batch with nobody waiting: Vidur's LOR counts only the queue.
    tel = fleet(in_flight=[32, 0, 3], waiting=[0, 0, 3], running=[32, 0, 0])
    assert choices("lor", tel, request()) == {0}
    tel = fleet(waiting=[4, 1, 2])
    assert choices("lor", tel, request()) == {1}


def test_jsq__picks_fewest_in_flight_and_breaks_ties_at_random():
    assert choices("jsq", fleet(in_flight=[3, 1, 2]), request()) == {1}
    assert choices("jsq", fleet(in_flight=[1, 4, 1]), request()) == {0, 2}


def test_bp__least_pending_prefill_then_fewest_active_blocks_from_its_own_record():
    # This request's prefill: 4 * 512 * 8e-5 + 0.005 = 0.1688 s. The router sent w0 a
    # 4,096-token prompt (0.3327 s) and w2 a 1,024-token one (0.0869 s), none has a first
    # token yet: w1 has no pressure.
    router = fresh("bp")
    router.streams.add(1, 0, (1, 2, 3, 4, 5, 6, 7, 8), 4096)
    router.streams.add(2, 2, (20, 21), 1024)
    tel = fleet()
    assert router.choose(request(), tel) == 1
    # It reads neither the engines' queues nor their backlog: a huge exact backlog on w1
    # changes nothing.
    router = fresh("bp")
    router.streams.add(1, 0, (1, 2), 1024)
    assert router.choose(request(), fleet(waiting=[0, 9, 0], backlog=[0, 50, 0])) in (1, 2)
    # Equal pressure: the fewest unique active prompt blocks (the router's own record).
    router = fresh("bp")
    for rid, worker, blocks in ((1, 0, (1, 2, 3)), (2, 1, (4,)), (3, 2, (5, 6))):
        router.streams.add(rid, worker, blocks, 0)
    sim_tel = fleet()
    sim_tel._sim.first_token_log.extend([1, 2, 3])  # all three have streamed a first token
    assert router.choose(request(), sim_tel) == 1
    # A first token ends a request's pressure; its blocks stay until its stream ends.
    assert router.streams.pending_requests.tolist() == [0, 1, 0]  # the one just routed


def test_affinity__longest_cached_prefix_wins_whatever_the_load():
    tel = fleet(in_flight=[0, 0, 50], caches={0: [10], 2: [10, 11, 12]})
    assert choices("affinity", tel, request()) == {2}
    tel = fleet(in_flight=[5, 2, 9], caches={})
    assert choices("affinity", tel, request()) == {1}


# -- SGLang cache_aware --------------------------------------------------------------------------
def sglang_with_tree(name: str, worker: int, ids, now: float = 99.0) -> SGLangCacheAware:
    router = fresh(name)
    router.index.insert(worker, ids, now=now)
    return router


def test_sglang__imbalance_sends_to_least_loaded_despite_a_full_match():
    tel = fleet(in_flight=[40, 5, 6])  # 40 - 5 > 32 and 40 > 1.1 * 5
    assert sglang_with_tree("sglang-lib-default", 0, PROMPT).choose(request(), tel) == 1
    # The deployed defaults: abs threshold 64, not imbalanced -> the full match wins.
    assert sglang_with_tree("sglang", 0, PROMPT).choose(request(), tel) == 0
    tel = fleet(in_flight=[80, 10, 12])  # 70 > 64 and 80 > 1.5 * 10
    assert sglang_with_tree("sglang", 0, PROMPT).choose(request(), tel) == 1


def test_sglang__cache_threshold_separates_the_presets():
    tel = fleet(in_flight=[3, 2, 2])
    # match 2 of 4 blocks = 0.5: not > 0.5 (library default) -> least loaded; > 0.3 -> 0
    assert sglang_with_tree("sglang-lib-default", 0, PROMPT[:2]).choose(request(), tel) in (1, 2)
    assert sglang_with_tree("sglang", 0, PROMPT[:2]).choose(request(), tel) == 0
    assert sglang_with_tree("sglang-lib-default", 0, PROMPT[:3]).choose(request(), tel) == 0


def test_sglang__a_tie_at_the_deepest_node_goes_to_its_first_tenant_not_the_least_loaded():
    # Workers 2 and 0 both match 3 blocks; 2 inserted the deepest block first. Worker 0 has
    # fewer requests in flight, which the old rule (ties to the least loaded) would pick.
    for seed in range(10):
        router = fresh("sglang", seed=seed)
        router.index.insert(2, PROMPT[:3], now=10.0)
        router.index.insert(0, PROMPT[:3], now=20.0)
        assert router.choose(request(), fleet(in_flight=[1, 5, 4])) == 2
    assert router.index.first_tenant([0, 2], PROMPT[2]) == 2


def test_sglang__the_first_tenant_is_the_first_to_insert_even_at_the_same_instant():
    # A trace's requests often share a timestamp: the order of insertion still decides,
    # not the lower worker index.
    router = fresh("sglang")
    router.index.insert(2, PROMPT[:3], now=3.0)
    router.index.insert(0, PROMPT[:3], now=3.0)
    assert router.index.first_tenant([0, 2], PROMPT[2]) == 2
    assert router.choose(request(), fleet(in_flight=[1, 5, 4])) == 2


def test_sglang__inserts_the_prompt_and_evicts_down_to_the_tree_size():
    router = fresh("sglang-lib-default")
    tel = fleet(in_flight=[0, 0, 0], now=1.0)
    worker = router.choose(request(ids=tuple(range(100, 120))), tel)
    assert len(router.index.tables[worker]) == 20
    # 10,000 characters / (4 chars a token * 512 tokens a block) = 4 blocks after eviction.
    late = fleet(in_flight=[0, 0, 0], now=31.0)
    router.choose(request(ids=(999,)), late)
    assert len(router.index.tables[worker]) <= 4 + 1
    assert set(router.index.born[worker]) == set(router.index.tables[worker])


# -- Dynamo --------------------------------------------------------------------------------------
def routed(router, tel, req, rid: int) -> int:
    req.rid = rid
    return router.choose(req, tel)


def test_dynamo__lowest_prefill_plus_decode_blocks_at_temperature_zero():
    # Nothing routed yet: prefill blocks = uncached tokens / 512, decode blocks = the
    # request's own 4 blocks. w0 (4-4)+4 = 4, w1 (4-0)+4 = 8, w2 (4-2)+4 = 6.
    tel = fleet(caches={0: PROMPT, 2: PROMPT[:2]})
    router = fresh("dynamo-t0")
    assert list(router.costs(request(), tel)) == [4, 8, 6]
    assert choices("dynamo-t0", tel, request()) == {0}


def test_dynamo__pending_prefill_of_what_it_routed_counts_until_the_first_token():
    tel = fleet(caches={0: PROMPT})
    router = fresh("dynamo-t0")
    assert routed(router, tel, request(), rid=1) == 0  # cost 0 + 4 on w0
    # A second, different 4-block prompt: w0 now carries 0 pending tokens (all cached) and
    # 4 active blocks; w1, w2 nothing. w0: 4 + (4 + 4) = 12; w1, w2: 4 + 4 = 8.
    other = request(ids=(20, 21, 22, 23))
    assert list(router.costs(other, tel)) == [12, 8, 8]
    assert routed(router, tel, other, rid=2) in (1, 2)
    worker = router.streams.where[2]
    # Its 2,048 uncached tokens are pending on that worker until its first token returns.
    assert router.streams.pending_tokens[worker] == 2048
    third = request(ids=(30, 31))
    cost = router.costs(third, tel)
    assert cost[worker] == (2048 + 1024) / 512 + (4 + 2)
    tel._sim.first_token_log.append(2)  # the first token streams back
    assert router.costs(third, tel)[worker] == 1024 / 512 + (4 + 2)
    tel._sim.end_log.extend([1, 2])  # both streams end: nothing active is left
    assert list(router.costs(third, tel)) == [4, 4, 4]
    assert router.streams.where == {} and not router.streams.pending_tokens.any()


def test_dynamo__the_overlap_weight_scales_the_prefill_term_only():
    # cost = weight * prefill_blocks + decode_blocks. Uncached prefill blocks (0, 4, 2), the
    # request's own 4 decode blocks on each: weight 2 gives (0, 8, 4) + 4, not the
    # (0, 4, 2) + 2 * 4 of a weight on the decode term.
    tel = fleet(caches={0: PROMPT, 2: PROMPT[:2]})
    router = DynamoKV(overlap_score_weight=2.0)
    router.reset(3, np.random.default_rng(0))
    assert list(router.costs(request(), tel)) == [4, 12, 8]


def test_dynamo__shared_prompt_blocks_count_once():
    tel = fleet()
    router = fresh("dynamo-t0")
    routed(router, tel, request(), rid=1)
    worker = router.streams.where[1]
    tel._sim.first_token_log.append(1)
    # The same prompt again: its blocks are already active there (de-duplicated).
    assert router.costs(request(), tel)[worker] == 4 + 4


def test_dynamo__temperature_samples_exp_of_normalized_cost():
    tel = fleet(caches={0: PROMPT, 2: PROMPT[:2]})
    router = fresh("dynamo-t0.5", seed=7)
    # Costs (4, 8, 6) before anything is routed; keep the router's state empty.
    cost = router.costs(request(), tel)
    assert list(cost) == [4, 8, 6]
    picks = np.bincount(
        [fresh("dynamo-t0.5", seed=s).choose(request(), tel) for s in range(3000)], minlength=3
    )
    # normalized (0, 1, 0.5): p(w0) = 1 / (1 + exp(-2) + exp(-1))
    assert picks[0] / 3000 == pytest.approx(1 / (1 + np.exp(-2) + np.exp(-1)), abs=0.03)


def test_dynamo_approx__predicts_the_cache_from_its_routing_with_a_ttl():
    router = fresh("dynamo-t0-approx")
    # The engines' caches are ignored: worker 0 holds the prompt but the router never sent it.
    tel = fleet(caches={0: PROMPT}, now=0.0)
    first = routed(router, tel, request(), rid=1)
    tel._sim.end_log.append(1)
    assert list(router.costs(request(), tel)) == [4 + 4 * (w != first) for w in range(3)]
    later = fleet(now=119.0)
    assert router.choose(request(), later) == first  # still within the 120 s time-to-live
    expired = fleet(now=240.0)
    fresh_router = router
    fresh_router.streams = type(router.streams)(3)
    assert list(fresh_router.costs(request(), expired)) == [8, 8, 8]


# -- llm-d ----------------------------------------------------------------------------------------
def test_llmd__weighted_prefix_queue_and_kv_scorers():
    router = fresh("llm-d")
    router.index.insert(1, PROMPT[:2], now=0.0)
    # cache_blocks 100: kv used 0.5, 0.1, 0.0
    tel = fleet(waiting=[0, 4, 2], running_blocks=[50, 10, 0], cache_blocks=100)
    expected = np.array(
        [3 * 0 + 2 * 1.0 + 2 * 0.5, 3 * 0.5 + 2 * 0.0 + 2 * 0.9, 3 * 0 + 2 * 0.5 + 2 * 1.0]
    )
    assert router.scores(request(), tel) == pytest.approx(expected)
    assert router.choose(request(), tel) == 1
    assert LLMD.queue_scorer(np.array([2, 2])) == pytest.approx([1, 1])
    assert LLMD.load_aware_scorer(np.array([0, 64, 500])) == pytest.approx([0.5, 0.25, 0.0])


def test_llmd__the_queue_scorer_is_min_max_normalized_not_divided_by_the_max():
    # (q_max - q) / (q_max - q_min) with q_min 2: (6 - 2) / 4 = 1, (6 - 4) / 4 = 0.5, 0.
    assert LLMD.queue_scorer(np.array([2, 4, 6])) == pytest.approx([1.0, 0.5, 0.0])
    # In the total (no prefix match, empty KV): 2 * queue score + 2 * 1.
    tel = fleet(waiting=[2, 4, 6], cache_blocks=100)
    assert fresh("llm-d").scores(request(), tel) == pytest.approx([4.0, 3.0, 2.0])


def test_llmd__reads_the_queues_and_kv_use_of_the_last_scrape():
    tel = fleet(waiting=[0, 4, 2], running_blocks=[50, 10, 0], cache_blocks=100)
    sim = tel._sim
    sim.waiting_count[:] = [9, 0, 0]  # after the scrape: not seen until the next one
    sim.running_blocks[:] = [100, 0, 0]
    before = np.array([2 * 1.0 + 2 * 0.5, 2 * 0.0 + 2 * 0.9, 2 * 0.5 + 2 * 1.0])
    assert fresh("llm-d").scores(request(), tel) == pytest.approx(before)
    # The next tick (every 50 ms) reads the state as it is then.
    sim._scrape(sim.now + 0.05)
    after = np.array([2 * 0.0 + 2 * 0.0, 2 * 1.0 + 2 * 1.0, 2 * 1.0 + 2 * 1.0])
    assert fresh("llm-d").scores(request(), tel) == pytest.approx(after)


def test_llmd__the_prefix_scorer_reads_the_first_4096_tokens_only():
    long = tuple(range(40, 52))  # 12 blocks of 512 tokens: only the first 8 are hashed
    router = fresh("llm-d")
    router.index.insert(0, long[:8], now=0.0)
    tel = fleet(cache_blocks=100)
    # 8 of 8 hashed blocks match on w0: prefix score 1, not 8 / 12.
    assert router.scores(request(ids=long), tel)[0] == pytest.approx(3 * 1.0 + 2 + 2)
    router.choose(request(ids=long), tel)
    assert all(len(t) <= 8 for t in router.index.tables)


def test_llmd__the_index_holds_the_engines_block_count_per_server_by_default():
    router = fresh("llm-d")
    tel = fleet(in_flight=[0, 0, 0], cache_blocks=5)
    for k in range(4):
        router.choose(request(ids=(100 + 2 * k, 101 + 2 * k)), tel)
    assert max(len(t) for t in router.index.tables) <= 5
    with pytest.raises(ValueError, match="lru_blocks_per_server"):
        LLMD(lru_blocks_per_server=0)


# -- vLLM production-stack ---------------------------------------------------------------------
def test_vllm_prefixaware__random_among_the_longest_matches():
    tel = fleet()
    picks = set()
    for seed in range(30):
        router = fresh("vllm-prefixaware", seed=seed)
        router.index.insert(0, PROMPT[:3], 0.0)
        router.index.insert(2, PROMPT[:3], 0.0)
        router.index.insert(1, PROMPT[:1], 0.0)
        picks.add(router.choose(request(), tel))
    assert picks == {0, 2}


def test_vllm_loadaware__engine_match_minus_relative_load_ties_to_the_first_worker():
    # The match comes from the engines' own caches, not a router-side trie.
    tel = fleet(in_flight=[8, 0, 4], caches={0: PROMPT})
    # mean load 4: w0 1 - (8 - 4)/4 = 0; w1 0 - (0 - 4)/4 = 1; w2 0 - 0 = 0
    assert fresh("vllm-loadaware").choose(request(), tel) == 1
    # mean 2: w0 1 - 1/2 = 0.5; w1 0 + 1/2 = 0.5: a tie goes to the first worker, always.
    tel = fleet(in_flight=[3, 1, 2], caches={0: PROMPT})
    assert choices("vllm-loadaware", tel, request()) == {0}


def test_vllm_loadaware__no_prefix_anywhere_falls_back_to_the_lowest_request_rate():
    router = fresh("vllm-loadaware")
    # Route three requests that no engine has cached: each goes to the lowest QPS so far.
    tel = fleet(in_flight=[0, 0, 0], now=0.0)
    picks = [router.choose(request(ids=(200 + k,)), tel) for k in range(3)]
    assert sorted(picks) == [0, 1, 2]
    # Worker 2 is loaded (in flight) but has the lowest rate over the window: it wins.
    router.rate.record(0, 1.0)
    router.rate.record(1, 1.0)
    tel = fleet(in_flight=[0, 0, 9], now=2.0)
    assert router.choose(request(ids=(300,)), tel) == 2
    # Past the 60 s window the old requests no longer count.
    assert router.rate.qps(100.0).tolist() == [0.0, 0.0, 0.0]


# -- AIBrix ---------------------------------------------------------------------------------------
def aibrix_with(worker_prefixes, now: float = 0.0, num_workers: int = 4):
    router = fresh("aibrix", num_workers=num_workers)
    tel = fleet(num_workers, now=now)
    router.choose(request(ids=(999,)), tel)  # builds the index for this block size
    for worker, ids in worker_prefixes:
        router.index.insert(worker, ids, now)
    return router


def test_aibrix__the_load_gate_opens_above_a_gap_of_8_only():
    # Gap exactly 8: not imbalanced; the full match on w0 (load 9 <= mean 7 + std 3.46) wins.
    router = aibrix_with([(0, PROMPT)])
    assert router.choose(request(), fleet(4, in_flight=[9, 1, 9, 9])) == 0
    # Gap 9: only the least-loaded worker is eligible. The removed extra condition
    # (max > 2 * (mean + 1): 10 > 17.5 is false) would have left w0 eligible.
    router = aibrix_with([(0, PROMPT)])
    assert router.choose(request(), fleet(4, in_flight=[10, 1, 10, 10])) == 1


def test_aibrix__best_match_under_mean_plus_std_else_next():
    router = aibrix_with([(0, PROMPT), (3, PROMPT[:2])])
    # loads (3, 2, 2, 3): mean 2.5, std 0.5; w0 (100%, load 3 <= 3) fits.
    assert router.choose(request(), fleet(4, in_flight=[3, 2, 2, 3])) == 0
    router = aibrix_with([(0, PROMPT), (3, PROMPT[:2])])
    # loads (6, 2, 2, 2): mean 3, std 1.73: w0 over the bound; next by match is w3 (50%).
    assert router.choose(request(), fleet(4, in_flight=[6, 2, 2, 2])) == 3


def test_aibrix__an_equal_match_goes_to_the_less_loaded_worker():
    # Both workers hold the whole prompt; loads (3, 1): mean 2, std 1, so both are within
    # mean + std = 3. The sort is match descending, then load ascending: worker 1, whatever
    # the random order equal pairs start in.
    for seed in range(10):
        router = fresh("aibrix", num_workers=2, seed=seed)
        router.choose(request(ids=(999,)), fleet(2, now=0.0))  # builds the index
        router.index.insert(0, PROMPT, 0.0)
        router.index.insert(1, PROMPT, 0.0)
        assert router.choose(request(), fleet(2, in_flight=[3, 1], now=0.0)) == 1


def test_aibrix__one_global_index_with_a_20_minute_ttl_and_390_blocks():
    router = aibrix_with([(0, PROMPT)])
    assert router.index.capacity == 200_000 * 4 // (4 * 512) == 390
    assert router.index.matches(PROMPT, 4, now=1199.0).tolist() == [4, 0, 0, 0]
    assert router.index.matches(PROMPT, 4, now=1201.0).tolist() == [0, 0, 0, 0]
    for k in range(400):
        router.index.insert(1, (5000 + k,), now=1.0)
    assert len(router.index.table) == 390 and PROMPT[0] not in router.index.table


# -- MABP-Route ----------------------------------------------------------------------------------
def mabp_route(exact: bool = False, num_workers: int = 3) -> MABPRoute:
    router = MABPRoute(exact=exact)
    router.reset(num_workers, np.random.default_rng(0))
    return router


def test_mabp_route__reuse_wins_unless_its_estimated_backlog_says_otherwise():
    tel = fleet(caches={2: PROMPT})
    assert choices("mabp-route", tel, request()) == {2}
    # Full prefill 0.1688 s, so 1 s of prefill the router sent w2 outweighs the 0.1638 s that
    # reuse saves. The engine's own backlog (0 here) is not what the router reads.
    router = mabp_route()
    router.backlog[:] = [0.0, 0.0, 1.0]
    router.stamp = tel.now
    assert router.choose(request(), tel) in (0, 1)
    # The exact reference reads the engine instead.
    tel = fleet(caches={2: PROMPT}, backlog=[0.0, 0.0, 1.0])
    assert choices("mabp-route-exact", tel, request()) == {0, 1}
    assert choices("mabp-route", tel, request()) == {2}


def test_mabp_route__its_backlog_estimate_is_what_it_sent_drained_at_one_second_a_second():
    router = mabp_route()
    tel = fleet(now=10.0)
    worker = router.choose(request(), tel)  # nothing cached: 0.1688 s of prefill
    assert router.backlog[worker] == pytest.approx(0.005 + 2048 * 8e-5)
    later = fleet(now=10.1)
    cost = router.costs(request(), later)
    assert router.backlog[worker] == pytest.approx(0.005 + 2048 * 8e-5 - 0.1)
    assert cost[worker] > cost[(worker + 1) % 3]
    assert not router._estimated_backlog(11.0).any()  # all served by now, at best


def test_mabp_route__tool_state_from_where_it_sent_that_state_before():
    router = mabp_route()
    router.tools[1][77] = None
    tel = fleet()
    assert router.choose(request(tool=77), tel) == 1
    assert 77 in router.tools[1]
    assert choices("mabp-route", tel, request(tool=-1)) == {0, 1, 2}
    # A downstream job installs no tool state where it runs (the engine's rule), so the
    # router does not record one there either.
    follow_up = Request(1, 100.0, 2048, 100, PROMPT, 88, True)
    sent = router.choose(follow_up, tel)
    assert all(88 not in tools for tools in router.tools), sent
    # The exact reference reads the engines' tool caches.
    assert choices("mabp-route-exact", fleet(tools={2: [77]}), request(tool=77)) == {2}


def test_mabp_route__damps_a_worker_near_its_batch_limit():
    # Reuse saves 0.1688 - 0.005 s; damping costs (in flight / 32)^2 * 0.1688 s.
    half = mabp_route().costs(request(), fleet(in_flight=[16, 0, 0], caches={0: PROMPT}))
    assert half[0] < half[1]
    full = mabp_route().costs(request(), fleet(in_flight=[32, 0, 0], caches={0: PROMPT}))
    assert full[0] > full[1]
    exact = mabp_route(exact=True).costs(request(), fleet(running=[32, 0, 0], caches={0: PROMPT}))
    assert exact[0] > exact[1]


def test_mabp_route__each_cost_term_by_hand():
    # Defaults: prefill_s(n) = 0.005 + 8e-5 * n, batch limit 32, p_miss 0.35, p_hit 0.05.
    full = 0.005 + 8e-5 * 2048  # 0.1688 s: the 4-block prompt, nothing cached
    tel = fleet(in_flight=[16, 34, 0], caches={0: PROMPT})
    router = mabp_route()
    router.tools[2][77] = None  # it sent tool state 77 to worker 2 before
    router.costs(request(ids=PROMPT[:2]), tel)  # a 1,024-token request seen first
    mean = (0.005 + 8e-5 * 1024 + full) / 2  # the fleet's mean request prefill, this one too
    # Successor term: (p_miss - p_hit) * E[job], E[job] the prefill of tool_tokens + the
    # request's output and 64 decode steps of a batch of one, on the workers without 77.
    tool = (0.35 - 0.05) * (0.005 + 8e-5 * (512 + 100) + 64 * 0.012)
    expected = [
        # w0: everything cached (the overhead is left), damping (16 / 32)^2 of the *full*
        # prefill, not of the uncached one: reuse never hides how busy a worker is.
        0.005 + 0.5**2 * full + tool,
        # w1: 34 in flight past the batch limit of 32: 2 * the mean prefill of backpressure;
        # busy is capped at 32, so damping 1^2 * full.
        2 * mean + full + 1.0**2 * full + tool,
        # w2: idle, holds the tool state: its prefill only.
        full,
    ]
    assert router.costs(request(tool=77), tel) == pytest.approx(expected, rel=1e-12)


# -- oracle-ttft -----------------------------------------------------------------------------------
def test_oracle_ttft__earliest_first_token_on_the_exact_backlog_and_cache():
    # Prefill of the 4-block prompt: 0.005 + 2048 * 8e-5 = 0.1688 s; cached on w2: 0.005 s.
    tel = fleet(caches={2: PROMPT}, backlog=[0.1, 0.0, 0.2])
    # w0 0.1 + 0.1688, w1 0 + 0.1688, w2 0.2 + 0.005: w1 (0.1688) beats w2 (0.205).
    assert choices("oracle-ttft", tel, request()) == {1}
    tel = fleet(caches={2: PROMPT}, backlog=[0.1, 0.0, 0.1])
    assert choices("oracle-ttft", tel, request()) == {2}
    tel = fleet(in_flight=[3, 1, 2])
    assert choices("oracle-ttft", tel, request()) == {1}  # equal costs: fewest in flight


# -- contract ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router__returns_a_valid_worker_and_production_rules_cite_their_source(name):
    router = fresh(name, num_workers=5)
    tel = fleet(5, in_flight=[1, 2, 3, 4, 5])
    assert 0 <= router.choose(request(), tel) < 5
    if ROUTERS[name].kind in ("production", "ablation"):
        doc = type(router).__doc__ or ""
        assert ".rs" in doc or ".go" in doc or ".py" in doc or ".md" in doc


def test_make_router__names_the_known_routers_on_a_typo():
    with pytest.raises(ValueError, match="unknown router 'jqs'.*jsq"):
        make_router("jqs")


@pytest.mark.parametrize(
    "name", sorted(n for n, spec in ROUTERS.items() if spec.kind != "reference"), ids=str
)
def test_router__reads_no_exact_engine_state_on_either_engine(name):
    """Only the labelled references read ``telemetry.exact``."""
    from mabp_gym.fleet import shipped_trace

    trace = shipped_trace("synthetic").head(150)
    for engine in ("simple", "step"):
        sim = FleetSimulator(trace, FleetConfig(num_workers=3, agentic_fraction=0.5), 0, engine)
        sim.telemetry.exact_allowed = False  # reading it raises PermissionError
        router = fresh(name)
        while (req := sim.next_request()) is not None:
            sim.dispatch(router.choose(req, sim.telemetry))
    # The control: a reference does read it.
    sim = FleetSimulator(trace, FleetConfig(num_workers=3))
    sim.telemetry.exact_allowed = False
    with pytest.raises(PermissionError, match="exact state"):
        fresh("oracle-ttft").choose(sim.next_request(), sim.telemetry)


# -- the plug-in mechanism -------------------------------------------------------------------
class _LowestIndex:
    """A router of a user's own: always the first worker of ``offset`` and later."""

    name = "lowest"

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def reset(self, num_workers, rng) -> None:
        self.num_workers = num_workers

    def choose(self, request, telemetry) -> int:
        return min(self.offset, self.num_workers - 1)


def test_register_router__a_users_router_is_built_by_name_and_replayed():
    from mabp_gym.fleet import register_router, replay, router_names, shipped_trace
    from mabp_gym.fleet.routers import ROUTERS as LIVE

    register_router("test-lowest-1", _LowestIndex, offset=1)
    try:
        assert "test-lowest-1" in router_names() and "test-lowest-1" in router_names("user")
        assert "test-lowest-1" not in router_names("production")
        router = make_router("test-lowest-1")
        assert isinstance(router, _LowestIndex) and router.offset == 1
        assert make_router("test-lowest-1") is not router  # a fresh one each time
        trace = shipped_trace("synthetic").head(40)
        metrics = replay(trace, make_router("test-lowest-1"), FleetConfig(num_workers=3))
        assert metrics["throughput"] > 0 and metrics["drop_rate"] < 1
    finally:
        del LIVE["test-lowest-1"]


class _Peeker(_LowestIndex):
    """A user's router that reads the engines' exact state, which no real router has."""

    def choose(self, request, telemetry) -> int:
        return int(np.argmin(telemetry.exact.waiting))


def test_evaluate_fleet__only_a_reference_may_read_the_exact_engine_state():
    from mabp_gym.fleet import evaluate_fleet, register_router, replay, shipped_trace
    from mabp_gym.fleet.routers import ROUTERS as LIVE

    trace = shipped_trace("synthetic").head(30)
    config = FleetConfig(num_workers=2)
    register_router("test-peeker", _Peeker)
    register_router("test-peeker-ref", _Peeker, kind="reference")
    try:
        with pytest.raises(PermissionError, match="router _Peeker read telemetry.exact"):
            evaluate_fleet(trace, ["test-peeker"], [0.5], runs=1, config=config)
        records = evaluate_fleet(trace, ["test-peeker-ref"], [0.5], runs=1, config=config)
        assert records[0]["throughput"] > 0
        assert replay(trace, _Peeker(), config)["throughput"] > 0  # by hand: the caller's call
        with pytest.raises(PermissionError, match="kind='reference'"):
            replay(trace, _Peeker(), config, exact_state=False)
    finally:
        del LIVE["test-peeker"], LIVE["test-peeker-ref"]


def test_register_router__the_shipped_kinds_decide_who_competes_in_a_table():
    from mabp_gym.fleet import ABLATION_ROUTERS, PRODUCTION_ROUTERS, REFERENCE_ROUTERS

    assert set(REFERENCE_ROUTERS) == {"oracle-ttft", "mabp-route-exact"}
    assert ABLATION_ROUTERS == ("sglang-lib-default", "llm-d-fixed-index")
    assert "aibrix" in PRODUCTION_ROUTERS and "mabp-route" not in PRODUCTION_ROUTERS
    assert make_router("vllm-loadaware").mode == "loadaware"
    assert make_router("dynamo-t0.5").temperature == 0.5


@pytest.mark.parametrize(
    "name, entry, kind, match",
    [
        ("jsq", _LowestIndex, "user", "already registered"),
        ("", _LowestIndex, "user", "non-empty string"),
        ("a,b", _LowestIndex, "user", "without ','"),
        ("test-new", _LowestIndex, "fancy", "kind of router 'test-new' must be one of"),
        ("test-new", "no_colon", "user", "must look like 'module:attribute'"),
        ("test-new", 3, "user", "a 'module:attribute' string or a callable, got int"),
        ("test-new", "no_such_routers:X", "user", "cannot import it"),  # a typo: at once
    ],
)
def test_register_router__bad_registrations_are_refused_and_change_nothing(
    name, entry, kind, match
):
    from mabp_gym.fleet import register_router

    before = dict(ROUTERS)
    with pytest.raises(ValueError, match=match):
        register_router(name, entry, kind=kind)
    assert before == ROUTERS


def test_llmd__the_fixed_index_preset_holds_500k_tokens_a_server_in_the_fleets_blocks():
    # routers.md: 31,250 blocks of 16 tokens a server, or the engine's own block count when
    # auto-tuned (the registered llm-d); both defaults are shipped.
    fixed, tuned = make_router("llm-d-fixed-index"), make_router("llm-d")
    assert fixed.index_blocks(512, 4000) == 976 and fixed.index_blocks(16, 4000) == 31_250
    assert tuned.index_blocks(512, 4000) == 4000
    with pytest.raises(ValueError, match="not both"):
        LLMD(lru_blocks_per_server=10, lru_tokens_per_server=5000)
    with pytest.raises(ValueError, match="lru_tokens_per_server: must be >= 1"):
        LLMD(lru_tokens_per_server=0)


def test_evaluate_fleet__an_edited_router_of_your_own_is_run_again_not_reused(
    tmp_path, monkeypatch
):
    """The run key holds a router of your own by its code (and every router by the
    package's version): an edit made the same command reuse the old code's runs."""
    import sys

    from mabp_gym.fleet import evaluate_fleet, register_router, shipped_trace
    from mabp_gym.fleet.routers import ROUTERS as LIVE

    module = tmp_path / "my_routers_edit.py"
    body = (
        "from mabp_gym.fleet.routers.base import RouterBase\n"
        "class Mine(RouterBase):\n"
        "    def choose(self, request, telemetry):\n"
        "        return {worker}\n"
    )
    module.write_text(body.format(worker=0))
    monkeypatch.syspath_prepend(str(tmp_path))
    trace, config = shipped_trace("synthetic").head(30), FleetConfig(num_workers=2)
    register_router("test-edited", "my_routers_edit:Mine")
    try:
        first = evaluate_fleet(trace, ["test-edited"], [0.5], runs=1, config=config)
        done = {r["key"]: r for r in first}
        same = evaluate_fleet(trace, ["test-edited"], [0.5], runs=1, config=config, done=done)
        assert same[0]["key"] == first[0]["key"]
        module.write_text(body.format(worker=1))
        edited = evaluate_fleet(trace, ["test-edited"], [0.5], runs=1, config=config, done=done)
        assert edited[0]["key"] != first[0]["key"]
    finally:
        del LIVE["test-edited"]
        sys.modules.pop("my_routers_edit", None)


def test_evaluate_fleet__a_routers_error_says_which_router_and_run_and_true_is_no_worker():
    from mabp_gym.fleet import evaluate_fleet, register_router, shipped_trace
    from mabp_gym.fleet.routers import ROUTERS as LIVE

    class Out:
        def reset(self, num_workers, rng):
            self.n = num_workers

        def choose(self, request, telemetry):
            return self.n

    class Yes(Out):
        def choose(self, request, telemetry):
            return True

    trace, config = shipped_trace("synthetic").head(30), FleetConfig(num_workers=2)
    register_router("test-out", Out)
    register_router("test-yes", Yes)
    try:
        with pytest.raises(ValueError, match=r"worker must be an integer in \[0, 2\)") as err:
            evaluate_fleet(trace, ["jsq", "test-out"], [0.5], runs=1, config=config)
        if hasattr(err.value, "add_note"):  # Python 3.11 on
            assert "router 'test-out' on trace synthetic[:30] at load 0.5, run 0" in str(
                err.value.__notes__
            )
        with pytest.raises(ValueError, match="got True"):
            evaluate_fleet(trace, ["test-yes"], [0.5], runs=1, config=config)
    finally:
        del LIVE["test-out"], LIVE["test-yes"]


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: AIBrixPrefixCache(ttl_s=-5), "aibrix ttl_s"),
        (lambda: AIBrixPrefixCache(imbalance_abs=-1), "aibrix imbalance_abs"),
        (lambda: AIBrixPrefixCache(imbalance_abs=2.5), "aibrix imbalance_abs"),
        (lambda: AIBrixPrefixCache(std_factor=float("nan")), "aibrix std_factor"),
        (lambda: LLMD(lru_blocks_per_server=2.5), "llm-d lru_blocks_per_server"),
        (lambda: LLMD(prefix_weight=float("nan")), "llm-d prefix_weight"),
        (lambda: LLMD(queue_weight=-1.0), "llm-d queue_weight"),
        (lambda: DynamoKV(overlap_score_weight=float("nan")), "dynamo overlap_score_weight"),
        (lambda: MABPRoute(damping=float("nan")), "mabp-route damping"),
        (lambda: MABPRoute(tool_weight="1"), "mabp-route tool_weight"),
        (lambda: VLLMProductionStack("loadaware", beta=float("inf")), "vllm-loadaware beta"),
        (lambda: VLLMProductionStack("prefixaware", window_s=0.0), "vllm-prefixaware window_s"),
        (lambda: DynamoKV(temperature=float("nan")), "dynamo temperature"),
        (lambda: DynamoKV(ttl_s=-1.0), "dynamo ttl_s"),
    ],
)
def test_routers__refuse_a_parameter_that_is_not_a_number_in_range_by_name(build, named):
    # Before, these ran silently or failed mid-run with numpy's "cannot be empty".
    with pytest.raises(ValueError, match=named):
        build()


def test_routers__a_ttl_of_infinity_means_entries_never_expire():
    assert AIBrixPrefixCache(ttl_s=float("inf")).ttl_s == DynamoKV(ttl_s=float("inf")).ttl_s
    with pytest.raises(ValueError, match="aibrix ttl_s: must be > 0"):
        AIBrixPrefixCache(ttl_s=0.0)
