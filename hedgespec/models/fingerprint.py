"""Content hashes of a target, recorded in pool manifests next to its id (name and revision).

A drafter trained on one target is only valid for the exact same weights and vocabulary, so the pool loader
compares these hashes instead of trusting names.
"""

from __future__ import annotations

import hashlib
from typing import Any


def state_dict_fingerprint(state_dict: dict[str, Any]) -> str:
    """sha256 over ``name, dtype, shape, raw bytes`` of every tensor, in sorted name order (``sha256:<hex>``)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{str(t.dtype).removeprefix('torch.')}|{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return "sha256:" + h.hexdigest()


def target_fingerprint(model: Any) -> str:
    """Content hash of a target model's weights (cached on the model object after the first call).

    Two models have the same fingerprint iff they hold the same tensors under the same names with the same
    dtypes, so a bfloat16 copy of a float32 target has a different fingerprint (as it should: its logits differ).
    A ``kind: hf`` target loaded by :func:`hedgespec.models.load_target` already carries the fingerprint of its
    checkpoint files and load dtypes (:mod:`hedgespec.models.checkpoint_hash`), which reads no weights.
    """
    cached = getattr(model, "_hedgespec_fingerprint", None)
    if cached is not None:
        return cached
    fp = state_dict_fingerprint(model.state_dict())
    try:
        object.__setattr__(model, "_hedgespec_fingerprint", fp)
    except Exception:  # pragma: no cover - exotic wrappers
        pass
    return fp


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 over the sorted ``token -> id`` vocabulary plus the chat template (``sha256:<hex>``)."""
    h = hashlib.sha256()
    for tok, idx in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        h.update(f"{idx}\t{tok}\n".encode("utf-8", "surrogatepass"))
    h.update((getattr(tokenizer, "chat_template", None) or "").encode())
    return "sha256:" + h.hexdigest()
