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


def free_port() -> int:
    """A TCP port nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_ids(base_url: str, ids: Sequence[int], new_tokens: int) -> dict:
    """One greedy native ``/generate`` call on token ids (exactly ``new_tokens``: EOS ignored); its JSON answer."""
    import json
    import urllib.request

    sp = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
    body = {"input_ids": list(ids), "sampling_params": sp}
    req = urllib.request.Request(
        base_url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)
