"""How a MABP slot grows with the network: ``multihop`` at 1,000 and 5,000 nodes (load 0.3).

A slot is timed in its four parts, each apart: MABP's decision (``scores``), the
projection (``project``), the transition (``Simulator._execute``: transfers, service,
routing, outcomes, retention, arrivals) and the observation (``encode``). After a warm-up
of ``--warmup`` slots, ``--slots`` slots are timed; every measurement runs in a fresh
process that imports one tree. The target: every part and the whole slot at most 5.5x
the time at 5,000 nodes as at 1,000 (5x the nodes: linear, with some slack).

With ``--baseline REF`` the same runs on a ``git worktree`` of ``REF``, the trees taking
turns (which goes first alternates), and the table gives both trees' growth and the
speed-up at each size. Prints a table and a JSON line (``--json PATH`` writes it too).

    python benchmarks/bench_large.py --baseline 69d66d0 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import emit
from _trees import ROOT, trees

PARTS = ("decide", "project", "transition", "encode", "slot")
SIZES = (1000, 5000)


def measure(tree: Path, nodes: int, slots: int, warmup: int) -> dict[str, float]:
    """Microseconds a slot of each part, on ``tree``'s code (run in a fresh process)."""
    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(tree / "benchmarks"))
    from _trees import import_tree

    import_tree(tree)
    import numpy as np

    from mabp_gym.agents import make_policy
    from mabp_gym.core.projection import project
    from mabp_gym.envs.env import SFMSNEnv

    env = SFMSNEnv("multihop", nodes=nodes, load=0.3)
    policy = make_policy("mabp", env)
    obs, _ = env.reset(seed=0)
    policy.reset(seed=0)
    for _ in range(warmup):
        obs, *_ = env.step(policy.scores(obs))
    sim, workload, encoder = env.sim, env.workload, env._encoder
    spent = dict.fromkeys(PARTS[:-1], 0.0)
    for _ in range(slots):
        started = time.perf_counter()
        scores = np.asarray(policy.scores(obs), dtype=np.float64)
        decided = time.perf_counter()
        control = project(workload, sim.state, scores, memory=env.memory)
        projected = time.perf_counter()
        sim._execute(control)
        executed = time.perf_counter()
        obs = encoder.encode(sim.state)
        encoded = time.perf_counter()
        spent["decide"] += decided - started
        spent["project"] += projected - decided
        spent["transition"] += executed - projected
        spent["encode"] += encoded - executed
    times = {part: 1e6 * value / slots for part, value in spent.items()}
    times["slot"] = sum(times.values())
    return times


def _run(tree: Path, nodes: int, args: argparse.Namespace) -> dict[str, float]:
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
            str(tree),
            str(nodes),
            str(args.slots),
            str(args.warmup),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=300, help="timed slots per run")
    parser.add_argument("--warmup", type=int, default=300, help="untimed slots first")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", metavar="REF", help="git ref to compare against")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        tree, nodes, slots, warmup = args.serve
        print(json.dumps(measure(Path(tree), int(nodes), int(slots), int(warmup))))
        return
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as where, trees(args.baseline, Path(where)) as found:
        names = list(found)
        for repeat in range(args.repeats):
            order = names if repeat % 2 == 0 else names[::-1]
            for nodes in SIZES:
                for name in order:
                    runs.setdefault((name, nodes), []).append(_run(found[name], nodes, args))
    medians = {
        key: {part: statistics.median(run[part] for run in values) for part in PARTS}
        for key, values in runs.items()
    }
    rows = _table(medians, names)
    emit(
        {
            "benchmark": "bench_large",
            "workload": "multihop",
            "load": 0.3,
            "slots": args.slots,
            "repeats": args.repeats,
            "baseline": args.baseline,
            "root": ROOT.name,
            "rows": rows,
        },
        args.json,
    )


def _table(medians: dict, names: list[str]) -> list[dict]:
    """Print each part's time at both sizes and its growth per tree; return the rows."""
    small, large = SIZES
    print(f"{'part':<11} {'tree':<9} {small:>10} {large:>10} {'growth':>8}")
    rows = []
    for part in PARTS:
        for name in names:
            a, b = medians[(name, small)][part], medians[(name, large)][part]
            print(f"{part:<11} {name:<9} {a:>8.1f}us {b:>8.1f}us {b / a:>7.2f}x")
            rows.append({"part": part, "tree": name, f"us_{small}": a, f"us_{large}": b})
        if len(names) == 2:
            for nodes in SIZES:
                ratio = medians[("current", nodes)][part] / medians[("baseline", nodes)][part]
                print(f"{'':<11} {'time ratio':<9} at {nodes}: {ratio:.2f}x (current / baseline)")
    return rows


if __name__ == "__main__":
    main()
