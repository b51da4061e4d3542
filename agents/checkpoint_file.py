"""The checkpoint file of the learned schedulers: tensors and JSON, nothing that can run code.

A checkpoint is a ``torch.save`` of a plain dict::

    {"format": "mabp-gym.checkpoint", "version": 2, "kind": "gnn" | "learn-mabp",
     "tensors": {name: Tensor}, "meta": "<JSON text>", "digest": "<sha256 hex>"}

It is always read with ``torch.load(..., weights_only=True)``: the unpickler then builds
only tensors and plain containers, so a crafted file whose pickle would call ``os.system``
is refused instead of executed. ``digest`` is the SHA-256 of the meta text and of every
tensor's name, dtype, shape and bytes; a flipped byte that torch's reader does not notice
changes the digest. ``meta`` holds the full description of the workload the checkpoint
was made for (:func:`workload_identity`), so that loading it for a workload with other
parameters is refused with the differing parameters named (:func:`check_workload`).

Every problem raises ``ValueError`` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mabp_gym.registry import checkpoint_path

if TYPE_CHECKING:  # torch loads only when a checkpoint is read or written
    import torch

    from mabp_gym.core.workload import Workload

FORMAT = "mabp-gym.checkpoint"
VERSION = 2
CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
# The load and the horizon are evaluation settings, not properties of the network the
# checkpoint learned: a checkpoint is meant to be run at any load for any number of slots.
_NOT_IDENTITY = ("load", "horizon")


def default_checkpoint(policy: str, workload_name: str) -> Path:
    """The shipped checkpoint ``make_policy(policy, ...)`` loads for a workload."""
    path = checkpoint_path(policy, {}, workload_name)  # the registry names the file
    if path is None:
        raise ValueError(f"policy {policy!r} reads no checkpoint")
    return path


def given_checkpoint(checkpoint: Any, default: Callable[[], Path]) -> Path:
    """The file a policy's ``checkpoint=`` names: a path (``str`` or ``os.PathLike``), or
    ``default()`` for None or an empty string.

    Raises:
        ValueError: anything else (a number, a dict of weights), named.
    """
    if checkpoint is None or checkpoint == "":
        return default()
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"checkpoint must be a file path, got {checkpoint!r}")
    return Path(checkpoint)


def missing_checkpoint(policy: str, path: Path, workload: Workload, label: str = "") -> str:
    """The error for a shipped checkpoint that is not there (``label``: the policy's name
    in prose, default ``policy``): how to train one, or, for a network the benchmark holds
    out of training, that none is; and the policy that runs on every network."""
    label = label or policy
    from mabp_gym.core.held_out import held_out_reason

    reason = held_out_reason(workload)
    if reason is not None:
        return f"no {label} checkpoint at {path}, and none is trained for it: {reason}; {ANYWHERE}"
    return (
        f"no {label} checkpoint at {path}; train one with "
        f"`mabp-gym train {policy} --workload {train_target(workload)}`, or {ANYWHERE}"
    )


ANYWHERE = "use `residual-mabp-any`, whose one shipped checkpoint runs on every network"
"""What a per-network policy's refusal offers instead."""


def _elsewhere(workload: Workload, instead: str) -> str:
    """The end of a refusal for a network a checkpoint was not made for: why none is
    trained for it where the benchmark holds it out, and ``instead``."""
    from mabp_gym.core.held_out import held_out_reason

    reason = held_out_reason(workload)
    return f" ({'' if reason is None else reason + '; '}{instead})"


def train_target(workload: Workload) -> str:
    """What ``mabp-gym train --workload`` takes to train for ``workload``: its name for a
    built-in one, else the file it was read from (a workload file's name field is no
    workload name)."""
    from mabp_gym.core.workloads import WORKLOADS

    return workload.name if workload.name in WORKLOADS else "<its workload file>"


def content_digest(tensors: dict[str, torch.Tensor], meta_text: str) -> str:
    """SHA-256 over the meta text and every tensor's name, dtype, shape and bytes."""
    import torch

    digest = hashlib.sha256(meta_text.encode("utf-8"))
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"\0{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(
            tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        )
    return digest.hexdigest()


def workload_identity(workload: Workload) -> dict[str, Any]:
    """What a checkpoint records of its workload: the name, the builder parameters and the
    whole file-format description, without the load and the horizon."""
    from mabp_gym.core.fileformat import workload_to_dict

    description = workload_to_dict(workload)
    description.pop("horizon", None)
    description["arrivals"].pop("load", None)
    params = {k: v for k, v in workload.params if k not in _NOT_IDENTITY}
    return {"name": workload.name, "params": params, "description": description}


