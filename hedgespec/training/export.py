"""``specforge export --to sglang`` run in-process, into a temporary directory renamed into place.

The result is SGLang's EAGLE-3 draft directory (``config.json`` + ``model.safetensors`` with ``fc.weight``,
``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``t2d``, ``d2t``; no ``embed_tokens``: the draft reuses
the target's embedding), which is also what ``hedgespec.engine.eagle3`` loads.

Crash safety: the export is built in a temporary sibling (``hedgespec.io.atomic_dir``) under a per-drafter lock
file, so a failure or a kill half-way leaves the destination as it was.  The temporary directory of a process
that was killed (SIGKILL leaves no chance to clean up) is removed by the next export of the same drafter: no
live exporter can own it while this one holds the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from safetensors import safe_open

from hedgespec.io import atomic_dir
from hedgespec.training._specforge import specforge_cli_main

REQUIRED_KEYS = ("fc.weight", "norm.weight", "lm_head.weight", "t2d", "d2t")
EXPORT_MARKER = ".hedgespec-export.json"


def _refuse_foreign(output_dir: Path) -> None:
    """Only an earlier export of ours (it has :data:`EXPORT_MARKER`) may be replaced."""
    if not (output_dir / EXPORT_MARKER).is_file():
        raise FileExistsError(
            f"{output_dir} exists and was not written by hedgespec (no {EXPORT_MARKER}); "
            "refusing to overwrite it: move it away or choose another pool/drafter name"
        )


@contextlib.contextmanager
def export_lock(output_dir: Path) -> Iterator[None]:
    """Hold ``<parent>/.<name>.export.lock`` and remove what killed exports of ``<name>`` left behind."""
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(output_dir.parent / f".{output_dir.name}.export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            mine = re.compile(rf"\.{re.escape(output_dir.name)}\.[a-z0-9_]{{8}}\.tmp")  # atomic_dir's mkdtemp names
            for stale in output_dir.parent.glob(f".{output_dir.name}.*.tmp"):
                if mine.fullmatch(stale.name) and stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale, ignore_errors=True)
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def export_sglang(
    checkpoint: Path, draft_config: Path, vocab_mapping: Path, output_dir: Path, provenance: dict
) -> Path:
    """Export ``checkpoint`` to ``output_dir`` (replacing an earlier export of ours, never foreign content)."""
    output_dir = Path(output_dir)
    with export_lock(output_dir), atomic_dir(output_dir, check_replace=_refuse_foreign) as tmp:
        rc = specforge_cli_main(
            [
                "export",
                "--to",
                "sglang",
                "--checkpoint",
                str(checkpoint),
                "--draft-config",
                str(draft_config),
                "--output-dir",
                str(tmp),
                "--vocab-mapping",
                str(vocab_mapping),
            ]
        )
        if rc != 0:
            raise RuntimeError(f"specforge export exited with {rc}")
        check_export(tmp)
        (tmp / EXPORT_MARKER).write_text(json.dumps(provenance, indent=2, sort_keys=True))
    return output_dir


def check_export(path: Path) -> dict[str, tuple[int, ...]]:
    """Check an SGLang export directory has the EAGLE-3 keys; return ``{key: shape}``."""
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path}: expected config.json and model.safetensors from specforge export")
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    missing = [k for k in REQUIRED_KEYS if k not in shapes]
    if missing or not any(k.startswith("midlayer.") for k in shapes):
        raise ValueError(f"{path}: export lacks {missing or ['midlayer.*']}; present: {sorted(shapes)}")
    return shapes
