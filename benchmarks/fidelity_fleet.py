"""The step engine against a published reference simulation of Llama-3-8B on A100s.

The reference (a Vidur-style simulation): one A100 a replica, TP 1, 4 replicas, vLLM's
scheduler without chunked prefill, at most 128 sequences, blocks of 16 tokens, 4,096 tokens
a batch; fixed 2,048-token prompts and 256-token outputs, every prompt unique, Poisson
arrivals, round-robin. This prints (1) each profile's step times beside the reference's
forward times and (2) the fleet's metrics on that workload at a few arrival rates and its
capacity (the throughput when requests arrive far faster than they are served).

    python benchmarks/fidelity_fleet.py                 # about a minute
    python benchmarks/fidelity_fleet.py --requests 800 --qps 4 12
"""

from __future__ import annotations

import argparse

import numpy as np
from _report import emit

from mabp_gym.fleet import FleetConfig, FleetSimulator, make_router, trace_from_columns
from mabp_gym.fleet.engine import LLAMA3_8B_A100_FORWARD_S, PROFILES

REFERENCE = {
    "num_workers": 4,
    "max_num_seqs": 128,
    "block_size": 16,
    "max_num_batched_tokens": 4096,
    "enable_chunked_prefill": False,
    # 80 GB x 0.9 - 16 GB of weights = 56 GB of KV at 131,072 bytes a token: 834 x 512.
    "cache_blocks": 834,
    "agentic_fraction": 0.0,
    "max_waiting": 100_000,
    "timeout_s": 1e9,
}
"""The reference's deployment as fleet constants (its capacity runs queue everything)."""


def forward_times() -> list[dict[str, float | str]]:
    """Each profile's step time beside the reference's forward time (ms)."""
    prefill, decode, context = LLAMA3_8B_A100_FORWARD_S
    rows: list[dict[str, float | str]] = []
    cases = [("prefill", n, t, {"prefill_tokens": n}) for n, t in prefill.items()] + [
        ("decode", b, t, {"decodes": b, "context": b * context}) for b, t in decode.items()
    ]
    for kind, size, seconds, step in cases:
        row: dict[str, float | str] = {"step": f"{kind} {size}", "reference_ms": 1e3 * seconds}
        for name, profile in PROFILES.items():
            row[name] = 1e3 * profile.step_s(**step)
        rows.append(row)
    return rows


def fleet_run(profile: str, qps: float, requests: int, seed: int) -> dict[str, float]:
    """Mean TTFT, TPOT and E2E (s) and throughput (req/s) on the reference workload."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1000.0 / qps, requests))
    trace = trace_from_columns(times, [2048] * requests, [256] * requests)
    sim = FleetSimulator(trace, FleetConfig(**REFERENCE), seed, engine="step", profile=profile)
    router = make_router("round-robin")
    router.reset(sim.config.num_workers, np.random.default_rng(seed))
    while (request := sim.next_request()) is not None:
        sim.dispatch(router.choose(request, sim.telemetry))
    ttft, e2e, tpot = (np.array([r[k] for r in sim.records]) for k in (0, 1, 2))
    return {
        "ttft_s": float(ttft.mean()),
        "tpot_s": float(tpot.mean()),
        "e2e_s": float(e2e.mean()),
        "throughput": sim.metrics()["throughput"],
        "completed": len(sim.records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--qps", type=float, nargs="+", default=[4.0, 12.0, 16.0])
    parser.add_argument("--saturate-qps", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    rows = forward_times()
    names = list(PROFILES)
    print("step | reference (ms) | " + " | ".join(names))
    for row in rows:
        cells = " | ".join(
            f"{row[n]:.2f} ({100 * (row[n] / row['reference_ms'] - 1):+.0f}%)" for n in names
        )  # type: ignore[operator]
        print(f"{row['step']} | {row['reference_ms']:.2f} | {cells}")
    runs = []
    for name in names:
        for qps in [*args.qps, args.saturate_qps]:
            run = {"profile": name, "qps": qps, **fleet_run(name, qps, args.requests, args.seed)}
            runs.append(run)
            print(
                f"{name} qps {qps:g}: TTFT {run['ttft_s']:.3f} s, TPOT {1e3 * run['tpot_s']:.1f} "
                f"ms, E2E {run['e2e_s']:.2f} s, throughput {run['throughput']:.2f} req/s"
            )
    emit({"benchmark": "fidelity_fleet", "forward_times": rows, "runs": runs}, args.json)


if __name__ == "__main__":
    main()
