"""Draw the from-scratch learning curve of ``examples/ppo_from_scratch.py``: return against
env steps (deterministic policy, the run's evaluation seeds) and held-out stable load
against env steps, with the reference policies as horizontal lines.

    python examples/plot_ppo_curve.py --runs s0.json s1.json \
        --stable s0.0=eval0.json s0.90112=eval_best.json --out curve.png

``--runs``: the JSON files the training runs wrote (their curve and reference returns).
``--stable``: ``RUN.STEPS=FILE`` pairs, each the JSON of ``ppo_from_scratch.py --checkpoint
RUN.STEPS.zip --search ... --json FILE`` (its ``ppo-scratch`` stable load is plotted at
STEPS for RUN; the reference policies evaluated with it become horizontal lines).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"random": "0.5", "all_positive": "tab:purple", "bp": "tab:red", "mabp": "tab:green"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--stable", nargs="*", default=[], metavar="RUN.STEPS=JSON")
    parser.add_argument("--out", required=True, metavar="PNG")
    args = parser.parse_args(argv)

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    references: dict[str, float] = {}
    for path in args.runs:
        run = json.loads(Path(path).read_text())
        name = Path(path).stem
        steps = [p["steps"] for p in run["curve"]]
        left.plot(steps, [p["return_deterministic"] for p in run["curve"]], label=name)
        references.update(run["references"])
    for name, value in sorted(references.items()):
        left.axhline(value, color=COLORS.get(name), linestyle="--", linewidth=1, label=name)
    left.set(xlabel="env steps", ylabel="return (600 slots, load 0.5)", title="return")
    left.legend(fontsize=7)

    # A checkpoint evaluated twice (a search from 0.3 that fails at once, and one over lower
    # loads) counts its larger stable load: the first says only "below 0.3".
    points: dict[str, dict[int, float]] = {}
    lines: dict[str, float] = {}
    for item in args.stable:
        key, _, path = item.partition("=")
        run, _, steps = key.rpartition(".")
        if not (run and steps.isdigit() and path):
            parser.error(f"--stable: expected RUN.STEPS=JSON, got {item!r}")
        stable = json.loads(Path(path).read_text())["stable"]["stable_load"]
        at = points.setdefault(run, {})
        at[int(steps)] = max(at.get(int(steps), 0.0), stable["ppo-scratch"])
        lines.update({p: v for p, v in stable.items() if p != "ppo-scratch"})
    for run, pts in sorted(points.items()):
        xs = sorted(pts)
        right.plot(xs, [pts[x] for x in xs], marker="o", label=run)
    for name, value in sorted(lines.items()):
        right.axhline(value, color=COLORS.get(name), linestyle="--", linewidth=1, label=name)
    right.set(xlabel="env steps", ylabel="stable load", title="held-out stable load")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
