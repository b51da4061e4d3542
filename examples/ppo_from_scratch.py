"""PPO from scratch with the documented policy, checkpoints chosen on held-out growth, and
the benchmark's stable-load verdict on evaluation seeds that training and choice never saw.

The documented recipe (``docs/learning.md``, "From scratch"), read top to bottom; every
knob is in ``Args``:

1. **Train**: SB3 PPO with :class:`mabp_gym.envs.sb3.GraphActorCriticPolicy` at its defaults
   on 4 ``DummyVecEnv`` envs of ``mixed``, each episode's load drawn from (0.3, 0.8),
   600-slot episodes. Rewards are normalized by SB3's ``VecNormalize`` (``norm_reward``:
   divided by a running standard deviation of the discounted return, so the critic sees
   returns of order one whatever the load), the learning rate decays linearly to 0.
2. **Choose**: every ``select_every`` env steps the deterministic policy (the means) runs
   ``select_horizon`` slots at the fixed ``select_load`` on ``select_seeds``; the kept
   checkpoint (``<stem>.best.zip``) is the one whose backlog does not grow on every
   selection seed (the benchmark's growth rule), then the lowest mean backlog. Training
   return plays no part.
3. **Evaluate**: the kept checkpoint, BP and MABP through the evaluation harness
   (``mabp_gym.evaluate``) on ``eval_seeds`` (300-304), ``eval_horizon`` slots (4,000: the
   benchmark's grid verdict), loads walked upward from 0.3 in steps of 0.05, each policy
   stopped at its first load that grows.

    python examples/ppo_from_scratch.py --seed 0 --json s0.json   # 6 min training, then the verdict
    python examples/ppo_from_scratch.py --checkpoint s0.best.zip --json e0.json  # eval only
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

import mabp_gym  # noqa: F401  (registers the env ids)
from mabp_gym.core.metrics import backlog_slope, does_not_grow, growth
from mabp_gym.envs.sb3 import GraphActorCriticPolicy


@dataclass
class Args:
    workload: str = "mixed"
    load_low: float = 0.3  # training load interval, drawn per episode
    load_high: float = 0.8
    horizon: int = 600  # training episode length (slots)
    steps: int = 400_000  # the budget, in env steps
    n_envs: int = 4
    n_steps: int = 256  # rollout length per env
    batch_size: int = 256
    n_epochs: int = 4
    learning_rate: float = 1e-3  # decays linearly to 0 over the budget
    gamma: float = 0.99
    normalize_reward: bool = True  # VecNormalize(norm_obs=False, norm_reward=True)
    log_std_init: float = -1.5  # the policy's default
    seed: int = 0
    # Checkpoint choice: the deterministic policy at a fixed load on seeds of its own.
    select_every: int = 16_384
    select_load: float = 0.6
    select_horizon: int = 1_000
    select_seeds: list[int] = field(default_factory=lambda: [100, 101])
    # The held-out verdict: the harness on seeds neither training nor choice used.
    eval_policies: list[str] = field(default_factory=lambda: ["bp", "mabp"])
    eval_seeds: list[int] = field(default_factory=lambda: [300, 301, 302, 303, 304])
    eval_horizon: int = 4_000
    eval_loads: list[float] = field(
        default_factory=lambda: [round(0.3 + 0.05 * k, 2) for k in range(14)]
    )
    evaluate: bool = True  # --no-evaluate: train and choose only
    checkpoint: str | None = None  # evaluate this checkpoint instead of training
    json: str | None = None  # also writes <stem>.best.zip (the chosen checkpoint), <stem>.zip


def make_env(args: Args, load: Any, horizon: int) -> gym.Env:
    return gym.make(
        "mabp_gym/SFMSN-v0",
        workload=args.workload,
        load=load,
        horizon=horizon,
        max_episode_steps=horizon,
    )


def selection_run(model: PPO, env: gym.Env, seed: int, horizon: int) -> dict[str, float]:
    """Mean backlog and growth of the deterministic policy over one selection episode."""
    obs, _ = env.reset(seed=seed)
    backlog = np.empty(horizon)
    for t in range(horizon):
        obs, *_ = env.step(model.predict(obs, deterministic=True)[0])
        backlog[t] = env.unwrapped.sim.state.units
    window = backlog[int(0.2 * horizon) :]
    rate = env.unwrapped.workload.total_rate
    return {"backlog": float(window.mean()), "growth": growth(backlog_slope(window), rate)}


class Select(BaseCallback):
    """Evaluates the deterministic policy for checkpoint choice every ``select_every``
    steps; keeps the best as ``<stem>.best.zip`` and logs the training diagnostics."""

    def __init__(self, args: Args, started: float) -> None:
        super().__init__()
        self.args, self.started = args, started
        self.env = make_env(args, args.select_load, args.select_horizon)
        self.points: list[dict[str, Any]] = []
        self.next = 0
        self.best: tuple[bool, float] | None = None
        self.best_state: dict[str, torch.Tensor] | None = None

    def evaluate(self) -> None:
        runs = [
            selection_run(self.model, self.env, seed, self.args.select_horizon)
            for seed in self.args.select_seeds
        ]
        point: dict[str, Any] = {
            "steps": int(self.num_timesteps),
            "backlog": float(np.mean([r["backlog"] for r in runs])),
            "growth": float(max(r["growth"] for r in runs)),
            "stable": all(does_not_grow(r["growth"]) for r in runs),
            "log_std": [float(v) for v in self.model.policy.log_std.detach()],
            "wall_s": time.perf_counter() - self.started,
        }
        for key in ("explained_variance", "value_loss", "approx_kl", "clip_fraction"):
            value = self.model.logger.name_to_value.get(f"train/{key}")
            if value is not None:
                point[key] = float(value)
        key = (not point["stable"], point["backlog"])
        if self.best is None or key < self.best:
            self.best = key
            point["best"] = True
            self.best_state = copy.deepcopy(self.model.policy.state_dict())
            if self.args.json:
                self.model.save(self.args.json.removesuffix(".json") + ".best.zip")
        self.points.append(point)
        print(
            f"steps {point['steps']:>7}  backlog {point['backlog']:8.1f}  "
            f"growth {point['growth']:+.4f}  {'stable' if point['stable'] else 'grows '}  "
            f"log_std {' '.join(f'{v:.2f}' for v in point['log_std'])}  "
            f"ev {point.get('explained_variance', float('nan')):.2f}  "
            f"{point['wall_s']:.0f}s{'  *' if point.get('best') else ''}",
            flush=True,
        )
        self.next = self.num_timesteps + self.args.select_every

    def _on_training_start(self) -> None:
        self.evaluate()

    def _on_rollout_end(self) -> None:
        if self.num_timesteps >= self.next:
            self.evaluate()

    def _on_step(self) -> bool:
        return True


ROW_KEYS = ("policy", "load", "mean_backlog", "penalty", "p95_delay", "hit_ratio", "stable")


def held_out_verdict(model: PPO, args: Args) -> dict[str, Any]:
    """The harness's stable-load verdict for the model and ``args.eval_policies`` on the
    evaluation seeds: loads walked upward, each policy stopped at its first growing load.

    The harness builds policies by registered name, so the model is registered for this
    process as ``ppo-scratch`` (a scores policy of its means)."""
    from mabp_gym.agents.base import Policy
    from mabp_gym.harness.evaluation import evaluate
    from mabp_gym.harness.summaries import stable_load, summarize_records
    from mabp_gym.registry import policy_names, register_policy

    class Means(Policy):
        def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
            return np.asarray(model.predict(obs, deterministic=True)[0], dtype=np.float64)

    if "ppo-scratch" not in policy_names():
        register_policy("ppo-scratch", Means)
    records: list[dict[str, Any]] = []
    active = ["ppo-scratch", *args.eval_policies]
    for load in sorted(args.eval_loads):
        batch = evaluate(
            active,
            args.workload,
            [load],
            args.eval_seeds,
            horizon=args.eval_horizon,
            backend="serial",
            progress=False,
        )
        records += batch
        growing = {row["policy"] for row in summarize_records(batch) if not row["stable"]}
        for row in summarize_records(batch):
            print({k: row[k] for k in ROW_KEYS}, flush=True)
        active = [p for p in active if p not in growing]
        if not active:
            break
    rows = [{k: row[k] for k in ROW_KEYS} for row in summarize_records(records)]
    out = {"rows": rows, "stable_load": stable_load(records)}
    print("held-out stable load", out["stable_load"], flush=True)
    return out


def parse(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, list):
            item = {"eval_loads": float, "eval_policies": str}.get(f.name, int)
            many = "*" if f.name == "eval_policies" else "+"  # none: the model alone
            parser.add_argument(flag, nargs=many, type=item, default=default)
        elif f.name in ("json", "checkpoint"):
            parser.add_argument(flag, default=None)
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    args = Args(**vars(parser.parse_args(argv)))
    used = set(args.select_seeds) & set(args.eval_seeds)
    if used:
        parser.error(f"--eval-seeds must not include selection seeds, both have {sorted(used)}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    result: dict[str, Any] = {"args": dataclasses.asdict(args)}
    if args.checkpoint:
        # Acting needs no schedule: a checkpoint made elsewhere loads without unpickling it.
        frozen = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0}
        model = PPO.load(args.checkpoint, device="cpu", custom_objects=frozen)
        result["held_out"] = held_out_verdict(model, args)
    else:
        load = (args.load_low, args.load_high) if args.load_high > args.load_low else args.load_low
        envs = DummyVecEnv([lambda: make_env(args, load, args.horizon)] * args.n_envs)
        envs.seed(args.seed)
        if args.normalize_reward:
            envs = VecNormalize(envs, norm_obs=False, norm_reward=True, gamma=args.gamma)
        model = PPO(
            GraphActorCriticPolicy,
            envs,
            n_steps=args.n_steps,
            batch_size=args.batch_size,
            n_epochs=args.n_epochs,
            learning_rate=lambda progress: args.learning_rate * progress,
            gamma=args.gamma,
            seed=args.seed,
            device="cpu",
            policy_kwargs={"log_std_init": args.log_std_init},
            verbose=0,
        )
        select = Select(args, started)
        model.learn(args.steps, callback=select)
        if select.points[-1]["steps"] != model.num_timesteps:
            select.evaluate()
        result["curve"] = select.points
        result["train_wall_s"] = time.perf_counter() - started
        if args.json:
            model.save(args.json.removesuffix(".json") + ".zip")
        if args.evaluate:
            assert select.best_state is not None
            model.policy.load_state_dict(select.best_state)  # the chosen checkpoint
            result["held_out"] = held_out_verdict(model, args)
    result["wall_s"] = time.perf_counter() - started
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
