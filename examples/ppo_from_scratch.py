"""PPO from scratch with the documented policy, checkpoints chosen on held-out growth, and
the benchmark's stable-load verdict on evaluation seeds that training and choice never saw.

The documented recipe (``docs/learning.md``, "From scratch"), read top to bottom; every
knob is in ``Args``:

1. **Train**: SB3 PPO with :class:`mabp_gym.envs.sb3.GraphActorCriticPolicy` at its defaults
   on 4 envs of ``mixed`` stepped together (``make_sb3_vec_env``), each episode's load
   drawn from (0.3, 0.8), 600-slot episodes. Rewards are normalized by SB3's
   ``VecNormalize`` (``norm_reward``: divided by a running standard deviation of the
   discounted return, so the critic sees returns of order one whatever the load), the
   learning rate (6e-4) decays linearly to 0, each update runs 2 epochs over its
   rollout (half of the 4 the December tables were made with: half the update time for
   the same budget in env steps), and an update's epochs stop once its
   approximate KL passes 1.5 x ``target_kl`` (0.02). At 1e-3 without the stop the policy
   found stable orderings and lost them (``docs/learning.md``, "Why training degraded").
2. **Choose**: every ``select_every`` env steps the policy (acting as ``act`` says: by
   default the stochastic policy PPO trained, seeded by each episode's seed) runs
   ``select_horizon`` slots at the fixed ``select_load`` on ``select_seeds`` (the screen:
   does not grow on every seed, then the lowest mean backlog). After training the
   ``shortlist`` best screened checkpoints and the last one walk the evaluation loads on
   ``walk_seeds`` (``walk_horizon`` slots, verdict v4), and the kept checkpoint
   (``<stem>.best.zip``) has the highest stable load there. Training return plays no part.
3. **Evaluate**: the kept checkpoint, its untrained self (the seed's initial weights), BP,
   MABP, random scores and the constant action (``constant``) through the evaluation harness
   (``mabp_gym.evaluate``) on ``eval_seeds`` (300-304), ``eval_horizon`` slots (4,000: the
   benchmark's grid verdict), loads walked upward from 0.3 in steps of 0.05, each policy
   stopped at its first load that grows.

    python examples/ppo_from_scratch.py --seed 0 --json s0.json  # 11 min training, then the verdict
    python examples/ppo_from_scratch.py --checkpoint s0.best.zip --json e0.json  # eval only
    python examples/ppo_from_scratch.py --checkpoint s0.best.zip s0.zip --untrained --seed 0 \
        --eval-policies --json e0.json  # both checkpoints and the seed's untrained policy
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize

import mabp_gym  # noqa: F401  (registers the env ids)
from mabp_gym.core.metrics import backlog_slope, does_not_grow, growth
from mabp_gym.envs.sb3 import GraphActorCriticPolicy, UpdateThreads, make_sb3_vec_env
from mabp_gym.training.arguments import require_at_least


@dataclass
class Args:
    workload: str = "mixed"
    load_low: float = 0.3  # training load interval, drawn per episode
    load_high: float = 0.8
    horizon: int = 600  # training episode length (slots)
    steps: int = 1_000_000  # the budget, in env steps (400,000 left 3 of 5 seeds below 0.65)
    n_envs: int = 4
    n_steps: int = 256  # rollout length per env
    batch_size: int = 256
    n_epochs: int = 2  # 4 until December 2026, at 3e-4 (docs/learning.md)
    learning_rate: float = 6e-4  # decays linearly to 0 (1e-3 without the KL stop oscillated)
    target_kl: float = 0.02  # an update's epochs stop past 1.5x this KL (SB3); 0: no stop
    gamma: float = 0.99
    normalize_reward: bool = True  # VecNormalize(norm_obs=False, norm_reward=True)
    log_std_init: float = -1.5  # the policy's default
    seed: int = 0
    # torch threads during the updates (the UpdateThreads callback); 0: one thread
    # throughout, as docs/learning.md's table was made. Faster with more (the updates of a
    # 2-core machine on 2: about 0.77x the time), but a run is reproducible per thread count.
    update_threads: int = 0
    # How a trained policy acts in the screen, the walk and the verdict: "sampled", the
    # stochastic policy PPO trained (a draw per slot from a generator seeded by the
    # episode's seed), or "mean", its means. The means leave single waiting jobs unserved
    # at low load (docs/learning.md, "Acting with the means").
    act: str = "sampled"
    # Checkpoint choice: the policy (as ``act``) at a fixed load on seeds of its own.
    select_every: int = 16_384
    select_load: float = 0.6
    select_horizon: int = 1_000
    select_seeds: list[int] = field(default_factory=lambda: [100, 101])
    # Then the walk itself on seeds of the choice's own: the ``shortlist`` best screened
    # checkpoints and the last one walk the evaluation loads on ``walk_seeds``; the kept one
    # has the highest stable load there (then the lowest screen backlog). One load on two
    # seeds picked a checkpoint that ran away one grid step higher on held-out seeds.
    shortlist: int = 4
    walk_seeds: list[int] = field(default_factory=lambda: [100, 101, 102])
    walk_horizon: int = 2_000
    # The held-out verdict: the harness on seeds neither training nor choice used.
    eval_policies: list[str] = field(
        default_factory=lambda: ["bp", "mabp", "random", "constant"]
    )  # beside the chosen checkpoint and its untrained self (the same seed, no update)
    eval_seeds: list[int] = field(default_factory=lambda: [300, 301, 302, 303, 304])
    eval_horizon: int = 4_000
    eval_loads: list[float] = field(
        default_factory=lambda: [round(0.3 + 0.05 * k, 2) for k in range(14)]
    )
    evaluate: bool = True  # --no-evaluate: train and choose only
    checkpoint: list[str] = field(default_factory=list)  # evaluate these instead of training
    untrained: bool = False  # with --checkpoint: also the --seed's initial weights
    json: str | None = None  # also writes <stem>.best.zip (the chosen checkpoint), <stem>.zip


def make_env(args: Args, load: Any, horizon: int) -> gym.Env:
    return gym.make(
        "mabp_gym/SFMSN-v0",
        workload=args.workload,
        load=load,
        horizon=horizon,
        max_episode_steps=horizon,
    )


ACTS = ("sampled", "mean")


def actor(policy: Any, act: str, seed: int | None) -> Any:
    """``obs -> scores`` of an SB3 graph policy acting as ``act`` says, for one episode of
    ``seed`` (the sampled draws' generator is seeded by it, so a run is reproducible)."""
    if act == "mean":
        return lambda obs: policy.predict(obs, deterministic=True)[0]
    generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
    return lambda obs: policy.sample_scores(obs, generator)


def selection_run(model: PPO, env: gym.Env, seed: int, horizon: int, act: str) -> dict[str, float]:
    """Mean backlog and growth of the policy acting as ``act`` over one selection episode."""
    obs, _ = env.reset(seed=seed)
    scores = actor(model.policy, act, seed)
    backlog = np.empty(horizon)
    for t in range(horizon):
        obs, *_ = env.step(scores(obs))
        backlog[t] = env.unwrapped.sim.state.units
    window = backlog[int(0.2 * horizon) :]
    rate = env.unwrapped.workload.total_rate
    return {"backlog": float(window.mean()), "growth": growth(backlog_slope(window), rate)}


class Select(BaseCallback):
    """Evaluates the policy (acting as ``args.act``) for checkpoint choice every ``select_every``
    steps; keeps the best as ``<stem>.best.zip`` and logs the training diagnostics."""

    def __init__(self, args: Args, started: float) -> None:
        super().__init__()
        self.args, self.started = args, started
        self.env = make_env(args, args.select_load, args.select_horizon)
        self.points: list[dict[str, Any]] = []
        self.next = 0
        self.best: tuple[bool, float] | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.states: list[dict[str, torch.Tensor]] = []  # one per point, for the walk

    def evaluate(self) -> None:
        runs = [
            selection_run(self.model, self.env, seed, self.args.select_horizon, self.args.act)
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
        # Epochs run against those scheduled: the KL stop's share shows here.
        rollouts = self.num_timesteps // (self.args.n_steps * self.args.n_envs)
        point["epochs"] = int(self.model._n_updates)
        point["epochs_scheduled"] = int(rollouts * self.args.n_epochs)
        for key in ("explained_variance", "value_loss", "approx_kl", "clip_fraction"):
            value = self.model.logger.name_to_value.get(f"train/{key}")
            if value is not None:
                point[key] = float(value)
        self.states.append(copy.deepcopy(self.model.policy.state_dict()))
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
            f"kl {point.get('approx_kl', float('nan')):.3f}  "
            f"epochs {point['epochs']}/{point['epochs_scheduled']}  "
            f"{point['wall_s']:.0f}s{'  *' if point.get('best') else ''}",
            flush=True,
        )
        self.next = self.num_timesteps + self.args.select_every

    def _on_training_start(self) -> None:
        self.evaluate()

    def _on_rollout_start(self) -> None:
        # At a rollout's start the update on the previous one is done: the point at N env
        # steps is the policy trained on all N (at a rollout's end it would miss the last).
        if self.num_timesteps >= self.next:
            self.evaluate()

    def _on_step(self) -> bool:
        return True


ROW_KEYS = ("policy", "load", "mean_backlog", "penalty", "p95_delay", "hit_ratio", "stable")


ACTING: dict[str, tuple[Any, str]] = {}
"""Registered name -> the SB3 policy module an :class:`Acting` policy acts with, and how."""


def register_acting(name: str, policy: Any, act: str) -> None:
    """Let the harness build ``name`` (it builds policies by registered name): ``policy``,
    an SB3 policy module, acting as ``act`` says (:func:`actor`), reseeded each episode."""
    from mabp_gym.agents.base import Policy
    from mabp_gym.registry import policy_names, register_policy

    class Acting(Policy):
        def reset(self, seed: int | None = None) -> None:
            super().reset(seed)
            self._scores = actor(*ACTING[self.name], seed)

        def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
            if not hasattr(self, "_scores"):
                self.reset(None)
            return np.asarray(self._scores(obs), dtype=np.float64)

    ACTING[name] = (policy, act)
    if name not in policy_names():
        register_policy(name, Acting)


def walk(
    args: Args, names: list[str], seeds: list[int], horizon: int, verbose: bool = True
) -> dict[str, Any]:
    """The harness's stable-load verdict (verdict v4) for ``names`` on ``seeds``: loads
    walked upward, each policy stopped at its first growing load."""
    from mabp_gym.harness.evaluation import evaluate
    from mabp_gym.harness.summaries import stable_load, summarize_records

    records: list[dict[str, Any]] = []
    active = list(names)
    for load in sorted(args.eval_loads):
        batch = evaluate(active, args.workload, [load], seeds, horizon=horizon, backend="serial")
        records += batch
        rows = summarize_records(batch)
        if verbose:
            for row in rows:
                print({k: row[k] for k in ROW_KEYS}, flush=True)
        active = [p for p in active if p not in {r["policy"] for r in rows if not r["stable"]}]
        if not active:
            break
    rows = [{k: row[k] for k in ROW_KEYS} for row in summarize_records(records)]
    return {"rows": rows, "stable_load": stable_load(records)}


def held_out_verdict(policies: dict[str, Any], args: Args) -> dict[str, Any]:
    """The verdict for each of ``policies`` (name -> SB3 policy module; the trained one is
    ``ppo-scratch``, its untrained self ``ppo-untrained``: the same architecture and seed
    before any update) and ``args.eval_policies`` on the evaluation seeds."""
    for name, policy in policies.items():
        register_acting(name, policy, args.act)
    out = walk(args, [*policies, *args.eval_policies], args.eval_seeds, args.eval_horizon)
    print("held-out stable load", out["stable_load"], flush=True)
    return out


def policy_with(model: PPO, state: dict[str, torch.Tensor]) -> Any:
    """A new policy module of ``model``'s kind holding ``state`` (SB3's policies cache
    tensors that cannot be deep-copied)."""
    policy = model.policy_class(
        model.observation_space, model.action_space, model.lr_schedule, **model.policy_kwargs
    )
    policy.load_state_dict(state)
    return policy.eval()


def choose(model: PPO, select: Select, args: Args) -> dict[str, Any]:
    """Walk the shortlisted checkpoints on ``args.walk_seeds``; load the chosen one into
    ``model`` and return what the walk found."""
    points = select.points
    ranked = sorted(
        range(len(points)), key=lambda k: (not points[k]["stable"], points[k]["backlog"])
    )
    shortlist = sorted(set(ranked[: args.shortlist]) | {len(points) - 1})
    found = []
    for k in shortlist:
        register_acting("ppo-candidate", policy_with(model, select.states[k]), args.act)
        out = walk(args, ["ppo-candidate"], args.walk_seeds, args.walk_horizon, verbose=False)
        load = float(out["stable_load"].get("ppo-candidate", 0.0))
        found.append({"steps": points[k]["steps"], "walk_stable_load": load, "index": k})
        print(f"candidate at {points[k]['steps']} steps: stable load {load:.2f}", flush=True)
    best = max(found, key=lambda f: (f["walk_stable_load"], -points[f["index"]]["backlog"]))
    model.policy.load_state_dict(select.states[best["index"]])
    return {"candidates": found, "chosen_steps": best["steps"]}


def make_model(args: Args) -> PPO:
    """The recipe's PPO on its training envs: ``n_envs`` envs of ``workload``, each
    episode's load drawn from the training interval, rewards normalized, the learning rate
    annealed linearly to 0 and each update's epochs stopped at ``target_kl``."""
    # An interval, or one load where --load-low equals --load-high.
    load = (args.load_low, args.load_high) if args.load_high > args.load_low else args.load_low
    # The batched vector env: the transitions DummyVecEnv of these envs gives, every env's
    # slot in one compiled call (tests/test_sb3_vec.py).
    envs: Any = make_sb3_vec_env(
        "mabp_gym/SFMSN-v0",
        args.n_envs,
        max_episode_steps=args.horizon,
        seed=args.seed,
        workload=args.workload,
        load=load,
        horizon=args.horizon,
    )
    if args.normalize_reward:
        envs = VecNormalize(envs, norm_obs=False, norm_reward=True, gamma=args.gamma)
    rate = args.learning_rate
    return PPO(
        GraphActorCriticPolicy,
        envs,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        learning_rate=lambda progress: rate * progress,  # progress: 1 at the start, 0 at the end
        target_kl=args.target_kl or None,
        gamma=args.gamma,
        seed=args.seed,
        device="cpu",
        policy_kwargs={"log_std_init": args.log_std_init},
        verbose=0,
    )


def checkpoint_names(args: Args) -> list[str]:
    """Each ``--checkpoint`` file's stem: ``runs/s0.best.zip`` -> ``s0.best``."""
    return [ckpt.removesuffix(".zip").rsplit("/", 1)[-1] for ckpt in args.checkpoint]


def parse(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, list):
            item = {"eval_loads": float, "eval_policies": str, "checkpoint": str}.get(f.name, int)
            many = "*" if f.name == "eval_policies" else "+"  # none: the model alone
            parser.add_argument(
                flag, nargs=many, type=item, default=default, help=f"default: {default}"
            )
        elif f.name == "json":
            parser.add_argument(flag, default=None, help="default: none")
        elif isinstance(default, bool):
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=f"default: {default}",
            )
        else:
            parser.add_argument(
                flag, type=type(default), default=default, help=f"default: {default}"
            )
    args = Args(**vars(parser.parse_args(argv)))
    used = (set(args.select_seeds) | set(args.walk_seeds)) & set(args.eval_seeds)
    if used:
        parser.error(
            f"--eval-seeds must not include selection seeds (--select-seeds, --walk-seeds), "
            f"both have {sorted(used)}"
        )
    if args.untrained and not args.checkpoint:
        parser.error("--untrained goes with --checkpoint (training evaluates its own)")
    stems = checkpoint_names(args)
    if len(set(stems)) < len(stems):
        parser.error(f"--checkpoint names each file once by its own name, got {stems}")
    if args.target_kl < 0:
        parser.error(f"--target-kl must be at least 0 (0: no KL stop), got {args.target_kl}")
    if not args.learning_rate > 0:
        parser.error(f"--learning-rate must be above 0, got {args.learning_rate}")
    if args.act not in ACTS:
        parser.error(f"--act must be one of {ACTS}, got {args.act!r}")
    if args.shortlist < 1:
        parser.error(f"--shortlist must be at least 1, got {args.shortlist}")
    if args.update_threads < 0:
        parser.error(
            f"--update-threads must be 0 or more (0: one thread), got {args.update_threads}"
        )
    check_before_training(args, parser)
    return args


