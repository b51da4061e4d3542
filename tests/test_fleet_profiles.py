"""Step-time profiles (selection, provenance, the plausibility check) and the step engine's
vLLM settings (validation, and what each one changes)."""

from __future__ import annotations

import dataclasses
import json

import gymnasium
import numpy as np
import pytest

import mabp_gym  # noqa: F401  (registers the envs)
from mabp_gym.fleet import (
    FleetConfig,
    FleetSimulator,
    Trace,
    TraceRequest,
    make_config,
    make_router,
    replay,
    shipped_trace,
)
from mabp_gym.fleet.engine import (
    GPUS,
    LLAMA3_8B_A100_FORWARD_S,
    MAX_PEAK_FRACTION,
    PROFILES,
    fit_step_profile,
)
from mabp_gym.fleet.evaluate import evaluate_fleet

LLAMA = PROFILES["llama-3-8b-a100"]


def one_worker(requests, profile=None, **config) -> FleetSimulator:
    cfg = FleetConfig(num_workers=1, agentic_fraction=0.0, **config)
    sim = FleetSimulator(Trace("hand", tuple(requests)), cfg, engine="step", profile=profile)
    while sim.next_request() is not None:
        sim.dispatch(0)
    return sim


def test_every_shipped_profile_says_where_it_comes_from_and_is_plausible():
    for name, profile in PROFILES.items():
        assert profile.name == name and len(profile.source) > 40
        share = profile.implied_prefill_flops() / GPUS[profile.gpu].peak_flops
        assert 0.3 < share <= MAX_PEAK_FRACTION


def test_a_profile_implying_more_than_75_percent_of_peak_is_refused():
    # BLIS's Llama-3.1-8B H100 prefill coefficient: 17.25 us a token, 931 TFLOP/s.
    with pytest.raises(ValueError, match=r"931 TFLOP/s, 94% of the H100-SXM's dense peak"):
        dataclasses.replace(LLAMA, name="h100", prefill_s_per_token=17.251e-6, gpu="H100-SXM")
    with pytest.raises(ValueError, match="gpu must be one of"):
        dataclasses.replace(LLAMA, gpu="TPU-v9")
    with pytest.raises(ValueError, match="decode_s_per_token must be > 0"):
        dataclasses.replace(LLAMA, decode_s_per_token=0.0)
    assert "llama-3.1-8b-h100" not in PROFILES


def test_llama_profile_is_the_fit_to_the_reference_forward_times():
    fitted = fit_step_profile(
        "refit",
        *LLAMA3_8B_A100_FORWARD_S,
        kv_bytes_per_token=131_072,
        parameters=8.03e9,
        gpu="A100-80GB",
        source="test",
    )
    for field in ("beta0_s", "prefill_s_per_token", "decode_s_per_token"):
        assert getattr(fitted, field) == pytest.approx(getattr(LLAMA, field), rel=1e-6)
    prefill, decode, context = LLAMA3_8B_A100_FORWARD_S
    # Within 3% of every decode step and of the 2,048- and 4,096-token prefills.
    for batch, seconds in decode.items():
        model = LLAMA.step_s(decodes=batch, context=batch * context)
        assert model == pytest.approx(seconds, rel=0.03)
    for tokens in (2048, 4096):
        assert LLAMA.step_s(prefill_tokens=tokens) == pytest.approx(prefill[tokens], rel=0.03)


def test_profile_selects_the_step_times_of_a_run():
    request = [TraceRequest(0.0, 1024, 3, (1, 2))]
    qwen, llama = one_worker(request), one_worker(request, profile="llama-3-8b-a100")
    ((ttft_q, _, _, _, _),), ((ttft_l, _, _, _, _),) = qwen.records, llama.records
    assert ttft_q == pytest.approx(PROFILES["qwen2.5-7b-a100"].step_s(prefill_tokens=1024))
    assert ttft_l == pytest.approx(LLAMA.step_s(prefill_tokens=1024))


