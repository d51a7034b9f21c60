"""Tiny deterministic fixtures: the ChatML template, tiny random Llama targets and random EAGLE-3 heads.

Everything here is built offline in well under a second from a seed, leaves the global RNG state untouched and
is identical on every machine. Users:

* the ``tiny`` target of the registry (:mod:`hedgespec.models.tiny`): :func:`tiny_target` and
  :func:`build_tiny_tokenizer` (a byte-level BPE trained on the fixed built-in corpus below);
* the on-disk SGLang checkpoints of :mod:`hedgespec.serving.tiny`: :func:`build_checkpoint_target` (byte
  vocabulary, no merges) and :func:`checkpoint_drafter_state`;
* engine tests and benchmarks: :func:`tiny_llama`, :func:`greedy_reference`, :func:`agreeing_drafter`;
* any target: :func:`random_drafter`, a random :class:`~hedgespec.engine.eagle3.Eagle3Drafter` shaped for it.

Both kinds of random head draw their weights in :func:`random_drafter_state` (SGLang key names, see
:mod:`hedgespec.engine.eagle3`) from a config made by :func:`drafter_config`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
from tokenizers import models as tokenizer_models
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from hedgespec.engine.eagle3 import EAGLE3_ARCH, Eagle3Drafter, default_aux_layer_ids, target_text_config
from hedgespec.engine.fit import fit_drafter

if TYPE_CHECKING:  # annotation only: hedgespec/models/tiny.py builds on this module, not the other way round
    from hedgespec.models.spec import TinyArch

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# ChatML, as in SmolLM2-Instruct (minus its default system prompt), so prompts are formatted the same way for the
# tiny targets and SmolLM2 and the OpenAI chat endpoint works on the tiny serving checkpoints. The string is part
# of the tiny target's tokenizer fingerprint (recorded in pool manifests): keep it byte-identical.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Shapes of the on-disk serving checkpoints (:func:`build_checkpoint_target`, :func:`checkpoint_drafter_state`).
CKPT_HIDDEN, CKPT_HEADS, CKPT_KV_HEADS, CKPT_INTER = 64, 4, 2, 128
TARGET_MODES = ("random", "const")
DRAFTER_MODES = ("random", "const", "anti")

# A small fixed corpus touching every domain, so the BPE merges are generic and deterministic.
_CORPUS = """\
def add(a, b):
    \"\"\"Return the sum of a and b.\"\"\"
    return a + b

for i in range(10):
    if i % 2 == 0:
        print(i)
class Stack:
    def __init__(self):
        self.items = []
    def push(self, item):
        self.items.append(item)
SELECT name, COUNT(*) FROM tracks WHERE milliseconds > 300000 GROUP BY album_id ORDER BY 2 DESC LIMIT 5;
CREATE TABLE artist (artist_id INTEGER PRIMARY KEY, name TEXT);
SELECT a.name FROM artist AS a JOIN album AS b ON a.artist_id = b.artist_id;
Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.
How many clips did Natalia sell altogether in April and May? 48/2 = <<48/2=24>>24 clips in May. #### 72
The mitochondrion is the organelle that produces ATP through oxidative phosphorylation.
A protein binds to DNA and regulates the transcription of a gene in the nucleus of the cell.
Sodium chloride, NaCl, has a molar mass of 58.44 g/mol; the element carbon has atomic number 6.
A 45-year-old patient presents with fever, joint pain and a rash. Which of the following is the most likely diagnosis?
A. Lupus B. Gout C. Psoriasis D. Lyme disease. Answer: A
Summarize the following news article. The government announced on Tuesday that the bushfires near Sydney
had been contained after firefighters worked through the night.
The capital of France is Paris. The quick brown fox jumps over the lazy dog. Hello! How can I help you today?
"""


# ------------------------------------------------------------------------------------------- tokenizers
def _chatml_tokenizer(tok: Tokenizer, register_specials: bool = False) -> PreTrainedTokenizerFast:
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    if register_specials:
        fast.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    fast.chat_template = CHAT_TEMPLATE
    return fast


@lru_cache(maxsize=4)
def _tokenizer_json(vocab_size: int) -> str:
    tok = Tokenizer(tokenizer_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS.splitlines(keepends=True) * 4, trainer=trainer)
    return tok.to_str()


def build_tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Byte-level BPE (``vocab_size`` >= 259: 256 bytes + 3 specials), ChatML template; offline, deterministic."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"tiny target vocab_size={vocab_size} is too small; need >= {256 + len(SPECIAL_TOKENS)}")
    return _chatml_tokenizer(Tokenizer.from_str(_tokenizer_json(vocab_size)))


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """The 256 byte-level symbols (sorted) plus the 3 specials, no merges, ChatML template (259 tokens)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for s in SPECIAL_TOKENS:
        vocab[s] = len(vocab)
    tok = Tokenizer(tokenizer_models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return _chatml_tokenizer(tok, register_specials=True)


# ---------------------------------------------------------------------------------------------- targets
def random_llama(cfg: LlamaConfig, seed: int, std: float | None = None) -> LlamaForCausalLM:
    """``LlamaForCausalLM(cfg)`` initialised from ``seed`` (global RNG untouched); ``std`` re-draws every matrix."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
        if std is not None:  # larger weights than HF's 0.02 init: less tied logits
            for p in model.parameters():
                if p.dim() == 2:
                    torch.nn.init.normal_(p, std=std)
    return model


def tiny_target(
    arch: TinyArch, seed: int = 0, dtype: str = "float32", device: str = "cpu"
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """The ``tiny`` target of shape ``arch``: ``(LlamaForCausalLM, tokenizer)``, weights from ``seed``, eval mode."""
    tok = build_tiny_tokenizer(arch.vocab_size)
    cfg = LlamaConfig(
        vocab_size=max(arch.vocab_size, len(tok)),
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=arch.tie_word_embeddings,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
    )
    model = random_llama(cfg, seed)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model = model.to(device=device, dtype=getattr(torch, dtype if dtype != "auto" else "float32"))
    model.eval()
    return model, tok


def build_checkpoint_target(
    seed: int = 0, num_layers: int = 4, mode: str = "random"
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """The serving checkpoints' target (fp32, H=64, byte vocabulary, weights std 0.2); ``const``: final norm 0."""
    if mode not in TARGET_MODES:
        raise ValueError(f"target mode must be 'random' or 'const', got {mode!r}")
    tok = byte_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=CKPT_HIDDEN,
        intermediate_size=CKPT_INTER,
        num_hidden_layers=num_layers,
        num_attention_heads=CKPT_HEADS,
        num_key_value_heads=CKPT_KV_HEADS,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="float32",
    )
    model = random_llama(cfg, seed, std=0.2)
    if mode == "const":
        with torch.no_grad():
            model.model.norm.weight.zero_()
    return model, tok


