"""The batched vector env: N single envs' observations, rewards and truncations, step by
step, through autoresets, on every built-in workload; and its bad input."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import mabp_gym
from mabp_gym.core.kernels import jit
from mabp_gym.envs.vector_env import SFMSNVectorEnv
from mabp_gym.envs.worker_vector_env import SFMSNWorkerVectorEnv

compiled_only = pytest.mark.skipif(
    not jit.COMPILED, reason="needs the compiled core (numba, MABP_GYM_PURE unset)"
)


def _singles(n: int, seed: int, **kwargs):
    envs = [gym.make("mabp_gym/SFMSN-v0", **kwargs) for _ in range(n)]
    return envs, [env.reset(seed=seed + i) for i, env in enumerate(envs)]


def _same(batched, single, i: int, where: str) -> None:
    if isinstance(single, dict):
        for key, value in single.items():
            assert np.array_equal(batched[key][i], value), f"{where}: {key}"
    else:
        assert np.array_equal(batched[i], single), where


def _compare(vec: SFMSNVectorEnv, steps: int, seed: int = 3, **kwargs) -> None:
    """``vec`` against ``num_envs`` single envs made with ``kwargs``, random scores."""
    n = vec.num_envs
    singles, first = _singles(n, seed, **kwargs)
    obs, info = vec.reset(seed=seed)
    for i, (single_obs, single_info) in enumerate(first):
        _same(obs, single_obs, i, "reset")
        if "load" in single_info:
            assert info["load"][i] == single_info["load"]
    rng = np.random.default_rng(seed)
    pending = [False] * n
    for step in range(steps):
        actions = rng.uniform(-1, 1, vec.action_space.shape).astype(np.float32)
        obs, rewards, terminated, truncated, _ = vec.step(actions)
        assert not terminated.any()
        for i, env in enumerate(singles):
            if pending[i]:  # NEXT_STEP: this step resets env i
                single_obs, _ = env.reset()
                reward, done = 0.0, False
            else:
                single_obs, reward, _, done, _ = env.step(actions[i])
            pending[i] = done
            _same(obs, single_obs, i, f"step {step}, env {i}")
            assert rewards[i] == reward, f"step {step}, env {i}"
            assert truncated[i] == done, f"step {step}, env {i}"
    batched = vec.envs if isinstance(vec, SFMSNVectorEnv) else []  # workers: in them
    for env, single in zip(batched, singles[: len(batched)], strict=True):  # written back
        state, single_state = env.sim.state, single.unwrapped.sim.state
        assert (state.t, state.units) == (single_state.t, single_state.units)


@compiled_only
@pytest.mark.parametrize("workload", sorted(mabp_gym.WORKLOADS))
def test_batched__equals_single_envs_through_autoresets(workload):
    # The horizon cuts each episode (a TimeLimit of 45 never does): its truncation is the
    # env's own, not the step count's.
    kwargs = {"workload": workload, "load": 0.85, "horizon": 30, "max_episode_steps": 45}
    vec = SFMSNVectorEnv(3, **kwargs)
    assert vec.compiled
    _compare(vec, 70, **kwargs)


@compiled_only
def test_batched__many_envs_hint_their_fifo_rows_to_the_cache_and_still_equal_single_envs():
    # From batch._WARM_FROM envs on, each env's FIFO rows are prefetched before its slot:
    # a hint to the cache, which must change nothing (load 1.2: the queues and pool grow).
    from mabp_gym.core.kernels import batch

    kwargs = {"workload": "mixed", "load": 1.2, "horizon": 40}
    vec = SFMSNVectorEnv(batch._WARM_FROM, **kwargs)
    assert vec.compiled and vec.num_envs >= batch._WARM_FROM
    _compare(vec, 40, **kwargs)


@compiled_only
def test_batched__flat_observation_drift_reward_and_load_interval():
    kwargs = {
        "workload": "rag",
        "load": (0.5, 1.2),
        "obs_mode": "flat",
        "reward": "drift_plus_penalty",
        "horizon": 25,
        "max_episode_steps": 25,
    }
    _compare(SFMSNVectorEnv(4, **kwargs), 60, **kwargs)


@compiled_only
def test_batched__generation_drawn_in_the_kernel_and_growing_buffers():
    # gen_prob strictly between 0 and 1: the outcome kernel draws from each env's
    # generator itself; load 1.6 grows the queues past the first pool and unit rows.
    kwargs = {"workload": "mixed", "load": 1.6, "gen_prob": 0.5, "horizon": 300}
    vec = SFMSNVectorEnv(2, max_episode_steps=300, **kwargs)
    _compare(vec, 300, max_episode_steps=300, **kwargs)
    assert vec._fifo[0].shape[1] > 64  # the pool grew


def test_batched_and_single__a_slot_asks_for_pool_rows_only_where_arrivals_can_join():
    """The free-row check counts a row per unit served or routed and one per pair the
    arrivals can join (they join as one run), not one per pair: on ``mixed`` (24 arrival
    pairs of 184) the first slots fit the first 64 rows, which a row per pair would not."""
    vec = SFMSNVectorEnv(2, workload="mixed", load=0.85)
    ix = vec.envs[0].sim.workload.index
    assert len(ix.arrival_pair) < 64 < ix.num_pairs  # else this test could not fail
    vec.reset(seed=0)
    vec.step(np.zeros(vec.action_space.shape, dtype=np.float32))
    pool = vec.envs[0].sim.state.fifo.pool
    assert pool.shape[0] == 64, pool.shape
    env = gym.make("mabp_gym/Mixed-v0", load=0.85)
    env.reset(seed=0)
    env.step(np.zeros(env.action_space.shape, dtype=np.float32))
    assert env.unwrapped.sim.state.fifo.pool.shape[0] == 64


@compiled_only
def test_batched__max_episode_steps_below_the_horizon_truncates():
    vec = SFMSNVectorEnv(2, workload="boundary", max_episode_steps=4)
    vec.reset(seed=0)
    truncated = [vec.step(vec.action_space.sample())[3] for _ in range(6)]
    assert truncated[3].all() and not truncated[4].any() and not truncated[0].any()


def test_batched__diagnostics_step_each_env_and_stack_their_info():
    kwargs = {"workload": "mixed", "diagnostics": True, "horizon": 20, "max_episode_steps": 20}
    vec = SFMSNVectorEnv(2, **kwargs)
    assert not vec.compiled
    _compare(vec, 25, **kwargs)
    vec.reset(seed=0)
    info = vec.step(vec.action_space.sample())[4]
    assert info["backlog"].shape == (2,) and info["_backlog"].all()


@pytest.mark.parametrize("diagnostics", [False, True], ids=["compiled", "each-env"])
def test_batched__a_deep_copy_steps_as_the_original_and_apart_from_it(diagnostics):
    """``copy.deepcopy`` failed (numba's list of generators); a plain copy would also have
    left each copied env's state apart from the stacked rows the kernel steps."""
    import copy

    def run(vec, seed, steps):
        rng, out = np.random.default_rng(seed), []
        for _ in range(steps):
            obs, reward, _, truncated, _ = vec.step(rng.uniform(-1, 1, vec.action_space.shape))
            out.append((obs["queues"].copy(), reward.copy(), truncated.copy()))
        return out

    vec = SFMSNVectorEnv(3, workload="mixed", diagnostics=diagnostics, max_episode_steps=500)
    copy.deepcopy(vec)  # before any reset too
    vec.reset(seed=0)
    run(vec, 1, 30)
    twin = copy.deepcopy(vec)
    ahead = run(twin, 2, 40)  # the copy first: the original must not feel it
    for mine, theirs in zip(run(vec, 2, 40), ahead, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            np.testing.assert_array_equal(a, b)
    for env, other, row in zip(vec.envs, twin.envs, twin._state.queue_len, strict=True):
        np.testing.assert_array_equal(env.sim.state.queue_len, other.sim.state.queue_len)
        assert np.shares_memory(other.sim.state.queue_len, row)  # the copy's own rows
        assert not np.shares_memory(env.sim.state.queue_len, row)


def test_workers__a_worker_polls_a_little_past_its_last_short_wait_and_briefly_after_a_long_one():
    from mabp_gym.envs.worker_vector_env import SPIN_MAX_S, SPIN_S, _spin

    assert _spin(4e-4) == pytest.approx(6e-4)  # steps back to back: poll past the gap
    assert _spin(1e-5) == SPIN_S  # never shorter than the default
    assert _spin(SPIN_MAX_S * 0.99) == SPIN_MAX_S  # capped
    assert _spin(SPIN_MAX_S) == SPIN_S == _spin(1.0)  # a policy between steps: poll briefly


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_workers__the_main_process_steps_a_little_fewer_envs_and_every_block_at_least_one(workers):
    from mabp_gym.envs.worker_vector_env import MAIN_SHARE, MAIN_SHARE_FRESH, _blocks

    for num_envs, share in itertools.product(
        [workers, workers + 1, 16, 64, 256, 1000], [MAIN_SHARE, MAIN_SHARE_FRESH]
    ):
        blocks = _blocks(num_envs, workers, share)
        assert [first for first, _ in blocks] == np.cumsum(
            [0] + [c for _, c in blocks[:-1]]
        ).tolist()
        sizes = [count for _, count in blocks]
        assert sum(sizes) == num_envs and min(sizes) >= 1 and len(sizes) == workers
        assert max(sizes[:-1]) - min(sizes[:-1]) <= 1  # the worker processes: even
        assert sizes[-1] == max(1, int(num_envs / workers * share))
    assert [count for _, count in _blocks(256, 2)] == [136, 120]
    assert [count for _, count in _blocks(1024, 2, MAIN_SHARE_FRESH)] == [584, 440]
    vec = SFMSNWorkerVectorEnv(8, workers=2, workload="mixed", load=0.85)  # Dict, copy=True
    assert [count for _, count in vec._blocks] == [5, 3]
    vec.close()


def test_checked_scores__written_into_out_as_returned_without_it():
    from mabp_gym.envs.vector_env import checked_scores

    rng = np.random.default_rng(0)
    resetting = np.array([False, True, False])
    for actions in (
        rng.uniform(-1, 1, (3, 5)).astype(np.float32),
        rng.integers(-3, 3, (3, 5)),
        rng.uniform(-1, 1, (3, 5)).tolist(),
    ):
        expected, flags = checked_scores(actions, resetting, 5)
        out = np.full((3, 5), 7.0)
        got, got_flags = checked_scores(actions, resetting, 5, out=out)
        assert got is out and np.array_equal(out, expected) and not out[1].any()
        assert np.array_equal(flags, got_flags)
    bad = rng.uniform(-1, 1, (3, 5))
    bad[1, 2] = np.nan  # a resetting row may hold anything
    assert np.isfinite(checked_scores(bad, resetting, 5, out=np.empty((3, 5)))[0]).all()
    bad[2, 0] = np.inf
    with pytest.raises(ValueError, match=r"env\(s\) \[2\] got NaN or inf"):
        checked_scores(bad, resetting, 5, out=np.empty((3, 5)))
    out = np.zeros((3, 5))
    with pytest.raises(ValueError, match=r"must have shape \(3, 5\)"):
        checked_scores(np.ones((3, 4)), resetting, 5, out=out)
    assert not out.any()  # a batch of the wrong shape is not written
    # With no env resetting the batch is checked by its sum first: finite scores whose sum
    # overflows pass (without a numpy warning, even where numpy raises on them), and a NaN
    # or inf anywhere, or infinities of both signs, are refused by their env.
    stepping = np.zeros(3, dtype=bool)
    huge = np.full((3, 5), np.finfo(np.float64).max)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        assert np.array_equal(checked_scores(huge, stepping, 5, out=np.empty((3, 5)))[0], huge)
        for values in ((np.nan,), (np.inf,), (-np.inf,), (np.inf, -np.inf)):
            bad = np.zeros((3, 5))
            bad[1, : len(values)] = values
            with pytest.raises(ValueError, match=r"env\(s\) \[1\] got NaN or inf"):
                checked_scores(bad, stepping, 5, out=np.empty((3, 5)))


def test_workers__a_deep_copy_is_refused_by_name():
    import copy

    vec = SFMSNWorkerVectorEnv(2, workers=2, workload="mixed")
    try:
        with pytest.raises(TypeError, match="worker processes cannot be copied"):
            copy.deepcopy(vec)
    finally:
        vec.close()


def test_make_vec__builds_the_batched_env_by_default():
    envs = gym.make_vec("mabp_gym/Rag-v0", num_envs=3, load=0.7)
    assert isinstance(envs.unwrapped, SFMSNVectorEnv)
    assert envs.unwrapped.max_episode_steps is None  # the ids set none: the horizon decides
    obs, _ = envs.reset(seed=0)
    assert obs["queues"].shape[0] == 3 and envs.observation_space.contains(obs)
    sync = gym.make_vec("mabp_gym/Rag-v0", num_envs=3, vectorization_mode="sync", load=0.7)
    assert not isinstance(sync.unwrapped, SFMSNVectorEnv)
    assert envs.metadata["autoreset_mode"] == sync.metadata["autoreset_mode"]


def test_batched__bad_input_is_refused_and_changes_nothing():
    vec = SFMSNVectorEnv(2, workload="mixed")
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(vec.action_space.sample())
    obs, _ = vec.reset(seed=0)
    width = vec.single_action_space.shape[0]
    with pytest.raises(ValueError, match=rf"shape \(2, {width}\)"):
        vec.step(np.zeros(width))
    bad = np.zeros((2, width))
    bad[1, 5] = np.nan
    with pytest.raises(ValueError, match=r"env\(s\) \[1\]"):
        vec.step(bad)
    bad[0, -1], bad[1] = np.inf, -np.inf  # the last score, every score: both envs named
    with pytest.raises(ValueError, match=r"env\(s\) \[0, 1\] got NaN or inf"):
        vec.step(bad)
    for where in [(0, 0), (1, width - 1)]:  # float32 scores, read by the kernel as they are
        bad32 = np.zeros((2, width), dtype=np.float32)
        bad32[where] = np.inf if where[0] else np.nan
        with pytest.raises(ValueError, match=rf"env\(s\) \[{where[0]}\] got NaN or inf"):
            vec.step(bad32)
    with pytest.raises(ValueError, match="real-valued"):
        vec.step(np.zeros((2, width), dtype=complex))
    # Nothing moved: the next good step is the first step of the episode.
    assert all(env.sim.state.t == 0 for env in vec.envs)
    vec.step(np.full((2, width), np.finfo(np.float64).max))  # the largest floats are finite
    assert all(env.sim.state.t == 1 for env in vec.envs)
    with pytest.raises(ValueError, match="sequence of 2 seeds"):
        vec.reset(seed=[1, 2, 3])
    for kwargs, match in [
        ({"num_envs": 0}, "at least 1"),
        ({"num_envs": 2.5}, "positive integer"),
        ({"num_envs": 2, "max_episode_steps": 0}, "max_episode_steps"),
        ({"num_envs": 2, "render_mode": "ansi"}, "does not render"),
        ({"num_envs": 2, "autoreset_mode": "SameStep"}, "next step only"),
    ]:
        with pytest.raises(ValueError, match=match):
            SFMSNVectorEnv(**kwargs)
    with pytest.raises(TypeError, match="'lod'"):  # as the single env refuses it
        SFMSNVectorEnv(2, lod=0.5)


def test_batched__seed_list_and_continued_streams():
    kwargs = {"workload": "agentic", "horizon": 10, "max_episode_steps": 10}
    vec = SFMSNVectorEnv(2, **kwargs)
    obs, _ = vec.reset(seed=[7, 11])
    singles = [gym.make("mabp_gym/SFMSN-v0", **kwargs) for _ in range(2)]
    for i, (env, seed) in enumerate(zip(singles, [7, 11], strict=True)):
        _same(obs, env.reset(seed=seed)[0], i, "seed list")
    # reset() without a seed continues each env's stream, as a single env's does.
    obs, _ = vec.reset()
    for i, env in enumerate(singles):
        _same(obs, env.reset()[0], i, "continued")


def test_batched__pure_python_path_gives_the_same_steps():
    # MABP_GYM_PURE=1: no numba, each env steps on its own; the same numbers.
    code = (
        "import numpy as np\n"
        "from mabp_gym.envs.vector_env import SFMSNVectorEnv\n"
        "vec = SFMSNVectorEnv(2, workload='rag', horizon=8, max_episode_steps=8)\n"
        "vec.reset(seed=5)\n"
        "rng = np.random.default_rng(0)\n"
        "out = []\n"
        "for _ in range(10):\n"
        "    out.extend(vec.step(rng.uniform(-1, 1, vec.action_space.shape))[1].tolist())\n"
        "print(vec.compiled, repr(out))\n"
    )
    runs = []
    for pure in ("1", "0"):
        env = {**os.environ, "MABP_GYM_PURE": pure}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        runs.append(done.stdout.split(" ", 1))
    assert runs[0][0] == "False"
    assert runs[0][1] == runs[1][1]


def test_batched__batches_of_any_dtype_and_layout_step_alike_and_stay_unchanged():
    # A C-contiguous, writable float32 or float64 batch is read by the kernel as it is
    # (float32 widened env by env), any other copied into the env's own float64 scores: a
    # read-only, Fortran-ordered or strided one. The same steps whichever, and the
    # caller's arrays keep their values.
    runs = []
    layouts = ("float32", "float64", "read-only", "fortran", "strided", "read-only float64")
    for layout in layouts:
        vec = SFMSNVectorEnv(3, workload="rag", load=0.9)
        vec.reset(seed=4)
        rng = np.random.default_rng(1)
        rewards = []
        for _ in range(12):
            batch = rng.uniform(-1, 1, vec.action_space.shape).astype(np.float32)
            if layout.endswith("float64"):
                batch = batch.astype(np.float64)
            kept = batch.copy()
            if layout.startswith("read-only"):
                batch.setflags(write=False)
            elif layout == "fortran":
                batch = np.asfortranarray(batch)
            elif layout == "strided":
                batch = np.repeat(batch, 2, axis=1)[:, ::2]
            rewards.append(vec.step(batch)[1])
            np.testing.assert_array_equal(batch, kept)
        runs.append((np.array(rewards), vec._state.queue_len.copy()))
    for rewards, queues in runs[1:]:
        np.testing.assert_array_equal(rewards, runs[0][0])
        np.testing.assert_array_equal(queues, runs[0][1])


@pytest.mark.skipif(not jit.COMPILED, reason="numba's runtime statistics need numba")
def test_batched__compiled_steps_release_every_array_they_make():
    # Part of a slot runs without numba's reference counts (jit.leaf); the arrays of a
    # step must still all be freed, and none freed early (the records would differ):
    # numba's count of live allocations is the same after 40 more steps of 16 envs.
    code = (
        "import json\n"
        "import numpy as np\n"
        "from numba.core.runtime import rtsys\n"
        "from mabp_gym.envs.vector_env import SFMSNVectorEnv\n"
        "vec = SFMSNVectorEnv(16, workload='mixed', load=0.85)\n"
        "vec.reset(seed=1)\n"
        "rng = np.random.default_rng(0)\n"
        "def live():\n"
        "    s = rtsys.get_allocation_stats()\n"
        "    return s.alloc - s.free, s.mi_alloc - s.mi_free\n"
        "for _ in range(20):\n"
        "    vec.step(rng.uniform(-1, 1, vec.action_space.shape))\n"
        "before = live()\n"
        "for _ in range(40):\n"
        "    vec.step(rng.uniform(-1, 1, vec.action_space.shape))\n"
        "print(json.dumps([before, live(), rtsys.get_allocation_stats().alloc]))\n"
    )
    env = {**os.environ, "NUMBA_NRT_STATS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    before, after, allocations = json.loads(done.stdout)
    assert allocations > 40 * 16  # the kernels do allocate, and were counted
    assert after == before


def test_batched__closed_env_refuses_to_step_and_seeds_are_checked_per_env():
    vec = SFMSNVectorEnv(2, workload="rag")
    vec.reset(seed=[np.int64(3), None])  # numpy integers and None are seeds
    vec.reset(seed=np.array([3, 4]))
    with pytest.raises(ValueError, match=r"env\(s\) \[1\]"):
        vec.reset(seed=[3, 4.5])
    # A negative seed is refused before any env is reset: env 0 keeps its episode.
    vec.reset(seed=[7, 8])
    vec.step(np.zeros(vec.action_space.shape))
    queues = vec.envs[0].unwrapped.sim.state.queue_len.copy()
    with pytest.raises(ValueError, match=r"env\(s\) \[1\] must be an integer >= 0"):
        vec.reset(seed=[5, -1])
    np.testing.assert_array_equal(vec.envs[0].unwrapped.sim.state.queue_len, queues)
    assert vec.envs[0].unwrapped.sim.state.t == 1
    with pytest.raises(ValueError, match="an integer >= 0 or a sequence"):
        vec.reset(seed=-3)
    vec.close()
    with pytest.raises(RuntimeError, match="closed"):
        vec.step(np.zeros(vec.action_space.shape))
    with pytest.raises(RuntimeError, match="closed"):
        vec.reset()
    with pytest.raises(ValueError, match="copy must be True or False"):
        SFMSNVectorEnv(2, copy="no")


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_batched__an_env_refused_at_construction_closes_quietly():
    """Gymnasium 1.2's ``VectorEnv.__del__`` closes even an env whose ``__init__`` raised."""
    import gc

    with pytest.raises(ValueError):
        SFMSNVectorEnv(0, workload="rag")
    gc.collect()
    half_built = SFMSNVectorEnv.__new__(SFMSNVectorEnv)
    half_built.close_extras()  # no envs yet: nothing to close


def test_vector_env__a_reset_mask_resets_the_masked_envs_alone_as_sync_does():
    # Gymnasium's partial reset, refused before ("options are not supported").
    batched = gym.make_vec("mabp_gym/SFMSN-v0", num_envs=2)
    sync = gym.make_vec("mabp_gym/SFMSN-v0", num_envs=2, vectorization_mode="sync")
    actions = np.ones((2, batched.single_action_space.shape[0]), dtype=np.float32)
    for vec in (batched, sync):
        vec.reset(seed=0)
        for _ in range(3):
            vec.step(actions)
    mask = np.array([True, False])
    got, _ = batched.reset(seed=[7, None], options={"reset_mask": mask})
    want, _ = sync.reset(seed=[7, None], options={"reset_mask": mask})
    for key in got:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert got["queues"][1].sum() > 0  # env 1 kept its episode
    for bad, error, message in (
        ({"reset_mask": [True, False]}, TypeError, "bool array of shape"),  # as sync's types
        ({"reset_mask": np.array([1, 0])}, TypeError, "bool array of shape"),
        ({"reset_mask": np.ones(3, dtype=bool)}, ValueError, "bool array of shape"),
        ({"reset_mask": np.zeros(2, dtype=bool)}, ValueError, "at least one env"),
        ({"other": 1}, ValueError, "options are not supported but reset_mask"),
    ):
        with pytest.raises(error, match=message):
            batched.reset(options=bad)
        if error is TypeError:  # Gymnasium 1.2's sync env asserts, later ones raise this
            with pytest.raises((TypeError, AssertionError)):
                sync.reset(options=bad)
    fresh = gym.make_vec("mabp_gym/SFMSN-v0", num_envs=2)
    with pytest.raises(ValueError, match="reset\\(\\) every env first"):
        fresh.reset(options={"reset_mask": mask})


@pytest.mark.parametrize("compiled", [True, False])
def test_batched__an_autoresetting_envs_action_row_is_ignored_as_sync_does(compiled):
    # Under next-step autoreset the row of an env that resets is not used: a NaN row there
    # was refused ("actions must be finite; env(s) [0]"), where SyncVectorEnv ignores it.
    if compiled and not jit.COMPILED:
        pytest.skip("needs the compiled core (numba, MABP_GYM_PURE unset)")
    kwargs = {"horizon": 1, "reward": "backlog" if compiled else lambda *_: 0.0}
    batched = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2, **kwargs)
    assert batched.compiled == compiled
    sync = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2, vectorization_mode="sync", **kwargs)
    ones = np.ones((2, batched.single_action_space.shape[0]))
    actions = ones.copy()
    actions[0] = np.nan
    for vec in (batched, sync):
        vec.reset(seed=0)
        vec.step(ones)  # horizon 1: both truncate, both reset on the next step
    got = batched.step(actions)
    want = sync.step(actions)
    assert np.isnan(actions[0]).all()  # the caller's array is left as it was
    for key in got[0]:
        np.testing.assert_array_equal(got[0][key], want[0][key], err_msg=key)
    np.testing.assert_array_equal(got[1], want[1])
    actions[0], actions[1] = 1.0, np.nan  # both step now: env 1's NaN row is refused
    with pytest.raises(ValueError, match=r"env\(s\) \[1\]"):
        batched.step(actions)


def test_batched__get_attr_and_call_as_sync_does_and_set_attr_refused():
    batched = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2)
    sync = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2, vectorization_mode="sync")
    actions = np.ones((2, batched.single_action_space.shape[0]))
    for vec in (batched, sync):
        vec.reset(seed=0)
        vec.step(actions)
    assert batched.get_attr("nu") == sync.get_attr("nu") == (5.0, 5.0)
    t = [env.state.t for env in batched.get_attr("sim")]
    assert t == [env.state.t for env in sync.get_attr("sim")] == [1, 1]
    assert batched.call("memory") == sync.call("memory") == (True, True)
    # A method is called, as Gymnasium's get_attr does (it is call(name) there).
    assert batched.get_attr("render") == sync.get_attr("render") == (None, None)
    # Dict keys in the space's order, as sync gives them: joining obs.values() is one layout.
    obs = {vec: vec.reset(seed=0)[0] for vec in (batched, sync)}
    assert list(obs[batched]) == list(obs[sync]) == list(batched.single_observation_space)
    for vec in (batched, sync):
        vec.step(actions)
    with pytest.raises(AttributeError, match="reads its envs' settings when it is made"):
        batched.set_attr("nu", 3.0)
    # Stepping or resetting one env behind the batch's back hung the next step (step) or
    # was not seen by it (reset): refused, and the batch steps on as before.
    batched.step(actions)
    for name, args, kwargs in (("step", (actions[0],), {}), ("reset", (), {"seed": 5})):
        with pytest.raises(AttributeError, match=f"call\\('{name}'\\) is refused"):
            batched.call(name, *args, **kwargs)
    assert [env.state.t for env in batched.get_attr("sim")] == [2, 2]
    sync.step(actions)
    after, expected = batched.step(actions)[0], sync.step(actions)[0]
    assert all(np.array_equal(after[k], expected[k]) for k in after)
    batched.close()
    with pytest.raises(RuntimeError, match="closed"):
        batched.get_attr("nu")


