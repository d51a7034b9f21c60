"""Atomic file writes: nothing half-written is ever left at the destination (ARCHITECTURE conventions).

Torch-free (layer L0): used by the simulator, the engine's traces, pool manifests and bench reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(text: str, path: str | Path) -> Path:
    """Write ``text`` to a temp file in the destination folder, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_json_atomic(obj: Any, path: str | Path, indent: int | None = 1) -> Path:
    """JSON version of :func:`write_text_atomic` (numpy scalars are written as floats)."""
    return write_text_atomic(json.dumps(obj, indent=indent, default=float), path)
