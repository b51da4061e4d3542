"""Where the batched env's compiled step spends its time: ``perf`` over numba's kernels.

numba's compiled code has no symbols that ``perf`` can read, so a profile shows only
anonymous addresses. This script compiles the kernels in this process (a fresh numba
cache: code loaded from the disk cache keeps no function list), steps
``mabp_gym/Mixed-v0`` (or ``--workload``) in the batched env, and records only the timed
steps with ``perf record -p``. It then writes ``/tmp/perf-PID.map``, the addresses numba
gives every compiled function, which ``perf report`` reads. Parts inlined into a kernel
(``jit.part``) count in that kernel.

Prints the microseconds an env-slot, the allocations an env-slot (numba's statistics),
the top symbols by share of the samples, and a JSON line.

    python benchmarks/profile_kernels.py --envs 16 --steps 2000
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time


def _function_sizes(elf: bytes) -> dict[str, int]:
    """Each function symbol's size in an ELF64 object file (its symbol table)."""
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    sizes = {}
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        names = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name, info, _, _, _, length = struct.unpack_from("<IBBHQQ", elf, at)
            if info & 0xF == 2:  # STT_FUNC
                text = elf[names + name : elf.index(b"\0", names + name)].decode()
                sizes[text] = length
    return sizes


def _perf_map(path: str) -> int:
    """Write every compiled function's address and size, as numba placed it, to ``path``:
    the addresses from numba, the sizes from the symbol table of the object code numba
    keeps where it caches a kernel. A function without one is left out, so its samples
    print as addresses rather than under another function's name."""
    import gc

    from numba.core.registry import CPUDispatcher

    ranges, seen = {}, set()
    for obj in gc.get_objects():
        if not isinstance(obj, CPUDispatcher):
            continue
        for compiled in obj.overloads.values():
            library = compiled.library
            elf = getattr(library, "_compiled_object", None)
            if id(library) in seen or not elf:
                continue
            seen.add(id(library))
            for name, size in _function_sizes(elf).items():
                try:
                    address = library.get_pointer_to_function(name)
                except Exception:  # noqa: BLE001  (a symbol the engine did not keep)
                    continue
                if address and size:
                    ranges[address] = (size, name)
    with open(path, "w", encoding="utf-8") as out:
        for address in sorted(ranges):
            size, name = ranges[address]
            out.write(f"{address:x} {size:x} {name}\n")
    return len(ranges)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="mixed")
    parser.add_argument("--load", type=float, default=0.85)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2000, help="timed (profiled) steps")
    parser.add_argument("--top", type=int, default=25, help="symbols to print")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    if args.envs < 1 or args.steps < 1:
        parser.error(f"--envs and --steps must be at least 1, got {args.envs} and {args.steps}")
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed here: the profile needs Linux's perf tool")
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="profile-kernels-")
    os.environ["NUMBA_NRT_STATS"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    from _report import emit
    from numba.core.runtime import rtsys

    from mabp_gym.envs.vector_env import SFMSNVectorEnv

    envs = SFMSNVectorEnv(args.envs, workload=args.workload, load=args.load)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (64, args.envs, *envs.single_action_space.shape))
    for k in range(200):  # compilation and warm-up, not recorded
        envs.step(actions[k % 64])
    data = os.path.join(tempfile.gettempdir(), f"profile-kernels-{os.getpid()}.data")
    perf = subprocess.Popen(
        ["perf", "record", "-q", "-o", data, "-p", str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(0.5)  # perf attaches
    before, started = rtsys.get_allocation_stats().alloc, time.process_time()
    for k in range(args.steps):
        envs.step(actions[k % 64])
    spent = time.process_time() - started
    allocations = (rtsys.get_allocation_stats().alloc - before) / (args.steps * args.envs)
    perf.send_signal(signal.SIGINT)
    _, error = perf.communicate(timeout=60)
    if perf.returncode not in (0, -signal.SIGINT):
        raise SystemExit(f"perf record failed: {error.decode()[-2000:]}")
    mapped = _perf_map(f"/tmp/perf-{os.getpid()}.map")
    report = subprocess.run(
        ["perf", "report", "-i", data, "--no-children", "--sort", "sym", "--stdio", "-q"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in report.splitlines():
        share, _, symbol = line.strip().partition("%")
        if share and symbol:
            rows.append((float(share), symbol.split("]", 1)[-1].strip()))
    us = 1e6 * spent / (args.steps * args.envs)
    print(
        f"{args.workload} at {args.load}, {args.envs} envs: {us:.1f} us CPU an env-slot, "
        f"{allocations:.1f} allocations an env-slot, {mapped} compiled functions mapped"
    )
    print(f"{'share':>7}  symbol (perf data: {data})")
    for share, symbol in rows[: args.top]:
        print(f"{share:6.2f}%  {symbol[:110]}")
    emit(
        {
            "benchmark": "profile_kernels",
            "workload": args.workload,
            "load": args.load,
            "envs": args.envs,
            "steps": args.steps,
            "us_per_env_slot": us,
            "allocations_per_env_slot": allocations,
            "top": [{"share": share, "symbol": symbol} for share, symbol in rows[: args.top]],
        },
        args.json,
    )


if __name__ == "__main__":
    main()