def _differences(stored: Any, current: Any, path: str = "") -> list[str]:
    """Paths at which two JSON-like values differ (``nodes[2].mu``)."""
    if isinstance(stored, dict) and isinstance(current, dict):
        found = []
        for key in sorted(set(stored) | set(current), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in stored or key not in current:
                found.append(where)
            else:
                found += _differences(stored[key], current[key], where)
        return found
    if isinstance(stored, list) and isinstance(current, list):
        if len(stored) != len(current):
            return [f"{path} (length {len(stored)} vs {len(current)})"]
        found = []
        for k, (a, b) in enumerate(zip(stored, current, strict=True)):
            found += _differences(a, b, f"{path}[{k}]")
        return found
    return [] if stored == current else [path]


def _builder_defaults(name: str) -> dict[str, Any]:
    from mabp_gym.core.workloads import BUILDERS

    if name not in BUILDERS:
        return {}
    return {key: param.default for key, param in BUILDERS[name][1].items()}


def check_workload(
    meta: dict[str, Any], workload: Workload, path: str | Path, instead: str = ANYWHERE
) -> None:
    """Raise ``ValueError`` unless ``workload`` is the network the checkpoint was made for.

    The load and the horizon may differ; anything else (``K``, ``eps``, a node's ``mu``)
    is named in the error with the checkpoint's value and this workload's, and the error
    ends with ``instead``: what runs on every network.
    """
    stored = meta.get("workload_identity")
    if not isinstance(stored, dict):
        raise ValueError(f"{path}: the checkpoint records no workload description")
    current = workload_identity(workload)
    old_params, new_params = stored.get("params") or {}, current["params"]
    # Builder parameters name the difference best; a workload read from a file has none,
    # and is compared by its description alone.
    # A parameter the builder gained after the checkpoint was made counts as its default
    # (a new parameter keeps the old network at its default, e.g. mixed's copies=1).
    defaults = _builder_defaults(str(stored.get("name")))
    changed = (
        [
            f"{key}={old_params.get(key)!r} in the checkpoint, {new_params.get(key)!r} here"
            for key in sorted(set(old_params) | set(new_params))
            if old_params.get(key, defaults.get(key)) != new_params.get(key, defaults.get(key))
        ]
        if old_params and new_params
        else []
    )
    if changed:
        raise ValueError(
            f"{path} was made for workload {stored.get('name')!r} with other "
            f"parameters: {'; '.join(changed)}{_elsewhere(workload, instead)}"
        )
    paths = _differences(stored.get("description"), current["description"])
    paths = [p for p in paths if p != "name"]
    if paths:
        shown = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
        raise ValueError(
            f"{path} was made for workload {stored.get('name')!r}, which differs "
            f"from {workload.name!r} at {shown}{_elsewhere(workload, instead)}"
        )


def save(
    path: str | Path, kind: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]
) -> str:
    """Write a checkpoint (atomically: a temporary file renamed over ``path``); return its
    content digest."""
    import torch

    path = Path(path)
    meta_text = json.dumps(meta, sort_keys=True, allow_nan=False)
    tensors = {name: t.detach().cpu().contiguous().clone() for name, t in tensors.items()}
    digest = content_digest(tensors, meta_text)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "kind": kind,
        "tensors": tensors,
        "meta": meta_text,
        "digest": digest,
    }
    partial = path.with_name(path.name + ".partial")
    torch.save(payload, partial)
    partial.replace(path)
    return digest


def load(
    path: str | Path, kind: str, device: str = "cpu"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read and verify a checkpoint of ``kind``: ``(tensors, meta)``.

    Raises:
        ValueError: naming the file, when it is missing, a directory, empty, not a
            checkpoint (or a file holding anything but tensors and plain data), of another
            kind, or when its content does not match its digest.
    """
    import torch

    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a checkpoint file")
    if not path.is_file():
        raise ValueError(f"{path}: no such checkpoint file")
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: the checkpoint file is empty")
    try:
        with warnings.catch_warnings():
            # torch warns about a foreign pickle protocol before refusing the file: the
            # refusal below says it in one line.
            warnings.simplefilter("ignore", UserWarning)
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # weights_only refused a global: a file from a pre-2 version or a crafted one.
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"{path}: refused: the file holds objects other than tensors and "
            f"plain data (an old-format or a tampered checkpoint; {first})"
        ) from None
    except Exception as error:  # noqa: BLE001 - torch raises many types on a damaged file
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"{path}: not a readable checkpoint ({type(error).__name__}: {first[:200]})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not a mabp-gym checkpoint (no format "
            f"{FORMAT!r}; files of version 1 are converted by "
            "training/convert_checkpoints.py)"
        )
    if payload.get("version") != VERSION:
        raise ValueError(
            f"{path}: checkpoint version {payload.get('version')!r}, this "
            f"package reads version {VERSION}"
        )
    if payload.get("kind") != kind:
        raise ValueError(f"{path}: a {payload.get('kind')!r} checkpoint, not a {kind!r} one")
    tensors, meta_text = payload.get("tensors"), payload.get("meta")
    if (
        not isinstance(tensors, dict)
        or not isinstance(meta_text, str)
        or not all(isinstance(t, torch.Tensor) for t in tensors.values())
    ):
        raise ValueError(f"{path}: damaged checkpoint (tensors or meta missing)")
    if content_digest(tensors, meta_text) != payload.get("digest"):
        raise ValueError(f"{path}: damaged checkpoint: its content does not match its digest")
    try:
        meta = json.loads(meta_text)
    except json.JSONDecodeError:
        raise ValueError(f"{path}: damaged checkpoint (meta is not JSON)") from None
    return {name: t.to(device) for name, t in tensors.items()}, meta