def tiny_llama(
    seed: int = 0,
    layers: int = 2,
    vocab: int = 64,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
    max_positions: int = 256,
    init: float = 0.2,
) -> LlamaForCausalLM:
    """A random ``LlamaForCausalLM`` (eval mode, float32, no special tokens) for engine tests; global RNG untouched."""
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        initializer_range=init,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    return random_llama(cfg, seed).eval()


@torch.no_grad()
def greedy_reference(model: Any, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """``transformers.generate(do_sample=False)`` for exactly ``max_new_tokens`` tokens; returns [1, P+n]."""
    ids = prompt if prompt.dim() == 2 else prompt[None]
    return model.generate(
        ids,
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )


# --------------------------------------------------------------------------------------------- drafters
def check_drafter_mode(mode: str) -> None:
    if mode not in DRAFTER_MODES:
        raise ValueError(f"drafter mode must be one of {DRAFTER_MODES}, got {mode!r}")


def drafter_config(
    *,
    hidden_size: int,
    intermediate_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    vocab_size: int,
    draft_vocab_size: int,
    aux_layer_ids: Sequence[int],
    max_position_embeddings: int,
    rms_norm_eps: float,
    rope: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An EAGLE-3 ``config.json`` (one midlayer, SGLang ``LlamaForCausalLMEagle3``); ``extra`` adds fields."""
    return {
        "architectures": [EAGLE3_ARCH],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab_size,
        "draft_vocab_size": draft_vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": rms_norm_eps,
        **(rope or {}),
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        **(extra or {}),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux_layer_ids)},
    }


def random_drafter_state(
    config: Mapping[str, Any], seed: int, std: float, mode: str = "random", lm_head_fan_in: bool = False
) -> dict[str, torch.Tensor]:
    """Random tensors (SGLang key names) for the EAGLE-3 head ``config`` describes, drawn from ``seed``.

    Matrices are N(0, std²), norms 1; ``lm_head_fan_in`` draws ``lm_head`` with std 1/sqrt(H) instead (logits of
    order 1). A draft vocabulary smaller than the target's maps onto a seeded random subset of target ids, drawn
    after the weights. ``mode``: ``random``; ``const``: final norm 0, so all draft logits tie and greedy drafting
    always proposes draft token 0; ``anti``: like ``const`` with the draft → target map rotated by half the draft
    vocabulary (a permutation), so the target id of draft token 0 sits half the vocabulary away from the draft
    tokens a tie-broken top-k picks (the lowest ones): neither its chain nor its tree proposes it.
    """
    check_drafter_mode(mode)
    h, inter, hd = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q_rows, kv_rows = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    v, vd = config["vocab_size"], config["draft_vocab_size"]
    n_aux = len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    state = {  # the draws happen in this order
        "fc.weight": rnd(h, n_aux * h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": rnd(q_rows, 2 * h),
        "midlayer.self_attn.k_proj.weight": rnd(kv_rows, 2 * h),
        "midlayer.self_attn.v_proj.weight": rnd(kv_rows, 2 * h),
        "midlayer.self_attn.o_proj.weight": rnd(h, q_rows),
        "midlayer.mlp.gate_proj.weight": rnd(inter, h),
        "midlayer.mlp.up_proj.weight": rnd(inter, h),
        "midlayer.mlp.down_proj.weight": rnd(h, inter),
        "norm.weight": torch.ones(h) if mode == "random" else torch.zeros(h),
        "lm_head.weight": rnd(vd, h),
    }
    if lm_head_fan_in:
        state["lm_head.weight"] = state["lm_head.weight"] * (1.0 / std) * (1.0 / math.sqrt(h))
    target_ids = torch.arange(v) if vd == v else torch.sort(torch.randperm(v, generator=g)[:vd]).values
    if mode == "anti":
        target_ids = torch.roll(target_ids, -(vd // 2))
    state["d2t"] = target_ids - torch.arange(vd)  # target_id = draft_id + d2t[draft_id]
    state["t2d"] = torch.zeros(v, dtype=torch.bool)
    state["t2d"][target_ids] = True
    return state


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=lambda o: getattr(o, "__dict__", str(o))))


def random_drafter(
    target: Any,
    seed: int = 0,
    draft_vocab_size: int | None = None,
    aux_layer_ids: Sequence[int] | None = None,
    intermediate_size: int | None = None,
    name: str | None = None,
    std: float = 0.02,
) -> Eagle3Drafter:
    """Random head shaped for ``target`` (a transformers causal LM or :class:`~hedgespec.engine.TargetModel`).

    ``draft_vocab_size`` defaults to the full target vocab (identity mapping); a smaller value maps the draft
    vocab onto a seeded random subset of target ids. ``aux_layer_ids`` defaults to
    :func:`~hedgespec.engine.eagle3.default_aux_layer_ids`, ``intermediate_size`` to the target's.
    """
    tcfg = target_text_config(target)
    h, nh = tcfg.hidden_size, tcfg.num_attention_heads
    ids = tuple(aux_layer_ids) if aux_layer_ids is not None else default_aux_layer_ids(tcfg.num_hidden_layers)
    rope = {
        k: getattr(tcfg, k)
        for k in ("rope_parameters", "rope_theta", "rope_scaling")
        if getattr(tcfg, k, None) is not None
    }
    config = drafter_config(
        hidden_size=h,
        intermediate_size=intermediate_size or tcfg.intermediate_size,
        num_heads=nh,
        num_kv_heads=getattr(tcfg, "num_key_value_heads", None) or nh,
        head_dim=getattr(tcfg, "head_dim", None) or h // nh,
        vocab_size=tcfg.vocab_size,
        draft_vocab_size=draft_vocab_size or tcfg.vocab_size,
        aux_layer_ids=ids,
        max_position_embeddings=int(getattr(tcfg, "max_position_embeddings", 2048)),
        rms_norm_eps=float(getattr(tcfg, "rms_norm_eps", 1e-6)),
        rope=_jsonable(rope),
    )
    state = random_drafter_state(config, seed, std, lm_head_fan_in=True)
    return Eagle3Drafter.from_state(config, state, name=name or f"random{seed}")


def checkpoint_drafter_state(
    target_config: Mapping[str, Any], seed: int = 0, mode: str = "random", aux_layer_ids: Sequence[int] = (0, 1, 2)
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json, tensors)`` of the serving checkpoints' one-layer drafter for the target ``target_config``.

    Full draft vocabulary, ``CKPT_HEADS``/``CKPT_KV_HEADS`` heads, weights std 0.2 drawn from ``10000 + seed``.
    """
    h, vocab = target_config["hidden_size"], target_config["vocab_size"]
    config = drafter_config(
        hidden_size=h,
        intermediate_size=CKPT_INTER,
        num_heads=CKPT_HEADS,
        num_kv_heads=CKPT_KV_HEADS,
        head_dim=h // CKPT_HEADS,
        vocab_size=vocab,
        draft_vocab_size=vocab,
        aux_layer_ids=aux_layer_ids,
        max_position_embeddings=target_config.get("max_position_embeddings", 1024),
        rms_norm_eps=target_config.get("rms_norm_eps", 1e-5),
        rope={"rope_theta": target_config.get("rope_theta", 10000.0)},
        extra={"torch_dtype": "float32", "target_hidden_size": h},
    )
    return config, random_drafter_state(config, 10_000 + seed, 0.2, mode)


def agreeing_drafter(
    model: Any, prompts: Sequence[torch.Tensor], seed: int = 0, steps: int = 600, length: int = 40, **kw: Any
) -> Eagle3Drafter:
    """A :func:`random_drafter` (``**kw``) distilled for ``steps`` Adam steps on ``model``'s greedy continuations."""
    seqs = [greedy_reference(model, p, length)[0] for p in prompts]
    return fit_drafter(random_drafter(model, seed=seed, **kw), model, seqs, steps=steps, seed=seed)
