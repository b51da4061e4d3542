"""Multi-agent PPO from scratch on the decentralized view: one shared policy per node role.

Every node of ``mabp_gym.parallel_env`` is an agent that scores its own candidates from its
local observation (stale telemetry of its neighbours). Agents of the same role (the two
generators, the two retrievers, ...) share one set of parameters: independent PPO with
parameter sharing per role, trained from random initialization on each agent's own reward
(``agent_reward="own"``: its backlog and the penalty of its decisions). Read top to bottom.

The policy of a role reads the agent's node row, queues, queue ages and memory (symlog),
and outputs, per kind of candidate (service, route, transfer, retain), the coefficients of
a linear score of each candidate's own features, as the single-agent
:class:`~mabp_gym.envs.sb3.GraphActorCriticPolicy` does per node. The Gaussian's
log-probability and entropy count the agent's active candidates only (``candidate_mask``),
scores start at +0.5 (only positive scores act), rewards are normalized by a running std of
the discounted return.

Every ``select_every`` slots the deterministic policy runs ``select_horizon`` slots at
``select_load`` on ``select_seeds``; the kept checkpoint is the one that does not grow on
every selection seed, then has the lowest backlog. After training, its stable load is
decided like the decentralized baselines' (``mabp_gym.harness.decentralized.run_decentralized``, the
growth verdict of ``mabp_gym.stable_load``) at each ``--eval-staleness``, beside its
untrained self (``ppo-untrained``: the seed's initial weights, no update) and decentralized
BP and MABP.

    python examples/marl_ppo.py --json marl.json        # about 10 minutes on 2 cores
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

import numpy as np
import torch
from torch import nn

import mabp_gym
from mabp_gym.core.metrics import backlog_slope, does_not_grow, growth
from mabp_gym.core.workload import ROLES

KINDS = ("service", "route", "transfer", "retain")
TRUNK = ("node", "queues", "queue_age", "memory")


@dataclass
class Args:
    workload: str = "mixed"
    load_low: float = 0.3  # each episode's load drawn from (load_low, load_high)
    load_high: float = 0.8
    staleness: int = 0  # telemetry delay while training
    agent_reward: str = "own"  # "own" (its backlog and penalty) or "global" (the team's)
    horizon: int = 400
    slots: int = 40_000  # the budget, in env steps (slots; every agent acts each slot)
    rollout: int = 400  # slots per update
    epochs: int = 4
    minibatches: int = 4
    learning_rate: float = 3e-4  # annealed linearly to 0 (1e-3 lost its best orderings)
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coef: float = 0.5
    hidden: int = 64
    score_bias: float = 0.5
    log_std_init: float = -1.5
    seed: int = 0
    # Checkpoint choice: the deterministic policy at a fixed load on seeds of its own.
    select_every: int = 4_000
    select_load: float = 0.4
    select_horizon: int = 600
    select_seeds: list[int] = field(default_factory=lambda: [100, 101])
    eval_policies: list[str] = field(default_factory=lambda: ["bp", "mabp"])
    eval_staleness: list[int] = field(default_factory=lambda: [0, 5])
    eval_loads: list[float] = field(
        default_factory=lambda: [round(0.3 + 0.05 * k, 2) for k in range(14)]
    )
    eval_seeds: list[int] = field(default_factory=lambda: [300, 301, 302])
    eval_horizon: int = 2_000
    json: str | None = None
    save: str | None = None  # the chosen checkpoint: {"args", "state_dict"} (torch.save)


def symlog(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(torch.abs(x))


class RolePolicy(nn.Module):
    """One actor-critic per role; every agent is scored by its role's parameters."""

    def __init__(self, env: Any, hidden: int, score_bias: float, log_std_init: float) -> None:
        super().__init__()
        space = env.observation_space(env.possible_agents[0])
        self.trunk_width = sum(int(np.prod(space[k].shape)) for k in TRUNK)
        self.widths = {k: int(space[k].shape[1]) for k in KINDS}
        self.counts = {k: int(space[k].shape[0]) for k in KINDS}
        self.split = [1 + self.widths[k] for k in KINDS]
        out = sum(self.split)

        def mlp(last: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Linear(self.trunk_width, hidden),
                nn.Tanh(),
                nn.Linear(hidden, hidden),
                nn.Tanh(),
                nn.Linear(hidden, last),
            )

        self.actors = nn.ModuleList(mlp(out) for _ in ROLES)
        self.critics = nn.ModuleList(mlp(1) for _ in ROLES)
        with torch.no_grad():
            for actor in self.actors:
                actor[-1].weight.mul_(0.01)
                actor[-1].bias.zero_()
                start = 0
                for width in self.split:  # alpha of each kind; the betas start at 0
                    actor[-1].bias[start] = score_bias
                    start += width
        self.log_std = nn.Parameter(torch.full((len(ROLES), len(KINDS)), log_std_init))
        kind = torch.repeat_interleave(
            torch.arange(len(KINDS)), torch.as_tensor([self.counts[k] for k in KINDS])
        )
        self.register_buffer("kind", kind, persistent=False)

    def forward(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Means ``(M, D_l)`` and values ``(M,)`` for ``M`` agent observations."""
        trunk = symlog(torch.cat([obs[k].reshape(obs[k].shape[0], -1) for k in TRUNK], -1))
        role = obs["node"][:, : len(ROLES)].argmax(-1)
        coefficients = torch.stack([actor(trunk) for actor in self.actors], 1)
        coefficients = coefficients[torch.arange(len(role)), role]
        values = torch.stack([critic(trunk)[:, 0] for critic in self.critics], 1)
        values = values[torch.arange(len(role)), role]
        scores = []
        for kind, part in zip(KINDS, coefficients.split(self.split, -1), strict=True):
            features = symlog(obs[kind])  # (M, count, F)
            scores.append(part[:, None, 0] + (part[:, None, 1:] * features).sum(-1))
        return nn.functional.softsign(torch.cat(scores, 1)), values

    def distribution(self, obs: dict[str, torch.Tensor]):
        mean, value = self(obs)
        role = obs["node"][:, : len(ROLES)].argmax(-1)
        std = self.log_std[role][:, self.kind].exp()
        return torch.distributions.Normal(mean, std, validate_args=False), value

    def act(self, obs, action=None):
        dist, value = self.distribution(obs)
        active = obs["candidate_mask"].float()
        if action is None:  # masked candidates at their mean: their scores change nothing
            action = torch.where(active > 0, dist.sample(), dist.mean)
        logp = (dist.log_prob(action) * active).sum(-1)
        return action, logp, (dist.entropy() * active).sum(-1), value


def stack(obs: dict[str, dict[str, np.ndarray]], agents: list[str]) -> dict[str, torch.Tensor]:
    keys = (*TRUNK, *KINDS, "candidate_mask")
    return {k: torch.as_tensor(np.stack([obs[a][k] for a in agents])).float() for k in keys}


class ReturnScale:
    """Rewards divided by a running std of the discounted return (one per agent)."""

    def __init__(self, agents: int, gamma: float) -> None:
        self.gamma, self.ret = gamma, np.zeros(agents)
        self.count, self.mean, self.m2 = 1e-4, 0.0, 0.0

    def __call__(self, rewards: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + rewards
        for x in self.ret:  # Welford
            self.count += 1
            delta = x - self.mean
            self.mean += delta / self.count
            self.m2 += delta * (x - self.mean)
        return rewards / np.sqrt(self.m2 / self.count + 1e-8)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: list[float],
    boots: torch.Tensor,
    next_value: torch.Tensor,
    args: Args,
) -> torch.Tensor:
    """Generalized advantage estimates per agent, shapes ``(rollout, agents)``.

    ``dones[t]``: the episode was truncated at step ``t`` (the env never terminates);
    ``boots[t]``: then the value of its last observation. A truncation stops the trace but
    not the bootstrap: the return past the cut is that value, not 0.
    """
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        nonterminal = 1.0 - dones[t]
        nxt = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        ahead = nxt * nonterminal + boots[t] * (1.0 - nonterminal)
        delta = rewards[t] + args.gamma * ahead - values[t]
        last = delta + args.gamma * args.gae_lambda * nonterminal * last
        advantages[t] = last
    return advantages


def train(args: Args) -> tuple[RolePolicy, RolePolicy, list[dict[str, float]]]:
    """The chosen checkpoint, the untrained policy (the seed's initial weights) and the
    selection log."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    make = lambda load: mabp_gym.parallel_env(  # noqa: E731
        args.workload,
        staleness=args.staleness,
        load=load,
        horizon=args.horizon,
        agent_reward=args.agent_reward,
    )
    env = make(args.load_low)
    agents = list(env.possible_agents)
    policy = RolePolicy(env, args.hidden, args.score_bias, args.log_std_init)
    untrained = copy.deepcopy(policy)  # what training adds is measured against it
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.learning_rate, eps=1e-5)
    scale = ReturnScale(len(agents), args.gamma)
    updates = max(1, args.slots // args.rollout)
    log: list[dict[str, float]] = []
    episode, slots, started = 0, 0, time.perf_counter()
    best: tuple[bool, float] | None = None
    best_state: dict[str, torch.Tensor] | None = None
    next_select = 0

    def new_episode() -> dict[str, dict[str, np.ndarray]]:
        nonlocal env, episode
        env = make(float(rng.uniform(args.load_low, args.load_high)))
        episode += 1
        return env.reset(seed=args.seed * 100_000 + episode)[0]

    obs = new_episode()
    for update in range(updates):
        optimizer.param_groups[0]["lr"] = args.learning_rate * (1 - update / updates)
        batch: dict[str, list] = {
            k: [] for k in ("obs", "act", "logp", "val", "rew", "done", "boot")
        }
        backlog = []
        for _ in range(args.rollout):
            tensors = stack(obs, agents)
            with torch.no_grad():
                action, logp, _, value = policy.act(tensors)
            obs, rewards, _, truncations, _ = env.step(
                {a: action[i].numpy() for i, a in enumerate(agents)}
            )
            backlog.append(env.last_outcome.backlog)
            done = any(truncations.values())
            batch["obs"].append(tensors)
            batch["act"].append(action)
            batch["logp"].append(logp)
            batch["val"].append(value)
            batch["rew"].append(torch.as_tensor(scale(np.array([rewards[a] for a in agents]))))
            batch["done"].append(float(done))
            # Episodes end by truncation only (the env never terminates): the return past
            # the cut is the value of the episode's last observation, not 0.
            boot = torch.zeros(len(agents))
            if done:
                with torch.no_grad():
                    boot = policy.act(stack(obs, agents))[3]
            batch["boot"].append(boot)
            slots += 1
            if done:
                obs = new_episode()
        with torch.no_grad():
            next_value = policy.act(stack(obs, agents))[3]
        values = torch.stack(batch["val"])
        rewards = torch.stack(batch["rew"]).float()
        advantages = gae(
            rewards, values, batch["done"], torch.stack(batch["boot"]), next_value, args
        )
        returns = advantages + values
        flat = {k: torch.cat([o[k] for o in batch["obs"]]) for k in batch["obs"][0]}
        act = torch.cat(batch["act"])
        old_logp, adv, ret = torch.cat(batch["logp"]), advantages.flatten(), returns.flatten()
        ppo_update(policy, optimizer, flat, (act, old_logp, adv, ret), args)
        var = float(ret.var())
        point = {
            "slots": slots,
            "mean_backlog": float(np.mean(backlog)),
            "explained_variance": float("nan")
            if var == 0
            else 1 - float((ret - values.flatten()).var()) / var,
            "wall_s": time.perf_counter() - started,
        }
        if slots >= next_select or update == updates - 1:
            runs = [selection_run(policy, args, seed) for seed in args.select_seeds]
            point["select_backlog"] = float(np.mean([r["backlog"] for r in runs]))
            point["select_stable"] = all(does_not_grow(r["growth"]) for r in runs)
            key = (not point["select_stable"], point["select_backlog"])
            if best is None or key < best:
                best, best_state = key, copy.deepcopy(policy.state_dict())
                point["best"] = True
            next_select = slots + args.select_every
        log.append(point)
        print_point(point)
    assert best_state is not None
    policy.load_state_dict(best_state)  # the chosen checkpoint
    return policy, untrained, log


def ppo_update(
    policy: RolePolicy,
    optimizer: torch.optim.Optimizer,
    flat: dict[str, torch.Tensor],
    batch: tuple[torch.Tensor, ...],
    args: Args,
) -> None:
    """PPO's clipped update over one rollout: ``epochs`` passes of shuffled minibatches;
    ``batch`` is the flattened (actions, log-probabilities, advantages, returns)."""
    act, old_logp, adv, ret = batch
    size = len(ret)
    for _ in range(args.epochs):
        for idx in torch.randperm(size).split(size // args.minibatches):
            _, logp, _, value = policy.act({k: v[idx] for k, v in flat.items()}, act[idx])
            ratio = (logp - old_logp[idx]).exp()
            a = (adv[idx] - adv[idx].mean()) / (adv[idx].std() + 1e-8)
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
            v_loss = 0.5 * ((value - ret[idx]) ** 2).mean()
            loss = pg + args.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()


def print_point(point: dict[str, float]) -> None:
    """One line of the training log: slots, backlog, explained variance, the selection's
    backlog and verdict, wall time, and a star where the checkpoint was chosen."""
    print(
        f"slots {point['slots']:>7}  backlog {point['mean_backlog']:8.1f}  "
        f"ev {point['explained_variance']:.2f}  "
        f"select {point.get('select_backlog', float('nan')):8.1f} "
        f"{'stable' if point.get('select_stable') else '      '}  {point['wall_s']:.0f}s"
        f"{'  *' if point.get('best') else ''}",
        flush=True,
    )


def selection_run(policy: RolePolicy, args: Args, seed: int) -> dict[str, float]:
    """Mean backlog and growth of the deterministic policy over one selection episode."""
    env = mabp_gym.parallel_env(
        args.workload,
        staleness=args.staleness,
        load=args.select_load,
        horizon=args.select_horizon,
    )
    rules = {a: Local(policy) for a in env.possible_agents}
    obs, _ = env.reset(seed=seed)
    backlog = []
    while env.agents:
        obs, *_ = env.step({a: rules[a].scores(obs[a]) for a in env.agents})
        backlog.append(env.last_outcome.backlog)
    window = np.asarray(backlog[int(0.2 * len(backlog)) :], dtype=float)
    rate = env.workload.total_rate
    return {"backlog": float(window.mean()), "growth": growth(backlog_slope(window), rate)}


class Local:
    """A trained role policy as the deterministic local rule of one agent."""

    def __init__(self, policy: RolePolicy) -> None:
        self.policy = policy

    def reset(self, seed: int | None = None) -> None:
        pass

    def scores(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        with torch.no_grad():
            return self.policy(stack({"a": obs}, ["a"]))[0][0].double().numpy()


def held_out(learned: dict[str, RolePolicy], args: Args) -> dict[str, Any]:
    """Stable load of the learned policies (``ppo``: the trained one, ``ppo-untrained``: its
    initial weights) and the decentralized baselines per staleness."""
    from mabp_gym import stable_load
    from mabp_gym.harness.decentralized import run_decentralized

    records = []
    for staleness in args.eval_staleness:
        active = [*learned, *args.eval_policies]
        for load in args.eval_loads:
            batch = []
            for name in active:
                for seed in args.eval_seeds:
                    rules = None
                    if name in learned:
                        policy = learned[name]
                        rules = lambda env, p=policy: {a: Local(p) for a in env.possible_agents}  # noqa: E731
                    batch.append(
                        run_decentralized(
                            name,
                            args.workload,
                            load=load,
                            seed=seed,
                            staleness=staleness,
                            horizon=args.eval_horizon,
                            rules=rules,
                        )
                    )
            records += batch
            growing = {
                r["local_policy"]
                for r in batch
                if sum(not x["stable"] for x in batch if x["local_policy"] == r["local_policy"])
                > len(args.eval_seeds) // 2
            }
            active = [p for p in active if p not in growing]
            if not active:
                break
    loads = stable_load(records)
    print("held-out stable load", loads, flush=True)
    return {"stable_load": loads}


def check_before_training(args: Args, parser: argparse.ArgumentParser) -> None:
    """Refuse what would otherwise fail after the training: a baseline that is not a local
    rule, a staleness the env refuses, a minibatch of one sample, an output path that
    cannot be written."""
    from mabp_gym.agents.decentralized import LOCAL_POLICIES

    unknown = sorted(set(args.eval_policies) - set(LOCAL_POLICIES))
    if unknown:
        parser.error(f"--eval-policies: {unknown} are not local rules, allowed: {LOCAL_POLICIES}")
    for flag, staleness, horizon in [
        ("--staleness", [args.staleness], args.horizon),
        ("--eval-staleness", args.eval_staleness, args.eval_horizon),
    ]:
        for value in staleness:
            try:
                mabp_gym.parallel_env(args.workload, staleness=value, horizon=horizon)
            except ValueError as error:
                parser.error(f"{flag} {value}: {error}")
    if not 1 <= args.minibatches <= args.rollout // 2:
        parser.error(
            f"--minibatches must be in [1, --rollout / 2 = {args.rollout // 2}] (a minibatch "
            f"needs two samples to normalize its advantages), got {args.minibatches}"
        )
    for flag, path in (("--json", args.json), ("--save", args.save)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            parser.error(f"{flag} {path}: its folder does not exist")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, list):
            item = {"eval_loads": float, "eval_policies": str}.get(f.name, int)
            if f.name in ("select_seeds", "eval_seeds"):
                item = int
            many = "*" if f.name == "eval_policies" else "+"  # none: the learned policy alone
            parser.add_argument(
                flag, nargs=many, type=item, default=default, help=f"default: {default}"
            )
        elif f.name in ("json", "save"):
            parser.add_argument(flag, default=None, help="default: none")
        else:
            parser.add_argument(
                flag, type=type(default), default=default, help=f"default: {default}"
            )
    args = Args(**vars(parser.parse_args(argv)))
    used = set(args.select_seeds) & set(args.eval_seeds)
    if used:
        parser.error(f"--eval-seeds must not include selection seeds, both have {sorted(used)}")
    if args.agent_reward not in ("own", "global"):
        parser.error(f"--agent-reward must be 'own' or 'global', got {args.agent_reward!r}")
    check_before_training(args, parser)
    torch.set_num_threads(1)
    policy, untrained, log = train(args)
    if args.save:
        torch.save({"args": dataclasses.asdict(args), "state_dict": policy.state_dict()}, args.save)
    learned = {"ppo": policy, "ppo-untrained": untrained}
    result = {"args": dataclasses.asdict(args), "curve": log, **held_out(learned, args)}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
