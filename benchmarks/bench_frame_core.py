"""Frame-MABP's decision per slot: the compiled kernels (``mabp_gym.agents.frame_mabp_core``)
against the numpy path they replace, in one process, the two taking turns.

Each round runs one episode of ``--slots`` slots per path on every network of the recipe's
family (``mixed`` at 0.9, ``rag`` and ``agentic`` at 0.9, ``multihop`` at 0.5) through
:func:`mabp_gym.rollout.episode`, the loop the harness and the training objective run,
with ``residual-frame-mabp``'s shipped weights (the policy a training run evaluates) and
with plain frame-MABP. It times the decision (``Slot.decision_s``: the scores, the
projection and the sibling caps) and the whole slot (the decision and the simulator's
step); the figures are medians over rounds of the mean time a slot. Every slot's control
is checked equal between the paths.

    python benchmarks/bench_frame_core.py --slots 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from _report import emit

from mabp_gym import Simulator, make_workload
from mabp_gym.agents.frame_mabp import FrameMABP
from mabp_gym.agents.mabp import MABP
from mabp_gym.agents.residual_mabp import ResidualFrameMABP
from mabp_gym.rollout import episode

CASES = (("mixed", 0.9), ("rag", 0.9), ("agentic", 0.9), ("multihop", 0.5))


def _episode(policy: FrameMABP, slots: int) -> tuple[float, float, str]:
    """Mean decision and slot seconds of one episode (seed 0), and its controls' digest."""
    sim = Simulator(policy.workload)
    sim.reset(0)
    policy.reset(0)
    digest = hashlib.sha256()
    decided = 0.0
    started = time.perf_counter()
    for slot in episode(sim, policy, slots):
        decided += slot.decision_s
        for value in slot.decision.as_dict().values():
            digest.update(value.tobytes())
    wall = time.perf_counter() - started
    return decided / slots, wall / slots, digest.hexdigest()


def per_slot_us(make, slots: int, rounds: int) -> dict[str, float]:
    """Median (over rounds) mean decision and slot time of the numpy and compiled paths."""
    compiled, numpy_path = make(), make()
    numpy_path._statics = None
    assert compiled._compiled_statics() is not None, "the kernels are not compiled here"
    _episode(compiled, 20)  # warm: compilation, caches
    times: dict[str, list[tuple[float, float]]] = {"numpy": [], "compiled": []}
    digests: dict[str, str] = {}
    for r in range(rounds):
        order = [("compiled", compiled), ("numpy", numpy_path)]
        for name, policy in order if r % 2 == 0 else order[::-1]:
            decision, slot, digest = _episode(policy, slots)
            times[name].append((decision, slot))
            assert digests.setdefault(name, digest) == digest
    assert digests["compiled"] == digests["numpy"], "the paths' controls differ"
    result = {}
    for name, values in times.items():
        result[f"{name}_decision_us"] = statistics.median(v[0] for v in values) * 1e6
        result[f"{name}_slot_us"] = statistics.median(v[1] for v in values) * 1e6
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    MABP.compile_after = FrameMABP.compile_after = 0
    rows = []
    print(f"{'policy':<20} {'network':<14} {'decision us':>19} {'x':>6} {'slot us':>17} {'x':>6}")
    for policy_name in ("residual-frame-mabp", "frame-mabp"):
        for workload, load in CASES:
            wl = make_workload(workload, load=load)
            if policy_name == "frame-mabp":
                got = per_slot_us(lambda wl=wl: FrameMABP(wl), args.slots, args.rounds)
            else:
                got = per_slot_us(
                    lambda wl=wl: ResidualFrameMABP.from_checkpoint(wl), args.slots, args.rounds
                )
            row = {
                "policy": policy_name,
                "network": f"{workload}@{load}",
                **got,
                "decision_speedup": got["numpy_decision_us"] / got["compiled_decision_us"],
                "slot_speedup": got["numpy_slot_us"] / got["compiled_slot_us"],
            }
            rows.append(row)
            print(
                f"{policy_name:<20} {row['network']:<14} "
                f"{got['numpy_decision_us']:>8.0f} -> {got['compiled_decision_us']:>6.0f} "
                f"{row['decision_speedup']:>5.2f}x "
                f"{got['numpy_slot_us']:>7.0f} -> {got['compiled_slot_us']:>6.0f} "
                f"{row['slot_speedup']:>5.2f}x"
            )
    emit({"benchmark": "bench_frame_core", "slots": args.slots, "rows": rows}, args.json)


if __name__ == "__main__":
    main()
