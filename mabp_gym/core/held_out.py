"""The networks the benchmark holds out of training: its generalisation track.

A learned policy's result on a network it was trained on says little about the next
network. The benchmark's generalisation track (:data:`mabp_gym.harness.bench.GENERALISATION`)
runs networks that no training may use, and every training entry point asks
:func:`held_out_reason` before any work, so a result there is zero-shot by construction.
"""

from __future__ import annotations

from pathlib import Path

from mabp_gym.core.fileformat import workload_digest_of
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import make_workload

EXAMPLE_FILE = str(Path(__file__).resolve().parents[1] / "examples" / "multihop14.json")
"""The workload file shipped with the package, a held-out network."""
HELD_OUT_NODES = 100
"""Generated ``multihop`` networks of this many nodes or more are held out."""


def held_out_reason(workload: Workload) -> str | None:
    """Why training may not use ``workload`` (a network of the generalisation track), or
    ``None`` where it may: every ``moe``, ``multihop`` from :data:`HELD_OUT_NODES` nodes,
    and the network of :data:`EXAMPLE_FILE` (at any load and horizon)."""
    params = dict(workload.params)
    if workload.name == "moe":
        return "moe is a held-out network of the benchmark's generalisation track"
    if workload.name == "multihop" and int(params.get("nodes", 0)) >= HELD_OUT_NODES:
        return (
            f"multihop networks of {HELD_OUT_NODES} nodes or more are held out by the "
            "benchmark's generalisation track"
        )
    if not params:
        example = make_workload(EXAMPLE_FILE, horizon=workload.horizon)
        if workload_digest_of(example) == workload_digest_of(workload):
            return "the shipped example file is a held-out network of the generalisation track"
    return None
