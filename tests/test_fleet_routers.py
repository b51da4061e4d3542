"""Each fleet router's rule, checked on a fleet state built by hand (../shared/routers.md)."""

from __future__ import annotations

import numpy as np
import pytest

from mabp_gym.fleet import ROUTERS, FleetConfig, FleetSimulator, Request, Trace, TraceRequest
from mabp_gym.fleet.routers import (
    LLMD,
    MABPRoute,
    SGLangCacheAware,
    make_router,
)

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
def test_jsq__picks_fewest_in_flight_and_breaks_ties_at_random():
    assert choices("jsq", fleet(in_flight=[3, 1, 2]), request()) == {1}
    assert choices("jsq", fleet(in_flight=[1, 4, 1]), request()) == {0, 2}


def test_bp__least_queue_pressure_then_fewest_active_blocks():
    # Request prefill 4 * 512 * 8e-5 + 0.005 = 0.1688 s; backlog in those units.
    tel = fleet(waiting=[0, 0, 0], backlog=[1.0, 0.0, 0.5])
    assert choices("bp", tel, request()) == {1}
    tel = fleet(waiting=[0, 1, 0], backlog=[0.0, 0.0, 0.0], active_blocks=[30, 0, 20])
    assert choices("bp", tel, request()) == {2}


def test_affinity__longest_cached_prefix_wins_whatever_the_load():
    tel = fleet(in_flight=[0, 0, 50], caches={0: [10], 2: [10, 11, 12]})
    assert choices("affinity", tel, request()) == {2}
    tel = fleet(in_flight=[5, 2, 9], caches={})
    assert choices("affinity", tel, request()) == {1}


# -- SGLang cache_aware --------------------------------------------------------------------------
def sglang_with_tree(preset: str, worker: int, ids) -> SGLangCacheAware:
    router = fresh(f"sglang-{preset}")
    router.index.insert(worker, ids, now=99.0)
    return router


def test_sglang__imbalance_sends_to_least_loaded_despite_a_full_match():
    router = sglang_with_tree("rust", 0, PROMPT)
    tel = fleet(in_flight=[40, 5, 6])  # 40 - 5 > 32 and 40 > 1.1 * 5
    assert router.choose(request(), tel) == 1
    router = sglang_with_tree("python", 0, PROMPT)  # abs threshold 64: not imbalanced
    assert router.choose(request(), tel) == 0


def test_sglang__cache_threshold_separates_the_presets():
    tel = fleet(in_flight=[3, 2, 2])
    # match 2 of 4 blocks = 0.5: not > 0.5 (Rust) -> least loaded; > 0.3 (Python) -> worker 0
    assert sglang_with_tree("rust", 0, PROMPT[:2]).choose(request(), tel) in (1, 2)
    assert sglang_with_tree("python", 0, PROMPT[:2]).choose(request(), tel) == 0
    assert sglang_with_tree("rust", 0, PROMPT[:3]).choose(request(), tel) == 0


def test_sglang__inserts_the_prompt_and_evicts_down_to_the_tree_size():
    router = fresh("sglang-rust")
    tel = fleet(in_flight=[0, 0, 0], now=1.0)
    worker = router.choose(request(ids=tuple(range(100, 120))), tel)
    assert len(router.index.tables[worker]) == 20
    # 10,000 characters / (4 chars a token * 512 tokens a block) = 4 blocks after eviction.
    late = fleet(in_flight=[0, 0, 0], now=31.0)
    router.choose(request(ids=(999,)), late)
    assert len(router.index.tables[worker]) <= 4 + 1


# -- Dynamo --------------------------------------------------------------------------------------
def test_dynamo__lowest_prefill_plus_decode_blocks_at_temperature_zero():
    # costs: w0 (4-4)+10 = 10, w1 (4-0)+5 = 9, w2 (4-2)+8 = 10
    tel = fleet(active_blocks=[10, 5, 8], caches={0: PROMPT, 2: PROMPT[:2]})
    router = fresh("dynamo-t0")
    assert list(router.costs(request(), tel)) == [10, 9, 10]
    assert choices("dynamo-t0", tel, request()) == {1}


def test_dynamo__temperature_samples_exp_of_normalized_cost():
    tel = fleet(active_blocks=[10, 5, 8], caches={0: PROMPT, 2: PROMPT[:2]})
    router = fresh("dynamo-t0.5", seed=7)
    picks = np.bincount([router.choose(request(), tel) for _ in range(6000)], minlength=3)
    # normalized costs (1, 0, 1): p(w1) = 1 / (1 + 2 exp(-2)) = 0.787
    assert picks[1] / 6000 == pytest.approx(1 / (1 + 2 * np.exp(-2)), abs=0.02)


