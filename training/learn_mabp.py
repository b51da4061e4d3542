"""Fit Learn-MABP: log interaction under an exploration policy, estimate the primitives.

Reads top to bottom: arguments, seeding, logging (MABP with noisy scores, several loads),
the fit on ``cuda`` when present, the estimation error against the true primitives, the
checkpoint, and the evaluation through ``mabp_gym.evaluate``.

    mabp-gym train learn-mabp --out runs/learn_mabp
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mabp_gym.agents import make_policy
from mabp_gym.core.workloads import make_workload
from mabp_gym.training.arguments import (
    check_loads,
    check_out_dir,
    command_line,
    parse_into,
    require_at_least,
)
from mabp_gym.training.common import (
    check_held_out,
    check_network,
    final_eval_seeds,
    rollout,
    seed_everything,
)

MIN_EXPLORE_SLOTS = 50
"""Fewer logged slots complete too few units to estimate every primitive from."""


@dataclass
class LearnMABPArgs:
    """Arguments of ``mabp-gym train learn-mabp``."""

    workload: str = "mixed"
    """Workload to learn (its shape fixes the checkpoint's)."""
    seed: int = 0
    """Seeds numpy, torch and every rollout."""
    explore_loads: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.7, 0.9])
    """Loads of the logged episodes (one episode per load)."""
    explore_slots: int = 600
    """Slots per logged episode."""
    explore_noise: float = 0.5
    """Std of the Gaussian noise on MABP's scores while logging."""
    eval_loads: list[float] = field(default_factory=lambda: [0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    """Loads of the final evaluation."""
    eval_seeds: int = 2
    """Seeds per load."""
    device: str = "auto"
    """Auto (cuda if available), cpu or cuda."""
    out: str = "runs/learn_mabp"
    """Directory for the checkpoint and the report."""
    progress: bool = True
    """Show a progress bar."""


def log_units(args: LearnMABPArgs) -> list[tuple[int, int, int, float, float]]:
    """Per-unit observations along noisy-MABP trajectories."""
    units = []
    loads = args.explore_loads
    if args.progress:
        from tqdm import tqdm

        loads = tqdm(loads, desc="logging", unit="episode")
    for k, load in enumerate(loads):
        workload = make_workload(args.workload, load=load)
        explorer = make_policy("mabp", workload)
        explorer.reset(args.seed + k)
        for _, _, outcome in rollout(
            workload,
            None,
            args.seed + k,
            args.explore_slots,
            actor=explorer.scores,
            noise=args.explore_noise,
        ):
            units.extend(outcome.units)
    return units


def train(args: LearnMABPArgs) -> dict[str, Any]:
    import torch

    from mabp_gym.agents.gnn import resolve_device
    from mabp_gym.agents.learn_mabp import PrimitiveEstimate

    started = time.perf_counter()
    torch.set_num_threads(1)  # small tensors: more threads only contend for the cores
    seed_everything(args.seed)
    device = resolve_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workload = make_workload(args.workload)
    units = log_units(args)
    estimate = PrimitiveEstimate.fit(workload, units, device=device)
    errors = estimate.errors(workload)
    command = command_line("learn-mabp", args)
    path = out / f"learn_mabp_{workload.name}.pt"
    estimate.save(
        path,
        workload,
        errors=errors,
        units=len(units),
        command=command,
        args=dataclasses.asdict(args),
    )

    from mabp_gym.harness.evaluation import evaluate
    from mabp_gym.harness.summaries import stable_load

    reference = evaluate(
        "mabp",
        args.workload,
        loads=args.eval_loads,
        seeds=final_eval_seeds(args.eval_seeds),
        output=out / "eval_mabp.jsonl",
    )
    learned = evaluate(
        "learn-mabp",
        args.workload,
        loads=args.eval_loads,
        seeds=final_eval_seeds(args.eval_seeds),
        policy_kw={"checkpoint": str(path)},
        output=out / "eval.jsonl",
    )
    stable = stable_load(reference + learned)
    report = {
        "checkpoint": str(path),
        "units": len(units),
        "errors": errors,
        "device": device,
        "stable_load": stable,
        "wall_s": time.perf_counter() - started,
        "command": command,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def validate(args: LearnMABPArgs) -> None:
    """Raise ``ValueError`` naming the first bad argument, before any work starts (and
    before torch loads: the device is checked after every other argument)."""
    check_network(args.workload)
    require_at_least(args, 1, "eval_seeds")
    require_at_least(args, MIN_EXPLORE_SLOTS, "explore_slots")
    check_held_out(
        args.seed,
        {args.seed + k for k in range(len(args.explore_loads))},
        {"the final evaluation's": final_eval_seeds(args.eval_seeds)},
        "--seed + k, one a logged episode",
    )
    if not args.explore_noise >= 0:
        raise ValueError(f"--explore-noise must be >= 0, got {args.explore_noise}")
    check_loads(args, "explore_loads", "eval_loads")
    from mabp_gym.agents.gnn import resolve_device  # the first to load torch

    resolve_device(args.device)
    check_out_dir(args.out)


def parse(argv: list[str] | None = None) -> LearnMABPArgs:
    """The arguments of ``mabp-gym train learn-mabp``, validated."""
    return parse_into(LearnMABPArgs, "mabp-gym train learn-mabp", __doc__, validate, argv)


def report(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    result = train(parse(argv))
    report(result)
    return result


if __name__ == "__main__":
    main()
