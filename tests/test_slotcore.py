"""The projection and encoding kernels (mabp_gym.core.kernels.slotcore): the same run
with numba and without it (the kernels then run as plain Python), and the stable sort they
use. Every slot's control and observation is held to golden digests in
``test_slot_golden.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mabp_gym.core.kernels import slotcore

_TRAJECTORY = """
import sys
{block}
from mabp_gym import Simulator, make_workload
from mabp_gym.core.kernels import jit
from mabp_gym.core.encoding import ObservationEncoder
from mabp_gym.agents import make_policy
wl = make_workload("mixed")
sim = Simulator(wl)
sim.reset(6)
encoder, policy = ObservationEncoder(wl), make_policy("mabp", wl)
rows = []
for _ in range(150):
    control, out = sim.step_scores(policy.scores(encoder.encode(sim.state)))
    rows.append((out.backlog, out.delays, out.generated, control.route.tolist()))
print(jit.COMPILED, hash(repr(rows)))
"""


def test_slotcore__without_numba_the_kernels_run_as_python_and_give_the_same_run():
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parent.parent)

    def run(block: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-c", _TRAJECTORY.format(block=block)],
            capture_output=True,
            text=True,
            cwd=root,
            check=True,
            env={"PYTHONPATH": root, "PYTHONHASHSEED": "0", "PATH": ""},
        )
        return result.stdout.split()

    # sys.modules["numba"] = None makes "import numba" fail as if it were not installed.
    without = run('sys.modules["numba"] = None')
    with_numba = run("")
    assert without[0] == "False" and with_numba[0] == "True"
    assert without[1] == with_numba[1]


def _descending(block, live, radix):
    """The sort with fresh scratch (as long as the kernel's: twice the candidates)."""
    n = block.shape[0]
    key, order = np.empty(2 * n), np.empty(2 * n, dtype=np.int64)
    start, count = slotcore._descending(
        block, live, radix, key, order, np.empty(256, dtype=np.int64)
    )
    return order[start : start + count]


def test_descending__is_numpys_stable_argsort_of_the_negated_scores():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        block = np.round(rng.uniform(-1, 1, int(rng.integers(1, 200))), 1)  # many ties
        live = block > 0
        wanted = np.flatnonzero(live)
        expected = wanted[np.argsort(-block[wanted], kind="mergesort")]
        for radix in (None, True):
            assert np.array_equal(_descending(block, live, radix), expected)


def test_descending__by_radix_from_many_candidates_on_the_same_order():
    # From _RADIX_FROM live candidates on the order comes from a radix sort of the values'
    # bits: the same order, ties in index order, for values of any magnitude (subnormal to
    # huge, shared and distinct bytes) and queues that leave some positive scores dead.
    rng = np.random.default_rng(1)
    start = slotcore._RADIX_FROM
    for n in (start - 1, start, start + 1, 3 * start, 20_000):
        for values in (
            np.round(rng.uniform(-1, 1, n), 2),
            rng.choice([5e-324, 1e-300, 0.25, 0.5, 1.0, 3.0, 7e10, -2.0, 0.0], n),
            rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n),
        ):
            live = (values > 0) & (rng.random(n) < 0.9)
            wanted = np.flatnonzero(live)
            expected = wanted[np.argsort(-values[wanted], kind="stable")]
            # radix=None (a network too small for it) merges whatever the count.
            for radix in (True, None):
                assert np.array_equal(_descending(values, live, radix), expected), n


def test_radix_sort__only_where_a_kind_has_enough_candidates_for_it():
    from types import SimpleNamespace

    from mabp_gym.core.workloads import make_workload

    assert slotcore.radix_sort(make_workload("mixed").index) is None
    start = slotcore._RADIX_FROM
    for counts in ((start, 0, 0), (0, start, 0), (0, 0, start)):
        ix = SimpleNamespace(num_actions=counts[0], num_routes=counts[1], num_transfers=counts[2])
        assert slotcore.radix_sort(ix) is True
    small = SimpleNamespace(num_actions=start - 1, num_routes=start - 1, num_transfers=start - 1)
    assert slotcore.radix_sort(small) is None
