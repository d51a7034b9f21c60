"""Plain autoregressive decoding with the target alone: the baseline every speculative run is measured against.

:func:`plain_generate` is ``transformers``' own ``generate`` (batch 1, KV cache) with the run's sampling
settings and stopping rule, so "× plain" ratios compare speculation with what a user gets without it:

* the same prompt ids and ``max_new_tokens`` (new tokens, the first one included, as the engine counts them);
* stop after ``eos_token_id`` when given, otherwise exactly ``max_new_tokens`` tokens;
* greedy (``temperature == 0``) or sampling with the same temperature / top-k / top-p and a seeded generator.

Under greedy decoding the speculative engine's output equals this one token for token (the bench records it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from hedgespec.decoding import SamplingParams


@dataclass(frozen=True)
class PlainResult:
    """New tokens of one plain decoding call and its wall time (prefill included)."""

    tokens: list[int]
    wall_s: float

    @property
    def tokens_per_s(self) -> float | None:
        return len(self.tokens) / self.wall_s if self.wall_s > 0 else None


def _generate_kwargs(max_new_tokens: int, sampling: SamplingParams, eos_token_id: int | None) -> dict[str, Any]:
    kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": 0 if eos_token_id is None else eos_token_id}
    if eos_token_id is None:  # the generation config's own EOS must not stop it either
        kw.update(eos_token_id=None, min_new_tokens=max_new_tokens)
    else:
        kw["eos_token_id"] = eos_token_id
    if sampling.greedy:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kw.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
    return kw


@torch.no_grad()
def plain_generate(
    model: Any, input_ids: Any, max_new_tokens: int, sampling: SamplingParams, eos_token_id: int | None = None
) -> PlainResult:
    """Decode ``max_new_tokens`` new tokens after ``input_ids`` ([T] or [1, T]) with the target alone."""
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    ids = ids[None] if ids.dim() == 1 else ids
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
        raise ValueError(f"input_ids must be a non-empty [T] or [1, T] sequence, got shape {tuple(ids.shape)}")
    kw = _generate_kwargs(max_new_tokens, sampling, eos_token_id)
    device = next(model.parameters()).device
    attention_mask = torch.ones_like(ids)
    with torch.random.fork_rng(devices=[]):
        if not sampling.greedy:
            torch.manual_seed(0 if sampling.seed is None else int(sampling.seed))
        t0 = time.perf_counter()
        out = model.generate(ids.to(device), attention_mask=attention_mask.to(device), **kw)
        wall = time.perf_counter() - t0
    return PlainResult(out[0, ids.shape[1] :].tolist(), wall)
