"""Every adaptation hedgespec needs to run SpecForge 0.2.0 training on a CPU, in one place.

SpecForge's unified runtime targets CUDA. Its offline EAGLE-3 path (features on disk -> ``specforge
train`` -> ``specforge export``) runs on CPU with gloo once these are in place (each item names the failure
it avoids on a machine without an accelerator):

1. ``training.fsdp_sharding=NO_SHARD`` (DDP instead of FSDP1, which raises "FSDP needs a non-CPU accelerator
   device") and ``training.attention_backend=sdpa`` (FlexAttention has no CPU backward).  These are plain config
   values set by the CPU budgets (``conf/train/tiny.yaml``, ``embedded.yaml``); :func:`check_cpu_config`
   rejects a CPU run without them before any work.
2. A pure-torch replacement for SpecForge's Triton-only ``LogSoftmaxLoss`` (``specforge.core.loss`` imports
   ``triton`` at module import and its kernels raise "0 active drivers" without a GPU).  We do **not** install
   triton (1 GB): when it is absent, :func:`cpu_runtime` registers a stand-in ``specforge.core.loss`` module
   holding :class:`SoftCrossEntropyLoss`; when it is present, the Triton class is swapped out for the duration
   of the run only.  The maths is SpecForge's own reference ``_compute_loss``: the soft cross-entropy
   ``-mean_{b,t} sum_v m[b,t] p[b,t,v] log softmax(z[b,t])_v`` (EAGLE-3 training loss, one TTT step).
3. ``torch.compile`` is disabled (``TORCHDYNAMO_DISABLE=1`` for child processes and
   ``torch._dynamo.config.disable`` in this one): SpecForge decorates RMSNorm/teacher helpers with
   ``torch.compile``, which costs ~60 s of compilation per run on CPU and buys nothing at these sizes.
4. ``SPECFORGE_DEVICE=cpu`` pins SpecForge's device probe.
5. :func:`save_target_head` writes the frozen target pieces SpecForge's offline trainer reads (config,
   tokenizer, ``embed_tokens`` and ``lm_head`` weights) as a *sharded* safetensors checkpoint, because
   ``TargetHead.load_weights`` requires a ``*.index.json`` and fails on a single ``model.safetensors``.
   Offline training needs nothing else from the target, so the rest of the weights are not written.

Everything here is scoped: :func:`cpu_runtime` restores the environment and the patched attributes on exit.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

#: Config values a CPU run must have, with the reason (shown in the error).
CPU_REQUIRED: dict[tuple[str, str], tuple[set[str], str]] = {
    ("training", "fsdp_sharding"): ({"NO_SHARD"}, "FSDP1 needs an accelerator; NO_SHARD uses DDP over gloo"),
    ("training", "attention_backend"): ({"sdpa", "eager"}, "FlexAttention has no backward on CPU"),
}


class SoftCrossEntropyLoss:
    """Pure-torch drop-in for ``specforge.core.loss.LogSoftmaxLoss`` (same ``apply`` signature).

    ``apply(logits[B,T,V], target_p[B,T,V], position_mask[B,T,1]) -> scalar``: the soft cross-entropy
    ``-mean_{b,t} sum_v position_mask * target_p * log_softmax(logits)``, computed in float32.
    Autograd supplies the backward ``softmax(z) * sum_v(m p) - m p`` that the Triton kernel hand-codes.
    """

    @staticmethod
    def apply(logits: torch.Tensor, target_p: torch.Tensor, position_mask: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits.float(), dim=-1)
        return -(position_mask * target_p * logp).sum(-1).mean()


def _reference_loss(logits: torch.Tensor, target_p: torch.Tensor, position_mask: torch.Tensor) -> torch.Tensor:
    return SoftCrossEntropyLoss.apply(logits, target_p, position_mask)


def triton_available() -> bool:
    """Whether ``import triton`` works (SpecForge's ``specforge.core.loss`` needs it at import)."""
    try:
        importlib.import_module("triton")
    except ImportError:
        return False
    return True


def check_cpu_config(raw: Mapping[str, Any]) -> None:
    """Raise ValueError naming the key when a CPU run's SpecForge config lacks a required CPU setting."""
    for (section, key), (allowed, why) in CPU_REQUIRED.items():
        value = (raw.get(section) or {}).get(key)
        if value not in allowed:
            raise ValueError(
                f"specforge.{section}.{key}={value!r} cannot run on CPU ({why}); "
                f"use one of {sorted(allowed)} (the tiny/embedded budgets set it), or train on a GPU with train=paper"
            )


@contextlib.contextmanager
def cpu_runtime() -> Iterator[None]:
    """Apply adaptations 2-4 for the duration of an in-process SpecForge run, then undo them."""
    saved_env = {k: os.environ.get(k) for k in ("TORCHDYNAMO_DISABLE", "SPECFORGE_DEVICE")}
    os.environ["TORCHDYNAMO_DISABLE"] = "1"
    os.environ["SPECFORGE_DEVICE"] = "cpu"
    saved_dynamo = torch._dynamo.config.disable  # torch imports its _dynamo submodule on this first access
    torch._dynamo.config.disable = True

    patched: list[tuple[Any, Any]] = []
    try:
        if "specforge.core.loss" not in sys.modules and not triton_available():
            stand_in = types.ModuleType("specforge.core.loss")
            stand_in.__doc__ = "hedgespec CPU stand-in for SpecForge's Triton loss module (see hedgespec.training.cpu)."
            stand_in.LogSoftmaxLoss = SoftCrossEntropyLoss  # type: ignore[attr-defined]
            stand_in._compute_loss = _reference_loss  # type: ignore[attr-defined]
            sys.modules["specforge.core.loss"] = stand_in  # stays: the real module cannot import without triton
        for name in ("specforge.algorithms.eagle3.model", "specforge.algorithms.peagle.model"):
            module = importlib.import_module(name)
            patched.append((module, module.LogSoftmaxLoss))
            module.LogSoftmaxLoss = SoftCrossEntropyLoss
        yield
    finally:
        for module, original in patched:
            module.LogSoftmaxLoss = original
        torch._dynamo.config.disable = saved_dynamo
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def save_target_head(model: torch.nn.Module, tokenizer: Any, path: Path, dtype: torch.dtype) -> None:
    """Write what SpecForge's offline trainer reads from a target (adaptation 5) into ``path``.

    Files: ``config.json``, the tokenizer, ``model-00001-of-00001.safetensors`` with
    ``model.embed_tokens.weight`` and ``lm_head.weight`` (the input embedding again when the target ties
    them), and ``model.safetensors.index.json`` mapping both keys to that shard.
    """
    path.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    embed = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    head = out.weight if out is not None else embed
    tensors = {
        "model.embed_tokens.weight": embed.detach().to(dtype).contiguous().clone(),
        "lm_head.weight": head.detach().to(dtype).contiguous().clone(),
    }
    shard = "model-00001-of-00001.safetensors"
    save_file(tensors, str(path / shard), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": {k: shard for k in tensors}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
