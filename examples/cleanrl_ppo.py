"""A CleanRL-style single-file PPO on ``gymnasium.make_vec``, with the candidate-structured
policy (the default) or a plain MLP on the flat observation.

Read top to bottom: arguments, vector env, agent, rollout, GAE, clipped update. The env is
``mabp_gym/SFMSN-v0`` stepped by the batched vector env; the action is a Gaussian over the
``D`` candidate scores, clipped to the Box by the env step. Two agents:

- ``--agent candidate`` (default): the Dict observation and
  :class:`~mabp_gym.agents.candidate_net.CandidateNet`, the network of the documented SB3
  policy (message passing over the graph, one linear read-out per candidate whose
  coefficients come from its node or link), with one learned log-std per kind of candidate
  and a value head on the pooled embedding.
- ``--agent mlp``: ``obs_mode="flat"`` (one symlog-scaled vector, the static index arrays
  left out) and CleanRL's MLP actor-critic. It does not learn orderings: it loses to the
  constant action (``docs/learning.md``, "CleanRL-style PPO"). At the defaults (200,000
  steps) the candidate agent beats the constant action and BP on the training seeds in
  that table.

What this env needs beyond CleanRL's continuous-action PPO (the same as the documented SB3
path, ``docs/learning.md``):

- **Masked log-probabilities.** The flat observation ends with the ``D`` entries of the
  ``action_mask``; log-probability and entropy sum over the active candidates only, and
  masked candidates are sampled at their mean (their scores change nothing).
- **Scores start at +0.5** (the actor's last bias): only positive scores act, so means at 0
  would switch every candidate off half the time.
- **Normalized rewards** (``gymnasium.wrappers.vector.NormalizeReward``, after
  ``RecordEpisodeStatistics``, so the printed returns are the env's own) and a learning rate
  annealed to 0.

    python examples/cleanrl_ppo.py              # the candidate agent, 200,000 steps (2.5 min here)
    python examples/cleanrl_ppo.py --agent mlp  # the flat MLP
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import mabp_gym  # noqa: F401  (registers the env ids)
from mabp_gym.agents.candidate_net import KINDS, CandidateNet, candidate_widths
from mabp_gym.training.arguments import require_at_least


@dataclass
class Args:
    agent: str = "candidate"
    """candidate (CandidateNet on the Dict observation) or mlp (the flat observation)"""
    workload: str = "mixed"
    """workload name or workload file"""
    load: float = 0.3
    """normalized load of every episode"""
    horizon: int = 600
    """slots per episode"""
    seed: int = 0
    """seed of the envs, torch and numpy"""
    total_timesteps: int = 200_000
    """environment steps over all envs"""
    num_envs: int = 4
    """vector envs (gymnasium.make_vec: the batched vector env)"""
    num_steps: int = 128
    """rollout length per env"""
    learning_rate: float = 3e-4
    """Adam step size (annealed linearly to 0)"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    update_epochs: int = 4
    """epochs per rollout"""
    clip_coef: float = 0.2
    """PPO clip range"""
    ent_coef: float = 0.0
    """entropy bonus"""
    vf_coef: float = 0.5
    """value-loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping"""
    hidden: int = 0
    """network width (0: the agent's default, 32 for candidate, 128 for mlp)"""
    score_bias: float = 0.5
    """initial mean of every score (only scores > 0 act)"""
    log_std_init: float = -1.5
    """initial log-std of every score"""
    norm_reward: bool = True
    """normalize rewards by a running std of the discounted return"""
    device: str = "auto"
    """auto (cuda when there is one), cpu or cuda"""
    eval_episodes: int = 5
    """held-out episodes for the final comparison (0: none)"""
    eval_seed: int = 10_000
    """the first held-out episode's seed (training resets from ``seed``'s own stream)"""


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    for field in dataclasses.fields(Args):
        flag = f"--{field.name.replace('_', '-')}"
        if isinstance(field.default, bool):
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=f"default: {field.default}",
            )
        else:
            parser.add_argument(
                flag,
                type=type(field.default),
                default=field.default,
                help=f"default: {field.default}",
            )
    args = Args(**vars(parser.parse_args(argv)))
    if args.agent not in AGENTS:
        parser.error(f"--agent must be one of {sorted(AGENTS)}, got {args.agent!r}")
    if args.hidden < 0:
        parser.error(f"--hidden must be at least 0 (0: the agent's default), got {args.hidden}")
    try:
        require_at_least(
            args,
            1,
            "total_timesteps",
            "num_envs",
            "num_steps",
            "num_minibatches",
            "update_epochs",
            "eval_episodes",
        )
    except ValueError as error:
        parser.error(str(error))
    batch = args.num_envs * args.num_steps
    if batch // args.num_minibatches < 2:
        parser.error(
            f"--num-minibatches must leave at least 2 samples a minibatch: the batch is "
            f"--num-envs x --num-steps = {batch}, got {args.num_minibatches}"
        )
    return args


