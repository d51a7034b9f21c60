"""Pool manifests: ``pools/<pool>.yaml`` lists the EAGLE-3 drafters of one pool and the target they belong to.

Written by ``train/run.py`` (one :func:`register_drafter` per trained drafter), read by the engine, the
server and the benchmarks (:func:`load_pool`).  Layout (``version: 1``)::

    pool: embedded
    target: {name, hash, tokenizer_hash, hidden_size, vocab_size, num_layers}
    decoding: {mode: chain, num_steps: 4, topk: 1, num_draft_tokens: 5}   # hedgespec.decoding.DecodingConfig
    drafters:
      - name: sql                                   # unique in the pool
        domain: sql                                 # general = the generalist baseline
        path: embedded/sql                          # export dir, inside the manifest's directory
        external: false                             # true: path may lie outside it (written only when true)
        weights_hash: sha256:...                    # of model.safetensors at registration (optional)
        target_hash: sha256:...                     # the target its features came from
        vocab_mapping_hash: ...                     # sha256 over the d2t/t2d tensors
        draft_vocab_size: 8192
        aux_layer_ids: [1, 14, 26]                  # fused target layers (EAGLE-3, SpecForge indices)
        data_manifest_hash: ...                     # the conversation data it was trained on
        training: {...}                             # budget + resolved SpecForge config
        metrics: {...}                              # final training metrics

:func:`load_pool` refuses a drafter ``path`` that leaves the manifest's directory (``..``, an absolute path
elsewhere, a symlink out) unless the entry says ``external: true``.  With a target it validates every drafter
against it (hash, hidden size, vocabulary, aux layers, files on disk) and raises ``PoolMismatchError`` naming
the drafter and the field; a truncated or corrupted ``model.safetensors`` (header, tensor extents, the
recorded ``weights_hash``) raises ``CorruptCheckpointError`` naming the file.  Writes are atomic
(temporary file + rename, under a lock file), so concurrent multirun jobs never lose an entry.

Torch-free: a target is described by :class:`TargetInfo` (``TargetInfo.from_model`` reads a loaded model).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from hedgespec.decoding import DecodingConfig
from hedgespec.io import write_text_atomic
from hedgespec.ranks import check_rank

MANIFEST_VERSION = 1


class PoolMismatchError(ValueError):
    """A pool (or one of its drafters) does not belong to the given target."""


class CorruptCheckpointError(ValueError):
    """A drafter's weights file is truncated or corrupted (the message names the file)."""


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
    weights_hash: str = ""  # "sha256:<hex>" of model.safetensors; "" = not recorded (older manifests)
    external: bool = False  # true: ``path`` may point outside the manifest's directory
    #: {"base": <drafter of this pool>, "rank": r | "full" | {matrix: r}}: a low-rank expert (hedgespec.engine.lowrank)
    lowrank: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layer_ids"] = list(self.aux_layer_ids)
        for optional in (
            "weights_hash",
            "external",
            "lowrank",
        ):  # written only when set: older manifests stay unchanged
            if not d[optional]:
                del d[optional]
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
        if not isinstance(kw.get("external", False), bool):
            raise ValueError(f"{where}drafter {d['name']!r}: field external must be true or false")
        low = kw.get("lowrank") or {}
        if low and (not isinstance(low, Mapping) or set(low) != {"base", "rank"}):
            raise ValueError(f"{where}drafter {d['name']!r}: field lowrank must be {{base: <drafter>, rank: <r>}}")
        kw["lowrank"] = dict(low)
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
    for d in drafters:
        check_contained(d, path.parent, where)
        _check_lowrank(d, drafters, where)
    return PoolManifest(str(raw["pool"]), target, manifest_decoding(raw.get("decoding"), where), drafters, path.parent)


def _check_lowrank(entry: DrafterEntry, drafters: tuple[DrafterEntry, ...], where: str) -> None:
    """A low-rank expert's ``base`` is another, dense drafter of the same pool; its rank is r >= 1, "full", or one
    per matrix (:func:`hedgespec.ranks.check_rank`)."""
    if not entry.lowrank:
        return
    base, rank = entry.lowrank["base"], entry.lowrank["rank"]
    dense = [d.name for d in drafters if not d.lowrank]
    if base == entry.name or base not in dense:
        raise ValueError(
            f"{where}drafter {entry.name!r}: lowrank.base={base!r} must name another, dense drafter of the pool "
            f"(one of {dense})"
        )
    check_rank(rank, f"{where}drafter {entry.name!r}: lowrank.rank")


