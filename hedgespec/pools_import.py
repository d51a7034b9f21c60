"""Published EAGLE-3 drafters in a pool: register a checkpoint this project did not train.

Behind ``scripts/add_drafter.py`` (docs/pools.md). A source is a local directory or a Hugging Face id resolved
from the local Hugging Face cache only (nothing is downloaded). Two public layouts are read:

- **SGLang / SpecForge** (what ``specforge export --to sglang`` writes, e.g. the SGLang EAGLE-3 checkpoints):
  ``config.json`` with ``architectures: [LlamaForCausalLMEagle3]``, ``draft_vocab_size``,
  ``eagle_config.eagle_aux_hidden_state_layer_ids``; ``model.safetensors`` (or ``pytorch_model.bin``) holding
  the head and its ``d2t``/``t2d`` draft-vocabulary mapping.
- **EAGLE repository** (Li et al. 2025, EAGLE-3; e.g. ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``): ``config.json``
  of a one-layer ``LlamaForCausalLM`` with ``draft_vocab_size`` and no aux layer ids, weights with ``d2t``/``t2d``
  in ``pytorch_model.bin``. The EAGLE repository fuses the target's layers at SGLang/SpecForge's default ids
  (hedgespec/engine/eagle3.py ``default_aux_layer_ids``), which the pool copy records explicitly.

The checkpoint is validated against the pool's target like a trained export (hidden size, vocabulary, aux layers,
a consistent d2t/t2d mapping, tensor shapes; ``Eagle3Drafter.validate``), then copied into the pool directory in
the SGLang layout, pickle weights converted to ``model.safetensors`` (read with ``torch.load(weights_only=True)``
only), or, with ``external=True``, recorded by absolute path. The entry's ``training`` block says
``source: published`` with the origin (HF id and commit, or the original directory). Every refusal happens
before the manifest is written, so a failed registration leaves it byte for byte as it was.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from huggingface_hub import snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError
from safetensors.torch import load_file, save_file

from hedgespec.engine.eagle3 import EAGLE3_ARCH, Eagle3Drafter, default_aux_layer_ids
from hedgespec.io import atomic_dir
from hedgespec.pools import (
    DrafterEntry,
    PoolManifest,
    PoolMismatchError,
    TargetInfo,
    check_safetensors,
    load_pool,
    register_drafter,
    validate_pool,
    weights_hash,
)
from hedgespec.training.hashing import tensors_hash

LAYOUTS = ("sglang", "eagle")
#: Weight files tried in this order; an ``.index.json`` lists shards (``weight_map``).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class PublishedDrafterError(ValueError):
    """A published checkpoint cannot be registered (the message names the drafter, the file and the cause)."""


@dataclass(frozen=True)
class Source:
    """A resolved checkpoint directory: where it came from and what it holds."""

    directory: Path
    origin: str  # the HF id, or the absolute original directory
    revision: str | None  # the HF commit of the cached snapshot (None for a local directory)
    layout: str  # sglang | eagle
    config: dict[str, Any]
    weight_files: tuple[Path, ...]
    pickled: bool  # weights in pytorch_model.bin (converted to safetensors when copied)


@dataclass(frozen=True)
class AddResult:
    entry: DrafterEntry
    manifest: Path
    export: Path  # the drafter's directory as the pool reads it
    converted: bool  # pickle weights were converted to model.safetensors
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- the source
def resolve_source(path: str, name: str, revision: str | None = None, cache_dir: str | Path | None = None) -> Source:
    """A local directory, else a Hugging Face id looked up in the local cache (``local_files_only``)."""
    p = Path(str(path)).expanduser()
    if p.is_dir():
        return _read_source(p.resolve(), str(p.resolve()), None, name)
    if p.exists():
        raise PublishedDrafterError(f"drafter {name!r}: path={path} is a file; pass the checkpoint's directory")
    if not _HF_ID.match(str(path)):
        raise PublishedDrafterError(
            f"drafter {name!r}: path={path!r} is neither a directory nor a Hugging Face id (owner/name)"
        )
    try:
        snap = Path(
            snapshot_download(str(path), revision=revision, cache_dir=cache_dir, local_files_only=True)
        ).resolve()
    except LocalEntryNotFoundError as exc:
        where = f" (cache {cache_dir})" if cache_dir else ""
        raise PublishedDrafterError(
            f"drafter {name!r}: Hugging Face model {path!r}{'@' + revision if revision else ''} is not in the local "
            f"cache{where}; this command never downloads: fetch it first with `huggingface-cli download {path}`"
            f"{' --revision ' + revision if revision else ''}, or pass path=<local directory>"
        ) from exc
    return _read_source(snap, str(path), snap.name, name)


def _read_source(directory: Path, origin: str, revision: str | None, name: str) -> Source:
    cfg_path = directory / "config.json"
    if not cfg_path.is_file():
        raise PublishedDrafterError(f"drafter {name!r}: {cfg_path} not found (an EAGLE-3 checkpoint has config.json)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PublishedDrafterError(f"drafter {name!r}: {cfg_path} is not valid JSON ({exc})") from exc
    if not isinstance(cfg, dict) or "draft_vocab_size" not in cfg:
        raise PublishedDrafterError(
            f"drafter {name!r}: {cfg_path} has no draft_vocab_size; not an EAGLE-3 checkpoint "
            "(EAGLE-1/2 heads have no draft vocabulary and cannot be served as EAGLE-3)"
        )
    files, pickled = _weight_files(directory, name)
    layout = "sglang" if EAGLE3_ARCH in (cfg.get("architectures") or []) else "eagle"
    return Source(directory, origin, revision, layout, cfg, files, pickled)


def _weight_files(directory: Path, name: str) -> tuple[tuple[Path, ...], bool]:
    for fname in WEIGHT_FILES:
        f = directory / fname
        if not f.is_file():
            continue
        if fname.endswith(".index.json"):
            try:
                shards = sorted(set(json.loads(f.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                raise PublishedDrafterError(f"drafter {name!r}: {f} is not a weights index ({exc!r})") from exc
            files = tuple(directory / s for s in shards)
        else:
            files = (f,)
        return files, ".bin" in fname
    found = sorted(p.name for p in directory.iterdir())
    raise PublishedDrafterError(f"drafter {name!r}: {directory} has none of {list(WEIGHT_FILES)} (it has {found})")


def read_state(files: tuple[Path, ...], pickled: bool, name: str) -> dict[str, torch.Tensor]:
    """All tensors of the checkpoint (``model.`` prefixes dropped). Pickle files are opened with
    ``torch.load(weights_only=True)``: anything but a flat name -> tensor dict is refused, never executed."""
    state: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.is_file():
            raise PublishedDrafterError(f"drafter {name!r}: weights shard {f} is missing")
        if pickled:
            part = _load_pickle(f, name)
        else:
            check_safetensors(f, f"drafter {name!r}: ")
            part = load_file(f)
        state.update({k.removeprefix("model."): v for k, v in part.items()})
    return state


def _load_pickle(f: Path, name: str) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for foreign objects, RuntimeError/EOFError for damaged files
        raise PublishedDrafterError(
            f"drafter {name!r}: {f} cannot be read as plain tensors ({type(exc).__name__}: {str(exc)[:300]}); "
            "it holds non-tensor pickle content or is damaged, and is never unpickled with weights_only=False"
        ) from exc
    if not isinstance(obj, dict):
        raise PublishedDrafterError(f"drafter {name!r}: {f} holds a {type(obj).__name__}, not a name -> tensor dict")
    bad = {str(k): type(v).__name__ for k, v in obj.items() if not (isinstance(k, str) and torch.is_tensor(v))}
    if bad:
        raise PublishedDrafterError(
            f"drafter {name!r}: {f} holds non-tensor pickle content {dict(list(bad.items())[:5])}; "
            "a checkpoint must be a flat name -> tensor dict"
        )
    return obj


# ---------------------------------------------------------------------------------------------- validation
def pool_config(src: Source, target: TargetInfo) -> dict[str, Any]:
    """The checkpoint's ``config.json`` in the SGLang layout the pool reads (architecture, explicit aux ids)."""
    cfg = dict(src.config)
    cfg["architectures"] = [EAGLE3_ARCH]
    eagle = dict(cfg.get("eagle_config") or {})
    if eagle.get("eagle_aux_hidden_state_layer_ids") is None:  # EAGLE layout: the repository's fixed capture ids
        eagle["eagle_aux_hidden_state_layer_ids"] = list(default_aux_layer_ids(target.num_layers))
    cfg["eagle_config"] = eagle
    return cfg