# -- the batched env over several processes (make_vec(..., workers=P)) -------------------


@compiled_only
def test_workers__equal_single_envs_through_autoresets_with_uneven_blocks():
    kwargs = {"workload": "mixed", "load": 0.85, "horizon": 30, "max_episode_steps": 45}
    vec = gym.make_vec("mabp_gym/SFMSN-v0", num_envs=5, workers=2, **kwargs)
    assert isinstance(vec.unwrapped, SFMSNWorkerVectorEnv)
    assert [count for _, count in vec.unwrapped._blocks] == [3, 2]
    _compare(vec, 70, **kwargs)
    vec.close()


@compiled_only
@pytest.mark.parametrize("obs_mode", ["dict", "flat"])
def test_workers__each_step_returns_fresh_arrays_unless_copy_is_off(obs_mode):
    # This process's block writes its rows into the arrays a step returns while the
    # workers step, and theirs are copied out of shared memory after: every row is the
    # step's, and a later step changes no array returned before.
    kwargs = {"workload": "mixed", "load": 0.85, "obs_mode": obs_mode}
    vec = SFMSNWorkerVectorEnv(4, workers=2, **kwargs)
    batched = SFMSNVectorEnv(4, **kwargs)
    vec.reset(seed=1)
    batched.reset(seed=1)
    rng = np.random.default_rng(0)
    kept = []
    for _ in range(4):
        actions = rng.uniform(-1, 1, vec.action_space.shape).astype(np.float32)
        obs, expected = vec.step(actions)[0], batched.step(actions)[0]
        kept.append(
            (
                obs,
                {k: v.copy() for k, v in expected.items()}
                if obs_mode == "dict"
                else expected.copy(),
            )
        )
    for obs, expected in kept:
        if obs_mode == "dict":
            assert all(np.array_equal(obs[k], expected[k]) for k in expected)
        else:
            assert np.array_equal(obs, expected)
    vec.close()
    shared = SFMSNWorkerVectorEnv(2, workers=2, copy=False, **kwargs)
    first = shared.reset(seed=1)[0]
    second = shared.step(np.zeros(shared.action_space.shape, dtype=np.float32))[0]
    leaf = (lambda o: o["queues"]) if obs_mode == "dict" else (lambda o: o)
    assert leaf(first) is leaf(second)  # the shared arrays themselves
    shared.close()


