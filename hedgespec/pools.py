"""Pool manifests: ``pools/<pool>.yaml`` lists the EAGLE-3 drafters of one pool and the target they belong to.

Written by ``train/run.py`` (one :func:`register_drafter` per trained drafter), read by the engine, the
server and the benchmarks (:func:`load_pool`).  Layout (``version: 1``)::

    pool: embedded
    target: {name, hash, tokenizer_hash, hidden_size, vocab_size, num_layers}
    decoding: {mode: chain, num_steps: 4, topk: 1, num_draft_tokens: 5}   # hedgespec.decoding.DecodingConfig
    drafters:
      - name: sql                                   # unique in the pool
        domain: sql                                 # general = the generalist baseline
        path: embedded/sql                          # export dir, relative to the manifest's directory
        target_hash: sha256:...                     # the target its features came from
        vocab_mapping_hash: ...                     # sha256 over the d2t/t2d tensors
        draft_vocab_size: 8192
        aux_layer_ids: [1, 14, 26]                  # fused target layers (EAGLE-3, SpecForge indices)
        data_manifest_hash: ...                     # the conversation data it was trained on
        training: {...}                             # budget + resolved SpecForge config
        metrics: {...}                              # final training metrics

:func:`load_pool` validates every drafter against the target (hash, hidden size, vocabulary, aux layers,
files on disk) and raises ``PoolMismatchError`` naming the drafter and the field.  Writes are atomic
(temporary file + rename, under a lock file), so concurrent multirun jobs never lose an entry.

Torch-free: a target is described by :class:`TargetInfo` (``TargetInfo.from_model`` reads a loaded model).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from hedgespec.decoding import DecodingConfig
from hedgespec.io import write_text_atomic

MANIFEST_VERSION = 1


class PoolMismatchError(ValueError):
    """A pool (or one of its drafters) does not belong to the given target."""


@dataclass(frozen=True)
class TargetInfo:
    """What a drafter must agree with: the target's identity and the shapes EAGLE-3 depends on."""

    name: str
    hash: str
    hidden_size: int
    vocab_size: int
    num_layers: int
    tokenizer_hash: str = ""

    @classmethod
    def from_model(cls, name: str, model: Any, tokenizer: Any | None = None) -> TargetInfo:
        """Describe a loaded transformers target (hashes via ``hedgespec.models`` fingerprints)."""
        from hedgespec.models import target_fingerprint, tokenizer_fingerprint

        cfg = getattr(model.config, "text_config", None) or model.config
        return cls(
            name=name,
            hash=target_fingerprint(model),
            hidden_size=int(cfg.hidden_size),
            vocab_size=int(cfg.vocab_size),
            num_layers=int(cfg.num_hidden_layers),
            tokenizer_hash=tokenizer_fingerprint(tokenizer) if tokenizer is not None else "",
        )


@dataclass(frozen=True)
class DrafterEntry:
    name: str
    domain: str
    path: str
    target_hash: str
    vocab_mapping_hash: str
    draft_vocab_size: int
    aux_layer_ids: tuple[int, ...]
    data_manifest_hash: str
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layer_ids"] = list(self.aux_layer_ids)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "") -> DrafterEntry:
        required = (
            "name",
            "domain",
            "path",
            "target_hash",
            "vocab_mapping_hash",
            "draft_vocab_size",
            "aux_layer_ids",
            "data_manifest_hash",
        )
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"{where}drafter {d.get('name', '?')!r} lacks field(s) {missing}")
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"{where}drafter {d.get('name', '?')!r} has unknown field(s) {sorted(unknown)}")
        kw = dict(d)
        kw["aux_layer_ids"] = tuple(int(i) for i in kw["aux_layer_ids"])
        kw["draft_vocab_size"] = int(kw["draft_vocab_size"])
        return cls(**kw)


@dataclass(frozen=True)
class PoolManifest:
    pool: str
    target: TargetInfo
    decoding: dict[str, Any]
    drafters: tuple[DrafterEntry, ...]
    root: Path = Path(".")  # directory drafter paths are relative to (the manifest's directory)

    def drafter(self, name: str) -> DrafterEntry:
        for d in self.drafters:
            if d.name == name:
                return d
        raise KeyError(f"pool {self.pool!r} has no drafter {name!r}; it has {[d.name for d in self.drafters]}")

    def drafter_path(self, entry: DrafterEntry | str) -> Path:
        entry = self.drafter(entry) if isinstance(entry, str) else entry
        p = Path(entry.path)
        return p if p.is_absolute() else self.root / p

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.drafters]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "pool": self.pool,
            "target": asdict(self.target),
            "decoding": dict(self.decoding),
            "drafters": [d.to_dict() for d in self.drafters],
        }


def pool_path(pools_dir: str | Path, pool: str) -> Path:
    """``<pools_dir>/<pool>.yaml``; ``pool`` must be a plain name."""
    if not pool or "/" in pool or pool.startswith("."):
        raise ValueError(f"pool={pool!r}: expected a plain name such as 'embedded'")
    return Path(pools_dir) / f"{pool}.yaml"


