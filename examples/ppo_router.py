"""A PPO router on ``mabp_gym/Fleet-v1``, each request's reward credited to its routing step.

Trains on windows of the first half of a shipped trace and evaluates, on the second half
(requests it never saw), the learned router (argmax) against MABP-Route, ``oracle-ttft``
and the production routers, with the same seeds for every router.

The policy scores each worker with one small network shared by all workers (so it works
for any fleet size and is indifferent to the workers' order): ``logit_w = f(worker w's
features, the request's)``, a softmax over workers; the critic reads the mean of the
workers' features and the request's. Fleet-v1 returns each request's reward when its first
token streams back (or it is dropped), with ``info["credit"]`` saying which routing step
caused it; the rollout puts every reward at that step before computing advantages
(GAE over routing steps), so a decision is judged by its own request's TTFT and, through
``gamma``, by the requests routed just after it.

    python examples/ppo_router.py --seed 0 --steps 60000 --json runs/router_s0.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mabp_gym.fleet import FleetConfig, make_router, replay
from mabp_gym.fleet.env import FleetRouterEnv
from mabp_gym.fleet.features import REQUEST_FEATURES, WORKER_FEATURES, RouterFeatures
from mabp_gym.fleet.simulator import make_config, scale_to_load
from mabp_gym.fleet.trace import Trace, load_trace

NW, NR = len(WORKER_FEATURES), len(REQUEST_FEATURES)
BASELINES = ("mabp-route", "oracle-ttft", "llm-d", "dynamo-t0", "vllm-loadaware", "sglang", "bp")


class RouterNet(nn.Module):
    """Per-worker logits from one shared scorer; a value from the pooled features."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.score = nn.Sequential(
            nn.Linear(NW + NR, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 1),
        )  # fmt: skip
        self.value = nn.Sequential(nn.Linear(NW + NR, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs (B, W * NW + NR)`` -> ``(logits (B, W), value (B,))``."""
        workers = obs[:, :-NR].reshape(obs.shape[0], -1, NW)
        request = obs[:, -NR:]
        joined = torch.cat([workers, request[:, None, :].expand(-1, workers.shape[1], -1)], -1)
        pooled = torch.cat([workers.mean(1), request], -1)
        return self.score(joined).squeeze(-1), self.value(pooled).squeeze(-1)


class PolicyRouter:
    """The trained network as a fleet router (the ``Router`` protocol), greedy."""

    name = "ppo-router"

    def __init__(self, net: RouterNet, config: FleetConfig) -> None:
        self.net, self.config = net, config

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        self.features = RouterFeatures(num_workers)

    def choose(self, request, telemetry) -> int:
        workers, own = self.features.observe(request, telemetry)
        obs = torch.as_tensor(np.concatenate([workers.ravel(), own]), dtype=torch.float32)
        with torch.no_grad():
            logits, _ = self.net(obs[None])
        worker = int(logits[0].argmax())
        self.features.routed(request, worker, self.config.tool_capacity)
        return worker


def windows(trace: Trace, size: int) -> list[Trace]:
    """Consecutive windows of ``size`` requests."""
    reqs = trace.requests
    return [
        Trace(f"{trace.name}[{a}:{a + size}]", reqs[a : a + size])
        for a in range(0, len(reqs) - size + 1, size)
    ]


def rollout(net: RouterNet, env: FleetRouterEnv, seed: int) -> dict[str, np.ndarray]:
    """One episode, sampled; rewards placed at the routing step that caused them."""
    obs_list, actions, logps, values = [], [], [], []
    obs, _ = env.reset(seed=seed)
    rewards: list[float] = []
    done = False
    while not done:
        x = torch.as_tensor(obs, dtype=torch.float32)[None]
        with torch.no_grad():
            logits, value = net(x)
        dist = torch.distributions.Categorical(logits=logits[0])
        action = dist.sample()
        obs_list.append(obs)
        actions.append(int(action))
        logps.append(float(dist.log_prob(action)))
        values.append(float(value[0]))
        rewards.append(0.0)
        obs, _, done, _, info = env.step(int(action))
        for step, reward in info["credit"]:
            rewards[step] += reward
    return {
        "obs": np.asarray(obs_list, dtype=np.float32),
        "actions": np.asarray(actions),
        "logps": np.asarray(logps, dtype=np.float32),
        "values": np.asarray(values, dtype=np.float32),
        "rewards": np.asarray(rewards, dtype=np.float32),
    }


def advantages(ep: dict[str, np.ndarray], gamma: float, lam: float) -> np.ndarray:
    """GAE over routing steps; the episode ends with every request resolved (value 0)."""
    rewards, values = ep["rewards"], ep["values"]
    adv = np.zeros_like(rewards)
    last = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        following = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * following - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv


def train(args: argparse.Namespace, config: FleetConfig, train_trace: Trace) -> RouterNet:
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    net = RouterNet()
    optim = torch.optim.Adam(net.parameters(), lr=args.lr)
    pool = windows(train_trace, args.window)
    steps, update = 0, 0
    started = time.perf_counter()
    while steps < args.steps:
        batch = []
        for _ in range(args.episodes):
            window = pool[int(rng.integers(len(pool)))]
            env = FleetRouterEnv(
                window, num_requests=None, load=args.load, engine=args.engine,
                num_workers=config.num_workers,
            )  # fmt: skip
            batch.append(rollout(net, env, int(rng.integers(2**31))))
        steps += sum(len(ep["actions"]) for ep in batch)
        obs = torch.as_tensor(np.concatenate([ep["obs"] for ep in batch]))
        actions = torch.as_tensor(np.concatenate([ep["actions"] for ep in batch]))
        old_logp = torch.as_tensor(np.concatenate([ep["logps"] for ep in batch]))
        adv_np = np.concatenate([advantages(ep, args.gamma, args.lam) for ep in batch])
        returns = torch.as_tensor(adv_np + np.concatenate([ep["values"] for ep in batch]))
        adv = torch.as_tensor((adv_np - adv_np.mean()) / (adv_np.std() + 1e-8))
        for _ in range(args.epochs):
            for idx in torch.randperm(len(actions)).split(args.minibatch):
                logits, value = net(obs[idx])
                dist = torch.distributions.Categorical(logits=logits)
                ratio = torch.exp(dist.log_prob(actions[idx]) - old_logp[idx])
                clipped = torch.clamp(ratio, 1 - args.clip, 1 + args.clip)
                policy_loss = -torch.min(ratio * adv[idx], clipped * adv[idx]).mean()
                value_loss = ((value - returns[idx]) ** 2).mean()
                loss = policy_loss + 0.5 * value_loss - args.entropy * dist.entropy().mean()
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 0.5)
                optim.step()
        update += 1
        mean_reward = float(np.mean(np.concatenate([ep["rewards"] for ep in batch])))
        print(
            f"update {update:3d}  env steps {steps:7d}  mean reward/request {mean_reward:+.3f}"
            f"  {time.perf_counter() - started:6.0f} s",
            flush=True,
        )
    return net


KEYS = ("slo_goodput", "p95_ttft_s", "p95_tpot_s", "p95_e2e_s", "throughput")


def evaluate(
    net: RouterNet | None, args: argparse.Namespace, config: FleetConfig, test: Trace
) -> dict[str, dict[str, list[float]]]:
    """Every router's metrics per evaluation run (seeds 9000, 9001, ...: the same for all)."""
    scaled = scale_to_load(test, args.load, config)
    routers = {} if net is None else {"ppo-router": lambda: PolicyRouter(net, config)}
    routers.update({name: (lambda n=name: make_router(n)) for name in args.baselines})
    rows = {}
    for name, build in routers.items():
        runs = [
            replay(scaled, build(), config, seed=9000 + k, engine=args.engine)
            for k in range(args.eval_runs)
        ]
        rows[name] = {key: [float(r[key]) for r in runs] for key in KEYS}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="conversation")
    parser.add_argument("--engine", default="step", choices=("simple", "step"))
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--workers", type=int, default=4, help="LLM workers in the fleet")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60_000, help="routing steps (env steps)")
    parser.add_argument("--window", type=int, default=400, help="requests per episode")
    parser.add_argument("--episodes", type=int, default=4, help="episodes per update")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--gamma", type=float, default=0.9)
    parser.add_argument("--lam", type=float, default=0.9)
    parser.add_argument("--clip", type=float, default=0.2)
    parser.add_argument("--entropy", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatch", type=int, default=256)
    parser.add_argument("--eval-runs", type=int, default=3)
    parser.add_argument(
        "--baselines", nargs="*", default=list(BASELINES), help="routers to compare with"
    )
    parser.add_argument("--json", metavar="PATH", help="write the evaluation here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = make_config(num_workers=args.workers)
    trace = load_trace(args.trace)
    half = len(trace) // 2
    train_trace = Trace(f"{trace.name}[:{half}]", trace.requests[:half])
    test_trace = Trace(f"{trace.name}[{half}:]", trace.requests[half:])
    net = train(args, config, train_trace) if args.steps > 0 else None  # 0: baselines only
    rows = evaluate(net, args, config, test_trace)
    print(f"held-out: {test_trace.name}, load {args.load}, engine {args.engine}")
    print(f"{'router':<16} {'goodput':>8} {'P95 TTFT':>9} {'P95 TPOT':>9}  (mean of runs)")
    for name, row in rows.items():
        goodput, ttft, tpot = (np.mean(row[k]) for k in KEYS[:3])
        print(f"{name:<16} {goodput:>8.3f} {ttft:>9.3f} {tpot:>9.3f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "held_out": rows}, indent=2), encoding="utf-8"
        )


if __name__ == "__main__":
    main()
