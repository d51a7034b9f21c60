"""Tiny models for engine tests, benchmarks and notebooks (no downloads, deterministic, CPU-fast)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.fit import fit_drafter


def tiny_llama(seed: int = 0, layers: int = 2, vocab: int = 64, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
               max_positions: int = 256, init: float = 0.2) -> Any:
    """A random ``LlamaForCausalLM`` (eval mode, float32, sdpa) built from ``LlamaConfig``; global RNG untouched."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
        initializer_range=init, bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    return model.eval()


@torch.no_grad()
def greedy_reference(model: Any, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """``transformers.generate(do_sample=False)`` for exactly ``max_new_tokens`` tokens; returns [1, P+n]."""
    ids = prompt if prompt.dim() == 2 else prompt[None]
    return model.generate(ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                          eos_token_id=None, pad_token_id=0)


def agreeing_drafter(model: Any, prompts: Sequence[torch.Tensor], seed: int = 0, steps: int = 600, length: int = 40, **kw: Any) -> Eagle3Drafter:
    """A head distilled for ``steps`` Adam steps on the target's greedy continuations of ``prompts``."""
    seqs = [greedy_reference(model, p, length)[0] for p in prompts]
    return fit_drafter(Eagle3Drafter.random_for(model, seed=seed, **kw), model, seqs, steps=steps, seed=seed)