def _parse(raw: Any, path: Path) -> PoolManifest:
    where = f"pool manifest {path}: "
    if not isinstance(raw, dict) or raw.get("version") != MANIFEST_VERSION:
        raise ValueError(f"{where}not a version-{MANIFEST_VERSION} hedgespec pool manifest")
    try:
        target = TargetInfo(**raw["target"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{where}bad 'target' block ({exc})") from exc
    drafters = tuple(DrafterEntry.from_dict(d, where) for d in raw.get("drafters") or [])
    names = [d.name for d in drafters]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{where}duplicate drafter name(s) {dup}")
    return PoolManifest(str(raw["pool"]), target, manifest_decoding(raw.get("decoding"), where), drafters, path.parent)


def _check(field_name: str, drafter: str, got: Any, want: Any, target: str, path: Path) -> None:
    if got != want:
        raise PoolMismatchError(
            f"pool manifest {path}: drafter {drafter!r} does not match target {target!r}: "
            f"field {field_name} is {got!r}, the target has {want!r}"
        )


def validate_pool(
    manifest: PoolManifest, target: TargetInfo, path: Path | None = None, check_files: bool = True
) -> None:
    """Raise PoolMismatchError naming the drafter and field for the first disagreement with ``target``."""
    path = path or manifest.root
    if manifest.target.hash != target.hash:
        raise PoolMismatchError(
            f"pool manifest {path}: pool {manifest.pool!r} was trained for target {manifest.target.name!r} "
            f"(field target.hash {manifest.target.hash!r}), not for target {target.name!r} ({target.hash!r})"
        )
    for d in manifest.drafters:
        _check("target_hash", d.name, d.target_hash, target.hash, target.name, path)
        for i in d.aux_layer_ids:
            if not 0 <= i < target.num_layers:
                raise PoolMismatchError(
                    f"pool manifest {path}: drafter {d.name!r}: field aux_layer_ids={list(d.aux_layer_ids)} "
                    f"has layer {i} outside the target's {target.num_layers} layers"
                )
        if not 0 < d.draft_vocab_size <= target.vocab_size:
            raise PoolMismatchError(
                f"pool manifest {path}: drafter {d.name!r}: field draft_vocab_size="
                f"{d.draft_vocab_size} exceeds the target vocabulary {target.vocab_size}"
            )
        if not check_files:
            continue
        cfg_path = manifest.drafter_path(d) / "config.json"
        if not cfg_path.is_file():
            raise PoolMismatchError(
                f"pool manifest {path}: drafter {d.name!r}: field path -> {cfg_path} does not exist"
            )
        cfg = json.loads(cfg_path.read_text())
        _check(
            "hidden_size (config.json)",
            d.name,
            cfg.get("target_hidden_size", cfg.get("hidden_size")),
            target.hidden_size,
            target.name,
            path,
        )
        _check("vocab_size (config.json)", d.name, cfg.get("vocab_size"), target.vocab_size, target.name, path)
        aux = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if aux is not None:
            _check("aux_layer_ids (config.json)", d.name, tuple(aux), d.aux_layer_ids, target.name, path)


def load_pool(path: str | Path, target: TargetInfo | None = None, check_files: bool = True) -> PoolManifest:
    """Read a pool manifest; with ``target``, refuse it unless every drafter matches (see module doc)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pool manifest {path} does not exist; train drafters with `python train/run.py`")
    manifest = _parse(yaml.safe_load(path.read_text()), path)
    if target is not None:
        validate_pool(manifest, target, path, check_files)
    return manifest


def save_pool(manifest: PoolManifest, path: str | Path) -> Path:
    """Write ``manifest`` to ``path`` atomically (temporary file in the same directory, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# hedgespec pool manifest, written by `python train/run.py` (pool={manifest.pool}); do not edit by hand\n"
    )
    return write_text_atomic(header + yaml.safe_dump(manifest.to_dict(), sort_keys=False), path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def manifest_decoding(raw: Mapping[str, Any] | None, where: str = "") -> dict[str, Any]:
    """A manifest's ``decoding`` block as :class:`DecodingConfig` fields (``{}`` when absent).

    Manifests written before the typed decoding config spelled it ``{k, topk, tree}``; they are read as
    ``{num_steps, topk, mode}``.
    """
    if not raw:
        return {}
    raw = dict(raw)
    if "k" in raw or "tree" in raw:
        raw = {
            "mode": raw.get("tree", "chain"),
            "num_steps": raw.get("k"),
            "topk": raw.get("topk", 1),
            "num_draft_tokens": raw.get("num_draft_tokens"),
        }
    try:
        return DecodingConfig.from_dict(raw).to_dict()
    except ValueError as exc:
        raise PoolMismatchError(f"{where}bad 'decoding' block ({exc})") from exc


def register_drafter(
    path: str | Path, pool: str, target: TargetInfo, entry: DrafterEntry, decoding: Mapping[str, Any] | None = None
) -> PoolManifest:
    """Add (or replace, by name) ``entry`` in ``path``, creating the manifest if needed.

    Refuses (PoolMismatchError) a manifest that belongs to another target or another pool name, and an entry
    whose ``target_hash`` is not the target's.  Existing entries are kept as they are.
    """
    path = Path(path)
    if entry.target_hash != target.hash:
        raise PoolMismatchError(
            f"drafter {entry.name!r}: field target_hash {entry.target_hash!r} is not the hash "
            f"of target {target.name!r} ({target.hash!r})"
        )
    with _locked(path):
        if path.exists():
            current = load_pool(path, check_files=False)
            if current.pool != pool:
                raise PoolMismatchError(f"pool manifest {path} holds pool {current.pool!r}, not {pool!r}")
            if current.target.hash != target.hash:
                raise PoolMismatchError(
                    f"pool manifest {path}: pool {pool!r} belongs to target {current.target.name!r} "
                    f"(field target.hash {current.target.hash!r}); drafter {entry.name!r} was trained on target "
                    f"{target.name!r} ({target.hash!r}). Use another pool name (pool=...) for this target"
                )
            drafters = [d for d in current.drafters if d.name != entry.name] + [entry]
            merged_decoding = dict(current.decoding) or manifest_decoding(decoding)
            manifest = replace(current, drafters=tuple(drafters), decoding=merged_decoding)
        else:
            manifest = PoolManifest(pool, target, manifest_decoding(decoding), (entry,), path.parent)
        save_pool(manifest, path)
    return manifest
