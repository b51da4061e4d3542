"""Request traces for fleet mode: Mooncake JSON lines, load scaling and synthetic generators.

A trace is a frozen list of requests in arrival order, each with the four Mooncake fields:
``timestamp`` (ms from the start), ``input_length`` and ``output_length`` (tokens) and
``hash_ids`` (the prompt's blocks, prefix-ordered; equal ids mean equal block content *and*
equal prefix, so a shared prefix shows as shared leading ids). Other public traces map onto
these fields (see ``docs/fleet.md``): Azure LLM inference (``TIMESTAMP``, ``ContextTokens``,
``GeneratedTokens``; no hashes, so no reuse), BurstGPT (``Timestamp`` s, ``Request tokens``,
``Response tokens``), Alibaba Bailian (Mooncake-like block hashes).
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mabp_gym.core.validate import is_real

BLOCK_TOKENS = 512
"""Tokens per hashed block in the Mooncake traces (and in the synthetic generators)."""

MAX_TIMESTAMP_MS = 1e10
"""The latest arrival a trace line may state: 10^10 ms, about 116 days."""
MAX_INPUT_TOKENS = 2**21
"""The longest prompt a trace line may state (2,097,152 tokens)."""
MAX_OUTPUT_TOKENS = 2**18
"""The longest generation a trace line may state (262,144 tokens)."""

SHIPPED_TRACES = ("conversation", "synthetic")
"""Names of the two Mooncake FAST'25 traces shipped with the package (Apache-2.0)."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace."""

    timestamp: float  # ms from the start of the trace
    input_length: int  # prompt tokens
    output_length: int  # generated tokens
    hash_ids: tuple[int, ...]  # prompt block hashes, prefix-ordered


