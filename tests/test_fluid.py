"""The fluid LP behind lambda_ref (mabp_gym.core.fluid) is capacity()'s all-hit / all-miss value."""

from __future__ import annotations

import pytest

from mabp_gym import make_workload
from mabp_gym.core.fluid import fluid_capacity


@pytest.mark.parametrize("name", ["work_reuse", "successor", "mixed"])
def test_fluid_capacity__a_miss_never_carries_more_than_a_hit(name):
    # (capacity(wl, "full"/"nomem") and wl.lambda_ref are this function by definition; the
    # closed forms below and tests/test_capacity.py check what it computes.)
    wl = make_workload(name)
    assert fluid_capacity(wl.index, hit=False) <= fluid_capacity(wl.index, hit=True)


def test_work_reuse__closed_forms():
    wl = make_workload("work_reuse", kappa_w=4.0)
    # One server, mu = kappa_w, work 1 on a hit and kappa_w on a miss (SPEC 2).
    assert fluid_capacity(wl.index, hit=True) == pytest.approx(4.0)
    assert fluid_capacity(wl.index, hit=False) == pytest.approx(1.0)
