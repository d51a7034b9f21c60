"""A Hugging Face target is fingerprinted from its checkpoint files, not tensor by tensor.

Independent truth: hashlib over the file bytes for plain files; for Hugging Face cache links, the blob name
(the LFS object id) is taken as is, which the test proves by giving a blob a name that is not its content's hash.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

import hedgespec.models.fingerprint as fingerprint
from hedgespec.models import load_target
from hedgespec.models.checkpoint_hash import checkpoint_fingerprint, file_sha256
from hedgespec.pools import TargetInfo


def test_hf_cache_links_are_not_read(tmp_path: Path) -> None:
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / ("c" * 40)
    blobs.mkdir()
    snap.mkdir(parents=True)
    name = "a" * 64  # not the sha256 of the bytes below: reading the file would give another value
    (blobs / name).write_bytes(b"weights")
    os.symlink(os.path.relpath(blobs / name, snap), snap / "model.safetensors")
    assert file_sha256(snap / "model.safetensors") == name
    plain_link_target = tmp_path / "w.bin"
    plain_link_target.write_bytes(b"other")
    os.symlink(plain_link_target, tmp_path / "link.safetensors")  # a link to a plain file: read
    assert file_sha256(tmp_path / "link.safetensors") == hashlib.sha256(b"other").hexdigest()


def test_plain_files_are_hashed_once(tmp_path: Path) -> None:
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"x" * 100_000)
    memo: dict[str, str] = {}
    assert file_sha256(f, memo) == hashlib.sha256(b"x" * 100_000).hexdigest()
    (key,) = memo
    memo[key] = "remembered"
    assert file_sha256(f, memo) == "remembered"  # same path, size and mtime: not read again
    f.write_bytes(b"y" * 100_000)
    os.utime(f, ns=(1, 1))
    assert file_sha256(f, memo) == hashlib.sha256(b"y" * 100_000).hexdigest()  # changed: read again


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tok = load_target("tiny")
    out = tmp_path_factory.mktemp("tiny_hf")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def test_hf_target_fingerprint_reads_no_tensor(saved_tiny: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path / "cache"))

    def no_tensor_hash(_sd):
        raise AssertionError("the weights were hashed tensor by tensor")

    monkeypatch.setattr(fingerprint, "state_dict_fingerprint", no_tensor_hash)
    spec = {"name": "t", "kind": "hf", "hf_id": str(saved_tiny), "dtype": "float32", "device": "cpu"}
    model, tok = load_target(spec)
    info = TargetInfo.from_model("t", model, tok)
    assert info.hash == checkpoint_fingerprint(saved_tiny, {"float32"})
    assert TargetInfo.from_model("t", *load_target(spec)).hash == info.hash  # a second load: the same target
    bf16 = TargetInfo.from_model("t", *load_target({**spec, "dtype": "bfloat16"}))
    assert bf16.hash != info.hash  # other logits: another target
    assert (tmp_path / "cache" / "file_hashes.json").is_file()


def test_changed_weights_change_the_fingerprint(saved_tiny: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path / "cache"))
    spec = {"name": "t", "kind": "hf", "hf_id": str(saved_tiny), "dtype": "float32"}
    model, _tok = load_target(spec)
    before = fingerprint.target_fingerprint(model)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    other = tmp_path / "changed"
    model.save_pretrained(other, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (saved_tiny / name).is_file():
            (other / name).write_bytes((saved_tiny / name).read_bytes())
    changed, _ = load_target({**spec, "hf_id": str(other)})
    assert fingerprint.target_fingerprint(changed) != before
    assert checkpoint_fingerprint(tmp_path / "nothing", {"float32"}) is None  # no files: the tensor hash is used
