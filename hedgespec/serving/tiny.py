"""Tiny on-disk checkpoints for serving tests and smoke runs: a random Llama target and EAGLE-3 drafters.

Everything is built offline in well under a second (byte-level vocabulary, random weights from a seed; see
:func:`hedgespec.fixtures.build_checkpoint_target` and :func:`hedgespec.fixtures.checkpoint_drafter_state`) and
written in the formats SGLang loads: a HF ``LlamaForCausalLM`` directory and a ``LlamaForCausalLMEagle3`` draft
directory (``config.json`` with ``eagle_config.eagle_aux_hidden_state_layer_ids``, ``model.safetensors`` with
``fc``/``midlayer``/``norm``/``lm_head``/``d2t``/``t2d``).

``mode`` shapes a checkpoint's behaviour for acceptance tests:

* ``"random"``: random weights;
* ``"const"``: final-norm weight 0, so all logits tie and greedy decoding always picks token 0
  (a target and a drafter both ``const`` agree on every position: acceptance 100 %);
* ``"anti"`` (drafters only): like ``const`` but ``d2t`` rotates the draft → target map by half the vocabulary,
  so its tied logits never put target token 0 among its proposals (its top-1 for a chain, its top-k for a tree)
  and against a ``const`` target it is always rejected.

Faulty drafters (``FAULT_MODES``, drafters only; they load like any other and fail only when they run, for the
server's fault tests):

* ``"nan"``: ``random`` with every ``fc`` weight NaN, so its hidden states and logits are NaN;
* ``"inf"``: ``random`` with ``lm_head`` rows 0 and 1 set to +inf and −inf, so every row has a +inf or NaN
  logit;
* ``"raise"``: ``random`` with ``d2t`` mapping every draft token far past the target vocabulary, so when it
  drafts, its first draft step embeds an out-of-range id and the forward raises ``IndexError`` (on CPU; on CUDA the
  same lookup is a device-side assert, so use it on CPU only). Its draft-extend passes run normally.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from hedgespec.fixtures import DRAFTER_MODES, build_checkpoint_target, check_drafter_mode, checkpoint_drafter_state

FAULT_MODES = ("nan", "inf", "raise")
MODES = DRAFTER_MODES
_OUT_OF_VOCAB = 1 << 20  # d2t offset of the "raise" drafter: past any tiny vocabulary, padding included


def make_target(path: str | os.PathLike[str], seed: int = 0, num_layers: int = 4, mode: str = "random") -> Path:
    """Write a tiny random ``LlamaForCausalLM`` (fp32, H=64, ``num_layers`` layers) with its tokenizer."""
    model, tok = build_checkpoint_target(seed=seed, num_layers=num_layers, mode=mode)
    path = Path(path)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def make_drafter(
    path: str | os.PathLike[str],
    target: str | os.PathLike[str],
    seed: int = 0,
    mode: str = "random",
    aux_layer_ids: Sequence[int] = (0, 1, 2),
) -> Path:
    """Write a random one-layer EAGLE-3 drafter for ``target`` (full draft vocabulary, SGLang format); ``mode`` is
    one of ``MODES`` or ``FAULT_MODES`` (module docstring)."""
    if mode not in FAULT_MODES:
        check_drafter_mode(mode)
    path = Path(path)
    tcfg = json.loads((Path(target) / "config.json").read_text())
    cfg, state = checkpoint_drafter_state(
        tcfg, seed=seed, mode="random" if mode in FAULT_MODES else mode, aux_layer_ids=aux_layer_ids
    )
    _inject_fault(state, mode)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def _inject_fault(state: dict, mode: str) -> None:
    """Make the tensors of a ``FAULT_MODES`` drafter faulty in place (no-op for the other modes)."""
    if mode == "nan":
        state["fc.weight"] = torch.full_like(state["fc.weight"], float("nan"))
    elif mode == "inf":
        head = state["lm_head.weight"].clone()
        head[0], head[1] = float("inf"), float("-inf")
        state["lm_head.weight"] = head
    elif mode == "raise":
        state["d2t"] = state["d2t"] + _OUT_OF_VOCAB
