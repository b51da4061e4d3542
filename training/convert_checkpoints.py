"""Convert version-1 checkpoints (pickled dicts, numpy arrays) to the version-2 format of
:mod:`mabp_gym.agents.checkpoint_file`, without retraining.

The old file is read with ``weights_only=True`` too: numpy arrays need three numpy globals
(``ndarray``, ``dtype`` and the array reconstructor), allowed for this one read and nothing
else, so even an old file cannot run code. The workload the checkpoint was made for is
rebuilt from its name at the builder defaults (the only way the version-1 files were
trained: their training command records no ``--set``), and its full description is stored.

    python -m mabp_gym.training.convert_checkpoints OLD.pt NEW.pt [--workload mixed]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mabp_gym.agents.gnn import GNNScheduler, save_checkpoint
from mabp_gym.agents.learn_mabp import PrimitiveEstimate
from mabp_gym.core.workloads import make_workload

_NUMPY_GLOBALS = [
    np.ndarray,
    np.dtype,
    np.dtypes.Float64DType,
    np.dtypes.BoolDType,
    np.dtypes.Int64DType,
]


def _numpy_reconstruct() -> Any:
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return _reconstruct


def read_version_1(path: str | Path) -> dict[str, Any]:
    """A version-1 checkpoint's dict (``weights_only=True`` with numpy arrays allowed)."""
    with torch.serialization.safe_globals([*_NUMPY_GLOBALS, _numpy_reconstruct()]):
        payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("kind") not in ("gnn", "learn-mabp"):
        raise ValueError(f"{path}: not a version-1 mabp-gym checkpoint")
    return payload


def convert(old: str | Path, new: str | Path, workload_name: str | None = None) -> str:
    """Write ``old`` (version 1) as ``new`` (version 2); return the new content digest."""
    payload = read_version_1(old)
    workload = make_workload(workload_name or payload["workload"])
    notes = {
        k: v
        for k, v in payload.items()
        if k
        not in (
            "kind",
            "state_dict",
            "dims",
            "hidden",
            "layers",
            "workload",
            "shape",
            "work",
            "penalty",
            "law",
            "seen",
            "counts",
        )
    }
    notes["converted_from_version"] = 1
    if payload["kind"] == "gnn":
        model = GNNScheduler(payload["dims"], hidden=payload["hidden"], layers=payload["layers"])
        model.load_state_dict(payload["state_dict"])
        return save_checkpoint(new, model, workload, **notes)
    estimate = PrimitiveEstimate(
        *(np.asarray(payload[k]) for k in ("work", "penalty", "law", "seen", "counts"))
    )
    return estimate.save(new, workload, **notes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--workload", default=None, help="default: the name stored in OLD")
    args = parser.parse_args(argv)
    print(convert(args.old, args.new, args.workload))


if __name__ == "__main__":
    main()