def check_contained(entry: DrafterEntry, root: Path, where: str = "") -> None:
    """Refuse a drafter ``path`` that resolves outside ``root`` (the manifest's directory) unless it is external.

    Resolved with symlinks, so ``../x``, an absolute path elsewhere and a symlink out are all refused: a
    manifest copied from someone else cannot make the engine or the server read files outside its pool.
    """
    if entry.external:
        return
    base = Path(os.path.realpath(root))
    p = Path(entry.path)
    resolved = Path(os.path.realpath(p if p.is_absolute() else base / p))
    if resolved != base and base not in resolved.parents:
        raise PoolMismatchError(
            f"{where}drafter {entry.name!r}: path {entry.path!r} resolves to {resolved}, outside the pool "
            f"directory {base}; move the export under it, or mark the entry `external: true` if this is intended"
        )


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
        if check_files:
            _check_files(manifest, d, target, path)


def _check_files(manifest: PoolManifest, d: DrafterEntry, target: TargetInfo, path: Path) -> None:
    """The drafter's export on disk: config.json agrees with the target, model.safetensors is intact."""
    cfg_path = manifest.drafter_path(d) / "config.json"
    if not cfg_path.is_file():
        raise PoolMismatchError(f"pool manifest {path}: drafter {d.name!r}: field path -> {cfg_path} does not exist")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(f"drafter {d.name!r}: {cfg_path} is not valid JSON ({exc})") from exc
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
    weights = manifest.drafter_path(d) / "model.safetensors"
    if weights.is_file() or d.weights_hash:
        check_safetensors(weights, f"drafter {d.name!r}: ")
    if d.weights_hash and weights_hash(weights) != d.weights_hash:
        raise CorruptCheckpointError(
            f"drafter {d.name!r}: {weights} does not match its recorded weights_hash {d.weights_hash} (corrupted "
            "or replaced after registration); re-export it (rerun `python train/run.py` for this drafter)"
        )


#: Bytes per element of the safetensors dtypes (the format's spec, huggingface/safetensors README).
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2}
_DTYPE_BYTES |= {"I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def check_safetensors(path: str | Path, where: str = "") -> dict[str, Any]:
    """Read a ``.safetensors`` header without loading tensors; raise CorruptCheckpointError naming ``path`` when
    the file is missing, truncated or its header is damaged (the layout: an 8-byte little-endian header size,
    the JSON header, then the tensor bytes, every tensor's ``data_offsets`` inside them and covering them)."""
    path = Path(path)

    def bad(why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"{where}{path} is {why}; re-export or re-download it")

    if not path.is_file():
        raise bad("missing")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or 8 + n > size:
            raise bad(f"truncated or not a safetensors file ({size} bytes, header size field {n})")
        try:
            header = json.loads(fh.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad(f"corrupted (its JSON header does not parse: {exc})") from exc
    data, end = size - 8 - n, 0
    for name, info in header.items() if isinstance(header, dict) else []:
        if name == "__metadata__":
            continue
        try:
            begin, stop = (int(x) for x in info["data_offsets"])
            want = math.prod(int(s) for s in info["shape"]) * _DTYPE_BYTES.get(str(info["dtype"]), stop - begin)
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"corrupted (header entry {name!r} is malformed: {exc!r})") from exc
        if not 0 <= begin <= stop <= data or stop - begin != want:
            raise bad(f"truncated or corrupted (tensor {name!r} spans bytes {begin}..{stop} of {data})")
        end = max(end, stop)
    if not isinstance(header, dict) or end != data:
        raise bad(f"truncated or corrupted (the header covers {end} of its {data} data bytes)")
    return header


def weights_hash(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes (what :attr:`DrafterEntry.weights_hash` records)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


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
        f"# hedgespec pool manifest (pool={manifest.pool}), written by `python train/run.py` and "
        "`python scripts/add_drafter.py`; do not edit by hand\n"
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
                    f"{target.name!r} ({target.hash!r}). Use another pool name (train.pool=...) for this target"
                )
            drafters = [d for d in current.drafters if d.name != entry.name] + [entry]
            merged_decoding = dict(current.decoding) or manifest_decoding(decoding)
            manifest = replace(current, drafters=tuple(drafters), decoding=merged_decoding)
        else:
            manifest = PoolManifest(pool, target, manifest_decoding(decoding), (entry,), path.parent)
        save_pool(manifest, path)
    return manifest
