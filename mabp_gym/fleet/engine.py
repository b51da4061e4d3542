"""The step-level engine of a fleet worker: vLLM-style continuous batching.

Each worker runs one batch at a time. A step is formed at its start, under a token budget
(``max_batched_tokens``) and a sequence limit (``FleetConfig.max_num_seqs``), the way vLLM's
scheduler forms it: the running sequences first, oldest first (one decode token each, or
the next chunk of a prefill still in progress: chunked prefill shares the step with the
decodes), then waiting sequences, first come first served, while budget, sequence slots and
KV memory allow. The step lasts

    ``beta0 + beta_prefill * prefill tokens + beta_decode * decode tokens
    + attention * context tokens the decodes read``

seconds (:class:`StepProfile`). KV memory is ``FleetConfig.cache_blocks`` blocks of
``block_tokens`` tokens, **shared** by the prefix cache and the running sequences: a block
held by a running sequence has a reference count; a block nobody holds stays cached (its
prompt prefix can be hit) until memory is needed, least recently used first. A decode that
needs a new block when none is free preempts the youngest running sequence (recompute: its
blocks are released, its prompt plus the tokens generated so far must be prefilled again,
and it rejoins the waiting queue at the front). A sequence's first token comes out of the
step that completes its prefill; its time per output token is measured from then on, so a
step stretched by a neighbour's prefill chunk counts against every decode in it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GPU:
    """An accelerator's published peak figures."""

    name: str
    peak_flops: float
    """Dense BF16 peak (FLOP/s)."""
    memory_bandwidth: float
    """HBM bandwidth (bytes/s)."""


GPUS: dict[str, GPU] = {
    "A100-80GB": GPU("A100-80GB", 312e12, 2.039e12),
    "H100-SXM": GPU("H100-SXM", 989e12, 3.35e12),
}
MAX_PEAK_FRACTION = 0.75
"""A profile whose prefill coefficient implies more than this share of its GPU's dense peak
(2 FLOPs a parameter a token) is refused: measured prefill rarely passes 60-70%."""