def layer(inputs: int, outputs: int, std: float = np.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


def masked_gaussian(mean: torch.Tensor, std: torch.Tensor, active: torch.Tensor, action):
    """Sample (when ``action`` is None) and score the Gaussian over the scores, counting
    the active candidates only: masked candidates sit at their mean (their scores change
    nothing) and add nothing to log-probability or entropy."""
    dist = torch.distributions.Normal(mean, std.expand_as(mean))
    if action is None:
        action = torch.where(active > 0, dist.sample(), mean)
    return action, (dist.log_prob(action) * active).sum(1), (dist.entropy() * active).sum(1)


class CandidateAgent(nn.Module):
    """CandidateNet's scores as the Gaussian's means, one log-std per kind of candidate,
    and a linear value head on its pooled latent (the documented SB3 policy's layout)."""

    def __init__(
        self, space: gym.spaces.Dict, hidden: int, score_bias: float, log_std_init: float
    ) -> None:
        super().__init__()
        self.net = CandidateNet(candidate_widths(space), hidden=hidden, score_bias=score_bias)
        self.critic = layer(hidden, 1, 1.0)
        counts = torch.as_tensor([space[kind].shape[0] for kind in KINDS])
        self.register_buffer("kind", torch.repeat_interleave(torch.arange(len(KINDS)), counts))
        self.log_std = nn.Parameter(torch.full((len(KINDS),), log_std_init))

    def means(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(obs)[0]

    def value(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.critic(self.net(obs)[1])

    def act(self, obs: dict[str, torch.Tensor], action: torch.Tensor | None = None):
        mean, latent = self.net(obs)
        std = self.log_std[self.kind].exp()
        action, log_prob, entropy = masked_gaussian(mean, std, obs["action_mask"], action)
        return action, log_prob, entropy, self.critic(latent)


class Agent(nn.Module):
    """CleanRL's MLP actor-critic on the flat observation, which ends with the action mask."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: int, score_bias: float, log_std_init: float
    ) -> None:
        super().__init__()
        self.act_dim = act_dim
        self.critic = nn.Sequential(
            layer(obs_dim, hidden),
            nn.Tanh(),
            layer(hidden, hidden),
            nn.Tanh(),
            layer(hidden, 1, 1.0),
        )
        self.actor_mean = nn.Sequential(
            layer(obs_dim, hidden),
            nn.Tanh(),
            layer(hidden, hidden),
            nn.Tanh(),
            layer(hidden, act_dim, 0.01),
        )
        nn.init.constant_(self.actor_mean[-1].bias, score_bias)
        self.actor_logstd = nn.Parameter(torch.full((1, act_dim), log_std_init))

    def means(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor_mean(x)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None):
        mean = self.actor_mean(x)
        active = x[:, -self.act_dim :]
        action, log_prob, entropy = masked_gaussian(mean, self.actor_logstd.exp(), active, action)
        return action, log_prob, entropy, self.critic(x)


AGENTS = {"candidate": ("dict", 32), "mlp": ("flat", 128)}
"""Each agent's observation mode and default width."""


def make_agent(args: Args, envs: Any) -> nn.Module:
    obs_mode, width = AGENTS[args.agent]
    hidden = args.hidden or width
    if obs_mode == "dict":
        space = envs.single_observation_space
        return CandidateAgent(space, hidden, args.score_bias, args.log_std_init)
    obs_dim = envs.single_observation_space.shape[0]
    act_dim = envs.single_action_space.shape[0]
    return Agent(obs_dim, act_dim, hidden, args.score_bias, args.log_std_init)


def as_tensor(obs: Any, device: torch.device) -> Any:
    """An observation batch as torch: one tensor (flat) or one per key (Dict)."""
    if isinstance(obs, dict):
        return {key: torch.as_tensor(value, device=device) for key, value in obs.items()}
    return torch.as_tensor(obs, device=device)


class ObsBuffer:
    """A rollout's observations, ``(num_steps, num_envs, ...)`` per key (one key, ``None``,
    for the flat observation)."""

    def __init__(self, space: gym.Space, shape: tuple[int, int], device: torch.device) -> None:
        spaces = space.spaces if isinstance(space, gym.spaces.Dict) else {None: space}
        self.dict = isinstance(space, gym.spaces.Dict)
        self.arrays = {
            key: torch.zeros(shape + tuple(sub.shape), device=device) for key, sub in spaces.items()
        }

    def __setitem__(self, step: int, obs: Any) -> None:
        for key, value in obs.items() if self.dict else [(None, obs)]:
            self.arrays[key][step] = value

    def flat(self, index: torch.Tensor) -> Any:
        """Rows ``index`` of the rollout flattened over steps and envs."""
        rows = {k: v.reshape(-1, *v.shape[2:])[index] for k, v in self.arrays.items()}
        return rows if self.dict else rows[None]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    terms: torch.Tensor,
    next_value: torch.Tensor,
    next_done: torch.Tensor,
    next_term: torch.Tensor,
    args: Args,
) -> torch.Tensor:
    """Generalized advantage estimates of one rollout, shapes ``(num_steps, num_envs)``.

    ``dones[t]`` / ``terms[t]``: whether the episode had ended / terminated before step
    ``t`` (CleanRL's convention), so ``values[t + 1]`` after a truncation is the value of
    the episode's last observation, which NEXT_STEP autoreset leaves in that slot. An ending
    stops the trace; only a termination stops the bootstrap. Every episode here is
    truncated (the env never terminates), so every target bootstraps: treating the cut as
    the end of the queue would teach the critic that backlog at slot 599 costs nothing.
    """
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        final = t == rewards.shape[0] - 1
        trace = 1.0 - (next_done if final else dones[t + 1])
        bootstrap = 1.0 - (next_term if final else terms[t + 1])
        nxt = next_value if final else values[t + 1]
        delta = rewards[t] + args.gamma * nxt * bootstrap - values[t]
        last = delta + args.gamma * args.gae_lambda * trace * last
        advantages[t] = last
    return advantages


BASELINES = ("constant", "bp", "mabp", "random")
"""What the trained agent is compared with: the constant action (0.5 for every candidate:
the projection's own order), BP, MABP and random scores; and the untrained agent."""


def episode_return(env: gym.Env, act, seed: int) -> float:
    """The env's return of one episode played by ``act(obs) -> scores`` from ``seed``."""
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(act(obs))
        total += float(reward)
        done = terminated or truncated
    return total


def compare(
    args: Args, agents: dict[str, nn.Module], device: torch.device
) -> dict[str, list[float]]:
    """Returns on the held-out episodes of each agent (deterministic: its means) and of
    :data:`BASELINES`, the same episodes for all."""
    from mabp_gym.agents import make_policy

    def env_of(obs_mode: str) -> gym.Env:
        return gym.make(
            "mabp_gym/SFMSN-v0",
            workload=args.workload,
            load=args.load,
            horizon=args.horizon,
            max_episode_steps=args.horizon,
            obs_mode=obs_mode,
        )

    seeds = range(args.eval_seed, args.eval_seed + args.eval_episodes)
    own, graph = env_of(AGENTS[args.agent][0]), env_of("dict")
    out: dict[str, list[float]] = {}
    for name, agent in agents.items():

        def means(obs, agent=agent):
            batch = {k: v[None] for k, v in obs.items()} if isinstance(obs, dict) else obs[None]
            with torch.no_grad():
                return agent.means(as_tensor(batch, device))[0].cpu().numpy()

        out[name] = [episode_return(own, means, seed) for seed in seeds]
    for name in BASELINES:
        policy = make_policy(name, graph)
        out[name] = []
        for seed in seeds:
            policy.reset(seed)
            out[name].append(episode_return(graph, policy.scores, seed))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(1)

    envs = make_envs(args)
    act_dim = envs.single_action_space.shape[0]
    agent = make_agent(args, envs).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    untrained = make_agent(args, envs).to(device)
    untrained.load_state_dict(agent.state_dict())

    shape = (args.num_steps, args.num_envs)
    obs_buf = ObsBuffer(envs.single_observation_space, shape, device)
    act_buf = torch.zeros(shape + (act_dim,), device=device)
    logp_buf, rew_buf, done_buf, term_buf, val_buf, valid_buf = (
        torch.zeros(shape, device=device) for _ in range(6)
    )
    batch_size = args.num_envs * args.num_steps
    minibatch = batch_size // args.num_minibatches
    iterations = max(1, args.total_timesteps // batch_size)

    started, global_step, returns = time.perf_counter(), 0, []
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = as_tensor(next_obs, device)
    next_done = torch.zeros(args.num_envs, device=device)
    next_term = torch.zeros(args.num_envs, device=device)
    reset_step = torch.zeros(args.num_envs, device=device)
    for iteration in range(iterations):
        optimizer.param_groups[0]["lr"] = args.learning_rate * (1.0 - iteration / iterations)
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs_buf[step] = next_obs
            done_buf[step], term_buf[step] = next_done, next_term
            valid_buf[step] = 1.0 - reset_step
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs)
            act_buf[step], logp_buf[step], val_buf[step] = action, logp, value.flatten()
            obs, reward, terminated, truncated, info = envs.step(action.cpu().numpy())
            done = np.logical_or(terminated, truncated)
            rew_buf[step] = torch.as_tensor(reward, device=device, dtype=torch.float32)
            next_obs = as_tensor(obs, device)
            next_done = torch.as_tensor(done, device=device, dtype=torch.float32)
            next_term = torch.as_tensor(terminated, device=device, dtype=torch.float32)
            reset_step = next_done.clone()  # NEXT_STEP: the next step only resets
            if "episode" in info:
                returns.extend(info["episode"]["r"][info["_episode"]].tolist())

        with torch.no_grad():
            next_value = agent.value(next_obs).flatten()
        advantages = gae(
            rew_buf, val_buf, done_buf, term_buf, next_value, next_done, next_term, args
        )
        targets = advantages + val_buf

        batch = (
            act_buf.reshape(-1, act_dim),
            logp_buf.flatten(),
            advantages.flatten(),
            targets.flatten(),
            valid_buf.flatten(),
        )
        update(args, agent, optimizer, obs_buf, batch, minibatch, device)
        mean_return = float(np.mean(returns[-10:])) if returns else float("nan")
        print(
            f"step {global_step:>7}  episodes {len(returns):>4}  "
            f"mean return (last 10) {mean_return:10.2f}  "
            f"{global_step / (time.perf_counter() - started):6.0f} steps/s",
            flush=True,
        )
    envs.close()
    result: dict[str, Any] = {
        "steps": global_step,
        "episodes": len(returns),
        "mean_return": float(np.mean(returns[-10:])) if returns else float("nan"),
    }
    if args.eval_episodes > 0:
        result["held_out"] = report_held_out(args, agent, untrained, device)
    return result


def make_envs(args: Any) -> Any:
    """The batched vector env (``mabp_gym.envs.vector_env``: one compiled call steps every
    env) with the env's own returns recorded, and the reward normalized if asked."""
    envs = gym.make_vec(
        "mabp_gym/SFMSN-v0",
        num_envs=args.num_envs,
        workload=args.workload,
        load=args.load,
        horizon=args.horizon,
        max_episode_steps=args.horizon,
        obs_mode=AGENTS[args.agent][0],
    )
    if args.agent == "mlp":  # the MLP reads the action mask off the flat vector's end
        layout = envs.envs[0].unwrapped.flat_layout
        assert layout["action_mask"][0].stop == envs.single_observation_space.shape[0]
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    if args.norm_reward:
        envs = gym.wrappers.vector.NormalizeReward(envs, gamma=args.gamma)
    # NEXT_STEP: the step after an episode ends is a reset step, whose transition is
    # masked out of the loss (gymnasium >= 1.0's default, declared by the env).
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    return envs


def update(
    args: Any,
    agent: Any,
    optimizer: torch.optim.Optimizer,
    obs_buf: ObsBuffer,
    batch: tuple[torch.Tensor, ...],
    minibatch: int,
    device: torch.device,
) -> None:
    """PPO's clipped update over one rollout, ``update_epochs`` passes of shuffled
    minibatches; ``batch`` is the flattened (actions, log-probabilities, advantages, value
    targets, valid-transition weights)."""
    b_act, b_logp, b_adv, b_ret, b_valid = batch
    for _epoch in range(args.update_epochs):
        for idx in torch.randperm(len(b_logp), device=device).split(minibatch):
            _, logp, entropy, value = agent.act(obs_buf.flat(idx), b_act[idx])
            ratio = (logp - b_logp[idx]).exp()
            adv, w = b_adv[idx], b_valid[idx]
            # Normalized over the minibatch's real transitions (reset steps carry none).
            mean = (adv * w).sum() / w.sum().clamp(min=1.0)
            std = (((adv - mean) ** 2 * w).sum() / (w.sum() - 1).clamp(min=1.0)).sqrt()
            adv = (adv - mean) / (std + 1e-8)
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef))
            v_loss = 0.5 * (value.flatten() - b_ret[idx]) ** 2
            loss = (
                (pg - args.ent_coef * entropy + args.vf_coef * v_loss) * w
            ).sum() / w.sum().clamp(min=1.0)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()


def report_held_out(
    args: Any, agent: Any, untrained: Any, device: torch.device
) -> dict[str, float]:
    """The trained and untrained agents' and the baselines' mean held-out returns, printed
    best first, and whether the trained agent beats the constant action and BP."""
    held_out = compare(args, {"trained": agent, "untrained": untrained}, device)
    print(f"held-out returns, {args.eval_episodes} episodes from seed {args.eval_seed}:")
    for name, values in sorted(held_out.items(), key=lambda kv: -np.mean(kv[1])):
        print(f"  {name:10} {np.mean(values):10.2f} +- {np.std(values):.2f}")
    best = max(BASELINES, key=lambda name: np.mean(held_out[name]))
    beats = np.mean(held_out["trained"]) > max(np.mean(held_out[n]) for n in ("constant", "bp"))
    print(
        "the trained agent "
        + ("beats" if beats else "does NOT beat")
        + f" the constant action and BP (best baseline: {best})"
    )
    return {name: float(np.mean(v)) for name, v in held_out.items()}


if __name__ == "__main__":
    main()