@dataclass(frozen=True)
class Trace:
    """A validated request trace in arrival order.

    Attributes:
        name: where it came from (file name or generator).
        requests: the requests, timestamps non-decreasing (checked: a trace out of order
            would run the simulator's clock backwards).
        block_tokens: the tokens a hashed block holds (the readers and generators: 512,
            :data:`BLOCK_TOKENS`); ``None`` for a trace built by hand that leaves it to the
            fleet's ``FleetConfig.block_tokens``. A simulator refuses a trace whose block
            size is not its own: every cache hit would be miscounted.
    """

    name: str
    requests: tuple[TraceRequest, ...]
    block_tokens: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.requests, tuple) or not all(
            isinstance(r, TraceRequest) for r in self.requests
        ):
            raise ValueError("Trace.requests must be a tuple of TraceRequest")
        size = self.block_tokens
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"Trace.block_tokens must be a positive integer or None, got {size!r}")
        last = -np.inf
        for k, r in enumerate(self.requests):
            if not r.timestamp >= last:  # NaN too
                raise ValueError(
                    f"Trace.requests[{k}]: timestamp {r.timestamp!r} is earlier than the "
                    f"previous request's {last:g} (or not a number); a trace is in arrival order"
                )
            last = r.timestamp

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival."""
        if not self.requests:
            return 0.0
        return (self.requests[-1].timestamp - self.requests[0].timestamp) / 1000.0

    def timestamps_s(self) -> np.ndarray:
        """Arrival times in seconds.  # (num_requests,) float64"""
        return np.array([r.timestamp for r in self.requests], dtype=np.float64) / 1000.0

    def head(self, count: int) -> Trace:
        """The first ``count`` requests (for quick tests and the env)."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"a trace's head needs a count >= 1 of requests, got {count!r}")
        return replace(self, name=f"{self.name}[:{count}]", requests=self.requests[:count])

    def scaled(self, factor: float) -> Trace:
        """The same requests with every timestamp multiplied by ``factor`` (order kept)."""
        if not (np.isfinite(factor) and factor > 0):
            raise ValueError(f"time scale factor must be a positive finite number, got {factor}")
        return replace(
            self,
            requests=tuple(
                TraceRequest(r.timestamp * factor, r.input_length, r.output_length, r.hash_ids)
                for r in self.requests
            ),
        )

    def spread_bursts(self) -> Trace:
        """The same requests with each run of equal timestamps spread evenly over the gap to
        the next distinct timestamp (order kept; the last run keeps its time).

        A trace whose clock is coarse (the Mooncake conversation trace's timestamps are
        multiples of 3 s: about ten requests share each) otherwise delivers each run as one
        burst at one instant, and a router reading metrics a few milliseconds old sees the
        whole burst as one state. Spread, each request stays within its own clock tick. The
        name gains ``-spread`` (results files key runs by trace name)."""
        times = np.array([r.timestamp for r in self.requests], dtype=np.float64)
        spread = times.copy()
        start = 0
        while start < len(times):
            end = start
            while end + 1 < len(times) and times[end + 1] == times[start]:
                end += 1
            if end > start and end + 1 < len(times):
                step = (times[end + 1] - times[start]) / (end - start + 1)
                spread[start : end + 1] = times[start] + step * np.arange(end - start + 1)
            start = end + 1
        return replace(
            self,
            name=f"{self.name}-spread",
            requests=tuple(
                TraceRequest(float(t), r.input_length, r.output_length, r.hash_ids)
                for t, r in zip(spread, self.requests, strict=True)
            ),
        )


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number a trace may hold")


def _parse_line(text: str, where: str) -> TraceRequest:
    try:
        record = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error.msg})") from None
    except ValueError as error:  # Infinity, -Infinity, NaN
        raise ValueError(f"{where}: {error}") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply for a trace line") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [
        k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in record
    ]
    if missing:
        raise ValueError(
            f"{where}: missing field(s) {missing}; a Mooncake line has timestamp, "
            "input_length, output_length and hash_ids"
        )
    stamp = record["timestamp"]
    if (
        isinstance(stamp, bool)
        or not isinstance(stamp, (int, float))
        or not 0 <= stamp <= MAX_TIMESTAMP_MS
    ):
        raise ValueError(
            f"{where}: timestamp must be a number of ms in [0, {MAX_TIMESTAMP_MS:.0e}], "
            f"got {stamp!r}"
        )
    lengths = []
    for key, limit in (("input_length", MAX_INPUT_TOKENS), ("output_length", MAX_OUTPUT_TOKENS)):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise ValueError(
                f"{where}: {key} must be an integer number of tokens in [1, {limit:,}], "
                f"got {value!r}"
            )
        lengths.append(value)
    ids = record["hash_ids"]
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
    ):
        raise ValueError(f"{where}: hash_ids must be a non-empty list of integers")
    if min(ids) < 0:
        raise ValueError(
            f"{where}: hash_ids must be >= 0 (negative ids are the simulator's own), got {min(ids)}"
        )
    if len(set(ids)) < len(ids):
        repeat = next(i for k, i in enumerate(ids) if i in ids[:k])
        raise ValueError(
            f"{where}: hash_ids repeat a block id within the request ({repeat}); "
            "a prompt's blocks are prefix-chained, so each id appears once (a repeat read as a "
            "hit on the request's own block)"
        )
    blocks = -(-lengths[0] // BLOCK_TOKENS)
    if len(ids) > blocks:
        raise ValueError(
            f"{where}: {len(ids)} hash_ids for {lengths[0]} input tokens; a block holds "
            f"{BLOCK_TOKENS} tokens, so at most {blocks}"
        )
    return TraceRequest(float(stamp), lengths[0], lengths[1], tuple(ids))


def parse_mooncake(lines: Iterable[str], name: str = "trace", limit: int | None = None) -> Trace:
    """Parse Mooncake JSON lines; blank lines are skipped. ``limit``: stop after that many
    requests (the rest of the file is not read).

    Raises:
        ValueError: naming the line (1-based) that is malformed or out of time order.
    """
    requests: list[TraceRequest] = []
    last = -np.inf
    for number, text in enumerate(lines, start=1):
        if limit is not None and len(requests) >= limit:
            break
        if not text.strip():
            continue
        request = _parse_line(text, f"{name} line {number}")
        if request.timestamp < last:
            raise ValueError(
                f"{name} line {number}: timestamp {request.timestamp:g} is earlier "
                f"than the previous line's {last:g}; traces must be in arrival order"
            )
        last = request.timestamp
        requests.append(request)
    if not requests:
        raise ValueError(f"{name}: no requests")
    return Trace(name, tuple(requests), BLOCK_TOKENS)


GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of every gzip stream (RFC 1952)."""


