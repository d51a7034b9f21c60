"""Sharded feature capture (hedgespec.training.capture_sharded) against the in-process capture.

The second implementation is hedgespec.training.features.generate_features on the same tiny target in this
process: two shard processes, each rebuilding the target from its spec and capturing every other conversation,
must leave the same directory, file for file and tensor for tensor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _train_helpers import CONVERSATIONS, compose_train, specforge_or_skip, tiny_overrides

from hedgespec.training.capture_sharded import capture_features_sharded, check_shards, shard_env
from hedgespec.training.features import MANIFEST, generate_features

TINY4 = {"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}}
KW = {"aux_layer_ids": [0, 1, 3], "max_length": 96, "max_samples": 5, "dtype": "float32", "progress": False}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    from hedgespec.models import load_target, target_fingerprint

    tmp = tmp_path_factory.mktemp("sharded")
    torch.set_num_threads(1)  # each shard computes on one thread of the two cores: the same kernels here
    model, tok = load_target(TINY4)
    fp = target_fingerprint(model)
    ref = generate_features(model, tok, CONVERSATIONS, tmp / "one", target_hash=fp, **KW)
    sharded = capture_features_sharded(
        TINY4, CONVERSATIONS, tmp / "two", shards=2, target_hash=fp, fingerprint=fp, **KW
    )
    return {"tmp": tmp, "ref": ref, "sharded": sharded, "fp": fp}


def _records(root: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {str(p.relative_to(root)): torch.load(p) for p in sorted(root.rglob("*.ckpt"))}


def test_two_shards_write_the_single_process_directory(both: dict) -> None:
    ref, sharded = both["ref"], both["sharded"]
    assert sharded.key == ref.key and not sharded.reused
    assert (sharded.num_samples, sharded.num_tokens, sharded.num_loss_tokens) == (
        ref.num_samples,
        ref.num_tokens,
        ref.num_loss_tokens,
    )
    a, b = _records(ref.path), _records(sharded.path)
    assert list(a) == list(b) and len(a) == ref.num_samples  # the same names: conversation order
    for name in a:
        for field in ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state"):
            assert torch.equal(a[name][field], b[name][field]), (name, field)
    manifest = json.loads((sharded.path / MANIFEST).read_text())
    assert manifest["backend"] == "transformers-sharded" and manifest["shards"] == 2
    assert not (sharded.path / "shards").exists()


def test_a_second_call_reuses_without_starting_shards(both: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("a shard was started for a cached key"))
    again = capture_features_sharded(
        TINY4, CONVERSATIONS, both["tmp"] / "two", shards=2, target_hash=both["fp"], fingerprint=both["fp"], **KW
    )
    assert again.reused and again.path == both["sharded"].path


def test_a_shard_with_another_target_fails_and_leaves_no_cache(tmp_path: Path) -> None:
    message = r"(?s)shard \d of 2 failed.*loaded a target with hash sha256:\w+; the training"
    with pytest.raises(RuntimeError, match=message):
        capture_features_sharded(
            TINY4, CONVERSATIONS, tmp_path, shards=2, target_hash="k", fingerprint="sha256:other", **KW
        )
    assert not any(tmp_path.rglob(MANIFEST)) and not any(tmp_path.rglob("*.ckpt"))


@pytest.mark.parametrize(
    ("shards", "device", "visible", "message"),
    [
        (0, "cpu", None, r"shards=0 must be an int >= 1"),
        ("2", "cpu", None, r"shards='2' must be an int"),
        (True, "cpu", None, r"shards=True must be an int"),
        (3, "cuda", 2, r"shards=3 but 2 CUDA device\(s\) are visible"),
    ],
)
def test_bad_shard_counts_are_named(shards: object, device: str, visible: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_shards(shards, device, visible)
    assert check_shards(2, "cuda", 2) == 2 and check_shards(4, "cpu") == 4


def test_each_shard_sees_its_own_gpu() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert [shard_env(r, 3, "cuda", env)["CUDA_VISIBLE_DEVICES"] for r in range(3)] == ["4", "5", "6"]
    assert [shard_env(r, 2, "cuda", {})["CUDA_VISIBLE_DEVICES"] for r in range(2)] == ["0", "1"]
    assert "CUDA_VISIBLE_DEVICES" not in shard_env(0, 2, "cpu", {})


def test_sharding_is_refused_for_the_deepspeed_capture(tmp_path: Path) -> None:
    specforge_or_skip()
    from hedgespec.training import train_drafter

    cfg = compose_train(tmp_path, *tiny_overrides("++train.features.backend=deepspeed", "++train.features.shards=2"))
    with pytest.raises(ValueError, match=r"train\.features\.shards=2 shards the transformers capture; the deepspeed"):
        train_drafter(cfg)


def test_a_training_run_with_two_capture_shards_registers_with_the_unsharded_key(tmp_path: Path) -> None:
    """``++train.features.shards=2``: the features come from two shard processes; the run key is the one an
    unsharded run of the same settings has (the features are the same), so either resumes the other."""
    specforge_or_skip()
    from hedgespec.training import train_drafter

    res = train_drafter(compose_train(tmp_path, *tiny_overrides("++train.features.shards=2")))
    assert res.final_step == 6 and res.manifest is not None and res.stages["features"]["reused"] is False
    manifest = json.loads(Path(res.stages["features"]["path"], MANIFEST).read_text())
    assert manifest["shards"] == 2
    marker = json.loads((res.run_dir / ".hedgespec-run.json").read_text())
    again = train_drafter(compose_train(tmp_path, *tiny_overrides()))  # unsharded: the same run, nothing redone
    assert json.loads((again.run_dir / ".hedgespec-run.json").read_text())["key"] == marker["key"]
    assert again.stages["features"]["reused"] is True and again.final_step == 6
