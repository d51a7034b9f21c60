"""Target features for offline EAGLE-3 training, computed with ``transformers`` in SpecForge's on-disk format.

SpecForge's own feature capture (``scripts/prepare_hidden_states.py``) needs SGLang on a GPU; this module
produces the same files on any device.  One file per conversation, ``rows_{g}-{g+N}/data_{i}.ckpt``, holding
(SpecForge offline format, read by ``specforge.runtime.data_plane.offline_reader``):

* ``input_ids`` ``(T,)`` int64 -- the conversation rendered with the target's own chat template;
* ``loss_mask`` ``(T,)`` int64 -- 1 on every assistant-turn token, end-of-turn marker included (what
  SpecForge's ``GeneralParser`` supervises), 0 elsewhere; with ``supervise="all"`` 1 on every token (the
  prompt's positions are supervised too: the target's distribution there is as real a label as on the answer);
* ``hidden_state`` ``(1, T, H)`` -- the target's last hidden state after the final norm (the ``lm_head`` input);
* ``aux_hidden_state`` ``(1, T, 3H)`` -- the outputs of the three fused layers ``aux_layer_ids`` (SpecForge
  layer-output indices, i.e. ``hidden_states[i + 1]`` of a transformers forward; default ``[1, L//2-1, L-4]``),
  concatenated in that order (EAGLE-3's fusion of low, middle and high target features).

The directory is cached under a key that hashes the target, the data file, the layer ids and every
tokenisation setting; a second run with the same inputs reuses it.  It is written to a temporary sibling and
renamed into place, so a killed run never leaves a half-written cache behind.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from hedgespec.io import atomic_dir
from hedgespec.training.hashing import file_hash, json_hash

FEATURE_FORMAT_VERSION = 1
SUPERVISE = ("assistant", "all")  # which tokens the loss mask marks: the assistant turns (SpecForge's) or all
ROWS_PER_DIR = 1000
MANIFEST = "features.json"


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """SpecForge's default EAGLE-3 capture layers ``[1, L//2 - 1, L - 4]`` (layer-output indices).

    Clamped into ``[0, L)`` for toy targets with fewer than 4 layers (the 2-layer ``tiny`` target gets
    ``[1, 0, 0]``); SpecForge's formula is unchanged for every real target.
    """
    if num_layers < 1:
        raise ValueError(f"num_layers={num_layers}: a target needs at least one layer")
    return [min(max(i, 0), num_layers - 1) for i in (1, num_layers // 2 - 1, num_layers - 4)]


def read_conversations(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Read SpecForge conversation JSONL rows ``{"id", "conversations": [{"role", "content"}]}``."""
    rows: list[dict[str, Any]] = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            conv = row.get("conversations")
            if not isinstance(conv, list) or not all({"role", "content"} <= set(m) for m in conv):
                raise ValueError(f"{path}:{lineno}: expected {{'id', 'conversations': [{{'role','content'}}]}}")
            rows.append(row)
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise ValueError(f"{path}: no conversations")
    return rows


def check_supervise(supervise: object) -> str:
    """``train.features.supervise`` must be one of :data:`SUPERVISE`."""
    if supervise not in SUPERVISE:
        raise ValueError(
            f"train.features.supervise={supervise!r}: must be one of {list(SUPERVISE)} (assistant: the answers' "
            "tokens, as SpecForge; all: every token of the conversation, prompt included)"
        )
    return str(supervise)


