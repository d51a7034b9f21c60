"""Shared by the serve-tier tests: the truth every served greedy output is compared with."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def hf_greedy(target: Path, prompts: Sequence[Sequence[int]], new_tokens: int) -> dict[tuple[int, ...], list[int]]:
    """Non-speculative greedy continuations of ``prompts`` by transformers' ``generate`` (independent of SGLang),
    exactly ``new_tokens`` each (no EOS stop), keyed by the prompt ids."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    out = {}
    for ids in prompts:
        with torch.no_grad():
            gen = model.generate(
                torch.tensor([list(ids)]), max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
            )
        out[tuple(ids)] = gen[0, len(ids) :].tolist()
    return out