@compiled_only
def test_workers__flat_observation_drift_reward_and_the_reset_infos_merged():
    kwargs = {
        "workload": "rag",
        "load": (0.5, 1.2),  # each reset's info holds the drawn load: merged by env
        "obs_mode": "flat",
        "reward": "drift_plus_penalty",
        "horizon": 25,
        "max_episode_steps": 25,
    }
    vec = SFMSNWorkerVectorEnv(4, workers=3, **kwargs)
    _compare(vec, 60, **kwargs)
    vec.close()


def test_workers__diagnostics_infos_merged_as_one_batched_env_gives_them():
    kwargs = {"workload": "mixed", "diagnostics": True, "horizon": 20, "max_episode_steps": 20}
    workers = SFMSNWorkerVectorEnv(3, workers=2, **kwargs)
    batched = SFMSNVectorEnv(3, **kwargs)
    actions = np.random.default_rng(0).uniform(-1, 1, batched.action_space.shape)
    for vec in (workers, batched):
        vec.reset(seed=4)
    got, want = workers.step(actions)[4], batched.step(actions)[4]
    assert set(got) == set(want) and got["_backlog"].all()
    for key in ("backlog", "hits", "penalty", "_backlog"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    np.testing.assert_array_equal(got["control"]["service"], want["control"]["service"])
    workers.close()


def test_workers__a_reset_mask_across_blocks_as_one_batched_env():
    workers = SFMSNWorkerVectorEnv(4, workers=2, workload="agentic")
    batched = SFMSNVectorEnv(4, workload="agentic")
    actions = np.ones((4, batched.single_action_space.shape[0]))
    for vec in (workers, batched):
        vec.reset(seed=0)
        for _ in range(3):
            vec.step(actions)
    for mask in (np.array([True, False, False, False]), np.array([False, False, True, True])):
        got, _ = workers.reset(seed=[9, None, 11, None], options={"reset_mask": mask})
        want, _ = batched.reset(seed=[9, None, 11, None], options={"reset_mask": mask})
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
        np.testing.assert_array_equal(workers.step(actions)[1], batched.step(actions)[1])
    workers.close()


def test_workers__bad_input_is_refused_before_any_env_steps():
    for kwargs, match in [
        ({"num_envs": 2, "workers": 0}, "positive integer"),
        ({"num_envs": 2, "workers": 1.5}, "positive integer"),
        ({"num_envs": 2, "workers": 3}, r"at most num_envs \(2\)"),
        ({"num_envs": 0}, "num_envs must be at least 1, got 0"),  # not about workers
        ({"num_envs": 2, "workers": 2, "context": "thread"}, "context must be"),
        ({"num_envs": 2, "workers": 2, "lod": 0.5}, "'lod'"),
        ({"num_envs": 2, "context": "spawn"}, "needs workers >= 2, got workers=1"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            gym.make_vec("mabp_gym/Mixed-v0", **kwargs)
    with pytest.raises(ValueError, match="at least 2"):
        SFMSNWorkerVectorEnv(2, workers=1)
    # workers=1 is the in-process batched env; context=None is the default, not a setting.
    assert isinstance(gym.make_vec("mabp_gym/Mixed-v0", num_envs=2).unwrapped, SFMSNVectorEnv)
    made = gym.make_vec("mabp_gym/Mixed-v0", num_envs=2, workers=1, context=None)
    assert isinstance(made.unwrapped, SFMSNVectorEnv)
    vec = SFMSNWorkerVectorEnv(3, workers=2, workload="mixed")
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(vec.action_space.sample())
    vec.reset(seed=0)
    bad = np.zeros(vec.action_space.shape)
    bad[2, 0] = np.inf  # the in-process block's env: refused before the worker steps
    with pytest.raises(ValueError, match=r"env\(s\) \[2\]"):
        vec.step(bad)
    for row in (0, 2):  # float32, which goes as it is: a worker's env, this process's
        bad32 = np.zeros(vec.action_space.shape, dtype=np.float32)
        bad32[row, -1] = np.nan
        with pytest.raises(ValueError, match=rf"env\(s\) \[{row}\]"):
            vec.step(bad32)
    assert [env.sim.state.t for env in vec.get_attr("unwrapped")] == [0, 0, 0]
    assert vec.call("nu") == (5.0, 5.0, 5.0)
    assert list(vec.reset(seed=0)[0]) == list(vec.single_observation_space)  # as sync's
    # A value that does not pickle is an error naming that, and the workers live on (it
    # killed worker 0 and closed the vector env with "worker 0 ... died").
    own = SFMSNWorkerVectorEnv(3, workers=2, context="fork", reward=lambda *_: 0.0)
    own.reset(seed=0)
    with pytest.raises(RuntimeError, match="call's value does not pickle"):
        own.call("__getattribute__", "_reward_fn")
    assert not own.closed and own.get_attr("nu") == (5.0, 5.0, 5.0)
    own.close()
    with pytest.raises(AttributeError, match="refused"):
        vec.call("step", bad[0])
    with pytest.raises(AttributeError, match="settings when it is made"):
        vec.set_attr("nu", 1.0)
    vec.close()
    with pytest.raises(RuntimeError, match="closed"):
        vec.step(bad)


def test_workers__a_dead_worker_is_an_error_and_closes_the_vector_env():
    vec = SFMSNWorkerVectorEnv(2, workers=2, workload="mixed")
    vec.reset(seed=0)
    process = vec._processes[0]
    process.kill()
    process.join()
    with pytest.raises(RuntimeError, match="worker 0 of the vector env died"):
        vec.step(np.zeros(vec.action_space.shape))
    assert vec.closed
    with pytest.raises(RuntimeError, match="closed"):
        vec.reset()


def test_workers__a_dropped_vector_env_stops_its_workers_quietly():
    """Gymnasium 1.2 closes a dropped vector env in ``VectorEnv.__del__``, 1.4 does not: the
    worker env closes itself, and its workers exit cleanly (code 0, no traceback)."""
    import gc

    vec = SFMSNWorkerVectorEnv(2, workers=2, workload="mixed")
    vec.reset(seed=0)
    processes = list(vec._processes)
    del vec
    gc.collect()
    for process in processes:
        process.join(timeout=10)
        assert process.exitcode == 0


@compiled_only
def test_batched__the_drift_reward_squares_in_float64_like_the_single_env():
    # int64 squares overflowed past about 3e9 units a queue and turned the reward positive.
    from mabp_gym.core.kernels import batch

    vec = SFMSNVectorEnv(2, workload="mixed", reward="drift_plus_penalty")
    vec.reset(seed=0)
    vec._state.queue_len[0, 0] = 3_100_000_000
    vec._state.queue_len[1, :] = 7
    value = [batch._lyapunov(i, vec._statics_all, vec._state, vec._slots.out) for i in range(2)]
    backlog = vec._state.queue_len.astype(np.float64)  # no unit in service after a reset
    assert value[0] == 0.5 * float(backlog[0] @ backlog[0]) > 4.8e18
    assert value[1] == 0.5 * 49 * backlog.shape[1]


def _address(array):
    return array.__array_interface__["data"][0]


def test_slot_arrays__the_kernel_views_each_array_where_the_pack_holds_it():
    # The kernel picks each array's buffer by the dtype it expects: a field whose dtype
    # changed in the pack but not in the kernel would read another array's bytes.
    from mabp_gym.core.kernels import batch

    ix = mabp_gym.make_workload("mixed").index
    slots = batch.slot_arrays(3, ix, 16)
    unpack = jit.njit(lambda packed: batch._unpack(packed)) if jit.COMPILED else batch._unpack
    out, (projection, outcome, row) = unpack(slots.packed)
    kernel = [*out, *projection, *outcome, row]
    python = batch.packed_views(slots.packed)
    assert len(kernel) == len(python) == slots.packed[-1].shape[0]
    for k, (seen, made) in enumerate(zip(kernel, python, strict=True)):
        where = (made.dtype, made.shape, _address(made))
        assert (seen.dtype, seen.shape, _address(seen)) == where, k
    assert [f.shape for f in slots.out] == [f.shape for f in batch.slot_buffers(3, ix, 16)]
    assert slots.out.start.min() == -1  # the contents are packed too


def test_slot_arrays__a_copy_views_its_own_buffers():
    import copy
    import pickle

    from mabp_gym.core.kernels import batch

    slots = batch.slot_arrays(2, mabp_gym.make_workload("mixed").index, 8)
    slots.out.slot[:] = 5
    for other in (copy.deepcopy(slots), pickle.loads(pickle.dumps(slots))):
        assert other.out.slot.tolist() == [5, 5]
        other.out.slot[:] = 9
        assert slots.out.slot.tolist() == [5, 5]
        assert batch.packed_views(other.packed)[21].tolist() == [9, 9]


def test_pack_arrays__refuses_what_it_cannot_hold_naming_it():
    from mabp_gym.core.kernels import batch

    with pytest.raises(TypeError, match=r"array 1 is uint16, 1-D: a pack holds arrays of"):
        batch.pack_arrays((np.zeros(2), np.zeros(2, dtype=np.uint16)))
    with pytest.raises(TypeError, match=r"array 0 is float64, 4-D: .* at most 3 dimensions"):
        batch.pack_arrays((np.zeros((1, 1, 1, 1)),))


def test_more_rows__keeps_what_was_served_and_doubles_the_rows():
    from mabp_gym.core.kernels import batch

    ix = mabp_gym.make_workload("mixed").index
    slots = batch.slot_arrays(2, ix, 4)
    slots.out.done[1, 3] = (7, 8, 9)
    bigger = batch.more_rows(slots, ix)
    assert bigger.out.done.shape == (2, 8, 3) and bigger.out.uniforms.shape == (2, 8)
    assert bigger.out.done[1, 3].tolist() == [7, 8, 9] and not bigger.out.done[:, 4:].any()


@pytest.mark.parametrize("vectorized", [False, True])
def test_env__a_reward_that_overflows_is_refused_with_the_scale_named(vectorized):
    # reward_scale=1e-308 made every reward -inf, silently (the vector env only warned).
    kwargs = {"workload": "mixed", "load": 0.85, "reward_scale": 1e-308}
    if vectorized:
        env = SFMSNVectorEnv(2, **kwargs)
        action = np.ones((2, env.single_action_space.shape[0]), np.float32)
    else:
        env = gym.make("mabp_gym/SFMSN-v0", **kwargs)
        action = np.ones(env.action_space.shape, np.float32)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"reward overflowed .* reward_scale=1e-308"):
        for _ in range(50):
            env.step(action)


@pytest.mark.parametrize("n", [*range(18), 63, 127, 128, 129, 136, 255, 257, 1000, 1031, 70_001])
def test_numpy_sum__the_float_numpy_sums_to_for_any_length(n):
    # The batched reward's memory held is summed in the kernel: in numpy's pairwise order,
    # or its last bits differed from the single env's past 8 nodes (fractional sizes).
    from mabp_gym.core.kernels import batch, rules

    rng = np.random.default_rng(n)
    values = rng.standard_normal(n) * 10 ** rng.uniform(-4, 4, n)
    assert 0.0 + rules.numpy_sum(values, *batch.sum_scratch()) == values.sum()
    one_by_one = 0.0
    for value in values.tolist():
        one_by_one += value
    if n == 1000:
        assert one_by_one != values.sum()  # else this test could not tell the orders apart


def test_batched__every_observation_returned_stays_as_it_was_returned():
    # copy=True: no later step, autoreset, reset of some envs or refused batch writes into
    # an observation returned; a refused batch leaves the env stepping as a twin that never
    # got it. The common step (every env steps, none resets) has the kernel write the
    # dynamic arrays into new ones and returns those: the next one that writes into the
    # env's own arrays (a reset, a step with resets, ``copy=False``) takes copies first.
    import copy

    vec = SFMSNVectorEnv(3, workload="mixed", load=0.9, horizon=4)
    twin = SFMSNVectorEnv(3, workload="mixed", load=0.9, horizon=4)
    got = [vec.reset(seed=1)[0]]
    twin.reset(seed=1)
    kept = [copy.deepcopy(got[0])]
    rng = np.random.default_rng(0)
    for step in range(11):  # autoresets at the horizon, 4
        actions = rng.uniform(-1, 1, vec.action_space.shape)
        if step == 6:
            bad = actions.copy()
            bad[2, 0] = np.nan
            with pytest.raises(ValueError, match=r"env\(s\) \[2\]"):
                vec.step(bad)
            mask = np.array([False, True, False])  # the others' rows: as the last step left
            obs, twin_obs = (env.reset(options={"reset_mask": mask})[0] for env in (vec, twin))
            assert all(np.array_equal(obs[key], value) for key, value in twin_obs.items())
        obs = vec.step(actions)[0]
        assert all(np.array_equal(obs[key], value) for key, value in twin.step(actions)[0].items())
        got.append(obs)
        kept.append(copy.deepcopy(obs))
        if step == 8:
            mask = np.array([True, False, True])
            got.append(vec.reset(options={"reset_mask": mask})[0])
            kept.append(copy.deepcopy(got[-1]))
            twin.reset(options={"reset_mask": mask})
    vec.copy = False  # its own arrays from now on: not the ones it returned
    for _ in range(2):
        actions = rng.uniform(-1, 1, vec.action_space.shape)
        own = vec.step(actions)[0]
        assert all(np.array_equal(own[key], value) for key, value in twin.step(actions)[0].items())
    for where, (obs, copied) in enumerate(zip(got, kept, strict=True)):
        for key, value in obs.items():
            assert np.array_equal(value, copied[key]), (where, key)
    arrays = {id(value) for obs in got for value in obs.values()}
    assert len(arrays) == len(got) * len(got[0])  # no array returned twice


@compiled_only
@pytest.mark.parametrize("workers", [1, 2])
def test_batched__writes_into_an_observation_returned_reach_no_later_one(workers):
    # The common step lends the arrays it returns (over 2 processes, this process's block
    # its rows of them): the next reset or step with resets observes every env again into
    # arrays of its own, rather than copying the lent ones (which would carry the caller's
    # writes into the rows a partial reset keeps).
    kwargs = {"workload": "mixed", "load": 0.9, "horizon": 4}
    vec = SFMSNVectorEnv(3, **kwargs) if workers == 1 else SFMSNWorkerVectorEnv(3, **kwargs)
    twin = SFMSNVectorEnv(3, **kwargs)
    obs, twin_obs = vec.reset(seed=1)[0], twin.reset(seed=1)[0]
    rng = np.random.default_rng(0)
    for step in range(12):  # autoresets at the horizon, 4
        for value in obs.values():
            value[...] = 7
        if step in (2, 5, 9):
            mask = np.array([step == 2, True, step == 9])
            obs, twin_obs = (env.reset(options={"reset_mask": mask})[0] for env in (vec, twin))
        else:
            actions = rng.uniform(-1, 1, vec.action_space.shape).astype(np.float32)
            obs, twin_obs = (env.step(actions)[0] for env in (vec, twin))
        for key, value in twin_obs.items():
            assert np.array_equal(obs[key], value), (step, key)
    vec.close()
