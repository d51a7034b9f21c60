"""Pool manifests (hedgespec.pools): round trip, registration, refusal of a mismatched target, atomic writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hedgespec.pools import (
    DrafterEntry,
    PoolManifest,
    PoolMismatchError,
    TargetInfo,
    load_pool,
    pool_path,
    register_drafter,
    save_pool,
)

TARGET = TargetInfo(name="tiny", hash="sha256:aaa", hidden_size=64, vocab_size=512, num_layers=4)
OTHER = TargetInfo(name="tiny", hash="sha256:bbb", hidden_size=64, vocab_size=512, num_layers=4)


def entry(
    name: str, domain: str | None = None, target_hash: str = "sha256:aaa", aux=(0, 1, 2), path=None
) -> DrafterEntry:
    return DrafterEntry(
        name=name,
        domain=domain or name,
        path=path or f"p/{name}",
        target_hash=target_hash,
        vocab_mapping_hash="v" * 8,
        draft_vocab_size=256,
        aux_layer_ids=tuple(aux),
        data_manifest_hash="d" * 8,
        training={"budget": "tiny"},
        metrics={"loss": 1.5},
    )


def write_export(root: Path, name: str, hidden: int = 64, vocab: int = 512, aux=(0, 1, 2)) -> None:
    d = root / "p" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": hidden,
                "vocab_size": vocab,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux)},
            }
        )
    )


def test_register_round_trip_and_replace(tmp_path: Path) -> None:
    path = pool_path(tmp_path, "tiny")
    register_drafter(path, "tiny", TARGET, entry("sql"), decoding={"k": 4, "topk": 1, "tree": "chain"})
    register_drafter(path, "tiny", TARGET, entry("math"))
    register_drafter(path, "tiny", TARGET, entry("sql", domain="sql"))  # same name: replaced, not duplicated
    for n in ("sql", "math"):
        write_export(tmp_path, n)
    pool = load_pool(path, TARGET)
    assert pool.names == ["math", "sql"]
    assert pool.decoding == {"mode": "chain", "num_steps": 4, "topk": 1, "num_draft_tokens": 5}
    assert pool.drafter("sql").aux_layer_ids == (0, 1, 2)
    assert pool.drafter_path("sql") == tmp_path / "p" / "sql"
    raw = yaml.safe_load(path.read_text())
    assert raw["version"] == 1 and raw["target"]["hash"] == "sha256:aaa"
    assert path.read_text().startswith("# hedgespec pool manifest")


def test_pool_of_another_target_is_refused_naming_field(tmp_path: Path) -> None:
    path = pool_path(tmp_path, "tiny")
    register_drafter(path, "tiny", TARGET, entry("sql"))
    write_export(tmp_path, "sql")
    with pytest.raises(PoolMismatchError, match=r"target\.hash"):
        load_pool(path, OTHER)
    # registering a drafter of another target into this pool is refused too
    with pytest.raises(PoolMismatchError, match=r"target\.hash.*drafter 'math'"):
        register_drafter(path, "tiny", OTHER, entry("math", target_hash=OTHER.hash))
    assert load_pool(path).names == ["sql"]  # unchanged


def test_single_drafter_mismatch_names_drafter_and_field(tmp_path: Path) -> None:
    path = pool_path(tmp_path, "tiny")
    good, bad = entry("sql"), entry("bio", target_hash="sha256:zzz")
    save_pool(PoolManifest("tiny", TARGET, {}, (good, bad), tmp_path), path)
    write_export(tmp_path, "sql")
    write_export(tmp_path, "bio")
    with pytest.raises(PoolMismatchError, match=r"drafter 'bio'.*field target_hash"):
        load_pool(path, TARGET)
    # shape fields are read from the export's config.json
    save_pool(PoolManifest("tiny", TARGET, {}, (good, entry("wide")), tmp_path), path)
    write_export(tmp_path, "wide", hidden=128)
    with pytest.raises(PoolMismatchError, match=r"drafter 'wide'.*hidden_size"):
        load_pool(path, TARGET)
    save_pool(PoolManifest("tiny", TARGET, {}, (entry("deep", aux=(0, 1, 9)),), tmp_path), path)
    with pytest.raises(PoolMismatchError, match=r"drafter 'deep'.*aux_layer_ids"):
        load_pool(path, TARGET)
    save_pool(PoolManifest("tiny", TARGET, {}, (entry("gone"),), tmp_path), path)
    with pytest.raises(PoolMismatchError, match=r"drafter 'gone'.*field path"):
        load_pool(path, TARGET)


def test_bad_manifests_and_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="plain name"):
        pool_path(tmp_path, "../x")
    with pytest.raises(FileNotFoundError, match="train/run.py"):
        load_pool(tmp_path / "none.yaml")
    p = tmp_path / "x.yaml"
    p.write_text("version: 7\n")
    with pytest.raises(ValueError, match="version-1"):
        load_pool(p)
    save_pool(PoolManifest("x", TARGET, {}, (entry("a"), entry("a")), tmp_path), p)
    with pytest.raises(ValueError, match="duplicate drafter"):
        load_pool(p)
    raw = yaml.safe_load(p.read_text())
    raw["drafters"] = [{**raw["drafters"][0], "typo_field": 1}]
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="unknown field"):
        load_pool(p)


def test_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = pool_path(tmp_path, "tiny")
    register_drafter(path, "tiny", TARGET, entry("sql"))
    before = path.read_text()

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(yaml, "safe_dump", boom)
    with pytest.raises(RuntimeError):
        register_drafter(path, "tiny", TARGET, entry("math"))
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_pools_module_is_torch_free() -> None:
    code = "import sys, hedgespec.pools; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_a_bench_result_carries_the_pools_provenance(tmp_path: Path) -> None:
    """Each drafter's identity from the manifest, so a committed result names what it measured without the
    (uncommitted) manifest; an inline pool has none."""
    from hedgespec.bench.runners import pool_provenance

    path = pool_path(tmp_path, "tiny")
    register_drafter(path, "tiny", TARGET, entry("sql"))
    register_drafter(path, "tiny", TARGET, entry("math"))
    prov = pool_provenance({"pool": {"manifest": str(path)}})
    assert prov["target_hash"] == "sha256:aaa" and sorted(d["name"] for d in prov["drafters"]) == ["math", "sql"]
    assert next(d for d in prov["drafters"] if d["name"] == "sql") == {
        "name": "sql",
        "domain": "sql",
        "weights_hash": None,
        "data_manifest_hash": "d" * 8,
        "vocab_mapping_hash": "v" * 8,
        "draft_vocab_size": 256,
        "budget": "tiny",
        "final_step": None,
        "features": None,
    }
    assert pool_provenance({"pool": {"drafters": [{"name": "a"}]}}) is None
