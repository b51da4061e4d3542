"""Shared output of the benchmarks: the JSON line every benchmark prints, and its file."""

from __future__ import annotations

import json
import platform
from typing import Any


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    return {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
    }


def emit(result: dict[str, Any], path: str | None) -> None:
    """Print ``result`` as one JSON line and, with ``path``, write it there too."""
    result = {**result, **machine()}
    print(json.dumps(result))
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
