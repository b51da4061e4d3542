"""The networks the benchmark holds out of training: its generalisation track.

A learned policy's result on a network it was trained on says little about the next
network. The benchmark's generalisation track (:data:`mabp_gym.harness.bench.GENERALISATION`)
runs networks that no training may use, and every training entry point asks
:func:`held_out_reason` before any work, so a result there is zero-shot by construction.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mabp_gym.core.fileformat import workload_digest_of
from mabp_gym.core.workload import Workload
from mabp_gym.core.workloads import make_workload

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE_FILE = str(EXAMPLES / "multihop14.json")
"""A workload file shipped with the package, a held-out network: a packet network without
memory."""
CODEASSIST_FILE = str(EXAMPLES / "codeassist.json")
"""A workload file shipped with the package, a held-out network: a coding assistant's
serving network with memory (search, three unequal generators, a test runner that sends
failing patches back, review)."""
EXAMPLE_FILES = (EXAMPLE_FILE, CODEASSIST_FILE)
HELD_OUT_NODES = 100
"""Generated ``multihop`` networks of this many nodes or more are held out."""


def held_out_reason(workload: Workload) -> str | None:
    """Why training may not use ``workload`` (a network of the generalisation track), or
    ``None`` where it may: every ``moe``, ``multihop`` from :data:`HELD_OUT_NODES` nodes,
    and the network of each of :data:`EXAMPLE_FILES` (at any load and horizon)."""
    params = dict(workload.params)
    if workload.name == "moe":
        return "moe is a held-out network of the benchmark's generalisation track"
    if workload.name == "multihop" and int(params.get("nodes", 0)) >= HELD_OUT_NODES:
        return (
            f"multihop networks of {HELD_OUT_NODES} nodes or more are held out by the "
            "benchmark's generalisation track"
        )
    if not params:
        digest = workload_digest_of(workload)
        for path in EXAMPLE_FILES:
            example = make_workload(path, horizon=workload.horizon)
            # By the network, whatever the name: a renamed copy is the same network.
            renamed = dataclasses.replace(example, name=workload.name)
            if workload_digest_of(renamed) == digest:
                return (
                    f"the shipped example file {Path(path).name} is a held-out network of "
                    "the generalisation track"
                )
    return None