@dataclass(frozen=True)
class StepProfile:
    """Step-time coefficients of one model on one GPU (seconds), with where they come from.

    Refused on construction (``ValueError``) when a coefficient is not positive, the GPU is
    unknown, or the prefill coefficient implies more than :data:`MAX_PEAK_FRACTION` of the
    GPU's peak (:meth:`implied_prefill_flops`)."""

    name: str
    beta0_s: float
    """Fixed time of a step."""
    prefill_s_per_token: float
    """Per uncached prompt token computed in the step."""
    decode_s_per_token: float
    """Per decode token (one per decoding sequence)."""
    attention_s_per_context_token: float
    """Per token of context a decode reads (its KV bytes over the GPU's memory bandwidth)."""
    source: str
    """Where the coefficients come from (a fit, a published file) and how."""
    parameters: float
    """Model parameters (for the FLOPs of a token: 2 a parameter)."""
    gpu: str
    """Key of :data:`GPUS`."""

    def __post_init__(self) -> None:
        for name in ("beta0_s", "prefill_s_per_token", "decode_s_per_token", "parameters"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise ValueError(f"StepProfile {self.name!r}: {name} must be > 0, got {value!r}")
        if not self.attention_s_per_context_token >= 0:
            raise ValueError(
                f"StepProfile {self.name!r}: attention_s_per_context_token must be >= 0, "
                f"got {self.attention_s_per_context_token!r}"
            )
        if self.gpu not in GPUS:
            raise ValueError(
                f"StepProfile {self.name!r}: gpu must be one of {sorted(GPUS)}, got {self.gpu!r}"
            )
        share = self.implied_prefill_flops() / GPUS[self.gpu].peak_flops
        if share > MAX_PEAK_FRACTION:
            raise ValueError(
                f"StepProfile {self.name!r}: prefill at {1e6 * self.prefill_s_per_token:g} us "
                f"a token implies {self.implied_prefill_flops() / 1e12:.0f} TFLOP/s, "
                f"{100 * share:.0f}% of the {self.gpu}'s dense peak; at most "
                f"{100 * MAX_PEAK_FRACTION:.0f}% is plausible"
            )

    def implied_prefill_flops(self) -> float:
        """FLOP/s the prefill coefficient implies: 2 FLOPs a parameter a token."""
        return 2.0 * self.parameters / self.prefill_s_per_token

    def step_s(self, prefill_tokens: int = 0, decodes: int = 0, context: int = 0) -> float:
        """Seconds of a step with these prefill tokens and decodes reading ``context``."""
        return (
            self.beta0_s
            + self.prefill_s_per_token * prefill_tokens
            + self.decode_s_per_token * decodes
            + self.attention_s_per_context_token * context
        )


def fit_step_profile(
    name: str,
    prefill_s: dict[int, float],
    decode_s: dict[int, float],
    decode_context: int,
    *,
    kv_bytes_per_token: int,
    parameters: float,
    gpu: str,
    source: str,
) -> StepProfile:
    """A profile fitted to measured forward times (seconds).

    ``prefill_s``: prompt tokens -> time of a prefill-only forward; ``decode_s``: batch size
    -> time of a decode step whose sequences each read ``decode_context`` tokens. The
    attention term is the roofline (``kv_bytes_per_token`` over the GPU's bandwidth); the
    decode steps fix the step's fixed time and the per-sequence time (least squares); the
    prefill coefficient is the least-squares slope of the prefill times over that fixed
    time. (A joint fit with one fixed time misses both: measured prefill is nearly
    proportional to its tokens, a decode step of one sequence is almost all fixed time.)
    """
    if len(prefill_s) < 1 or len(decode_s) < 2:
        raise ValueError("fit_step_profile needs at least one prefill and two decode times")
    attention = kv_bytes_per_token / GPUS[gpu].memory_bandwidth
    batches = np.array(sorted(decode_s), dtype=np.float64)
    times = np.array([decode_s[int(b)] for b in batches]) - attention * decode_context * batches
    per_seq, beta0 = np.polyfit(batches, times, 1)
    tokens = np.array(sorted(prefill_s), dtype=np.float64)
    over = np.array([prefill_s[int(n)] for n in tokens]) - beta0
    prefill = float(tokens @ over / (tokens @ tokens))
    return StepProfile(
        name,
        round(float(beta0), 9),
        round(prefill, 12),
        round(float(per_seq), 12),
        attention,
        source,
        parameters,
        gpu,
    )


LLAMA3_8B_A100_FORWARD_S = (
    {512: 41.3e-3, 1024: 95.5e-3, 2048: 188.7e-3, 4096: 377.4e-3},
    {1: 10.83e-3, 8: 12.16e-3, 16: 14.15e-3, 32: 17.20e-3, 64: 23.38e-3, 128: 37.48e-3},
    2048,
)
"""Forward times of a published reference simulation of Llama-3-8B on one A100 (TP 1, vLLM):
prefill-only forwards of 512-4,096 tokens, decode steps of batch 1-128 at context 2,048."""

PROFILES: dict[str, StepProfile] = {
    "qwen2.5-7b-a100": StepProfile(
        "qwen2.5-7b-a100",
        10041.674e-6,
        81.121e-6,
        59.986e-6,
        # 28 layers x 4 KV heads x 128 dims x 2 (K, V) x 2 bytes = 57,344 bytes a token,
        # read at the A100-80GB's 2.039 TB/s.
        57_344 / 2.039e12,
        "BLIS (inference-sim) coefficients.yaml, qwen/qwen2.5-7b-instruct, A100-80, TP 1, "
        "vLLM 0.8.4: beta = (10041.67, 81.12, 59.99) us; the attention term is a roofline "
        "estimate from the model's published configuration (BLIS's fit has none)",
        7.62e9,
        "A100-80GB",
    ),
    "llama-3-8b-a100": StepProfile(
        "llama-3-8b-a100",
        10540.416e-6,
        88.42357e-6,
        77.014123e-6,
        # 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes = 131,072 bytes a token.
        131_072 / 2.039e12,
        "fit_step_profile to LLAMA3_8B_A100_FORWARD_S (a published reference simulation's "
        "forward times of Llama-3-8B on one A100, TP 1): beta0 and the per-sequence decode "
        "time by least squares over the decode steps, the attention term a roofline "
        "(131,072 bytes a token at 2.039 TB/s), the prefill slope by least squares over "
        "the prefill forwards",
        8.03e9,
        "A100-80GB",
    ),
}
"""The shipped profiles by name. (A Llama-3.1-8B H100 profile from BLIS's coefficients was
dropped: its prefill coefficient, 17.25 us a token, implies 931 TFLOP/s, 94% of the
H100's dense peak.)"""
DEFAULT_PROFILE = "qwen2.5-7b-a100"
MAX_BATCHED_TOKENS = 2048
"""vLLM's token budget per step with chunked prefill (``max_num_batched_tokens``): the
default of ``FleetConfig.max_num_batched_tokens``."""


class Sequence:
    """A request inside a worker's engine."""

    __slots__ = (
        "request",
        "target",
        "computed",
        "generated",
        "blocks",
        "capacity",
        "first",
        "fresh",
    )

    def __init__(self, request: Any) -> None:
        """``request``: a :class:`mabp_gym.fleet.simulator.Request` (not imported: the
        simulator imports this module)."""
        self.request = request
        self.target = request.input_length  # tokens whose KV must exist before decoding
        self.computed = 0
        self.generated = 0
        self.blocks: list[int] = []
        self.capacity = 0  # tokens its blocks hold
        self.first = -1.0  # time of the first token
        self.fresh = 0  # generated blocks (their ids are the engine's own)


OWN_BASE = -(2**62)
"""Ids of blocks of generated tokens start here (trace blocks are >= 0, downstream jobs'
new blocks count down from -1): such a block is never asked for again, so it is freed,
not cached, when its sequence lets it go."""


OWN_LIMIT = OWN_BASE + 2**61
"""Blocks below this are generated tokens' (see :data:`OWN_BASE`)."""


class KVCache:
    """``capacity`` units of KV memory (blocks of ``block_size`` tokens) shared by running
    sequences (reference counted) and the prefix cache (unreferenced blocks, evicted least
    recently used first). A prompt block (a trace block hash) may span several units; a
    block of generated tokens is one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.refs: dict[int, int] = {}
        self.idle: OrderedDict[int, None] = OrderedDict()
        self.units: dict[int, int] = {}  # resident block -> units it occupies
        self.held = 0  # units of referenced blocks
        self.resident = 0  # units of referenced and cached blocks
        self._next_own = OWN_BASE
        # Membership changes of prompt blocks since the simulator last read them: (block,
        # whether it was present before), for KV events with a delay.
        self.journal: list[tuple[int, bool]] = []

    def __contains__(self, block: int) -> bool:  # the prefix cache as KV events report it
        return block in self.refs or block in self.idle

    def free(self) -> int:
        """Units a new reference can take now (free plus evictable)."""
        return self.capacity - self.held

    def cost(self, block: int, units: int) -> int:
        """Units that referencing ``block`` takes from :meth:`free` (its own size if
        resident, else ``units``; nothing if already referenced)."""
        if block in self.refs:
            return 0
        return self.units.get(block, units)

    def acquire(self, block: int, units: int = 1) -> None:
        """Reference ``block`` (a hit if resident, else a newly filled block of ``units``)."""
        self.acquire_all((block,), (units,))

    def acquire_all(self, blocks: Seq[int], units: Seq[int]) -> None:
        """:meth:`acquire` each block in turn (one call for a prompt's blocks)."""
        refs, idle, sizes, journal = self.refs, self.idle, self.units, self.journal
        held, resident, capacity = self.held, self.resident, self.capacity
        try:
            for block, size in zip(blocks, units, strict=True):
                count = refs.get(block)
                if count is not None:
                    refs[block] = count + 1
                    continue
                if block in idle:
                    del idle[block]
                    size = sizes[block]
                else:
                    while resident + size > capacity:
                        if not idle:
                            raise MemoryError("no free KV block")  # callers check free()
                        evicted, _ = idle.popitem(last=False)
                        resident -= sizes.pop(evicted)
                        journal.append((evicted, True))
                    sizes[block] = size
                    resident += size
                    if block >= OWN_LIMIT:
                        journal.append((block, False))
                refs[block] = 1
                held += size
        finally:
            self.held, self.resident = held, resident

    def own_block(self) -> int:
        """A new one-unit block for generated tokens."""
        self._next_own += 1
        self.acquire(self._next_own)
        return self._next_own

    def release(self, block: int) -> None:
        self.release_all((block,))

    def release_all(self, blocks: Seq[int]) -> None:
        """Drop a reference to each block: a prompt block nobody holds stays cached, a block
        of generated tokens is freed."""
        refs, idle, sizes = self.refs, self.idle, self.units
        held, resident = self.held, self.resident
        for block in blocks:
            count = refs[block] - 1
            if count:
                refs[block] = count
                continue
            del refs[block]
            size = sizes[block]
            held -= size
            if block < OWN_LIMIT:
                resident -= size
                del sizes[block]
            else:  # a prompt block stays cached for later hits
                idle[block] = None
        self.held, self.resident = held, resident


class StepEngine:
    """One worker's scheduler, KV memory and step clock.

    Args:
        capacity: KV memory in blocks of ``block_tokens`` tokens.
        block_tokens: tokens a trace block hash covers (the prefix-cache unit).
        max_seqs: sequences a step may hold (vLLM's ``max_num_seqs``).
        profile: step times.
        block_size: tokens a KV block holds (vLLM's ``block_size``; divides
            ``block_tokens``; default ``block_tokens``).
        max_batched_tokens: tokens a step may compute (``max_num_batched_tokens``).
        chunked_prefill: vLLM's ``enable_chunked_prefill``; off, a step is either prefills
            (whole prompts, first come first served, before any decode) or decodes.
    """

    def __init__(
        self,
        capacity: int,
        block_tokens: int,
        max_seqs: int,
        profile: StepProfile,
        *,
        block_size: int | None = None,
        max_batched_tokens: int = MAX_BATCHED_TOKENS,
        chunked_prefill: bool = True,
    ) -> None:
        self.block_size = block_size or block_tokens
        self.units_per_block = block_tokens // self.block_size
        self.kv = KVCache(capacity * self.units_per_block)
        self.block_tokens = block_tokens
        self.max_seqs = max_seqs
        self.max_batched_tokens = max_batched_tokens
        self.chunked_prefill = chunked_prefill
        self.profile = profile
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.busy = False
        self.batch: list[tuple[Sequence, int]] = []  # (sequence, prefill tokens; 0: decode)
        self.shape = (0, 0, 0)  # the step's prefill tokens, decodes, context tokens read
        self.preemptions = 0
        # A run of identical decode steps scheduled as one event (the simulator's):
        # when the first began, each one's end and duration, and a version that a cut
        # (an arrival) bumps so that the superseded end event is skipped.
        self.run_start = 0.0
        self.run_ends: list[float] = []
        self.run_version = 0
        self.synced_at = 0.0  # when the simulator last copied this engine's telemetry

    # -- admission ------------------------------------------------------------------------
    def _prompt_units(self, seq: Sequence, prompt: list[int]) -> list[int]:
        """Units of each prompt block (a prompt's last block may be partly filled)."""
        per = self.units_per_block
        if per == 1:
            return [1] * len(prompt)
        bt, bs, length = self.block_tokens, self.block_size, seq.request.input_length
        return [max(1, min(per, -(-(length - k * bt) // bs))) for k in range(len(prompt))]

    def _admit(self, seq: Sequence) -> tuple[bool, int]:
        """Give ``seq`` its blocks (the prompt's, hits first, then fresh ones for tokens
        generated before a preemption); ``(admitted, cached tokens)``."""
        kv, bs = self.kv, self.block_size
        prompt = list(seq.request.hash_ids[: -(-seq.target // self.block_tokens)])
        hits = 0
        for block in prompt:
            if block not in kv:
                break
            hits += 1
        units = self._prompt_units(seq, prompt)
        covered = sum(kv.units.get(b, u) for b, u in zip(prompt, units, strict=True)) * bs
        own = max(0, -(-(seq.target - covered) // bs))
        need = sum(kv.cost(b, u) for b, u in zip(prompt, units, strict=True))
        if kv.free() < need + own:
            return False, 0
        kv.acquire_all(prompt, units)
        seq.blocks = prompt + [kv.own_block() for _ in range(own)]
        seq.capacity = covered + own * bs
        # vLLM recomputes at least the last prompt token.
        seq.computed = min(hits * self.block_tokens, seq.target - 1)
        return True, seq.computed

    def _cached_tokens(self, seq: Sequence) -> int:
        """Tokens of ``seq`` its admission would find cached now."""
        hits = 0
        for block in seq.request.hash_ids[: -(-seq.target // self.block_tokens)]:
            if block not in self.kv:
                break
            hits += 1
        return min(hits * self.block_tokens, seq.target - 1)

    def _release(self, seq: Sequence) -> None:
        self.kv.release_all(seq.blocks)
        seq.blocks = []
        seq.capacity = 0

    # -- one step -------------------------------------------------------------------------
    def form_batch(self) -> tuple[float, list[tuple[Sequence, int]]]:
        """Schedule the next step; ``(duration, [(admitted sequence, cached tokens)])``.

        The step's batch is kept for :meth:`finish_step`; an empty one means nothing could
        run (no work, or the first waiting sequence does not fit the memory left)."""
        batch: list[tuple[Sequence, int]] = []
        admitted: list[tuple[Sequence, int]] = []
        prefill_tokens = decode_tokens = context = 0
        if not self.chunked_prefill:
            prefill_tokens = self._prefill_step(batch, admitted)
        if not batch:
            budget, decode_tokens, context, prefill_tokens = self._running_step(batch)
            if self.chunked_prefill:
                prefill_tokens += self._admit_waiting(batch, admitted, budget)
        self.batch = batch
        self.shape = (prefill_tokens, decode_tokens, context)
        if not batch:
            return 0.0, admitted
        return self.profile.step_s(prefill_tokens, decode_tokens, context), admitted

    def coalescible(self) -> int:
        """Steps, the one just formed included, that would run this same batch of decodes
        with nothing else changing: no sequence finishes before the last of them, none needs
        a new block, and no waiting sequence can join (admission failed for want of slots,
        budget or memory, and none of those grows while decodes fill their blocks). 1 when
        the step computes any prefill."""
        steps = 0
        for seq, chunk in self.batch:
            if chunk:
                return 1
            left = min(
                seq.request.output_length - seq.generated,
                seq.capacity - seq.target - seq.generated,
            )
            if steps == 0 or left < steps:
                steps = left
        return max(steps, 1)

    def run_seconds(self, steps: int) -> float:
        """Seconds of the decode steps 2 to ``steps`` of a run that this step starts (the
        context grows by one token a decode a step): summed in closed form."""
        p = self.profile
        _, decodes, context = self.shape
        later = steps - 1
        read = later * context + decodes * later * steps // 2
        return later * (p.beta0_s + p.decode_s_per_token * decodes) + (
            p.attention_s_per_context_token * read
        )

    def advance(self, steps: int) -> None:
        """Apply ``steps`` decode steps of the current batch that end before the last one
        (no sequence finishes or needs a block in them: :meth:`coalescible`)."""
        for seq, _ in self.batch:
            seq.generated += steps

    def _running_step(self, batch: list[tuple[Sequence, int]]) -> tuple[int, int, int, int]:
        """The running sequences' part of a step, oldest first: a decode token each, or the
        next chunk of a prefill in progress; ``(budget left, decodes, context, prefill)``."""
        budget = self.max_batched_tokens
        prefill_tokens = decode_tokens = context = 0
        running, kv = self.running, self.kv
        k = 0
        while k < len(running) and budget > 0:
            seq = running[k]
            if seq.computed < seq.target:
                chunk = min(seq.target - seq.computed, budget)
                batch.append((seq, chunk))
                budget -= chunk
                prefill_tokens += chunk
                k += 1
                continue
            total = seq.target + seq.generated
            if total >= seq.capacity:
                while kv.free() < 1 and len(running) > k + 1:
                    self._preempt(running[-1])
                if kv.free() < 1:
                    self._preempt(seq)
                    continue
                seq.blocks.append(kv.own_block())
                seq.capacity += self.block_size
                seq.fresh += 1
            batch.append((seq, 0))
            budget -= 1
            decode_tokens += 1
            context += total
            k += 1
        return budget, decode_tokens, context, prefill_tokens

    def _admit_waiting(
        self,
        batch: list[tuple[Sequence, int]],
        admitted: list[tuple[Sequence, int]],
        budget: int,
    ) -> int:
        """Waiting sequences join the step first come first served while budget, sequence
        slots and memory allow (their first chunk); the prefill tokens they add."""
        prefill_tokens = 0
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            fits, hit = self._admit(seq)
            if not fits:
                break
            chunk = self._start_running(
                seq, hit, min(seq.target - seq.computed, budget), batch, admitted
            )
            budget -= chunk
            prefill_tokens += chunk
        return prefill_tokens

    def _start_running(
        self,
        seq: Sequence,
        hit: int,
        chunk: int,
        batch: list[tuple[Sequence, int]],
        admitted: list[tuple[Sequence, int]],
    ) -> int:
        """Move the head of the waiting queue (``seq``, admitted with ``hit`` cached
        tokens) into the running batch with its first ``chunk`` of prefill; returns it."""
        self.waiting.popleft()
        self.running.append(seq)
        admitted.append((seq, hit))
        batch.append((seq, chunk))
        return chunk

    def _prefill_step(
        self, batch: list[tuple[Sequence, int]], admitted: list[tuple[Sequence, int]]
    ) -> int:
        """Without chunked prefill: waiting prompts, whole, first come first served, while
        the budget, sequence slots and memory allow (vLLM refuses a prompt over the budget;
        here one runs alone in its step); the prefill tokens (0: a decode step instead)."""
        budget = self.max_batched_tokens
        prefill_tokens = 0
        while self.waiting and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            if batch and seq.target - self._cached_tokens(seq) > budget:
                break
            fits, hit = self._admit(seq)
            if not fits:
                break
            chunk = self._start_running(seq, hit, seq.target - seq.computed, batch, admitted)
            budget -= chunk
            prefill_tokens += chunk
        return prefill_tokens

    def _preempt(self, seq: Sequence) -> None:
        """Recompute preemption: release its blocks, prefill prompt + generated again."""
        self.running.remove(seq)
        self._release(seq)
        seq.target = seq.request.input_length + seq.generated
        seq.computed = 0
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def finish_step(self) -> tuple[list[Sequence], list[Sequence]]:
        """Apply the step just run; ``(sequences with a first token, finished sequences)``."""
        firsts, done = [], []
        # Preemption only takes sequences not yet scheduled in the step (or the one being
        # scheduled, which then stays out of it), so every batch entry is still running.
        for seq, chunk in self.batch:
            if chunk:
                seq.computed += chunk
                if seq.computed < seq.target:
                    continue
                if seq.first < 0:
                    firsts.append(seq)
            seq.generated += 1
            if seq.generated >= seq.request.output_length:
                done.append(seq)
        for seq in done:
            self.running.remove(seq)
            self._release(seq)
        self.batch = []
        return firsts, done

    def pending_prefill_tokens(self) -> int:
        """Prompt tokens still to compute, running and waiting (the exact backlog)."""
        pending = 0
        for seq in self.running:
            pending += seq.target - seq.computed
        for seq in self.waiting:
            pending += seq.target
        return pending
