"""numba's disk cache of the kernels: emptied when a kernel source changes, whatever file
the change is in (numba itself checks a kernel against its own file only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mabp_gym.core.kernels import jit


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    kernels, folder = tmp_path / "kernels", tmp_path / "agents"
    for path in (kernels, folder, folder / "__pycache__"):
        path.mkdir()
    (kernels / "rules.py").write_text("def rule(): return 1\n")
    (folder / "policy.py").write_text("from mabp_gym.core.kernels import jit\n")
    (folder / "plain.py").write_text("x = 1\n")
    return kernels, folder, folder / "__pycache__"


def _fill(cache: Path) -> None:
    for name in ("policy.step-12.py311.nbi", "policy.step-12.py311.1.nbc"):
        (cache / name).write_text("compiled")


def _cached(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.suffix in (".nbi", ".nbc"))


def test_drop_stale_cache__empties_the_cache_when_a_kernel_source_changes(tmp_path):
    kernels, folder, cache = _tree(tmp_path)
    _fill(cache)
    assert jit.drop_stale_cache(cache, folder, kernels)  # no digest yet: dropped once
    assert _cached(cache) == []
    _fill(cache)
    assert not jit.drop_stale_cache(cache, folder, kernels)  # nothing changed: kept
    assert len(_cached(cache)) == 2
    (folder / "plain.py").write_text("x = 2\n")  # a file that uses no kernel
    assert not jit.drop_stale_cache(cache, folder, kernels)
    assert len(_cached(cache)) == 2
    # A kernel it calls, in another folder: numba would have run the old code.
    (kernels / "rules.py").write_text("def rule(): return 2\n")
    assert jit.drop_stale_cache(cache, folder, kernels)
    assert _cached(cache) == []
    _fill(cache)
    (folder / "policy.py").write_text("from mabp_gym.core.kernels import jit  # edited\n")
    assert jit.drop_stale_cache(cache, folder, kernels)
    assert _cached(cache) == []
    assert (cache / "mabp_gym-kernels.digest").exists()
    assert not [p for p in cache.iterdir() if ".digest." in p.name]  # no temporary left


def test_drop_stale_cache__makes_the_cache_folder_where_there_is_none(tmp_path):
    kernels, folder, cache = _tree(tmp_path)
    cache.rmdir()
    cache = tmp_path / "user" / "cache"  # NUMBA_CACHE_DIR's or the user's, not yet made
    assert jit.drop_stale_cache(cache, folder, kernels)
    assert not jit.drop_stale_cache(cache, folder, kernels)


def test_kernels__check_the_folder_numba_caches_them_in(tmp_path, monkeypatch):
    if not jit.COMPILED:
        pytest.skip("numba is not there (or MABP_GYM_PURE=1): nothing is compiled or cached")
    checked = []
    monkeypatch.setattr(jit, "_CHECKED", set())
    monkeypatch.setattr(jit, "drop_stale_cache", lambda cache, folder: checked.append(cache))

    def twice(x):  # pragma: no cover - compiled
        return 2 * x

    jit.kernel(twice)
    assert checked and checked[0] == Path(twice.__code__.co_filename).parent / "__pycache__"


def test_warmup__numpy_for_the_first_calls_then_the_kernel_or_at_once_from_the_disk_cache(
    monkeypatch,
):
    asked = []
    monkeypatch.setattr(jit, "is_cached", lambda kernel: asked.append(kernel) or False)
    fresh = jit.Warmup("kernel")
    assert [fresh.due(3) for _ in range(5)] == [False, False, False, True, True]
    assert fresh.calls == 3 and asked == ["kernel"]  # the disk asked once a process
    assert jit.Warmup("kernel").due(0)  # compile_after = 0: the kernel from the first call
    monkeypatch.setattr(jit, "is_cached", lambda kernel: True)
    cached = jit.Warmup("kernel")
    assert cached.due(10**9) and cached.calls == 0


def test_entry_point__the_compiled_version_for_the_arguments_types_called_straight():
    def total(values, pair):
        return values.sum() + pair[0][0] * pair[1]

    args = (np.arange(3.0), (np.ones(2), 2))
    assert jit.entry_point(total, args) is total  # plain Python: itself
    if not jit.COMPILED:
        return
    from numba import njit

    kernel = njit(total)
    assert jit.entry_point(kernel, args) is kernel  # nothing compiled yet: the dispatcher
    assert kernel(*args) == 5.0
    fast = jit.entry_point(kernel, args)
    assert fast is not kernel
    assert fast(np.arange(4.0), (np.full(1, 2.0), 3)) == 12.0  # other sizes, the same types
    assert jit.entry_point(kernel, (np.arange(3), args[1])) is kernel  # int64: none compiled


def test_typed__calls_the_entry_point_once_typed_and_pickles_by_name():
    import pickle

    from mabp_gym.agents.mabp_core import mabp_fill

    typed = jit.Typed(jit.entry_point)  # any module-level callable: the plain path
    assert typed.call((len, ())) is len and typed.entry is jit.entry_point  # plain: itself
    copied = pickle.loads(pickle.dumps(typed))
    assert copied.kernel is jit.entry_point and copied.entry is None
    kernel = jit.Typed(mabp_fill)
    assert pickle.loads(pickle.dumps(kernel)).kernel is mabp_fill
    if not jit.COMPILED:
        return
    from numba import njit

    fast = jit.Typed(njit(lambda values: values.sum()))
    assert fast.call((np.arange(3.0),), plain=False) == 3.0 and fast.entry is None
    assert fast.call((np.arange(3.0),)) == 3.0 and fast.entry is not fast.kernel
    assert fast.call((np.arange(5.0),)) == 10.0
