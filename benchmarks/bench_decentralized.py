"""Decision time per agent of MABP run as one agent per node (the decentralized view).

Each agent's ``scores(obs)`` is timed on its own local observation, slot by slot, on
``mixed`` at load 0.85 (the observation building and the transition excluded). In the same
run, alternating slot by slot, the centralized MABP scores the global observation of the
same state, so the two are measured under the same machine load. Prints a table (mean and
P95 per agent, microseconds) and a JSON line. The paper's real router decides in 34 us at
P95.

    python benchmarks/bench_decentralized.py --slots 600
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _report import emit

from mabp_gym.agents import make_policy
from mabp_gym.agents.decentralized import local_policies
from mabp_gym.envs.parallel import parallel_env


def measure(
    workload: str, load: float, slots: int, seed: int, policy: str
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    env = parallel_env(workload, load=load, horizon=slots)
    local = local_policies(policy, env)
    central = make_policy(policy, env.workload, nu=env.nu, memory=env.memory)
    central.reset(seed)
    for rule in local.values():
        rule.reset(seed)
    times = {agent: np.empty(slots) for agent in env.possible_agents}
    central_times = np.empty(slots)
    obs, _ = env.reset(seed=seed)
    for t in range(slots):
        global_obs = env.global_observation()
        started = time.perf_counter()
        central.scores(global_obs)
        central_times[t] = time.perf_counter() - started
        actions = {}
        for agent in env.agents:
            started = time.perf_counter()
            actions[agent] = local[agent].scores(obs[agent])
            times[agent][t] = time.perf_counter() - started
        obs, *_ = env.step(actions)
    return ({a: v * 1e6 for a, v in times.items()}, central_times * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, default=0.85)
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--policy", default="mabp", choices=["mabp", "bp"])
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    args = parser.parse_args()
    per_agent, central = measure(args.workload, args.load, args.slots, args.seed, args.policy)
    pooled = np.concatenate(list(per_agent.values()))
    per_slot = np.sum(list(per_agent.values()), axis=0)
    rows = {agent: (float(v.mean()), float(np.percentile(v, 95))) for agent, v in per_agent.items()}
    print(f"{args.policy} on {args.workload}, load {args.load}, {args.slots} slots")
    print(f"{'agent':<22} {'mean us':>9} {'P95 us':>9}")
    for agent, (mean, p95) in rows.items():
        print(f"{agent:<22} {mean:>9.1f} {p95:>9.1f}")
    summary = {
        "every agent, pooled": (float(pooled.mean()), float(np.percentile(pooled, 95))),
        "all agents, summed per slot": (float(per_slot.mean()), float(np.percentile(per_slot, 95))),
        "centralized, per slot": (float(central.mean()), float(np.percentile(central, 95))),
    }
    for label, (mean, p95) in summary.items():
        print(f"{label:<22} {mean:>9.1f} {p95:>9.1f}")
    emit(
        {
            "benchmark": "decentralized_decision_time",
            "policy": args.policy,
            "workload": args.workload,
            "load": args.load,
            "slots": args.slots,
            "per_agent_us": {a: {"mean": m, "p95": p} for a, (m, p) in rows.items()},
            **{
                label.replace(", ", "_").replace(" ", "_"): {"mean": m, "p95": p}
                for label, (m, p) in summary.items()
            },
        },
        args.json,
    )


if __name__ == "__main__":
    main()
