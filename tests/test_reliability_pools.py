"""Pool manifests under faults: concurrent writers, damaged weights files, paths that leave the pool directory."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from hedgespec.pools import (
    CorruptCheckpointError,
    DrafterEntry,
    PoolManifest,
    PoolMismatchError,
    TargetInfo,
    check_safetensors,
    load_pool,
    pool_path,
    register_drafter,
    save_pool,
    weights_hash,
)

TARGET = TargetInfo(name="tiny", hash="sha256:aaa", hidden_size=64, vocab_size=512, num_layers=4)
PER_WRITER = 20


def _entry(name: str, path: str | None = None, **kw) -> DrafterEntry:
    return DrafterEntry(
        name=name,
        domain="general",
        path=path if path is not None else f"p/{name}",
        target_hash=TARGET.hash,
        vocab_mapping_hash="v",
        draft_vocab_size=256,
        aux_layer_ids=(0, 1, 2),
        data_manifest_hash="d",
        **kw,
    )


def _writer(path: str, prefix: str, barrier) -> None:
    barrier.wait()  # both processes start registering at the same moment
    for i in range(PER_WRITER):
        register_drafter(path, "tiny", TARGET, _entry(f"{prefix}{i}"))


def test_two_processes_registering_at_once_both_land(tmp_path: Path) -> None:
    path = pool_path(tmp_path, "tiny")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(str(path), p, barrier)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    names = load_pool(path).names
    assert sorted(names) == sorted(f"{p}{i}" for p in "ab" for i in range(PER_WRITER))
    assert [n for n in names if n.startswith("a")] == [f"a{i}" for i in range(PER_WRITER)]  # each writer's order kept
    assert not [f for f in tmp_path.iterdir() if f.suffix == ".tmp"]  # no temporary file left behind


# -- safetensors files: the library writes them, the check must accept every one and refuse every damage -----


def _export(root: Path, name: str = "d0") -> Path:
    d = root / "p" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(
        json.dumps(
            {"hidden_size": 64, "vocab_size": 512, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}}
        )
    )
    rng = np.random.default_rng(0)
    tensors = {
        "fc.weight": rng.standard_normal((64, 192)).astype(np.float32),
        "norm.weight": rng.standard_normal(64).astype(np.float16),
        "d2t": rng.integers(0, 512, 256).astype(np.int64),
        "t2d": rng.integers(0, 2, 512).astype(np.bool_),
        "scalar": np.array(3.0, dtype=np.float64),
    }
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d / "model.safetensors"


def _manifest(root: Path, weights: Path | None) -> Path:
    path = pool_path(root, "tiny")
    entry = _entry("d0", weights_hash=weights_hash(weights) if weights is not None else "")
    save_pool(PoolManifest("tiny", TARGET, {}, (entry,), root), path)
    return path


def test_intact_export_passes(tmp_path: Path) -> None:
    weights = _export(tmp_path)
    header = check_safetensors(weights)
    assert set(header) - {"__metadata__"} == set(load_file(str(weights)))
    assert load_pool(_manifest(tmp_path, weights), TARGET).names == ["d0"]


def _truncate(f: Path, keep: int) -> None:
    f.write_bytes(f.read_bytes()[:keep])


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda f: _truncate(f, f.stat().st_size - 7), id="truncated-data"),
        pytest.param(lambda f: _truncate(f, 40), id="truncated-header"),
        pytest.param(lambda f: _truncate(f, 3), id="truncated-size-field"),
        pytest.param(lambda f: f.write_bytes(b"\x10" + f.read_bytes()[1:]), id="header-size-corrupted"),
        pytest.param(lambda f: f.write_bytes(f.read_bytes()[:12] + b"#" + f.read_bytes()[13:]), id="header-json"),
        pytest.param(lambda f: f.write_bytes(f.read_bytes() + b"\0" * 16), id="trailing-bytes"),
    ],
)
def test_damaged_header_or_length_is_refused_naming_the_file(tmp_path: Path, damage) -> None:
    weights = _export(tmp_path)
    manifest = _manifest(tmp_path, None)  # no recorded hash: the structural check alone must catch it
    damage(weights)
    with pytest.raises(SafetensorError):  # independent truth: the safetensors library refuses it too
        load_file(str(weights))
    with pytest.raises(CorruptCheckpointError, match=str(weights)) as err:
        load_pool(manifest, TARGET)
    assert "drafter 'd0'" in str(err.value)


def test_flipped_weight_byte_is_caught_by_the_recorded_hash(tmp_path: Path) -> None:
    weights = _export(tmp_path)
    manifest = _manifest(tmp_path, weights)
    blob = bytearray(weights.read_bytes())
    blob[-100] ^= 0x40  # inside fc.weight's data: the file still parses
    weights.write_bytes(bytes(blob))
    assert set(load_file(str(weights)))  # the library loads it without complaint
    with pytest.raises(CorruptCheckpointError, match=rf"{weights}.*weights_hash"):
        load_pool(manifest, TARGET)
    assert load_pool(manifest).names == ["d0"]  # without a target (no file checks) the manifest still reads


def test_missing_weights_with_a_recorded_hash(tmp_path: Path) -> None:
    weights = _export(tmp_path)
    manifest = _manifest(tmp_path, weights)
    weights.unlink()
    with pytest.raises(CorruptCheckpointError, match=rf"{weights} is missing"):
        load_pool(manifest, TARGET)


def test_corrupted_config_json_names_the_file(tmp_path: Path) -> None:
    weights = _export(tmp_path)
    manifest = _manifest(tmp_path, weights)
    cfg = weights.parent / "config.json"
    cfg.write_text(cfg.read_text()[:20])
    with pytest.raises(CorruptCheckpointError, match=rf"{cfg} is not valid JSON"):
        load_pool(manifest, TARGET)


# -- drafter paths must stay inside the pool directory -------------------------------------------------------


def _raw_manifest(root: Path, path: str, **extra) -> Path:
    man = _manifest(root, None)
    raw = yaml.safe_load(man.read_text())
    raw["drafters"][0].update(path=path, **extra)
    man.write_text(yaml.safe_dump(raw))
    return man


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_path_outside_the_pool_is_refused(tmp_path: Path, kind: str) -> None:
    root, outside = tmp_path / "pools", tmp_path / "elsewhere"
    outside.mkdir()
    root.mkdir()
    path = {"dotdot": "../elsewhere", "absolute": str(outside), "symlink": "link"}[kind]
    if kind == "symlink":
        (root / "link").symlink_to(outside)
    man = _raw_manifest(root, path)
    with pytest.raises(PoolMismatchError, match=rf"drafter 'd0': path '{path}' resolves to {outside}, outside"):
        load_pool(man)
    assert load_pool(_raw_manifest(root, path, external=True)).drafter("d0").external is True


def test_paths_inside_the_pool_load(tmp_path: Path) -> None:
    root = tmp_path / "pools"
    root.mkdir()
    for path in ("tiny/sql", "./tiny/../tiny/sql", str(root / "tiny" / "sql")):  # train/run.py writes the first
        man = load_pool(_raw_manifest(root, path))
        assert man.drafter_path("d0").resolve() == (root / "tiny" / "sql").resolve()
    with pytest.raises(ValueError, match="field external must be true or false"):
        load_pool(_raw_manifest(root, "tiny/sql", external="yes"))


def test_optional_fields_are_not_written_when_unset(tmp_path: Path) -> None:
    man = _manifest(tmp_path, None)
    assert "weights_hash" not in man.read_text() and "external" not in man.read_text()


def test_engine_load_of_a_damaged_drafter_names_the_file(tmp_path: Path) -> None:
    """Inline ``kind: path`` pools load through Eagle3Drafter.load, not load_pool: the same structural check."""
    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.fixtures import random_drafter, tiny_llama

    model = tiny_llama()
    random_drafter(model, seed=0).save(tmp_path / "d")
    assert Eagle3Drafter.load(tmp_path / "d", model).name == "d"
    _truncate(tmp_path / "d" / "model.safetensors", 40)
    with pytest.raises(CorruptCheckpointError, match=r"drafter 'd': .*model\.safetensors"):
        Eagle3Drafter.load(tmp_path / "d", model)
    (tmp_path / "d" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"drafter 'd': .*config\.json is not valid JSON"):
        Eagle3Drafter.load(tmp_path / "d", model)
