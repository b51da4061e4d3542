"""Draw the from-scratch learning curve of ``examples/ppo_from_scratch.py`` over training
seeds: the checkpoint-choice backlog (deterministic policy, the fixed selection load and
seeds) against env steps, mean and spread over the runs, with BP, MABP and random scores
on the same load, seeds and horizon as horizontal lines; and each run's held-out stable
load beside BP's and MABP's.

    python examples/plot_ppo_curve.py --runs s0.json s1.json s2.json \
        --out docs/figures/ppo_scratch_curve.png --json curve.json

With ``--labels`` each run is its own line (one label a run: runs of different knobs on
one seed, say) and only the curves are drawn; runs trained with ``--no-evaluate`` have no
held-out panel.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import matplotlib
import numpy as np

import mabp_gym  # noqa: F401  (registers the env ids)
from mabp_gym.agents import make_policy

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"random": "0.5", "bp": "tab:red", "mabp": "tab:green"}


def reference_backlog(name: str, args: dict[str, Any]) -> float:
    """Mean backlog (after a 20% warm-up) of a reference policy on the selection runs."""
    means = []
    for seed in args["select_seeds"]:
        horizon = args["select_horizon"]
        env = gym.make(
            "mabp_gym/SFMSN-v0",
            workload=args["workload"],
            load=args["select_load"],
            horizon=horizon,
            max_episode_steps=horizon,
        )
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        size = env.action_space.shape[0]
        policy = None if name == "random" else make_policy(name, env)
        if policy is not None:
            policy.reset(seed)
        backlog = []
        for _ in range(horizon):
            action = rng.uniform(-1, 1, size) if policy is None else policy.scores(obs)
            obs, *_ = env.step(action)
            backlog.append(env.unwrapped.sim.state.units)
        means.append(float(np.mean(backlog[int(0.2 * horizon) :])))
    return float(np.mean(means))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--runs", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--out", required=True, metavar="PNG")
    parser.add_argument("--json", metavar="PATH", help="also write the curve's numbers here")
    parser.add_argument("--labels", nargs="+", metavar="LABEL", help="one line a run, so named")
    args = parser.parse_args(argv)
    if args.labels is not None and len(args.labels) != len(args.runs):
        parser.error(f"--labels names each run: {len(args.runs)} runs, {len(args.labels)} labels")
    runs = [json.loads(Path(path).read_text()) for path in args.runs]
    settings = runs[0]["args"]
    steps = [p["steps"] for p in min((run["curve"] for run in runs), key=len)]
    backlog = np.array([[p["backlog"] for p in run["curve"]][: len(steps)] for run in runs])
    references = {name: reference_backlog(name, settings) for name in ("random", "bp", "mabp")}

    held = [run.get("held_out", {}).get("stable_load", {}) for run in runs]
    panels = 2 if any(held) and not args.labels else 1  # knobs compared: curves only
    fig, axes = plt.subplots(1, panels, figsize=(11 if panels == 2 else 8, 4), squeeze=False)
    left = axes[0][0]
    mean = backlog.mean(axis=0)
    if args.labels:
        for label, line in zip(args.labels, backlog, strict=True):
            left.plot(steps, line, label=label)
    else:
        left.plot(steps, mean, color="tab:blue", label=f"PPO, mean of {len(runs)} seeds")
        left.fill_between(
            steps,
            backlog.min(axis=0),
            backlog.max(axis=0),
            alpha=0.25,
            color="tab:blue",
            label="min-max over seeds",
        )
    for name, value in references.items():
        left.axhline(value, color=COLORS[name], linestyle="--", linewidth=1, label=name)
    left.set(
        xlabel="env steps",
        ylabel=f"mean backlog at load {settings['select_load']}",
        yscale="log",
        title=f"checkpoint choice: {settings['select_horizon']} slots, seeds "
        f"{', '.join(map(str, settings['select_seeds']))}",
    )
    left.legend(fontsize=7)

    if panels == 2:
        draw_held_out(axes[0][1], runs, held, settings)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    if args.json:
        out = {
            "steps": steps,
            "backlog_mean": mean.tolist(),
            "backlog_min": backlog.min(axis=0).tolist(),
            "backlog_max": backlog.max(axis=0).tolist(),
            "references": references,
            "held_out": held,
        }
        Path(args.json).write_text(json.dumps(out, indent=2))


def draw_held_out(right: Any, runs: list[dict], held: list[dict], settings: dict) -> None:
    """Each run's held-out stable load as a bar, the references' as lines."""
    values = [h.get("ppo-scratch", np.nan) for h in held]
    right.bar(range(len(runs)), values, color="tab:blue")
    lines = {k: v for h in held for k, v in h.items() if k != "ppo-scratch"}
    for name, value in lines.items():
        right.axhline(value, color=COLORS.get(name, "k"), linestyle="--", label=name)
    right.set(
        xticks=range(len(runs)),
        xticklabels=[f"seed {run['args']['seed']}" for run in runs],
        ylabel="held-out stable load",
        ylim=(0, 1.0),
        title=f"seeds {', '.join(map(str, settings['eval_seeds']))}, "
        f"{settings['eval_horizon']} slots",
    )
    right.legend(fontsize=7)


if __name__ == "__main__":
    main()