def test_dynamo_approx__predicts_the_cache_from_its_routing_with_a_ttl():
    router = fresh("dynamo-t0-approx")
    # The engines' caches are ignored: worker 0 holds the prompt but the router never sent it.
    tel = fleet(active_blocks=[0, 0, 0], caches={0: PROMPT}, now=0.0)
    first = router.choose(request(), tel)
    assert list(router.costs(request(), tel)) == [4 - 4 * (w == first) for w in range(3)]
    later = fleet(active_blocks=[0, 0, 0], now=119.0)
    assert router.choose(request(), later) == first  # still within the 120 s time-to-live
    expired = fleet(active_blocks=[0, 0, 0], now=240.0)
    assert list(router.costs(request(), expired)) == [4, 4, 4]


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


def test_vllm_loadaware__match_minus_relative_load():
    router = fresh("vllm-loadaware")
    router.index.insert(0, PROMPT, 0.0)
    # mean load 4: w0 1 - (8 - 4)/4 = 0; w1 0 - (0 - 4)/4 = 1; w2 0 - 0 = 0
    assert router.choose(request(), fleet(in_flight=[8, 0, 4])) == 1
    router = fresh("vllm-loadaware")
    router.index.insert(0, PROMPT, 0.0)
    # mean 2: w0 1 - 1/2 = 0.5; w1 0 + 1/2 = 0.5 - tie broken at random; w2 0 - (2-2)/2 = 0
    assert router.choose(request(), fleet(in_flight=[3, 1, 2])) in (0, 1)


# -- AIBrix ---------------------------------------------------------------------------------------
def test_aibrix__load_gate_keeps_only_the_least_loaded():
    router = fresh("aibrix", num_workers=4)
    router.index.insert(0, PROMPT, 0.0)
    # max 20 > 2 * (mean 5.5 + 1) and 20 - 0 >= 8: only worker 1 (load 0) is eligible.
    assert router.choose(request(), fleet(4, in_flight=[20, 0, 1, 1])) == 1


def test_aibrix__best_match_under_mean_plus_std_else_next():
    router = fresh("aibrix", num_workers=4)
    router.index.insert(0, PROMPT, 0.0)
    router.index.insert(3, PROMPT[:2], 0.0)
    # loads (3, 2, 2, 3): mean 2.5, std 0.5; w0 (100%, load 3 <= 3) fits.
    assert router.choose(request(), fleet(4, in_flight=[3, 2, 2, 3])) == 0
    router = fresh("aibrix", num_workers=4)
    router.index.insert(0, PROMPT, 0.0)
    router.index.insert(3, PROMPT[:2], 0.0)
    # loads (6, 2, 2, 2): mean 3, std 1.73: w0 over the bound; next by match is w3 (50%).
    assert router.choose(request(), fleet(4, in_flight=[6, 2, 2, 2])) == 3


# -- MABP-Route ----------------------------------------------------------------------------------
def test_mabp_route__reuse_wins_unless_the_cached_worker_is_backlogged():
    tel = fleet(caches={2: PROMPT})
    assert choices("mabp-route", tel, request()) == {2}
    # Full prefill 0.1688 s, so a 1 s backlog outweighs the 0.1638 s that reuse saves.
    tel = fleet(caches={2: PROMPT}, backlog=[0.0, 0.0, 1.0])
    assert choices("mabp-route", tel, request()) == {0, 1}


def test_mabp_route__tool_state_breaks_an_otherwise_equal_choice():
    tel = fleet(tools={1: [77]})
    assert choices("mabp-route", tel, request(tool=77)) == {1}
    assert choices("mabp-route", tel, request(tool=-1)) == {0, 1, 2}


def test_mabp_route__damps_a_worker_near_its_batch_limit():
    router = MABPRoute()
    router.reset(3, np.random.default_rng(0))
    # Reuse saves 0.1688 - 0.005 s; damping costs (running / 32)^2 * 0.1688 s.
    half = router.costs(request(), fleet(running=[16, 0, 0], caches={0: PROMPT}))
    assert half[0] < half[1]
    full = router.costs(request(), fleet(running=[32, 0, 0], caches={0: PROMPT}))
    assert full[0] > full[1]


# -- contract ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_router__returns_a_valid_worker_and_production_rules_cite_their_source(name):
    router = fresh(name, num_workers=5)
    tel = fleet(5, in_flight=[1, 2, 3, 4, 5])
    assert 0 <= router.choose(request(), tel) < 5
    if name not in ("jsq", "bp", "affinity", "mabp-route"):
        doc = type(router).__doc__ or ""
        assert ".rs" in doc or ".go" in doc or ".py" in doc or ".md" in doc


def test_make_router__names_the_known_routers_on_a_typo():
    with pytest.raises(ValueError, match="unknown router 'jqs'.*jsq"):
        make_router("jqs")
