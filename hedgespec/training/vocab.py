"""Draft-vocabulary mapping (EAGLE-3's reduced draft head), built with SpecForge's own functions.

The draft ``lm_head`` predicts only ``draft_vocab_size`` tokens: the most frequent *supervised* target tokens
of the domain's training features (SpecForge ``count_effective_feature_tokens`` +
``process_token_dict_to_mappings``).  The mapping is two buffers saved as ``{"d2t", "t2d"}``:
``t2d[v]`` (bool, target vocab) says whether target token ``v`` is in the draft vocabulary and ``d2t[d]``
(int64 offsets) maps draft id ``d`` to target id ``d + d2t[d]``.  Its hash (over the tensors, not the pickle
bytes) goes into the pool manifest so a drafter is never paired with another mapping.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import torch

from hedgespec.io import write_bytes_atomic
from hedgespec.training._specforge import require_specforge
from hedgespec.training.hashing import tensors_hash


@dataclass(frozen=True)
class VocabMapping:
    path: Path
    hash: str
    draft_vocab_size: int
    coverage: float  # fraction of supervised tokens whose target id is in the draft vocab
    reused: bool


def build_vocab_mapping(
    features_dir: Path, target_vocab_size: int, draft_vocab_size: int, max_length: int | None = None
) -> VocabMapping:
    """Write (or reuse) ``features_dir/vocab_mapping/draft<draft_vocab_size>.pt`` and return it with its hash."""
    if not 0 < draft_vocab_size <= target_vocab_size:
        raise ValueError(f"draft_vocab_size={draft_vocab_size} must be in [1, target vocab {target_vocab_size}]")
    require_specforge()
    from specforge.data.preprocessing import process_token_dict_to_mappings
    from specforge.training.vocab_mapping import count_effective_feature_tokens

    out = Path(features_dir) / "vocab_mapping" / f"draft{draft_vocab_size}.pt"
    counts = count_effective_feature_tokens(
        str(features_dir), max_length=max_length, target_vocab_size=target_vocab_size
    )
    reused = out.is_file()
    if reused:
        mapping = torch.load(out, weights_only=True)
        d2t, t2d = mapping["d2t"], mapping["t2d"]
    else:
        with contextlib.redirect_stdout(io.StringIO()):  # SpecForge prints coverage chatter
            d2t, t2d = process_token_dict_to_mappings(counts, draft_vocab_size, target_vocab_size)
        _write_mapping(d2t, t2d, out)
    return _mapping(out, d2t, t2d, counts, target_vocab_size, reused)


def shared_vocab_mapping(
    drafter_weights: Path, features_dir: Path, target_vocab_size: int, draft_vocab_size: int
) -> VocabMapping:
    """The draft vocabulary of an exported drafter (its ``d2t``/``t2d``), for a run that fine-tunes it.

    ``train.draft.vocab=init``: a domain expert trained from the generalist keeps the generalist's draft
    vocabulary, so every weight (``lm_head`` included) is the generalist's plus a delta of the same shape, which
    is what a low-rank pool stores (``hedgespec.engine.lowrank``). Written to
    ``features_dir/vocab_mapping/shared-<hash>.pt``; coverage is measured on this run's features.
    """
    from safetensors.torch import load_file

    require_specforge()
    from specforge.training.vocab_mapping import count_effective_feature_tokens

    state = load_file(str(drafter_weights))
    if "d2t" not in state or "t2d" not in state:
        raise ValueError(f"train.draft.vocab=init: {drafter_weights} holds no d2t/t2d vocabulary mapping")
    d2t, t2d = state["d2t"].long(), state["t2d"].bool()
    if int(d2t.numel()) != draft_vocab_size or int(t2d.numel()) != target_vocab_size:
        raise ValueError(
            f"train.draft.vocab=init: the source drafter's vocabulary ({d2t.numel()} draft ids over "
            f"{t2d.numel()} target ids, {drafter_weights}) differs from this run's draft vocab_size="
            f"{draft_vocab_size} over {target_vocab_size}; set train.draft.vocab_size={d2t.numel()}"
        )
    digest = tensors_hash({"d2t": d2t, "t2d": t2d})
    out = Path(features_dir) / "vocab_mapping" / f"shared-{digest[:16]}.pt"
    reused = out.is_file()
    if not reused:
        _write_mapping(d2t, t2d, out)
    counts = count_effective_feature_tokens(str(features_dir), target_vocab_size=target_vocab_size)
    return _mapping(out, d2t, t2d, counts, target_vocab_size, reused)


def _write_mapping(d2t: torch.Tensor, t2d: torch.Tensor, out: Path) -> None:
    buf = io.BytesIO()
    torch.save({"d2t": d2t, "t2d": t2d}, buf)
    write_bytes_atomic(buf.getvalue(), out)


def _mapping(
    out: Path, d2t: torch.Tensor, t2d: torch.Tensor, counts: dict, target_vocab_size: int, reused: bool
) -> VocabMapping:
    total = sum(counts.values())
    kept = sum(c for tok, c in counts.items() if tok < target_vocab_size and bool(t2d[tok]))
    return VocabMapping(
        out, tensors_hash({"d2t": d2t, "t2d": t2d}), int(d2t.numel()), kept / total if total else 0.0, reused
    )
