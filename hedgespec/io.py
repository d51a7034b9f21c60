"""Atomic writes: nothing half-written is ever left at the destination.

Torch-free (core layer): files (:func:`write_text_atomic`, :func:`write_json_atomic`) for the simulator, the
engine's traces, pool manifests and bench reports; whole directories (:func:`atomic_dir`) for drafter
checkpoints, exports, feature caches and data recipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def write_text_atomic(text: str, path: str | Path) -> Path:
    """Write ``text`` to a temp file in the destination folder, then rename it over ``path``."""
    return write_bytes_atomic(text.encode("utf-8"), path)


def write_bytes_atomic(data: bytes, path: str | Path) -> Path:
    """Write ``data`` to a temp file in the destination folder (mode 0644), then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_json_atomic(obj: Any, path: str | Path, indent: int | None = 1, sort_keys: bool = False) -> Path:
    """JSON version of :func:`write_text_atomic` (numpy scalars are written as floats)."""
    return write_text_atomic(json.dumps(obj, indent=indent, sort_keys=sort_keys, default=float), path)


@contextlib.contextmanager
def atomic_dir(
    path: str | Path,
    replace: bool | Callable[[Path], bool] = True,
    check_replace: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Build a directory in a temporary sibling, then rename it to ``path``.

    Yields the temporary directory to write into. On success an existing ``path`` is replaced (after
    ``check_replace(path)``, which may raise to refuse it) when ``replace`` is true, otherwise kept (the new
    copy is discarded: another writer finished first). ``replace`` may also be a callable, asked with the
    existing ``path`` at that moment (e.g. "replace it unless it is already complete"). On any error the
    temporary directory is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the result is an ordinary directory (pools are shared)
    try:
        yield tmp
        if path.exists():
            if not (replace(path) if callable(replace) else replace):
                shutil.rmtree(tmp, ignore_errors=True)
                return
            if check_replace is not None:
                check_replace(path)
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def portable_paths(obj: Any) -> Any:
    """Replace machine-local path prefixes in a JSON-like tree (home → ``~``, temp dir → ``$TMPDIR``, the
    working directory → ``.``) so committed results carry no paths of the machine that produced them."""
    prefixes = [
        (os.getcwd().rstrip("/") + "/", "./"),
        (tempfile.gettempdir().rstrip("/") + "/", "$TMPDIR/"),
        (os.path.expanduser("~").rstrip("/") + "/", "~/"),
    ]
    if isinstance(obj, dict):
        return {k: portable_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable_paths(v) for v in obj]
    if isinstance(obj, str):
        for old, new in prefixes:  # anywhere a path starts: the whole string, or after '=', a space, a quote, ...
            if old != "/":
                obj = re.sub(r"(?<![\w./~$-])" + re.escape(old), lambda _m, n=new: n, obj)
    return obj
