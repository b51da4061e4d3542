"""Writes ``slot_golden.json``: digests of every slot the core gives on every compiled-case
workload (controls, outcomes, states, generator streams, observations), memory on and off,
and of Oracle-Sur's controls.

The file was first written by the numpy reference the kernels replaced (commit
781e551 with ``MABP_GYM_PURE=1``, Oracle-Sur's reference program included), and the
kernels, compiled and as plain Python, gave the same digests; ``tests/test_slot_golden.py``
holds both runs of the kernels to it. Rewrite it only when behaviour is
*meant* to change, and say so in the commit. Usage: ``python tests/data/make_slot_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from compiled_cases import WORKLOADS as COMPILED_WORKLOADS  # noqa: E402

from mabp_gym import Simulator, make_workload  # noqa: E402
from mabp_gym.agents import make_policy  # noqa: E402
from mabp_gym.core.encoding import ObservationEncoder  # noqa: E402

CASES = [
    *COMPILED_WORKLOADS,
    ("mixed", {"load": 1.3}),  # past the bound: long queues of many runs
    ("agentic", {"gen_prob": 0.6}),  # generation draws between the successor draws
]
EVERY = 25  # one digest per this many slots, so that a failure names where it starts
ORACLE_CASES = [("mixed", {"load": 0.8}), ("agentic", {}), ("multihop", {})]
PROGRAM_CASES = [("mixed", {"load": 0.8}), ("boundary", {"load": 0.8, "K": 2.5})]


def _bytes(value) -> bytes:
    if isinstance(value, np.ndarray):
        return str(value.dtype).encode() + repr(value.shape).encode() + value.tobytes()
    return repr(value).encode()


class _Digests:
    def __init__(self) -> None:
        self.hash, self.out, self.n = hashlib.sha256(), [], 0

    def add(self, *values) -> None:
        for value in values:
            self.hash.update(_bytes(value))
        self.n += 1
        if self.n % EVERY == 0:
            self.out.append(self.hash.hexdigest()[:16])

    def done(self) -> list[str]:
        if self.n % EVERY:
            self.out.append(self.hash.hexdigest()[:16])
        return self.out


def _state(sim: Simulator) -> tuple:
    st = sim.state
    return (
        st.t,
        st.units,
        tuple(st.queues),
        st.queue_len,
        st.holder,
        st.owner,
        st.memory_used,
        st.service_action,
        st.service_residual,
        st.service_hit,
        st.service_birth,
        repr(sim.rng.bit_generator.state),
    )


def _outcome(outcome) -> tuple:
    return tuple(getattr(outcome, f.name) for f in fields(outcome))


def trajectory(name: str, overrides: dict, memory: bool) -> list[str]:
    """MABP's scores, and random ones every third slot (about half of all candidates
    positive: many transfers, drops and generated objects), executed through ``step``
    (checked) and ``step_scores`` (training) in turn, with SPEC 6's invariants checked."""
    wl = make_workload(name, **overrides)
    sim = Simulator(wl, memory=memory, check_invariants=True)
    sim.reset(7)
    encoder = ObservationEncoder(wl, memory=memory)
    policy = make_policy("mabp", wl, memory=memory)
    policy.reset(7)
    rng = np.random.default_rng(8)
    digests = _Digests()
    for t in range(300 if memory else 100):
        obs = encoder.encode(sim.state)
        if t % 3 == 2:
            scores = rng.uniform(-1, 1, wl.index.num_scores)
        else:
            scores = policy.scores(obs)
        if t % 2:
            control, out = sim.step_scores(scores)
        else:
            control = sim.project(scores)
            out = sim.step(control)
        digests.add(
            *(obs[key] for key in sorted(obs)),
            *control.as_dict().values(),
            *_outcome(out),
            *_state(sim),
        )
    return digests.done()


def oracle(name: str, overrides: dict) -> list[str]:
    """Oracle-Sur's controls (its slot program, branch and bound and knapsacks)."""
    wl = make_workload(name, **overrides)
    sim = Simulator(wl)
    sim.reset(3)
    policy = make_policy("oracle-sur", wl)
    policy.reset(3)
    digests = _Digests()
    for _ in range(40):
        control = policy.control(sim.state)
        out = sim.step(control)
        digests.add(*control.as_dict().values(), *_outcome(out))
    return digests.done()


def programs(name: str, overrides: dict, values: bool = False) -> list[str]:
    """Oracle-Sur's service-and-starts program on 300 random slots: random gains, work,
    compute left and queues, with compute left on the EPS boundaries of its comparisons (a
    unit that just fits, a row that binds by less than EPS): its controls and statuses.

    With ``values``: each program's status and objective (the gain of its services) alone.
    A program with several optimal controls gets the one HiGHS's version lands on (scipy
    1.16 and 1.15 pick another in about a third of these 300 on ``mixed``, each of equal
    gain), so the controls are pinned to the file's scipy and the values to any."""
    from types import SimpleNamespace

    from mabp_gym.agents.oracle import OracleSur
    from mabp_gym.core.control import EPS

    wl = make_workload(name, **overrides)
    ix = wl.index
    rng = np.random.default_rng(5)
    no_transfers = np.zeros(0, dtype=np.int64)
    digests = _Digests()
    for _ in range(300):
        gain = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, 3.5], ix.num_actions)
        gain[rng.random(ix.num_actions) < 0.5] = rng.uniform(0.1, 5.0)
        work = rng.choice([0.25, 0.5, 1.0, 2.0, 2.5, 3.0], ix.num_actions)
        avail = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], ix.num_nodes)
        near = rng.random(ix.num_nodes) < 0.3  # on a boundary, either side of EPS
        avail[near] += rng.choice([-0.5, 0.5, -2.0, 2.0], int(near.sum())) * EPS
        avail = np.maximum(avail, 0.0)
        state = SimpleNamespace(queue_len=rng.integers(0, 4, ix.num_pairs))
        oracle = OracleSur(wl)
        oracle._gain_work = lambda *args, g=gain, w=work: (g, w)  # type: ignore[method-assign]
        oracle._available = lambda *args, a=avail: a  # type: ignore[method-assign]
        control, status = oracle._solve(state, no_transfers, np.zeros((2, ix.num_actions)))
        if values:
            gained = None if control is None else round(float(gain @ control.service), 6)
            digests.add(status, gained)
        else:
            digests.add(status, *(() if control is None else control.as_dict().values()))
    return digests.done()


def scipy_version() -> str:
    """scipy's ``major.minor``: the HiGHS that breaks ties between equally good programs."""
    import scipy

    return ".".join(scipy.__version__.split(".")[:2])


def key(name: str, overrides: dict, memory: bool | None = None) -> str:
    tail = "" if memory is None else f"/memory={memory}"
    return f"{Path(name).name}{json.dumps(overrides, sort_keys=True)}{tail}"


def main() -> None:
    golden = {
        "trajectories": {
            key(name, overrides, memory): trajectory(name, overrides, memory)
            for name, overrides in CASES
            for memory in (True, False)
        },
        "oracle": {
            key(name, overrides): oracle(name, overrides) for name, overrides in ORACLE_CASES
        },
        "programs": {
            key(name, overrides): programs(name, overrides) for name, overrides in PROGRAM_CASES
        },
        "program_values": {
            key(name, overrides): programs(name, overrides, values=True)
            for name, overrides in PROGRAM_CASES
        },
        "programs_scipy": scipy_version(),
    }
    (HERE / "slot_golden.json").write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main()
