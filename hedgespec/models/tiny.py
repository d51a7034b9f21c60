"""The ``tiny`` target: a randomly initialised small ``LlamaForCausalLM`` for tests and CPU smoke runs.

Built in well under a second, deterministic for a seed, no files on disk. Its tokenizer is a byte-level BPE
trained with ``tokenizers`` on a fixed built-in corpus (so it is identical on every machine) and it uses the
same ChatML chat template as SmolLM2, so prompts are formatted the same way for both targets.

The builders live in :mod:`hedgespec.fixtures` (with the other tiny test targets and the random drafters);
this module is what the registry (:mod:`hedgespec.models.registry`) loads for ``target=tiny``.
"""

from __future__ import annotations

from typing import Any

from hedgespec.fixtures import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tiny_tokenizer, tiny_target

from .spec import TinyArch

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tiny_target", "build_tiny_tokenizer"]


def build_tiny_target(
    arch: TinyArch | None = None, seed: int = 0, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Return ``(LlamaForCausalLM, tokenizer)`` with weights drawn from ``seed`` (global RNG state untouched)."""
    return tiny_target(arch or TinyArch(), seed=seed, dtype=dtype, device=device)