def test_profile_reaches_replay_evaluate_fleet_and_both_envs():
    trace = Trace("t", tuple(shipped_trace("synthetic").requests[:60]))
    config = FleetConfig(num_workers=2)
    runs = {
        p: replay(trace, make_router("jsq"), config, engine="step", profile=p)
        for p in ("qwen2.5-7b-a100", "llama-3-8b-a100")
    }
    assert runs["qwen2.5-7b-a100"]["p95_tpot_s"] != runs["llama-3-8b-a100"]["p95_tpot_s"]
    (record,) = evaluate_fleet(
        trace, ["jsq"], [0.5], 1, config, engine="step", profile="llama-3-8b-a100"
    )
    assert record["profile"] == "llama-3-8b-a100"
    for env_id in ("mabp_gym/Fleet-v0", "mabp_gym/Fleet-v1"):
        env = gymnasium.make(env_id, num_requests=50, engine="step", profile="llama-3-8b-a100")
        env.reset(seed=0)
        assert env.unwrapped.sim.engines[0].profile is LLAMA


def test_a_profile_is_refused_when_unknown_or_with_the_simple_engine():
    trace = Trace("t", tuple(shipped_trace("synthetic").requests[:20]))
    with pytest.raises(ValueError, match=r"profile must be one of \['llama-3-8b-a100'"):
        replay(trace, make_router("jsq"), engine="step", profile="gpt-9")
    with pytest.raises(ValueError, match="profile must be one of"):  # its name first
        replay(trace, make_router("jsq"), profile="gpt-9")
    with pytest.raises(ValueError, match="the simple engine takes FleetConfig's"):
        replay(trace, make_router("jsq"), profile="llama-3-8b-a100")
    with pytest.raises(ValueError, match="the simple engine takes FleetConfig's"):
        gymnasium.make("mabp_gym/Fleet-v1", num_requests=20, profile="llama-3-8b-a100")


def test_fleet_cli__profile_is_chosen_and_a_bad_one_is_one_line(run_cli):
    args = ("fleet", "--requests", "40", "--runs", "1", "--routers", "jsq", "--loads", "0.5")
    result = run_cli(*args, "--engine", "step", "--profile", "llama-3-8b-a100")
    assert result.returncode == 0, result.stderr
    assert "step engine, profile llama-3-8b-a100" in result.stdout
    result = run_cli(*args, "--engine", "step", "--profile", "gpt-9")
    assert result.returncode == 2 and "profile must be one of" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli(*args, "--set", "enable_chunked_prefill=maybe", "--engine", "step")
    assert result.returncode == 2 and "give true or false" in result.stderr
    result = run_cli(*args, "--set", "max_num_batched_tokens=4096", "--set", "block_size=16")
    assert result.returncode == 2 and "step-engine setting" in result.stderr
    assert "use --engine step" in result.stderr and "FleetConfig." not in result.stderr
    result = run_cli(*args, "--profile", "llama-3-8b-a100")  # the simple engine
    assert result.returncode == 2 and "leave --profile out" in result.stderr


def test_fleet_cli__vllm_settings_reach_the_engine(run_cli, tmp_path):
    records = []
    settings = ("max_num_batched_tokens=4096", "block_size=16", "enable_chunked_prefill=false")
    for given in ((), settings):
        out = tmp_path / f"runs{len(given)}.json"
        args = ["fleet", "--requests", "60", "--runs", "1", "--routers", "round-robin"]
        args += ["--loads", "0.7", "--engine", "step", "--json", str(out)]
        for setting in given:
            args += ["--set", setting]
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr
        (record,) = json.loads(out.read_text())
        records.append(record)
    assert records[1]["profile"] == "qwen2.5-7b-a100" and records[0]["key"] != records[1]["key"]
    # Whole prompts in bigger steps: the same requests see other first-token times.
    assert records[0]["p95_ttft_s"] != records[1]["p95_ttft_s"]