def read_mooncake(path: str | Path, limit: int | None = None) -> Trace:
    """Read a Mooncake JSON-lines trace (``.jsonl`` or ``.jsonl.gz``), streaming: with
    ``limit`` only the first that many requests are read.

    Raises:
        ValueError: the path is missing or not a regular file, the file is not UTF-8 or
            not a sound gzip stream, or a line is malformed (named by number).
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(
            f"trace file {str(path)!r} does not exist (the shipped traces: "
            f"{', '.join(SHIPPED_TRACES)})"
        )
    if not path.is_file():
        raise ValueError(f"trace file {str(path)!r} is not a regular file")
    with path.open("rb") as raw:  # gzip by its magic bytes, whatever the name says
        zipped = raw.read(2) == GZIP_MAGIC or path.suffix.lower() == ".gz"
    opener = gzip.open if zipped else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            return parse_mooncake(handle, path.name, limit)
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path.name}: not UTF-8 text (byte {error.start} of a line: {error.reason})"
        ) from None
    except (EOFError, OSError, zlib.error) as error:
        raise ValueError(
            f"{path.name}: not a readable gzip file ({type(error).__name__}: {error})"
        ) from None


def shipped_trace(name: str) -> Trace:
    """One of the shipped Mooncake FAST'25 traces: ``conversation`` or ``synthetic``."""
    if name not in SHIPPED_TRACES:
        raise ValueError(f"unknown shipped trace {name!r}; choose one of {SHIPPED_TRACES}")
    resource = resources.files("mabp_gym.fleet") / "traces" / f"mooncake_{name}.jsonl.gz"
    with resources.as_file(resource) as path:
        trace = read_mooncake(path)
    return replace(trace, name=name)


def load_trace(spec: str, limit: int | None = None) -> Trace:
    """A shipped trace by name, else a Mooncake file by path (with ``limit``, its first
    that many requests, the rest of a file left unread). A file in the working folder
    named like a shipped trace is refused as ambiguous: ``./NAME`` reads the file."""
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1
    ):
        raise ValueError(f"a trace's request limit must be a whole number >= 1, got {limit!r}")
    if spec in SHIPPED_TRACES:
        if Path(spec).is_file():
            raise ValueError(
                f"trace {spec!r} names a shipped trace and a file here: pass ./{spec} for "
                f"the file, or move the file to use the shipped trace"
            )
        trace = shipped_trace(spec)
        return trace if limit is None else trace.head(limit)
    return read_mooncake(spec, limit)