def tokenize_conversation(
    tokenizer: Any, messages: Sequence[dict[str, str]], max_length: int, supervise: str = "assistant"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Render ``messages`` with the tokenizer's chat template; return ``(input_ids, loss_mask)``, both ``(T,)``.

    The loss mask marks the characters each assistant turn adds to the rendered text (content plus the
    template's end-of-turn marker), mapped to tokens through the fast tokenizer's offsets; with
    ``supervise="all"`` it marks every token.  Raises ValueError when the template is not prefix-stable (a
    later turn rewrites earlier text), where no such span exists.
    """
    msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
    text = tokenizer.apply_chat_template(msgs, tokenize=False)
    spans: list[tuple[int, int]] = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = tokenizer.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True) if i else ""
        upto = tokenizer.apply_chat_template(msgs[: i + 1], tokenize=False)
        if not (upto.startswith(before) and text.startswith(upto)):
            raise ValueError("the target's chat template is not prefix-stable; cannot locate assistant spans")
        spans.append((len(before), len(upto)))
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"][:max_length]
    offsets = enc["offset_mapping"][:max_length]
    if check_supervise(supervise) == "all":
        return torch.tensor(ids, dtype=torch.long), torch.ones(len(ids), dtype=torch.long)
    mask = [int(any(s <= a < e for s, e in spans)) for a, _b in offsets]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)


@dataclass(frozen=True)
class FeatureSet:
    """A cached feature directory and what produced it."""

    path: Path
    key: str
    num_samples: int
    num_tokens: int
    num_loss_tokens: int
    reused: bool


def feature_key(
    target_hash: str,
    data_hash: str,
    aux_layer_ids: Sequence[int],
    max_length: int,
    max_samples: int | None,
    dtype: str,
    tokenizer_hash: str = "",
    supervise: str = "assistant",
) -> str:
    """Cache key: target hash + data hash + layer ids + tokenisation/dtype settings + format version, and the
    tokenizer's fingerprint (vocabulary and chat template, e.g. a pinned thinking switch) when given, and the
    loss mask's ``supervise`` when it is not the default."""
    fields: dict[str, Any] = {
        "v": FEATURE_FORMAT_VERSION,
        "target": target_hash,
        "data": data_hash,
        "aux": list(aux_layer_ids),
        "max_length": max_length,
        "max_samples": max_samples,
        "dtype": dtype,
    }
    if tokenizer_hash:  # absent -> the key of runs that predate it
        fields["tokenizer"] = tokenizer_hash
    if check_supervise(supervise) != "assistant":  # the default keeps the key of runs that predate it
        fields["supervise"] = supervise
    return json_hash(fields)[:20]


def cached_features(out: Path, key: str) -> FeatureSet | None:
    """The feature directory ``out`` (cache key ``key``) when a finished capture left its manifest there."""
    manifest_path = Path(out) / MANIFEST
    if not manifest_path.is_file():
        return None
    m = json.loads(manifest_path.read_text())
    return FeatureSet(Path(out), key, m["num_samples"], m["num_tokens"], m["num_loss_tokens"], reused=True)


def add_capture_arguments(p: Any) -> None:
    """The ``argparse`` options every capture worker takes (what the records are, and the cache key's parts)."""
    p.add_argument("--data", required=True, help="conversation JSONL ({'id', 'conversations': [...]})")
    p.add_argument("--target-hash", required=True, help="the target's part of the cache key")
    p.add_argument("--aux-layer-ids", type=int, nargs=3, required=True, help="the three fused layer ids")
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--max-samples", type=int, default=None)
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"), help="stored dtype")
    p.add_argument("--supervise", default="assistant", choices=SUPERVISE, help="which tokens the loss mask marks")
    p.add_argument("--progress", action="store_true")


@torch.inference_mode()
def generate_features(
    model: torch.nn.Module,
    tokenizer: Any,
    data_path: str | Path,
    cache_root: str | Path,
    *,
    target_hash: str,
    aux_layer_ids: Sequence[int],
    max_length: int,
    max_samples: int | None = None,
    dtype: str = "bfloat16",
    progress: bool = True,
    tokenizer_hash: str = "",
    supervise: str = "assistant",
) -> FeatureSet:
    """Write (or reuse) the offline features for ``data_path`` under ``cache_root/<key>/`` (``tokenizer_hash``:
    :func:`hedgespec.models.tokenizer_fingerprint` of ``tokenizer``, part of the key when given; ``supervise``:
    which tokens the loss mask marks, :data:`SUPERVISE`)."""
    n_layers = int(model.config.num_hidden_layers)
    bad = [i for i in aux_layer_ids if not 0 <= i < n_layers]
    if len(aux_layer_ids) != 3 or bad:
        raise ValueError(f"aux_layer_ids={list(aux_layer_ids)}: need 3 layer ids in [0, {n_layers}) for this target")
    key = feature_key(
        target_hash, file_hash(data_path), aux_layer_ids, max_length, max_samples, dtype, tokenizer_hash, supervise
    )
    out = Path(cache_root) / key
    if (cached := cached_features(out, key)) is not None:
        return cached

    rows = read_conversations(data_path, max_samples)
    was_training = model.training
    model.eval()
    try:
        with atomic_dir(out, replace=False) as tmp:  # a concurrent run that finished first keeps its copy
            n_written, n_tokens, n_loss = _write_records(
                model, tokenizer, rows, tmp, aux_layer_ids, max_length, getattr(torch, dtype), progress, supervise
            )
            if n_written == 0:
                raise ValueError(
                    f"{data_path}: no conversation has a supervised assistant token within max_length={max_length}"
                )
            write_manifest(
                tmp, key, target_hash, data_path, aux_layer_ids, max_length, dtype, (n_written, n_tokens, n_loss),
                supervise,
            )  # fmt: skip
    finally:
        model.train(was_training)
    return FeatureSet(out, key, n_written, n_tokens, n_loss, reused=False)


def write_manifest(
    out: Path,
    key: str,
    target_hash: str,
    data_path: str | Path,
    aux_layer_ids: Sequence[int],
    max_length: int,
    dtype: str,
    counts: tuple[int, int, int],
    supervise: str,
    **extra: Any,
) -> None:
    """``out/features.json``: what the records are and how many (``counts``: samples, tokens, loss tokens)."""
    manifest = {
        "format": "specforge-offline-eagle3",
        "version": FEATURE_FORMAT_VERSION,
        "key": key,
        "target_hash": target_hash,
        "data_path": str(data_path),
        "aux_layer_ids": list(aux_layer_ids),
        "max_length": max_length,
        "dtype": dtype,
        "num_samples": counts[0],
        "num_tokens": counts[1],
        "num_loss_tokens": counts[2],
        "supervise": supervise,
        **extra,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _write_records(
    model: torch.nn.Module,
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    out: Path,
    aux_layer_ids: Sequence[int],
    max_length: int,
    torch_dtype: torch.dtype,
    progress: bool,
    supervise: str = "assistant",
) -> tuple[int, int, int]:
    """One ``rows_{g}-{g+N}/data_{i}.ckpt`` per supervised conversation; returns (written, tokens, loss tokens)."""
    n_tokens = n_loss = n_written = 0
    for row in tqdm(rows, desc="target features", unit="conv", disable=not progress):
        record = feature_record(model, tokenizer, row, aux_layer_ids, max_length, torch_dtype, supervise)
        if record is None:
            continue  # nothing supervised (e.g. the assistant turn was truncated away)
        torch.save(record, record_path(out, n_written))
        n_written += 1
        n_tokens += int(record["input_ids"].numel())
        n_loss += int(record["loss_mask"].sum())
    return n_written, n_tokens, n_loss


def record_path(out: Path, index: int) -> Path:
    """``out/rows_{g}-{g+N}/data_{index}.ckpt`` (its directory made), the file of the ``index``-th record."""
    group = (index // ROWS_PER_DIR) * ROWS_PER_DIR
    d = out / f"rows_{group}-{group + ROWS_PER_DIR}"
    d.mkdir(exist_ok=True)
    return d / f"data_{index}.ckpt"


@torch.inference_mode()
def feature_record(
    model: torch.nn.Module,
    tokenizer: Any,
    row: dict[str, Any],
    aux_layer_ids: Sequence[int],
    max_length: int,
    torch_dtype: torch.dtype,
    supervise: str = "assistant",
) -> dict[str, torch.Tensor] | None:
    """One conversation's record (CPU tensors), or None when no token of it is supervised."""
    input_ids, loss_mask = tokenize_conversation(tokenizer, row["conversations"], max_length, supervise)
    if int(loss_mask.sum()) == 0:
        return None
    # the decoder stack only: the lm_head (~20% of a small target's FLOPs) is not needed here
    backbone = model.get_decoder() if hasattr(model, "get_decoder") else model
    outputs = backbone(input_ids=input_ids[None].to(model.device), output_hidden_states=True)
    hs = outputs.hidden_states
    aux = torch.cat([hs[j + 1] for j in aux_layer_ids], dim=-1)
    return {
        "input_ids": input_ids.cpu(),
        "loss_mask": loss_mask.cpu(),
        "hidden_state": hs[-1].to(torch_dtype).cpu().contiguous(),
        "aux_hidden_state": aux.to(torch_dtype).cpu().contiguous(),
    }
