"""PPO from scratch with the per-candidate graph policy (Stable-Baselines3), with a
learning curve against BP, MABP and random on the same held-out seeds.

The policy is :class:`mabp_gym.envs.sb3.GraphActorCriticPolicy`: one Gaussian mean per
candidate decision, read out of a GINE network over the observation graph. Every
``--eval-every`` steps the deterministic policy (the means) plays ``--eval-seeds``
episodes; the reference policies play the same seeds once. Return is the sum of the
env's reward (``-(backlog + nu * penalty) / 100`` per slot).

    python examples/ppo_sb3.py --workload mixed --load 0.3 --steps 10000 --json curve.json
    python examples/ppo_sb3.py --workload rag --load 0.2 0.6      # a load interval
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

import mabp_gym  # noqa: F401  (registers the env ids)
from mabp_gym.agents import make_policy
from mabp_gym.agents.gnn import resolve_device
from mabp_gym.envs.sb3 import GraphActorCriticPolicy, UpdateThreads
from mabp_gym.training.arguments import require_at_least


def make_env(workload: str, load: Any, horizon: int) -> gym.Env:
    """One env of the run: ``load`` is a number or a ``(low, high)`` interval."""
    return gym.make(
        "mabp_gym/SFMSN-v0",
        workload=workload,
        load=load,
        horizon=horizon,
        max_episode_steps=horizon,
    )


def episode_return(env: gym.Env, act, seed: int) -> float:
    """Return of one episode played by ``act(obs) -> scores`` from ``reset(seed)``."""
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        total += reward
        done = terminated or truncated
    return total


def reference_returns(args: argparse.Namespace) -> dict[str, float]:
    """Mean return of each reference policy on the evaluation seeds (its fixed load)."""
    env = make_env(args.workload, args.eval_load, args.horizon)
    out = {}
    for name in args.references:
        returns = []
        for seed in args.eval_seeds:
            if name == "random":
                space = env.action_space
                space.seed(seed)
                returns.append(episode_return(env, lambda _obs, s=space: s.sample(), seed))
            else:
                policy = make_policy(name, env)
                returns.append(episode_return(env, policy.scores, seed))
        out[name] = float(np.mean(returns))
    return out


class Curve(BaseCallback):
    """Evaluates the deterministic policy every ``every`` steps on the evaluation seeds."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.env = make_env(args.workload, args.eval_load, args.horizon)
        self.points: list[dict[str, float]] = []
        self.next = 0

    def evaluate(self) -> None:
        point: dict[str, float] = {"steps": int(self.num_timesteps)}
        # Deterministic (the means) and stochastic (sampled, seeded) play: early on the
        # means are all near 0 and only their signs decide, so both are reported. The
        # draws come from a generator of the episode's own: torch's global one is PPO's,
        # and seeding it here made every --seed sample alike and --eval-every change the
        # training.
        policy = self.model.policy
        for mode in ("deterministic", "stochastic"):
            returns = []
            for seed in self.args.eval_seeds:
                if mode == "deterministic":
                    act = lambda obs: policy.predict(obs, deterministic=True)[0]  # noqa: E731
                else:
                    draws = torch.Generator().manual_seed(seed)
                    act = lambda obs, g=draws: policy.sample_scores(obs, g)  # noqa: E731
                returns.append(episode_return(self.env, act, seed))
            point[f"return_{mode}"] = float(np.mean(returns))
        self.points.append(point)
        print(
            f"steps {self.num_timesteps:>7}  eval return deterministic "
            f"{point['return_deterministic']:10.2f}  stochastic "
            f"{point['return_stochastic']:10.2f}",
            flush=True,
        )
        self.next = self.num_timesteps + self.args.eval_every

    def _on_training_start(self) -> None:
        self.evaluate()

    def _on_rollout_start(self) -> None:
        # After the update of the rollout before: each point is the policy trained on
        # its steps (a rollout's end comes before its update).
        if self.num_timesteps >= self.next:
            self.evaluate()

    def _on_step(self) -> bool:
        return True


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument(
        "--workload", default="mixed", help="workload name or workload file (default mixed)"
    )
    parser.add_argument(
        "--load",
        type=float,
        nargs="+",
        default=[0.3],
        help="training load, or two numbers: an interval drawn per episode",
    )
    parser.add_argument(
        "--eval-load",
        type=float,
        default=None,
        help="evaluation load (default: the training load, or the middle of its interval)",
    )
    parser.add_argument("--horizon", type=int, default=600, help="slots per episode")
    parser.add_argument("--steps", type=int, default=10_000, help="PPO environment steps")
    parser.add_argument(
        "--n-envs",
        type=int,
        default=4,
        help="vector envs (one batched graph forward scores all of them)",
    )
    parser.add_argument("--n-steps", type=int, default=256, help="rollout length per env")
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[100, 101])
    parser.add_argument(
        "--references",
        nargs="*",
        default=["random", "bp", "mabp"],
        help="reference policies evaluated on the same seeds",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device", default="auto", help="auto (cuda when there is one), cpu or cuda"
    )
    parser.add_argument(
        "--update-threads",
        type=int,
        default=0,
        help="torch threads during PPO's updates (0: one thread throughout; more is faster "
        "on a machine with the cores, reproducible per thread count)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the curve there")
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        require_at_least(args, 1, "n_envs", "steps", "eval_every")
        require_at_least(args, 2, "n_steps", "horizon")  # SB3 normalizes over two samples
    except ValueError as error:
        parser.error(str(error))
    if args.update_threads < 0:
        parser.error(
            f"--update-threads must be 0 or more (0: one thread), got {args.update_threads}"
        )
    if len(args.load) not in (1, 2):
        parser.error("--load takes one number or two (an interval)")
    load = args.load[0] if len(args.load) == 1 else tuple(args.load)
    args.eval_load = args.eval_load if args.eval_load is not None else float(np.mean(args.load))
    device = resolve_device(args.device)
    torch.set_num_threads(1)  # small graphs: one thread is fastest on the CPU

    started = time.perf_counter()
    references = reference_returns(args)
    for name, value in references.items():
        print(f"reference {name:<8} return {value:10.2f}", flush=True)
    envs = DummyVecEnv(
        [lambda: make_env(args.workload, load, args.horizon) for _ in range(args.n_envs)]
    )
    envs.seed(args.seed)
    model = PPO(
        GraphActorCriticPolicy,
        envs,
        n_steps=args.n_steps,
        batch_size=min(256, args.n_steps * args.n_envs),
        n_epochs=4,
        seed=args.seed,
        device=device,
        verbose=0,
    )
    curve = Curve(args)
    threads = [UpdateThreads(args.update_threads)] if args.update_threads else []
    model.learn(args.steps, callback=[*threads, curve])  # the threads given back first
    if curve.points[-1]["steps"] != model.num_timesteps:
        curve.evaluate()
    result = {
        "workload": args.workload,
        "load": args.load,
        "eval_load": args.eval_load,
        "horizon": args.horizon,
        "steps": int(model.num_timesteps),
        "eval_seeds": args.eval_seeds,
        "seed": args.seed,
        "device": device,
        "references": references,
        "curve": curve.points,
        "wall_s": time.perf_counter() - started,
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