def validate_checkpoint(
    src: Source, state: dict[str, torch.Tensor], target: TargetInfo, name: str
) -> tuple[dict[str, Any], Eagle3Drafter]:
    """Refuse a checkpoint that does not fit ``target``; returns its pool config and the loaded head."""
    where = f"drafter {name!r} ({src.directory / 'config.json'})"
    cfg = pool_config(src, target)
    hidden = cfg.get("target_hidden_size", cfg.get("hidden_size"))
    for field_name, got, want in (
        ("hidden_size", cfg.get("hidden_size"), target.hidden_size),
        ("target_hidden_size", hidden, target.hidden_size),
        ("vocab_size", cfg.get("vocab_size"), target.vocab_size),
    ):
        if got != want:
            raise PoolMismatchError(
                f"{where}: {field_name} is {got!r}, target {target.name!r} has {want!r}; this checkpoint belongs "
                "to another target"
            )
    missing = [k for k in ("d2t", "t2d") if k not in state]
    if missing:
        raise PublishedDrafterError(
            f"drafter {name!r}: {', '.join(str(f) for f in src.weight_files)} has no draft-vocabulary mapping "
            f"tensor(s) {missing} (EAGLE-3 checkpoints store d2t and t2d next to the weights)"
        )
    shape = SimpleNamespace(
        config=SimpleNamespace(
            hidden_size=target.hidden_size, vocab_size=target.vocab_size, num_hidden_layers=target.num_layers
        )
    )
    try:
        head = Eagle3Drafter.from_state(cfg, state, name=name)
        head.validate(shape)
    except ValueError as exc:
        raise PoolMismatchError(f"{where}: {exc}") from exc
    return cfg, head


