"""Fingerprint of a Hugging Face checkpoint from its files, without reading the weights where the cache knows them.

``target_fingerprint`` hashes every tensor of a loaded model, minutes for a 65 GB target on every run. A target
loaded from a checkpoint directory is identified instead by its files: the sha256 of each ``*.safetensors``
file (plus ``config.json``) and the dtypes the weights were loaded in (a bfloat16 copy of a float32 checkpoint
computes other logits, so it is another target). In the Hugging Face cache a snapshot's files are links to
``blobs/<sha256>`` (the LFS object id, which is the file's sha256), so nothing is read; files of a plain
directory are hashed once and remembered by (path, size, mtime) under ``$HEDGESPEC_CACHE/file_hashes.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from hedgespec.io import write_json_atomic

from .paths import cache_dir

FORMAT = "hf-checkpoint-files-v1"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 24


def file_sha256(path: str | os.PathLike[str], memo: dict[str, str] | None = None) -> str:
    """sha256 hex of a file: the blob name of an HF cache link, else ``memo`` by (path, size, mtime), else read."""
    path = Path(path)
    if path.is_symlink():
        blob = Path(os.path.realpath(path)).name
        if _SHA256.fullmatch(blob) and Path(os.path.realpath(path)).parent.name == "blobs":
            return blob
    real = Path(os.path.realpath(path))
    st = real.stat()
    key = f"{real}|{st.st_size}|{st.st_mtime_ns}"
    if memo is not None and key in memo:
        return memo[key]
    h = hashlib.sha256()
    with open(real, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    if memo is not None:
        memo[key] = h.hexdigest()
    return h.hexdigest()


def checkpoint_fingerprint(
    model_dir: str | os.PathLike[str], dtypes: Iterable[str], memo_path: str | os.PathLike[str] | None = None
) -> str | None:
    """``sha256:<hex>`` over the checkpoint's file hashes and the loaded ``dtypes``; None without safetensors files
    (then the caller falls back to hashing the tensors)."""
    model_dir = Path(model_dir)
    weights = sorted(model_dir.glob("*.safetensors"))
    if not weights:
        return None
    memo_file = Path(memo_path) if memo_path is not None else cache_dir() / "file_hashes.json"
    try:
        memo = json.loads(memo_file.read_text()) if memo_file.is_file() else {}
    except (OSError, ValueError):  # a damaged memo only costs a re-hash
        memo = {}
    before = len(memo)
    files = [p for p in (model_dir / "config.json",) if p.is_file()] + weights
    record = {
        "format": FORMAT,
        "files": [[p.name, file_sha256(p, memo)] for p in files],
        "dtypes": sorted(set(dtypes)),
    }
    if len(memo) != before:
        try:
            write_json_atomic(memo, memo_file)
        except OSError:  # a read-only cache: the hashes are simply not remembered
            pass
    return "sha256:" + hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
