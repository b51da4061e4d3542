"""The step-level engine of a fleet worker: vLLM-style continuous batching.

Each worker runs one batch at a time. A step is formed at its start, under a token budget
(``max_batched_tokens``) and a sequence limit (``FleetConfig.max_running``), the way vLLM's
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
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepProfile:
    """Step-time coefficients of one model on one GPU (seconds)."""

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
    ),
    "llama-3.1-8b-h100": StepProfile(
        "llama-3.1-8b-h100",
        5752.705e-6,
        17.251e-6,
        5.999e-6,
        # 32 layers x 8 KV heads x 128 dims x 2 x 2 bytes = 131,072 bytes, at 3.35 TB/s.
        131_072 / 3.35e12,
        "BLIS (inference-sim) coefficients.yaml, meta-llama/llama-3.1-8b-instruct, H100, "
        "TP 1, vLLM 0.8.4: beta = (5752.71, 17.25, 6.00) us; attention term as above",
    ),
}
DEFAULT_PROFILE = "qwen2.5-7b-a100"
MAX_BATCHED_TOKENS = 2048
"""vLLM's token budget per step with chunked prefill (``max_num_batched_tokens``)."""


class Sequence:
    """A request inside a worker's engine."""

    __slots__ = ("request", "target", "computed", "generated", "blocks", "first", "fresh")

    def __init__(self, request: Any) -> None:
        """``request``: a :class:`mabp_gym.fleet.simulator.Request` (not imported: the
        simulator imports this module)."""
        self.request = request
        self.target = request.input_length  # tokens whose KV must exist before decoding
        self.computed = 0
        self.generated = 0
        self.blocks: list[int] = []
        self.first = -1.0  # time of the first token
        self.fresh = 0  # generated blocks (their ids are the engine's own)


OWN_BASE = -(2**62)
"""Ids of blocks of generated tokens start here (trace blocks are >= 0, downstream jobs'
new blocks count down from -1): such a block is never asked for again, so it is freed,
not cached, when its sequence lets it go."""


def _own(block: int) -> bool:
    return block < OWN_BASE + 2**61


class KVCache:
    """``capacity`` blocks shared by running sequences (reference counted) and the prefix
    cache (unreferenced blocks, evicted least recently used first)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.refs: dict[int, int] = {}
        self.idle: OrderedDict[int, None] = OrderedDict()
        self._next_own = OWN_BASE
        # Membership changes of prompt blocks since the simulator last read them: (block,
        # whether it was present before), for KV events with a delay.
        self.journal: list[tuple[int, bool]] = []

    def __contains__(self, block: int) -> bool:  # the prefix cache as KV events report it
        return block in self.refs or block in self.idle

    def free(self) -> int:
        """Blocks a new reference can take now (free plus evictable)."""
        return self.capacity - len(self.refs)

    def acquire(self, block: int) -> None:
        """Reference ``block`` (a hit if resident, else a newly filled block)."""
        if block in self.refs:
            self.refs[block] += 1
            return
        if block in self.idle:
            del self.idle[block]
        else:
            if len(self.refs) + len(self.idle) >= self.capacity:
                if not self.idle:
                    raise MemoryError("no free KV block")  # callers check free() first
                evicted, _ = self.idle.popitem(last=False)
                self.journal.append((evicted, True))
            if not _own(block):
                self.journal.append((block, False))
        self.refs[block] = 1

    def own_block(self) -> int:
        """A new block for generated tokens."""
        self._next_own += 1
        self.acquire(self._next_own)
        return self._next_own

    def release(self, block: int) -> None:
        count = self.refs[block] - 1
        if count:
            self.refs[block] = count
            return
        del self.refs[block]
        if not _own(block):  # a prompt block stays cached for later hits
            self.idle[block] = None


class StepEngine:
    """One worker's scheduler, KV memory and step clock."""

    def __init__(
        self, capacity: int, block_tokens: int, max_seqs: int, profile: StepProfile
    ) -> None:
        self.kv = KVCache(capacity)
        self.block_tokens = block_tokens
        self.max_seqs = max_seqs
        self.profile = profile
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.busy = False
        self.batch: list[tuple[Sequence, int]] = []  # (sequence, prefill tokens; 0: decode)
        self.preemptions = 0

    # -- admission ------------------------------------------------------------------------
    def blocks_needed(self, seq: Sequence) -> int:
        return -(-seq.target // self.block_tokens)

    def _admit(self, seq: Sequence) -> tuple[bool, int]:
        """Give ``seq`` its blocks (the prompt's, hits first, then fresh ones for tokens
        generated before a preemption); ``(admitted, cached tokens)``."""
        need = self.blocks_needed(seq)
        prompt = list(seq.request.hash_ids[:need])
        hits = 0
        for block in prompt:
            if block not in self.kv:
                break
            hits += 1
        own = need - len(prompt)
        if self.kv.free() < sum(1 for b in prompt if b not in self.kv.refs) + own:
            return False, 0
        for block in prompt:
            self.kv.acquire(block)
        seq.blocks = prompt + [self.kv.own_block() for _ in range(own)]
        # vLLM recomputes at least the last prompt token.
        seq.computed = min(hits * self.block_tokens, seq.target - 1)
        return True, seq.computed

    def _release(self, seq: Sequence) -> None:
        for block in seq.blocks:
            self.kv.release(block)
        seq.blocks = []

    # -- one step -------------------------------------------------------------------------
    def form_batch(self) -> tuple[float, list[tuple[Sequence, int]]]:
        """Schedule the next step; ``(duration, [(admitted sequence, cached tokens)])``.

        The step's batch is kept for :meth:`finish_step`; an empty one means nothing could
        run (no work, or the first waiting sequence does not fit the memory left)."""
        budget = MAX_BATCHED_TOKENS
        batch: list[tuple[Sequence, int]] = []
        admitted: list[tuple[Sequence, int]] = []
        prefill_tokens = decode_tokens = context = 0
        k = 0
        while k < len(self.running) and budget > 0:
            seq = self.running[k]
            if seq.computed < seq.target:
                chunk = min(seq.target - seq.computed, budget)
                batch.append((seq, chunk))
                budget -= chunk
                prefill_tokens += chunk
                k += 1
                continue
            total = seq.target + seq.generated
            if total >= len(seq.blocks) * self.block_tokens:
                while self.kv.free() < 1 and len(self.running) > k + 1:
                    self._preempt(self.running[-1])
                if self.kv.free() < 1:
                    self._preempt(seq)
                    continue
                seq.blocks.append(self.kv.own_block())
                seq.fresh += 1
            batch.append((seq, 0))
            budget -= 1
            decode_tokens += 1
            context += total
            k += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            fits, hit = self._admit(seq)
            if not fits:
                break
            self.waiting.popleft()
            self.running.append(seq)
            admitted.append((seq, hit))
            chunk = min(seq.target - seq.computed, budget)
            batch.append((seq, chunk))
            budget -= chunk
            prefill_tokens += chunk
        p = self.profile
        duration = (
            p.beta0_s
            + p.prefill_s_per_token * prefill_tokens
            + p.decode_s_per_token * decode_tokens
            + p.attention_s_per_context_token * context
        )
        self.batch = batch
        return (duration if batch else 0.0), admitted

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
        return sum(s.target - s.computed for s in self.running) + sum(
            s.target for s in self.waiting
        )