# -------------------------------------------------------------------------------------------- registration
def _manifest_target(
    manifest: Path, pool: str, target: TargetInfo | None
) -> tuple[str, TargetInfo, list[DrafterEntry]]:
    """The pool's name, target and entries: from the manifest when it exists, else ``target`` (required)."""
    if manifest.exists():
        current = load_pool(manifest, check_files=False)
        if target is not None and target.hash != current.target.hash:
            raise PoolMismatchError(
                f"pool manifest {manifest} belongs to target {current.target.name!r} ({current.target.hash}), "
                f"not to {target.name!r} ({target.hash}); pass another pool"
            )
        return current.pool, current.target, list(current.drafters)
    if target is None:
        raise FileNotFoundError(
            f"pool manifest {manifest} does not exist; pass target=<name> (e.g. target=llama8b) to create it"
        )
    return pool, target, []


def _copy_into_pool(src: Source, state: dict[str, torch.Tensor], cfg: dict[str, Any], dest: Path) -> None:
    """Write the SGLang layout at ``dest``: safetensors bytes copied as they are, pickle weights converted."""
    with atomic_dir(dest) as tmp:
        renamed = not src.pickled and any(k.startswith("model.") for k in check_safetensors(src.weight_files[0]))
        if src.pickled or len(src.weight_files) > 1 or renamed:
            save_file({k: v.detach().contiguous().clone() for k, v in state.items()}, str(tmp / "model.safetensors"))
        else:
            shutil.copyfile(src.weight_files[0], tmp / "model.safetensors")
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _pool_warnings(entry: DrafterEntry, others: list[DrafterEntry]) -> list[str]:
    """What SGLang would refuse when serving the pool together (it reads aux ids and the draft vocab once)."""
    out = []
    for other in others:
        for attr in ("aux_layer_ids", "draft_vocab_size"):
            if getattr(other, attr) != getattr(entry, attr):
                out.append(
                    f"drafter {entry.name!r} has {attr}={getattr(entry, attr)}, drafter {other.name!r} has "
                    f"{getattr(other, attr)}: the engine serves them together, an SGLang server refuses the pool"
                )
    return out


