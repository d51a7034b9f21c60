"""Tiny on-disk checkpoints for serving tests and smoke runs: a random Llama target and EAGLE-3 drafters.

Everything is built offline in well under a second (``tokenizers`` byte-level vocabulary, random weights
from a seed) and written in the formats SGLang loads: a HF ``LlamaForCausalLM`` directory and a
``LlamaForCausalLMEagle3`` draft directory (``config.json`` with ``eagle_config.eagle_aux_hidden_state_layer_ids``,
``model.safetensors`` with ``fc``/``midlayer``/``norm``/``lm_head``/``d2t``/``t2d``).

``mode`` shapes a checkpoint's behaviour for acceptance tests:

* ``"random"``: random weights;
* ``"const"``: final-norm weight 0, so all logits tie and greedy decoding always picks token 0
  (a target and a drafter both ``const`` agree on every position: acceptance 100 %);
* ``"anti"`` (drafters only): like ``const`` but ``d2t`` swaps draft tokens 0 and 1, so it always proposes
  target token 1 and against a ``const`` target is always rejected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (  # ChatML, so the OpenAI chat endpoint works on the tiny target
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
HIDDEN, HEADS, KV_HEADS, INTER = 64, 4, 2, 128
MODES = ("random", "const", "anti")


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": list(SPECIALS)})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_target(path: str | os.PathLike[str], seed: int = 0, num_layers: int = 4, mode: str = "random") -> Path:
    """Write a tiny random ``LlamaForCausalLM`` (fp32, H=64, ``num_layers`` layers) with its tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if mode not in ("random", "const"):
        raise ValueError(f"target mode must be 'random' or 'const', got {mode!r}")
    path = Path(path)
    tok = _tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=INTER,
                      num_hidden_layers=num_layers, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                      max_position_embeddings=1024, tie_word_embeddings=False, rms_norm_eps=1e-5,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      torch_dtype="float32")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
        for p in model.parameters():  # larger weights than HF's 0.02 init: less tied logits
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.2)
    if mode == "const":
        with torch.no_grad():
            model.model.norm.weight.zero_()
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def make_drafter(path: str | os.PathLike[str], target: str | os.PathLike[str], seed: int = 0, mode: str = "random",
                 aux_layer_ids: Sequence[int] = (0, 1, 2)) -> Path:
    """Write a random one-layer EAGLE-3 drafter for ``target`` (full draft vocabulary, SGLang format)."""
    import torch
    from safetensors.torch import save_file

    if mode not in MODES:
        raise ValueError(f"drafter mode must be one of {MODES}, got {mode!r}")
    path = Path(path)
    tcfg = json.loads((Path(target) / "config.json").read_text())
    vocab, h, n_aux = tcfg["vocab_size"], tcfg["hidden_size"], len(aux_layer_ids)
    head_dim = h // HEADS
    gen = torch.Generator().manual_seed(10_000 + seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.2

    w = {
        "fc.weight": rnd(h, n_aux * h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": rnd(HEADS * head_dim, 2 * h),
        "midlayer.self_attn.k_proj.weight": rnd(KV_HEADS * head_dim, 2 * h),
        "midlayer.self_attn.v_proj.weight": rnd(KV_HEADS * head_dim, 2 * h),
        "midlayer.self_attn.o_proj.weight": rnd(h, HEADS * head_dim),
        "midlayer.mlp.gate_proj.weight": rnd(INTER, h),
        "midlayer.mlp.up_proj.weight": rnd(INTER, h),
        "midlayer.mlp.down_proj.weight": rnd(h, INTER),
        "norm.weight": torch.zeros(h) if mode in ("const", "anti") else torch.ones(h),
        "lm_head.weight": rnd(vocab, h),
        "d2t": torch.zeros(vocab, dtype=torch.int64),
        "t2d": torch.ones(vocab, dtype=torch.bool),
    }
    if mode == "anti":
        w["d2t"][0], w["d2t"][1] = 1, -1  # swap: draft token 0 -> target token 1 (and 1 -> 0), a permutation
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": INTER,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "max_position_embeddings": tcfg.get("max_position_embeddings", 1024),
        "rms_norm_eps": tcfg.get("rms_norm_eps", 1e-5),
        "rope_theta": tcfg.get("rope_theta", 10000.0),
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "target_hidden_size": h,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids)},
    }
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path