def trace_from_columns(
    timestamps_ms: Sequence[float],
    input_lengths: Sequence[int],
    output_lengths: Sequence[int],
    hash_ids: Sequence[Sequence[int]] | None = None,
    name: str = "columns",
) -> Trace:
    """A trace from columns of another public trace (see ``docs/fleet.md`` for the mapping).

    Without ``hash_ids`` (Azure LLM inference, BurstGPT) every request gets fresh block ids,
    so no prefix is ever shared: such traces test load balancing, not reuse. Rows are sorted
    by time (stable) and validated as Mooncake lines are; an error names the column and the
    caller's row.
    """
    count = len(timestamps_ms)
    if (
        len(input_lengths) != count
        or len(output_lengths) != count
        or (hash_ids is not None and len(hash_ids) != count)
    ):
        raise ValueError(
            "timestamps, input_lengths, output_lengths (and hash_ids) must have the same length"
        )
    for k in range(count):  # by the caller's row, before sorting; nothing coerced
        _check_column_value(timestamps_ms[k], f"timestamps_ms[{k}]", whole=False)
        _check_column_value(input_lengths[k], f"input_lengths[{k}]", whole=True)
        _check_column_value(output_lengths[k], f"output_lengths[{k}]", whole=True)
        if hash_ids is not None:
            ids = hash_ids[k]
            if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
                raise ValueError(f"hash_ids[{k}]: must be a list of integers, got {ids!r}")
            for i in ids:
                _check_column_value(i, f"hash_ids[{k}]", whole=True)
    order = sorted(range(count), key=lambda k: float(timestamps_ms[k]))
    requests = []
    next_id = 0
    for k in order:
        tokens = int(input_lengths[k])
        if hash_ids is None:
            blocks = max(1, -(-tokens // BLOCK_TOKENS))
            ids = list(range(next_id, next_id + blocks))
            next_id += blocks
        else:
            ids = [int(i) for i in hash_ids[k]]
        line = {
            "timestamp": float(timestamps_ms[k]),
            "input_length": tokens,
            "output_length": int(output_lengths[k]),
            "hash_ids": ids,
        }
        requests.append(_parse_line(json.dumps(line), f"{name} row {k}"))
    if not requests:
        raise ValueError(f"{name}: no requests")
    return Trace(name, tuple(requests), BLOCK_TOKENS)


def _check_column_value(value: Any, where: str, *, whole: bool) -> None:
    """A column's entry is a real number (an integer where ``whole``), never coerced: a
    string, a bool, NaN or 100.9 tokens are refused by column and row."""
    if not is_real(value) or not math.isfinite(value) or (whole and value != int(value)):
        kind = "a whole number" if whole else "a finite number"
        raise ValueError(f"{where}: must be {kind}, got {value!r}")


# -- synthetic generators ----------------------------------------------------------------------
def _arrivals(rng: np.random.Generator, count: int, rate: float, burstiness: float) -> np.ndarray:
    """Arrival times (s): Poisson at ``burstiness`` 1, else gamma inter-arrivals with that
    squared coefficient of variation (bursty above 1), mean ``1 / rate``."""
    if not rate > 0:
        raise ValueError(f"rate must be positive (requests per second), got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness (squared CV of inter-arrivals) must be > 0, got {burstiness}")
    shape = 1.0 / burstiness
    gaps = rng.gamma(shape, 1.0 / (shape * rate), size=count)
    return np.cumsum(gaps) - gaps[0]


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")


def _check_blocks(name: str, value: Any, low: int) -> int:
    """A generator's block count: an integer >= ``low`` (a negative one made negative block
    ids, the simulator's own; numpy's ``low >= high`` was the message of a 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def prefix_tree_trace(
    count: int = 2000,
    *,
    rate: float = 4.0,
    burstiness: float = 1.0,
    branching: Sequence[int] = (4, 8),
    shared_blocks: Sequence[int] = (4, 8),
    tail_blocks: tuple[int, int] = (1, 6),
    output_mean: float = 200.0,
    seed: int = 0,
) -> Trace:
    """Requests whose prompts share prefixes along a tree (system prompt, then documents).

    Level ``k`` of the tree has ``branching[k]`` children per node, each adding
    ``shared_blocks[k]`` blocks; a request picks a leaf (Zipf-like, skew 1.1) and adds
    ``tail_blocks`` unique blocks. Proves: prefix-aware routing raises the hit ratio over
    load-only routing; the ideal hit ratio is the shared fraction of the blocks.
    """
    _check_count(count)
    if len(branching) != len(shared_blocks) or not branching:
        raise ValueError("branching and shared_blocks must be non-empty and of equal length")
    for k, (base, shared) in enumerate(zip(branching, shared_blocks, strict=True)):
        _check_blocks(f"branching[{k}]", base, 1)
        _check_blocks(f"shared_blocks[{k}]", shared, 0)
    if len(tail_blocks) != 2:
        raise ValueError(f"tail_blocks must be (low, high), got {tail_blocks!r}")
    low = _check_blocks("tail_blocks[0]", tail_blocks[0], 0)
    _check_blocks("tail_blocks[1]", tail_blocks[1], low)
    if sum(shared_blocks) + low < 1:  # a prompt of no block had -508 tokens
        raise ValueError(
            "shared_blocks and tail_blocks give a prompt of no block; every request needs at "
            "least one (sum(shared_blocks) + tail_blocks[0] >= 1)"
        )
    rng = np.random.default_rng(seed)
    times = _arrivals(rng, count, rate, burstiness)
    leaves = int(np.prod(branching))
    weights = 1.0 / np.arange(1, leaves + 1) ** 1.1
    leaf_of = rng.choice(leaves, size=count, p=weights / weights.sum())
    next_id = 0
    node_ids: dict[tuple[int, ...], list[int]] = {}

    def path_ids(leaf: int) -> list[int]:
        nonlocal next_id
        ids: list[int] = []
        digits = []
        for base in reversed(branching):
            digits.append(leaf % base)
            leaf //= base
        digits.reverse()
        for level in range(len(digits)):
            key = tuple(digits[: level + 1])
            if key not in node_ids:
                node_ids[key] = list(range(next_id, next_id + shared_blocks[level]))
                next_id += shared_blocks[level]
            ids.extend(node_ids[key])
        return ids

    requests = []
    for k in range(count):
        ids = path_ids(int(leaf_of[k]))
        tail = int(rng.integers(tail_blocks[0], tail_blocks[1] + 1))
        ids = ids + list(range(next_id, next_id + tail))
        next_id += tail
        length = (len(ids) - 1) * BLOCK_TOKENS + int(rng.integers(1, BLOCK_TOKENS + 1))
        output = max(1, int(rng.exponential(output_mean)))
        requests.append(TraceRequest(float(times[k] * 1000.0), length, output, tuple(ids)))
    return Trace(f"prefix_tree(seed={seed})", tuple(requests), BLOCK_TOKENS)


def agentic_session_trace(
    count: int = 2000,
    *,
    rate: float = 4.0,
    burstiness: float = 2.0,
    sessions: int = 200,
    system_blocks: int = 2,
    turn_blocks: int = 2,
    output_mean: float = 150.0,
    seed: int = 0,
) -> Trace:
    """Multi-turn agentic sessions: each turn's prompt is the previous turn's prompt plus new
    blocks (tool results, the user's next message), as in the Mooncake conversation trace.

    Session ``s`` starts with a shared system prompt of ``system_blocks`` blocks; turns of a
    session arrive in order. Proves: session affinity matters, and the downstream tool state
    (keyed by the session's first own block) is reused when turns stay on one worker.
    """
    _check_count(count)
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}")
    system_blocks = _check_blocks("system_blocks", system_blocks, 0)
    turn_blocks = _check_blocks("turn_blocks", turn_blocks, 1)
    rng = np.random.default_rng(seed)
    times = _arrivals(rng, count, rate, burstiness)
    owner = rng.integers(0, sessions, size=count)
    next_id = system_blocks
    history: dict[int, list[int]] = {}
    requests = []
    for k in range(count):
        s = int(owner[k])
        ids = history.get(s, list(range(system_blocks)))
        new = int(rng.integers(1, 2 * turn_blocks + 1))
        ids = ids + list(range(next_id, next_id + new))
        next_id += new
        history[s] = ids
        length = (len(ids) - 1) * BLOCK_TOKENS + int(rng.integers(1, BLOCK_TOKENS + 1))
        output = max(1, int(rng.exponential(output_mean)))
        requests.append(TraceRequest(float(times[k] * 1000.0), length, output, tuple(ids)))
    return Trace(f"agentic_sessions(seed={seed})", tuple(requests), BLOCK_TOKENS)


def write_mooncake(trace: Trace, path: str | Path) -> None:
    """Write a trace as Mooncake JSON lines (gzip when the name ends in ``.gz``).

    Raises:
        ValueError: a trace the reader would refuse or misread: hashed in blocks of other
            than 512 tokens (the format has no field for it), or a request without blocks
            or with negative (the simulator's own) block ids; nothing is written then.
    """
    if trace.block_tokens not in (None, BLOCK_TOKENS):
        raise ValueError(
            f"write_mooncake: the trace is hashed in {trace.block_tokens}-token blocks; the "
            f"Mooncake format has no block size and is read as {BLOCK_TOKENS}"
        )
    for k, r in enumerate(trace.requests):
        if not r.hash_ids or min(r.hash_ids) < 0:
            raise ValueError(
                f"write_mooncake: requests[{k}] has {'no' if not r.hash_ids else 'a negative'} "
                "block id; the reader takes a non-empty list of ids >= 0"
            )
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as handle:
        for r in trace.requests:
            stamp = int(r.timestamp) if float(r.timestamp).is_integer() else r.timestamp
            handle.write(
                json.dumps(
                    {
                        "timestamp": stamp,
                        "input_length": r.input_length,
                        "output_length": r.output_length,
                        "hash_ids": list(r.hash_ids),
                    }
                )
                + "\n"
            )