def _check_destination(src: Source, dest: Path, name: str, external: bool, replacing: bool) -> None:
    """``external`` needs what the pool loader reads as it is; a copy never lands on an unlisted directory."""
    if external and (src.pickled or len(src.weight_files) != 1 or src.layout != "sglang"):
        raise PublishedDrafterError(
            f"drafter {name!r}: external=true needs an SGLang-layout checkpoint with one model.safetensors "
            f"({src.directory} has the {src.layout} layout, weights {[f.name for f in src.weight_files]}); "
            "drop external=true to convert it into the pool directory"
        )
    if not external and dest.exists() and not replacing:
        raise ValueError(f"drafter {name!r}: {dest} already exists; remove it or choose another name=")


def add_published_drafter(
    manifest: str | Path,
    name: str,
    path: str,
    domain: str = "general",
    external: bool = False,
    target: TargetInfo | None = None,
    pool: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    overwrite: bool = False,
    decoding: dict[str, Any] | None = None,
) -> AddResult:
    """Validate the checkpoint at ``path`` (directory or cached HF id) and add it to ``manifest`` as ``name``.

    ``target`` is needed only to create a new manifest (an existing one names its target); ``pool`` is the new
    manifest's pool name (default: the file's stem). Refuses an existing drafter name unless ``overwrite``.
    """
    manifest = Path(manifest)
    if not _NAME.match(str(name)):
        raise ValueError(f"name={name!r}: expected a plain drafter name such as 'eagle3-general'")
    if not str(domain or "").strip():
        raise ValueError("domain= is empty; pass the drafter's domain (general for a generalist)")
    pool, info, entries = _manifest_target(manifest, pool or manifest.stem, target)
    if not overwrite and name in [e.name for e in entries]:
        raise ValueError(
            f"pool manifest {manifest} already has a drafter named {name!r}; choose another name= "
            "or pass overwrite=true to replace it"
        )
    src = resolve_source(path, name, revision, cache_dir)
    state = read_state(src.weight_files, src.pickled, name)
    cfg, head = validate_checkpoint(src, state, info, name)
    dest = src.directory if external else manifest.parent / pool / name
    _check_destination(src, dest, name, external, replacing=overwrite and name in [e.name for e in entries])
    entry = _entry(src, head, info, name, domain, dest, pool, external)
    created = not external and not dest.exists()
    try:
        if not external:
            _copy_into_pool(src, state, cfg, dest)
            entry = DrafterEntry.from_dict(
                {**entry.to_dict(), "weights_hash": weights_hash(dest / "model.safetensors")}
            )
        validate_pool(PoolManifest(pool, info, {}, (entry,), manifest.parent), info, manifest, check_files=True)
    except Exception:
        if created:  # a copy the manifest never listed is not left behind
            shutil.rmtree(dest, ignore_errors=True)
        raise
    others = [e for e in entries if e.name != name]
    register_drafter(manifest, pool, info, entry, decoding=decoding)
    return AddResult(entry, manifest, dest, src.pickled, _pool_warnings(entry, others))


def _entry(
    src: Source,
    head: Eagle3Drafter,
    info: TargetInfo,
    name: str,
    domain: str,
    dest: Path,
    pool: str,
    external: bool,
) -> DrafterEntry:
    """The manifest entry (``weights_hash`` of the file the pool reads; set after copying when not external)."""
    return DrafterEntry(
        name=name,
        domain=str(domain),
        path=str(dest) if external else f"{pool}/{name}",
        target_hash=info.hash,
        vocab_mapping_hash=tensors_hash({"d2t": head.d2t, "t2d": head.t2d}),
        draft_vocab_size=head.config.draft_vocab_size,
        aux_layer_ids=tuple(head.aux_layer_ids(info.num_layers)),
        data_manifest_hash="",
        training={
            "source": "published",
            "origin": src.origin,
            "revision": src.revision,
            "layout": src.layout,
            "weights_files": [f.name for f in src.weight_files],
        },
        weights_hash=weights_hash(src.weight_files[0]) if external else "",
        external=bool(external),
    )
