"""How the kernels run: compiled by numba, or as the plain Python they are written in.

Every rule of a slot is written once, as a kernel function in this package. Where numba is
importable and ``MABP_GYM_PURE`` is unset, :func:`kernel` compiles it on first use (cached
on disk); otherwise it returns the function itself, which runs the same loops as plain
Python: slower, and giving the same controls, states, draws and records
(``tests/test_slot_golden.py`` holds both runs to one set of golden digests).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable)

try:
    if os.environ.get("MABP_GYM_PURE", "") not in ("", "0"):
        raise ImportError("MABP_GYM_PURE is set")
    from numba import njit
except ImportError:  # pragma: no cover - exercised on machines without numba
    njit = None  # type: ignore[assignment]

COMPILED = njit is not None
"""Whether the kernels are compiled (numba importable and ``MABP_GYM_PURE`` unset)."""


_OWN = "_ZN8mabp_gym"
"""How numba's mangled name of every function compiled from this package begins: the
functions :func:`_index_as_given` applies to."""


def _index_as_given() -> None:
    """Index arrays in this package's kernels as given, without Python's wrap of a
    negative index. numba's integer indexing (``numba.np.arrayobj.fix_integer_index``)
    adds the axis' length to every signed index below zero: a shift, an and and an add on
    each read through an index held in another array, and a register for each array's
    length, which the kernels do thousands of times a slot (the batched step's kernel
    took 1.2x the time with it: ``benchmarks/RESULTS.md``). No kernel indexes with a
    negative number: CI runs their tests with numba's bounds checks, which fail on one
    here. Every other function numba compiles, numba's own and the user's, keeps the
    wrap: the choice is made on the name of the function being compiled."""
    import inspect

    from numba.core import types
    from numba.np import arrayobj

    wraps = getattr(arrayobj, "fix_integer_index", None)
    if wraps is None or getattr(wraps, "index_as_given", False):
        return  # a numba without it indexes as before: slower, the same results
    if list(inspect.signature(wraps).parameters) != ["context", "builder", "idxty", "idx", "size"]:
        return

    def fix_integer_index(context: Any, builder: Any, idxty: Any, idx: Any, size: Any) -> Any:
        if idxty.signed and builder.function.name.startswith(_OWN):
            return context.cast(builder, idx, idxty, types.intp)
        return wraps(context, builder, idxty, idx, size)

    fix_integer_index.index_as_given = True  # type: ignore[attr-defined]
    arrayobj.fix_integer_index = fix_integer_index


if COMPILED:
    _index_as_given()


_KERNELS = Path(__file__).resolve().parent
_DIGEST = "mabp_gym-kernels.digest"
_CHECKED: set[Path] = set()


def kernel(function: F) -> F:
    """``function`` compiled by numba (cached on disk) where :data:`COMPILED`, else itself."""
    if njit is None:
        return function
    return _fresh(njit(cache=True)(function), function)


def part(function: F) -> F:
    """A piece of a kernel, inlined into the kernels that call it where :data:`COMPILED`
    (the eight pieces on the env's path cost 0.45 s of a cold start inlined, 1.6 s compiled
    on their own, even without their Python wrappers: ``benchmarks/RESULTS.md``), itself
    otherwise."""
    if njit is None:
        return function
    return _fresh(njit(cache=True, inline="always")(function), function)


_NO_RUNTIME: dict[str, Any] = {"_nrt": False}  # numba's option, not in its typed signature


def leaf(function: F) -> F:
    """``function`` compiled by numba without reference counting (cached on disk) where
    :data:`COMPILED`, else itself. For a function that allocates nothing: numba compiles
    it and what it calls without the runtime, and refuses an allocation or a returned
    array that is not an argument there. Every view and argument of a compiled function
    costs an atomic increment and decrement; here the caller's references keep the arrays
    alive. (The FIFO's ``_take`` and ``_push``, called once per run a slot touches, took
    two thirds of the batched env's reference counts: ``benchmarks/RESULTS.md``.)

    Never hand a leaf a numpy ``Generator`` from Python: numba takes a reference to it
    that only a kernel with the runtime gives back (call the leaf through a
    :func:`kernel`)."""
    if njit is None:
        return function
    return _fresh(njit(cache=True, **_NO_RUNTIME)(function), function)


def entry_point(kernel: Any, args: tuple[Any, ...]) -> Callable[..., Any]:
    """What numba's dispatcher calls for ``args`` once it has typed them: the compiled
    ``kernel``'s version for their types, called straight, or ``kernel`` itself where it
    is plain Python or has no version for those types yet (call it once first).

    The dispatcher types every argument of every call: a batched step's 76 arrays, its
    tuples and its typed list took 7 us of it (``benchmarks/RESULTS.md``). Call the entry
    point only with arguments of the types of ``args`` (a caller's own buffers, whatever
    their sizes): numba's unboxing does not check an array's dtype or layout.
    """
    overloads = getattr(kernel, "overloads", None)
    if not overloads:
        return kernel
    types = tuple(kernel.typeof_pyval(arg) for arg in args)
    compiled = overloads.get(types)
    return kernel if compiled is None else compiled.entry_point


class Typed:
    """A kernel called through its :func:`entry_point` once numba has typed a call's
    arguments. One per call site whose arguments keep their types (the caller's own
    buffers); a call whose arguments may come in other types (an array of the user's, of
    any layout) passes ``plain=False`` and goes through numba's dispatcher."""

    __slots__ = ("entry", "kernel")

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.entry: Callable[..., Any] | None = None

    def call(self, args: tuple[Any, ...], plain: bool = True) -> Any:
        """``kernel(*args)``."""
        if plain and self.entry is not None:
            return self.entry(*args)
        result = self.kernel(*args)
        if plain:
            self.entry = entry_point(self.kernel, args)
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) as the kernel's module and name: the compiled entry
        point does not pickle, and the copy types its arguments again."""
        function = getattr(self.kernel, "py_func", self.kernel)
        return (_typed, (function.__module__, function.__qualname__))


def _typed(module: str, name: str) -> Typed:
    """A :class:`Typed` of the kernel ``name`` of ``module`` (unpickling one)."""
    return Typed(getattr(importlib.import_module(module), name))


def _fresh(dispatcher: Any, function: Callable) -> Any:
    """``dispatcher``, after :func:`drop_stale_cache` of the folder numba caches it in
    (beside the sources, ``NUMBA_CACHE_DIR`` or the user's cache), once a process."""
    cache = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
    if isinstance(cache, str) and Path(cache) not in _CHECKED:
        _CHECKED.add(Path(cache))
        drop_stale_cache(Path(cache), Path(function.__code__.co_filename).resolve().parent)
    return dispatcher


def drop_stale_cache(cache: Path, folder: Path, kernels: Path = _KERNELS) -> bool:
    """Empty numba's ``cache`` folder (of kernels defined in ``folder``) when a kernel
    source changed since it was filled; returns whether it did.

    numba checks a cached kernel against its own file only, but a kernel carries the
    compiled code of what it calls or inlines from other files: after an edit there (or
    an upgrade that changed only those), the cache went on running the old code, tests and
    benchmarks with it. The sources are every ``.py`` file of ``kernels`` and those of
    ``folder`` that use them; their digest is kept in the cache. A cache that cannot be
    written to is left alone.
    """
    sources = sorted({*kernels.glob("*.py"), *folder.glob("*.py")})
    digest = hashlib.sha256()
    for source in sources:
        data = source.read_bytes()
        if source.parent == kernels or b"core.kernels" in data:
            digest.update(source.name.encode() + b"\0" + data)
    marker = cache / _DIGEST
    try:
        if marker.read_text() == digest.hexdigest():
            return False
    except OSError:
        pass  # no digest yet: a cache from before it was kept
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for stale in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            stale.unlink(missing_ok=True)
        fresh = cache / f"{_DIGEST}.{os.getpid()}"
        fresh.write_text(digest.hexdigest())
        fresh.replace(marker)  # whole or not at all, as another process may read it
    except OSError:
        return False
    return True


def _no_prefetch(array: Any, offset: int) -> None:
    """Nothing: as plain Python there is no cache to hint."""


def _prefetch_intrinsic() -> Any:
    """``prefetch(array, offset)`` for compiled kernels: a read hint to the cache for the
    line ``offset`` bytes into ``array``'s data (LLVM's ``llvm.prefetch``; it never faults,
    and changes no result)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    byte = ir.IntType(8).as_pointer()
    name = "llvm.prefetch.p0" if str(byte) == "ptr" else "llvm.prefetch.p0i8"  # LLVM's pointers
    i32 = ir.IntType(32)

    @intrinsic
    def prefetch(typingctx: Any, array: Any, offset: Any) -> Any:
        if not isinstance(array, types.Array) or not isinstance(offset, types.Integer):
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            address = builder.gep(builder.bitcast(data, byte), [args[1]])
            hint = ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32])
            function = cgutils.get_or_insert_function(builder.module, hint, name)
            builder.call(function, [address, i32(0), i32(3), i32(1)])  # read, keep, data
            return context.get_dummy_value()

        return types.void(array, types.intp), codegen

    return prefetch


def _view_of(context: Any, builder: Any, whole: Any, kind: Any, data: Any, shape: list) -> Any:
    """Code for a C-contiguous array of type ``kind`` and ``shape`` (LLVM values) at
    ``data``, a view into the array ``whole`` (its memory and owner): the intrinsics'
    one way to make a view. It takes a reference where the runtime is on."""
    from numba.core.imputils import impl_ret_borrowed
    from numba.np.arrayobj import populate_array

    strides: list[Any] = []
    step = whole.itemsize
    for extent in reversed(shape):
        strides.insert(0, step)
        step = builder.mul(step, extent)
    out = context.make_array(kind)(context, builder)
    populate_array(
        out,
        data=data,
        shape=shape,
        strides=strides,
        itemsize=whole.itemsize,
        meminfo=whole.meminfo,
        parent=whole.parent,
    )
    return impl_ret_borrowed(context, builder, kind, out._getvalue())


def _pack_field(pack: Any, k: int) -> Any:
    """Field ``k`` of a pack (the bounds of every field head it), as a view."""
    return pack[int(pack[k]) : int(pack[k + 1])]


def _pack_field_intrinsic() -> Any:
    """``pack_field(pack, k)`` for compiled kernels: the view numba's slicing makes, made
    where it is used. As a function of its own it needed declared signatures (numba types
    the field numbers as literals, and compiled one specialization each, 1.5 s of a cold
    start) and could not serve a kernel without the runtime (:func:`leaf`: no new array
    may come back from a call there); inlined at every use, numba copied its IR about 80
    times (0.9 s of a cold start). The view takes a reference where the runtime is on."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def pack_field(typingctx: Any, pack: Any, k: Any) -> Any:
        if not (
            isinstance(pack, types.Array)
            and pack.ndim == 1
            and pack.layout == "C"
            and pack.dtype in (types.int64, types.float64)
            and isinstance(k, (types.Integer, types.IntEnumMember))
        ):
            return None
        view = types.Array(pack.dtype, 1, "C", readonly=not pack.mutable)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            whole = context.make_array(signature.args[0])(context, builder, args[0])
            intp = context.get_value_type(types.intp)
            at = context.cast(builder, args[1], signature.args[1], types.intp)
            bounds = []
            for place in (at, builder.add(at, ir.Constant(intp, 1))):
                value = builder.load(builder.gep(whole.data, [place]))
                bounds.append(context.cast(builder, value, pack.dtype, types.intp))
            data = builder.gep(whole.data, [bounds[0]])
            length = builder.sub(bounds[1], bounds[0])
            return _view_of(context, builder, whole, view, data, [length])

        return view(pack, k), codegen

    return pack_field


prefetch = _no_prefetch if njit is None else _prefetch_intrinsic()
"""A read hint to the cache in a kernel, ``prefetch(array, byte_offset)``; nothing as
plain Python."""


def _shaped(buffer: Any, start: int, shape: tuple[int, ...]) -> Any:
    """``buffer[start : start + size]`` as an array of ``shape`` (C order), a view."""
    size = 1
    for extent in shape:
        size *= extent
    return buffer[start : start + size].reshape(shape)


def _flat(array: Any) -> Any:
    """A C-contiguous ``array``'s items as one dimension, a view."""
    return array.reshape(array.size)


def _view_intrinsics() -> tuple[Any, Any]:
    """``shaped(buffer, start, shape)`` and ``flat(array)`` for compiled kernels: the
    views numba's ``reshape`` makes, without its call into numba's helper library to
    check the layout (20 ns a view, ``benchmarks/RESULTS.md``): their arrays are
    C-contiguous by type. ``shaped`` trusts ``start`` and ``shape`` to lie within
    ``buffer``: it serves the kernels' own packs
    (:func:`~mabp_gym.core.kernels.batch.pack_arrays`). A view takes a
    reference where the runtime is on."""
    from numba.core import types
    from numba.extending import intrinsic

    def contiguous(array: Any, ndim: int | None = None) -> bool:
        return (
            isinstance(array, types.Array)
            and array.layout == "C"
            and (ndim is None or array.ndim == ndim)
        )

    @intrinsic
    def shaped(typingctx: Any, buffer: Any, start: Any, shape: Any) -> Any:
        if not (
            contiguous(buffer, 1)
            and isinstance(start, types.Integer)
            and isinstance(shape, types.UniTuple)
            and isinstance(shape.dtype, types.Integer)
        ):
            return None
        kind = buffer.copy(ndim=len(shape), layout="C")

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            whole = context.make_array(signature.args[0])(context, builder, args[0])
            at = context.cast(builder, args[1], signature.args[1], types.intp)
            extents = [
                context.cast(builder, builder.extract_value(args[2], k), shape.dtype, types.intp)
                for k in range(len(shape))
            ]
            data = builder.gep(whole.data, [at])
            return _view_of(context, builder, whole, kind, data, extents)

        return kind(buffer, start, shape), codegen

    @intrinsic
    def flat(typingctx: Any, array: Any) -> Any:
        if not contiguous(array):
            return None
        kind = array.copy(ndim=1, layout="C")

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            whole = context.make_array(signature.args[0])(context, builder, args[0])
            return _view_of(context, builder, whole, kind, whole.data, [whole.nitems])

        return kind(array), codegen

    return shaped, flat


def is_cached(function: Any) -> bool:
    """Whether numba's disk cache holds the compiled ``function`` (a :func:`kernel`): its
    index file exists. ``False`` where it cannot tell or nothing compiles."""
    cache = getattr(function, "_cache", None)
    path = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    return isinstance(path, str) and os.path.exists(path)


class Warmup:
    """When a process should start calling a compiled kernel instead of its numpy twin: at
    once where numba's disk cache holds the kernel (loading it takes milliseconds), else
    after ``after`` calls made without it, so that a short run or a test never waits for a
    compilation and a long one pays for it once. One per kernel, shared by every caller in
    the process."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.calls = 0
        """Calls made without the kernel in this process."""
        self.on_disk: bool | None = None
        """Whether the disk cache held the kernel (asked on the first call)."""

    def due(self, after: int) -> bool:
        """Whether this call should run the kernel; counts it when it should not."""
        if self.on_disk is None:
            self.on_disk = is_cached(self.kernel)
        if self.on_disk or self.calls >= after:
            return True
        self.calls += 1
        return False


pack_field = _pack_field if njit is None else _pack_field_intrinsic()
"""Field ``k`` of a pack, ``pack[pack[k] : pack[k + 1]]``, as a view (in a kernel, and as
plain Python: from Python, call the plain function :func:`_pack_field`)."""


shaped, flat = (_shaped, _flat) if njit is None else _view_intrinsics()
"""In a kernel, ``shaped(buffer, start, shape)``: a view of ``buffer`` (1-D) from
``start`` as an array of ``shape``; ``flat(array)``: a C-contiguous array's 1-D view. As
plain Python too (from Python, call :func:`_shaped` and :func:`_flat`)."""
