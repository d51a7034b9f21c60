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
        buf = io.BytesIO()
        torch.save({"d2t": d2t, "t2d": t2d}, buf)
        write_bytes_atomic(buf.getvalue(), out)
    total = sum(counts.values())
    kept = sum(c for tok, c in counts.items() if tok < target_vocab_size and bool(t2d[tok]))
    return VocabMapping(
        out, tensors_hash({"d2t": d2t, "t2d": t2d}), draft_vocab_size, kept / total if total else 0.0, reused
    )
