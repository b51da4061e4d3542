"""SGLang's cache-aware router (its deployed defaults and its library default)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mabp_gym.fleet.routers.base import (
    CHARS_PER_TOKEN,
    PrefixIndex,
    RouterBase,
    argmin_random,
)
from mabp_gym.fleet.simulator import Request, Telemetry


@dataclass(frozen=True)
class SGLangPreset:
    """Defaults of SGLang's cache-aware policy."""

    cache_threshold: float
    balance_abs_threshold: float
    balance_rel_threshold: float
    eviction_interval_s: float
    max_tree_size: int  # characters, as SGLang counts them


SGLANG_PRESETS = {
    # router_args.py (the Python CLI; the Rust command line uses the same values): deployed.
    "deployed": SGLangPreset(0.3, 64, 1.5, 60.0, 2**26),
    # CacheAwareConfig::default() in sgl-model-gateway/src/policies/mod.rs: a library
    # default that few deploy, kept as a labelled ablation.
    "lib-default": SGLangPreset(0.5, 32, 1.1, 30.0, 10_000),
}


class SGLangCacheAware(RouterBase):
    """SGLang model gateway ``cache_aware`` policy.

    Source: sgl-project/sglang ``sgl-model-gateway/src/policies/cache_aware.rs`` (defaults in
    ``sgl-model-gateway/src/policies/mod.rs`` and ``router_args.py``; older tree
    ``sgl-router/src/policies/cache_aware.rs``). Load = requests in flight from the gateway.
    If ``max - min > balance_abs`` and ``max > balance_rel * min`` the least-loaded worker
    wins. Otherwise the worker whose approximate tree has the longest prefix match wins if
    ``match / prompt > cache_threshold``, else the least-loaded one; a tie at the deepest
    matched node goes to that node's first tenant (the worker that inserted it first), not
    the least-loaded one. The prompt is inserted into the chosen worker's tree; every
    ``eviction_interval`` the trees are cut (LRU) to ``max_tree_size`` characters, here
    ``max_tree_size / (CHARS_PER_TOKEN * block_tokens)`` blocks (at least one). Upstream
    counts the match in characters; here in blocks (the same ratio when the prompt is whole
    blocks; a partial last block makes the block ratio lower: on the conversation trace at
    load 0.9 about 1% of the deployed preset's decisions differ from a token ratio's).

    Presets: ``deployed`` (the CLI defaults deployments run; the ``sglang`` router) and
    ``lib-default`` (the library's ``CacheAwareConfig::default()``; ``sglang-lib-default``,
    an ablation).
    """

    def __init__(self, preset: str = "deployed") -> None:
        super().__init__()
        if preset not in SGLANG_PRESETS:
            raise ValueError(
                f"unknown SGLang preset {preset!r}; choose one of {sorted(SGLANG_PRESETS)}"
            )
        self.preset = SGLANG_PRESETS[preset]
        self.name = "sglang" if preset == "deployed" else f"sglang-{preset}"

    def reset(self, num_workers: int, rng: np.random.Generator) -> None:
        super().reset(num_workers, rng)
        self.index = PrefixIndex(num_workers)
        self.next_eviction = self.preset.eviction_interval_s

    def choose(self, request: Request, telemetry: Telemetry) -> int:
        p = self.preset
        now = telemetry.now
        if now >= self.next_eviction:
            cap = max(1, p.max_tree_size // (CHARS_PER_TOKEN * telemetry.config.block_tokens))
            for w in range(self.num_workers):
                self.index.evict(w, cap)
            self.next_eviction = now + p.eviction_interval_s
        load = telemetry.in_flight
        low, high = int(load.min()), int(load.max())
        ids = request.hash_ids
        if high - low > p.balance_abs_threshold and high > p.balance_rel_threshold * low:
            worker = argmin_random(load, self.rng)
        else:
            matches = self.index.matches(ids)
            top = int(matches.max())
            if top / len(ids) > p.cache_threshold:
                worker = self.index.first_tenant(np.flatnonzero(matches == top), ids[top - 1])
            else:
                worker = argmin_random(load, self.rng)
        self.index.insert(worker, ids, now)
        return worker