def check_before_training(args: Args, parser: argparse.ArgumentParser) -> None:
    """Refuse what would otherwise fail after the training (the verdict's policies, loads
    and horizon) or inside SB3 (budgets it cannot run), and evaluation seeds a training
    env resets with."""
    from mabp_gym.core.metrics import check_window
    from mabp_gym.registry import named_policy, policy_names

    try:
        require_at_least(args, 1, "steps", "n_envs", "n_epochs", "select_every")
        # A one-sample batch has no advantage std.
        require_at_least(args, 2, "n_steps", "batch_size", "horizon")
    except ValueError as error:
        parser.error(str(error))
    if not 0.0 <= args.load_low <= args.load_high <= 10.0:
        parser.error(
            f"--load-low and --load-high must satisfy 0 <= low <= high <= 10 (equal: one "
            f"load), got {args.load_low} and {args.load_high}"
        )
    bad_loads = [x for x in args.eval_loads if not 0.0 < x <= 10.0]
    if bad_loads:
        parser.error(f"--eval-loads must each be in (0, 10], got {bad_loads}")
    for flag, horizon in (
        ("--select-horizon", args.select_horizon),
        ("--walk-horizon", args.walk_horizon),
        ("--eval-horizon", args.eval_horizon),
    ):
        try:
            check_window(horizon, 0.2)
        except ValueError as error:
            parser.error(f"{flag}: {error}")
    for name in args.eval_policies:
        try:
            named_policy(name)
        except ValueError as error:
            parser.error(f"--eval-policies: {error}")
        if name not in policy_names():
            parser.error(f"--eval-policies: unknown policy {name!r}; choose from {policy_names()}")
    trained_on = set(range(args.seed, args.seed + args.n_envs))
    if not args.checkpoint and trained_on & set(args.eval_seeds):
        parser.error(
            f"--eval-seeds must not include a seed the training envs reset with (--seed "
            f"{args.seed} to {args.seed + args.n_envs - 1}), got {sorted(args.eval_seeds)}"
        )
    missing = [c for c in args.checkpoint if not os.path.isfile(c)]
    if missing:
        parser.error(f"--checkpoint: no such file {missing[0]!r} (give the .zip's full name)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    result: dict[str, Any] = {"args": dataclasses.asdict(args)}
    if args.checkpoint:
        # Acting needs no schedule: a checkpoint made elsewhere loads without unpickling it.
        frozen = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0}
        models = [PPO.load(ckpt, device="cpu", custom_objects=frozen) for ckpt in args.checkpoint]
        policies = {"ppo-scratch": models[0].policy}
        if len(models) > 1:  # each shown as ppo-<its file's stem>
            names = checkpoint_names(args)
            policies = {f"ppo-{st}": m.policy for st, m in zip(names, models, strict=True)}
        if args.untrained:  # the same seed's initial weights: PPO seeds before it builds
            policies["ppo-untrained"] = make_model(args).policy
        result["held_out"] = held_out_verdict(policies, args)
    else:
        model = make_model(args)
        select = Select(args, started)
        threads = [UpdateThreads(args.update_threads)] if args.update_threads else []
        model.learn(args.steps, callback=[*threads, select])  # the threads given back first
        if select.points[-1]["steps"] != model.num_timesteps:
            select.evaluate()
        result["curve"] = select.points
        result["train_wall_s"] = time.perf_counter() - started
        if args.json:
            model.save(args.json.removesuffix(".json") + ".zip")
        if args.evaluate:
            result["choice"] = choose(model, select, args)
            if args.json:
                model.save(args.json.removesuffix(".json") + ".best.zip")  # the walk's choice
            policies = {
                "ppo-scratch": model.policy,
                "ppo-untrained": policy_with(model, select.states[0]),
            }
            if result["choice"]["chosen_steps"] != select.points[-1]["steps"]:
                policies["ppo-last"] = policy_with(model, select.states[-1])  # a collapse shows
            result["held_out"] = held_out_verdict(policies, args)
    result["wall_s"] = time.perf_counter() - started
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
