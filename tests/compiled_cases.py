"""The workloads the compiled cores are held to their references on (``test_slotcore``,
``test_transition_core``): every built-in workload, a workload file and generated networks."""

from __future__ import annotations

from pathlib import Path

import mabp_gym

MULTIHOP14 = str(Path(mabp_gym.__file__).parent / "examples" / "multihop14.json")
WORKLOADS = [(name, {}) for name in mabp_gym.WORKLOADS] + [
    (MULTIHOP14, {}),
    ("mixed", {"copies": 2}),
    ("multihop", {"nodes": 30, "memory": 0}),
]