def test_fleet_env__the_renamed_batch_limit_is_named():
    with pytest.raises(TypeError, match="max_running is now max_num_seqs"):
        gymnasium.make("mabp_gym/Fleet-v1", num_requests=20, max_running=8)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens must be > 0"),
        ({"max_num_batched_tokens": 2048.5}, "max_num_batched_tokens must be an integer"),
        ({"max_num_seqs": 0}, "max_num_seqs must be > 0"),
        ({"block_size": 24}, r"block_size must divide block_tokens \(512\)"),
        ({"block_size": -16}, "block_size must be >= 0"),
        ({"enable_chunked_prefill": 1}, "enable_chunked_prefill must be True or False"),
        ({"max_running": 8}, "max_running is now max_num_seqs"),
    ],
)
def test_engine_settings_are_validated(overrides, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make_config(**overrides)


def test_step_engine_settings_are_refused_with_the_simple_engine():
    trace = Trace("t", tuple(shipped_trace("synthetic").requests[:20]))
    for setting in ({"max_num_batched_tokens": 4096}, {"enable_chunked_prefill": False}):
        with pytest.raises(ValueError, match="step-engine setting that the simple engine"):
            replay(trace, make_router("jsq"), FleetConfig(**setting))


def test_max_num_batched_tokens_sets_the_chunk():
    profile = PROFILES["qwen2.5-7b-a100"]
    sim = one_worker([TraceRequest(0.0, 4000, 2, tuple(range(8)))], max_num_batched_tokens=4096)
    ((ttft, _, _, _, _),) = sim.records
    assert ttft == pytest.approx(profile.step_s(prefill_tokens=4000))  # one chunk, not two
    sim = one_worker([TraceRequest(0.0, 4000, 2, tuple(range(8)))], max_num_batched_tokens=1000)
    ((ttft, _, _, _, _),) = sim.records
    assert ttft == pytest.approx(4 * profile.beta0_s + profile.prefill_s_per_token * 4000)


def test_max_num_seqs_caps_the_batch():
    requests = [TraceRequest(0.0, 512, 4, (k,)) for k in range(3)]
    sim = one_worker(requests, max_num_seqs=2)
    ttft = sorted(r[0] for r in sim.records)
    # The third waits for a slot: its first token comes after both others finished.
    assert ttft[2] > max(r[1] for r in sim.records if r[4] != 2) - 1e-12


def test_without_chunked_prefill_a_step_is_prefills_or_decodes_never_both():
    profile = PROFILES["qwen2.5-7b-a100"]
    requests = [
        TraceRequest(0.0, 512, 40, (1,)),
        TraceRequest(100.0, 1536, 2, (2, 3, 4)),  # arrives while the first decodes
    ]
    mixed = one_worker(requests)
    whole = one_worker(requests, enable_chunked_prefill=False)
    # Off: the second prompt runs in a prefill-only step, so its TTFT is a pure prefill
    # step after the decode step in progress; on, it shares a step with a decode.
    by_rid = {rid: ttft for ttft, _, _, _, rid in whole.records}
    assert by_rid[1] < profile.step_s(prefill_tokens=1536) + profile.step_s(1, 1, 600)
    engine = whole.engines[0]
    assert not engine.running and not engine.kv.refs
    assert {r[4] for r in mixed.records} == {r[4] for r in whole.records} == {0, 1}
    # The first request's decodes stall for the whole prefill step: its TPOT grows.
    tpot = {rid: t for _, _, t, _, rid in whole.records}
    tpot_mixed = {rid: t for _, _, t, _, rid in mixed.records}
    assert tpot[0] != tpot_mixed[0]


def test_without_chunked_prefill_prompts_fill_the_budget_whole():
    profile = PROFILES["qwen2.5-7b-a100"]
    requests = [TraceRequest(0.0, 2048, 2, tuple(range(4 * k, 4 * k + 4))) for k in range(3)]
    sim = one_worker(requests, enable_chunked_prefill=False, max_num_batched_tokens=4096)
    ttft = sorted(r[0] for r in sim.records)
    # The first starts the idle engine alone; the two that arrive at the same instant
    # share the next prefill step, whole (4,096 tokens), before any decode.
    assert ttft[0] == pytest.approx(profile.step_s(prefill_tokens=2048))
    assert ttft[1] == ttft[2] == pytest.approx(ttft[0] + profile.step_s(prefill_tokens=4096))


def test_block_size_allocates_kv_in_its_blocks():
    # Two sequences of 300 prompt + 250 generated tokens in 1,536 tokens of memory: in
    # blocks of 512 each needs two (4 > 3: one is preempted), in blocks of 16 each needs
    # 35 (70 <= 96: no preemption).
    requests = [TraceRequest(0.0, 300, 250, (1,)), TraceRequest(0.0, 300, 250, (2,))]
    coarse = one_worker(requests, cache_blocks=3)
    fine = one_worker(requests, cache_blocks=3, block_size=16)
    assert coarse.engines[0].kv.capacity == 3 and fine.engines[0].kv.capacity == 96
    assert coarse.engines[0].preemptions >= 1 and fine.engines[0].preemptions == 0
    assert len(fine.records) == len(coarse.records) == 2
    assert max(r[1] for r in fine.records) < max(r[1] for r in coarse.records)
    assert fine.engines[0].kv.held == 0 and np.all(fine.running_blocks == 0)
