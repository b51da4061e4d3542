"""Cost per slot as the network grows: µs per slot and decision µs of bp and mabp.

Networks: ``mixed`` with 1, 2, 4 and 8 copies (load 0.85) and random ``multihop`` networks
of 50, 100 and 200 nodes (load 0.3). A slot is what ``env.step`` does with a policy in
front of it: encode the observation, score (the *decision*, timed apart), project and
execute. Two more rows time ``SFMSNEnv.step`` itself with mabp on ``mixed`` at 0.85 and
the harness's ``runs.run`` per policy of Table I (``--table``).

With ``--baseline REF`` the same measurements also run on a ``git worktree`` of ``REF``:
one measuring process per tree, the two taking turns case by case (which goes first
alternates), so that every speed-up is a ratio measured in one run on a noisy machine.
The networks are built once by the current tree and handed to both as workload files (so
a baseline without the generated workloads still runs them). Prints a table and a JSON
line (``--json PATH`` also writes it).

    python benchmarks/bench_scaling.py --slots 1000
    python benchmarks/bench_scaling.py --baseline 90025b2 --repeats 3 --table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import emit
from _trees import ROOT, import_tree, trees

NETWORKS = (
    ("mixed x1", "mixed", {"copies": 1}, 0.85),
    ("mixed x2", "mixed", {"copies": 2}, 0.85),
    ("mixed x4", "mixed", {"copies": 4}, 0.85),
    ("mixed x8", "mixed", {"copies": 8}, 0.85),
    ("multihop 50", "multihop", {"nodes": 50}, 0.3),
    ("multihop 100", "multihop", {"nodes": 100}, 0.3),
    ("multihop 200", "multihop", {"nodes": 200}, 0.3),
)
POLICIES = ("bp", "mabp")
TABLE_LOADS = (0.5, 0.85)  # loads timed per Table I policy with --table


# -- worker: runs inside whichever tree is first on sys.path --------------------------------
def _tree_api():
    """``make_policy`` and ``ObservationEncoder`` where this tree keeps them (older trees:
    the top-level ``agents`` package and ``mabp_gym.envs.env``)."""
    try:
        from mabp_gym.agents import make_policy
    except ImportError:
        from agents import make_policy  # type: ignore[no-redef]
    try:
        from mabp_gym.core.encoding import ObservationEncoder
    except ImportError:
        from mabp_gym.envs.env import ObservationEncoder  # type: ignore[no-redef]
    return make_policy, ObservationEncoder


def _slot_times(
    path: str, load: float, policy_name: str, slots: int, seed: int
) -> dict[str, float]:
    from mabp_gym import Simulator, make_workload

    make_policy, ObservationEncoder = _tree_api()
    workload = make_workload(path, load=load)
    sim = Simulator(workload)
    sim.reset(seed)
    encoder = ObservationEncoder(workload)
    policy = make_policy(policy_name, workload)
    policy.reset(seed)
    clock = time.perf_counter
    decision = 0.0
    for t in range(slots + 50):  # 50 warm-up slots (compilation, caches)
        if t == 50:
            decision, started = 0.0, clock()
        obs = encoder.encode(sim.state)
        tick = clock()
        scores = policy.scores(obs)
        decision += clock() - tick
        sim.step_scores(scores)
    total = clock() - started
    return {
        "us_per_slot": total / slots * 1e6,
        "decision_us": decision / slots * 1e6,
        "backlog": float(sim.state.units),
    }


def _env_step_times(slots: int, seed: int) -> dict[str, float]:
    from mabp_gym.envs.env import SFMSNEnv

    make_policy, _ = _tree_api()
    env = SFMSNEnv("mixed", load=0.85)
    obs, _ = env.reset(seed=seed)
    policy = make_policy("mabp", env)
    policy.reset(seed)
    clock = time.perf_counter
    stepping = 0.0
    for t in range(slots + 50):
        if t == 50:
            stepping, started = 0.0, clock()
        action = policy.scores(obs)
        tick = clock()
        obs, _, _, _, _ = env.step(action)
        stepping += clock() - tick
    total = clock() - started
    return {"us_per_slot": total / slots * 1e6, "env_step_us": stepping / slots * 1e6}


def _table_time(policy: str, horizon: int) -> dict[str, float]:
    from mabp_gym.harness.runs import RunSpec, run

    # Untimed, a short run first: compiles the policy's kernels (a fresh worktree has no
    # numba cache) without touching the timed runs' workloads (another horizon).
    run(RunSpec(policy, "mixed", TABLE_LOADS[-1], 0, horizon=20))
    started = time.perf_counter()
    for load in TABLE_LOADS:
        run(RunSpec(policy, "mixed", load, 0, horizon=horizon))
    return {"us_per_slot": (time.perf_counter() - started) / (len(TABLE_LOADS) * horizon) * 1e6}


def serve() -> None:
    """Answer measurement requests, one JSON line in and one out, in this process's tree."""
    tree = Path(os.environ["PYTHONPATH"]).resolve()
    import_tree(tree)
    import mabp_gym

    make_policy, encoder = _tree_api()
    for code in (make_policy, encoder):
        source = Path(sys.modules[code.__module__].__file__ or "").resolve()
        if not source.is_relative_to(tree):
            raise SystemExit(f"{code.__name__} came from {source}, not {tree}")

    print(json.dumps({"tree": str(Path(mabp_gym.__file__).resolve().parent.parent)}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        kind = request.pop("kind")
        if kind == "slots":
            answer = _slot_times(**request)
        elif kind == "env":
            answer = _env_step_times(**request)
        else:
            answer = _table_time(**request)
        print(json.dumps(answer), flush=True)


# -- driver ---------------------------------------------------------------------------------
class Worker:
    """A measuring process whose imports resolve to ``tree``."""

    def __init__(self, tree: Path) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve"],
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        hello = self._read()
        if Path(hello["tree"]) != tree.resolve():
            raise SystemExit(f"worker imported mabp_gym from {hello['tree']}, not {tree}")

    def _read(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a worker died (exit code {self.process.wait()})")
        return json.loads(line)

    def ask(self, **request) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def _measure(workers: dict[str, Worker], repeats: int, **request) -> dict[str, dict]:
    """Median of ``repeats`` answers per tree, the trees taking turns (order alternating)."""
    answers: dict[str, list[dict]] = {name: [] for name in workers}
    for repeat in range(repeats):
        order = list(workers) if repeat % 2 == 0 else list(reversed(workers))
        for name in order:
            answers[name].append(workers[name].ask(**request))
    return {
        name: {key: statistics.median(a[key] for a in runs) for key in runs[0]}
        for name, runs in answers.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="measurements per case and tree (alternating with --baseline)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", metavar="REF", help="git ref to compare against")
    parser.add_argument(
        "--table", action="store_true", help="also time runs.run per Table I policy (slow)"
    )
    parser.add_argument("--table-horizon", type=int, default=600)
    parser.add_argument(
        "--only", metavar="TEXT", help="measure only the networks whose label contains TEXT"
    )
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return

    sys.path.insert(0, str(ROOT))
    from mabp_gym import make_workload
    from mabp_gym.core.fileformat import save_workload

    names = ["current", "baseline"] if args.baseline else ["current"]
    medians: dict[str, dict] = {name: {"cases": {}, "table": {}} for name in names}
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        tmpdir = Path(tmp)
        with trees(args.baseline, tmpdir) as checkouts:
            workers = {name: Worker(tree) for name, tree in checkouts.items()}
            try:
                for label, name, overrides, load in NETWORKS:
                    if args.only and args.only not in label:
                        continue
                    path = tmpdir / f"{label.replace(' ', '_')}.json"
                    save_workload(make_workload(name, **overrides), path)
                    for policy in POLICIES:
                        result = _measure(
                            workers,
                            args.repeats,
                            kind="slots",
                            path=str(path),
                            load=load,
                            policy_name=policy,
                            slots=args.slots,
                            seed=args.seed,
                        )
                        for tree, row in result.items():
                            medians[tree]["cases"][f"{label}|{policy}"] = row
                result = _measure(
                    workers, args.repeats, kind="env", slots=args.slots, seed=args.seed
                )
                for tree, row in result.items():
                    medians[tree]["env_step"] = row
                if args.table:
                    from mabp_gym.cli.common import TABLE_POLICIES

                    for policy in TABLE_POLICIES:
                        result = _measure(
                            workers,
                            args.repeats,
                            kind="table",
                            policy=policy,
                            horizon=args.table_horizon,
                        )
                        for tree, row in result.items():
                            medians[tree]["table"][policy] = row["us_per_slot"]
            finally:
                for worker in workers.values():
                    worker.close()
    _print(medians, args)
    emit(
        {
            "benchmark": "bench_scaling",
            "slots": args.slots,
            "repeats": args.repeats,
            "baseline": args.baseline,
            "results": medians,
        },
        args.json,
    )


def _print(medians: dict, args: argparse.Namespace) -> None:
    current = medians["current"]
    base = medians.get("baseline")
    head = f"{'network':<14} {'policy':<6} {'us/slot':>9} {'decision us':>12} {'backlog':>8}"
    print(head + (f" {'base us/slot':>13} {'speed-up':>9}" if base else ""))
    for key, row in current["cases"].items():
        label, policy = key.split("|")
        line = (
            f"{label:<14} {policy:<6} {row['us_per_slot']:>9.0f} "
            f"{row['decision_us']:>12.0f} {row['backlog']:>8.0f}"
        )
        if base:
            old = base["cases"][key]["us_per_slot"]
            line += f" {old:>13.0f} {old / row['us_per_slot']:>8.2f}x"
        print(line)
    cases = current["cases"]
    for policy in POLICIES:
        if f"mixed x1|{policy}" in cases and f"mixed x8|{policy}" in cases:
            ratio = (
                cases[f"mixed x8|{policy}"]["us_per_slot"]
                / cases[f"mixed x1|{policy}"]["us_per_slot"]
            )
            print(f"{policy}: mixed x8 / x1 time per slot = {ratio:.2f} (target <= 8)")
    if "multihop 200|mabp" in cases:
        big = cases["multihop 200|mabp"]["us_per_slot"]
        print(f"mabp on multihop 200: {1e6 / big:.0f} slots/s (target >= 1,000)")
    env = current["env_step"]
    line = (
        f"env.step, mabp, mixed 0.85: {env['env_step_us']:.0f} us per step "
        f"({env['us_per_slot']:.0f} us with the decision)"
    )
    if base:
        ratio = base["env_step"]["env_step_us"] / env["env_step_us"]
        loop = base["env_step"]["us_per_slot"] / env["us_per_slot"]
        line += (
            f"; {ratio:.2f}x the baseline ({loop:.2f}x with the decision; "
            "target >= 2 against 90025b2)"
        )
    print(line)
    if current["table"]:
        print(f"runs.run per slot on mixed (loads {TABLE_LOADS}, horizon {args.table_horizon}):")
        for policy, us in current["table"].items():
            line = f"  {policy:<20} {us:>8.0f} us/slot"
            if base:
                line += (
                    f"  baseline {base['table'][policy]:>8.0f}  {base['table'][policy] / us:.2f}x"
                )
            print(line)
        if base:
            new_total = sum(current["table"].values())
            old_total = sum(base["table"].values())
            print(
                f"  Table I estimate (every policy, equal runs): {old_total / new_total:.2f}x "
                "(target >= 2 against 90025b2)"
            )


if __name__ == "__main__":
    main()
