"""MABP's compiled decision (mabp_gym.agents.mabp_core) against its numpy path, bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mabp_gym  # noqa: F401
from mabp_gym.agents import mabp_core
from mabp_gym.agents.mabp import MABP
from mabp_gym.core.kernels import jit
from mabp_gym.core.workloads import WORKLOADS

pytestmark = pytest.mark.skipif(not jit.COMPILED, reason="the kernels run as plain Python here")

VARIANTS = {
    "mabp": {},
    "no-transition": {"transition": False},
    "no-reuse": {"reuse": False},
}


@pytest.fixture(autouse=True)
def _compile_at_once(monkeypatch):
    monkeypatch.setattr(MABP, "compile_after", 0)


def _numpy_twin(workload, **kw) -> MABP:
    twin = MABP(workload, **kw)
    twin._statics = None  # the numpy path
    return twin


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("workload", WORKLOADS)
def test_mabp_core__scores_and_object_values_equal_the_numpy_path_to_the_bit(workload, variant):
    env = gym.make("mabp_gym/SFMSN-v0", workload=workload, load=0.9, horizon=300)
    wl = env.unwrapped.workload
    compiled, twin = MABP(wl, **VARIANTS[variant]), _numpy_twin(wl, **VARIANTS[variant])
    obs, _ = env.reset(seed=3)
    compiled.reset(3)
    twin.reset(3)
    assert compiled._compiled_statics() is not None
    for _ in range(150):
        got, want = compiled.scores(obs), twin.scores(obs)
        assert got.tobytes() == want.tobytes()
        if wl.index.num_retains:
            assert compiled.object_values.tobytes() == twin.object_values.tobytes()
        else:
            assert compiled.object_values is None and twin.object_values is None
        obs, *_ = env.step(got)


def test_mabp_core__without_memory_and_with_recency_retention_the_rules_agree():
    env = gym.make("mabp_gym/SFMSN-v0", workload="mixed", load=0.8, memory=False)
    wl = env.unwrapped.workload
    compiled, twin = MABP(wl, memory=False), _numpy_twin(wl, memory=False)
    recency = MABP(wl, retention=False)
    assert recency._compiled_statics() is None  # most-recently-used stays in numpy
    obs, _ = env.reset(seed=0)
    for _ in range(100):
        got = compiled.scores(obs)
        assert got.tobytes() == twin.scores(obs).tobytes()
        obs, *_ = env.step(got)


def test_mabp_core__a_subclass_that_changes_the_weights_runs_the_numpy_path():
    class Scaled(MABP):
        def weights(self, queues):
            return 2.0 * super().weights(queues)

    env = gym.make("mabp_gym/SFMSN-v0", workload="mixed")
    assert Scaled(env.unwrapped.workload)._compiled_statics() is None
    assert MABP(env.unwrapped.workload)._compiled_statics() is not None


def test_mabp_core__row_sums_add_as_numpy_does_at_every_length_up_to_128():
    from mabp_gym.core.kernels.rules import numpy_row_sum

    rng = np.random.default_rng(0)
    for n in range(0, 129):
        values = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
        assert numpy_row_sum(np.concatenate([values, [1e300]]), 0, n) == values.sum(), n


def test_mabp_core__the_first_decisions_run_numpy_then_the_kernel_takes_over_unchanged(
    monkeypatch,
):
    import mabp_gym.agents.mabp as module

    monkeypatch.setattr(MABP, "compile_after", 5)
    monkeypatch.setattr(module.WARMUP, "calls", 0)
    monkeypatch.setattr(module.WARMUP, "on_disk", False)  # a fresh install
    env = gym.make("mabp_gym/SFMSN-v0", workload="rag", load=0.9)
    wl = env.unwrapped.workload
    switching, twin = MABP(wl), _numpy_twin(wl)
    obs, _ = env.reset(seed=1)
    paths = []
    for _ in range(12):
        got = switching.scores(obs)
        paths.append(switching._statics is not False)
        assert got.tobytes() == twin.scores(obs).tobytes()
        obs, *_ = env.step(got)
    assert paths == [False] * 5 + [True] * 7


def test_mabp_core__a_kernel_in_the_disk_cache_runs_from_the_first_decision(monkeypatch):
    import mabp_gym.agents.mabp as module

    monkeypatch.setattr(MABP, "compile_after", 10**9)
    monkeypatch.setattr(module.WARMUP, "calls", 0)
    monkeypatch.setattr(module.WARMUP, "on_disk", True)
    env = gym.make("mabp_gym/SFMSN-v0", workload="mixed")
    policy = MABP(env.unwrapped.workload)
    policy.scores(env.reset(seed=0)[0])
    assert policy._statics is not False and policy._statics is not None


def test_mabp_core__queues_of_any_layout_score_alike_through_the_entry_point_or_not():
    # Once numba has typed a decision's arguments the policy calls the kernel's entry
    # point, which takes arrays of those types only: queues of another layout (Fortran
    # order, read-only, a strided view) go through numba's dispatcher, to the same scores.
    env = gym.make("mabp_gym/Mixed-v0", load=0.9)
    wl = env.unwrapped.workload
    obs, _ = env.reset(seed=5)
    for _ in range(30):
        obs, *_ = env.step(MABP(wl).scores(obs))
    queues = obs["queues"].astype(np.float64)
    frozen = queues.copy()
    frozen.setflags(write=False)
    wide = np.zeros((queues.shape[0], 2 * queues.shape[1]))
    wide[:, ::2] = queues
    layouts = [queues, np.asfortranarray(queues), frozen, wide[:, ::2], queues]
    policy = MABP(wl)
    expected = MABP(wl).scores(obs)
    for queued in layouts:
        policy.reset(0)
        assert np.array_equal(policy.scores({**obs, "queues": queued}), expected)
    assert policy._fill_kernel.entry not in (None, mabp_core.mabp_fill)
