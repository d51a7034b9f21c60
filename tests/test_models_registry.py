"""Target registry: name resolution (no loading for the paper targets), the tiny target, configs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoTokenizer

from hedgespec.fixtures import CHAT_TEMPLATE
from hedgespec.models import (
    BUILTIN_TARGETS,
    TargetSpec,
    load_target,
    load_tokenizer,
    resolve_target,
    target_fingerprint,
    tokenizer_fingerprint,
)
from hedgespec.serving.tiny import make_target

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.mark.parametrize(
    "name, hf_id",
    [("llama8b", "meta-llama/Llama-3.1-8B-Instruct"), ("qwen8b", "Qwen/Qwen3-8B"), ("qwen32b", "Qwen/Qwen3-32B")],
)
def test_paper_targets_resolve_without_loading(name: str, hf_id: str) -> None:
    spec = resolve_target(name)
    assert spec.kind == "hf" and spec.hf_id == hf_id and spec.name == name


def test_hf_prefix_and_errors() -> None:
    spec = resolve_target("hf:some/model")
    assert spec.kind == "hf" and spec.hf_id == "some/model"
    with pytest.raises(ValueError, match="target='nope' is unknown"):
        resolve_target("nope")
    with pytest.raises(ValueError, match="hf:"):
        resolve_target("hf:")
    with pytest.raises(ValueError, match="kind=hf but no hf_id"):
        TargetSpec(name="x", kind="hf")
    with pytest.raises(ValueError, match="unknown override"):
        load_target("tiny", colour="red")


@pytest.mark.parametrize("name", sorted(BUILTIN_TARGETS))
def test_conf_target_yaml_matches_registry(name: str) -> None:
    path = CONF / "target" / f"{name}.yaml"
    text = path.read_text()
    assert text.startswith("#"), "every shipped YAML starts with a comment giving the command"
    spec = TargetSpec.from_dict(yaml.safe_load(text))
    assert spec == BUILTIN_TARGETS[name]


def test_hydra_composes_target_group() -> None:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("prepare_data", overrides=["target=tiny"])
    assert resolve_target(cfg.target) == BUILTIN_TARGETS["tiny"]


def test_tiny_is_fast_deterministic_and_seeded() -> None:
    t = time.perf_counter()
    m1, tok = load_target("tiny")
    assert time.perf_counter() - t < 30
    m2, _ = load_target("tiny")
    m3, _ = load_target("tiny", seed=1)
    assert target_fingerprint(m1) == target_fingerprint(m2)
    assert target_fingerprint(m1) != target_fingerprint(m3)
    assert sum(p.numel() for p in m1.parameters()) < 1_000_000
    # the global RNG is untouched by building a target
    torch.manual_seed(123)
    a = torch.rand(1)
    torch.manual_seed(123)
    load_target("tiny")
    assert torch.equal(a, torch.rand(1))
    assert tokenizer_fingerprint(tok) == tokenizer_fingerprint(load_tokenizer("tiny"))


def test_tiny_tokenizer_round_trip_and_chat_template() -> None:
    _, tok = load_target("tiny")
    for text in ["def f(x):\n    return x * 2\n", "SELECT * FROM t;", "Ünïcødé ✓ 日本", "#### 42"]:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    s = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert s == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>"


def test_tiny_tokenizers_share_the_chatml_template(tmp_path: Path) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    on_disk = AutoTokenizer.from_pretrained(make_target(tmp_path / "t"))  # the serving checkpoints' byte vocabulary
    for tok in (load_tokenizer("tiny"), on_disk):
        assert tok.chat_template == CHAT_TEMPLATE
        assert tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False) == want


def test_tiny_greedy_generate_matches_manual_argmax_loop() -> None:
    torch.set_num_threads(1)
    model, tok = load_target("tiny", seed=3)
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=tok.pad_token_id,
        )
        seq = ids
        for _ in range(8):  # independent truth: full forward each step, no KV cache
            nxt = model(seq).logits[0, -1].argmax().view(1, 1)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(out, seq)


def test_tiny_is_identical_across_processes() -> None:
    import subprocess
    import sys

    code = (
        "from hedgespec.models import load_target, target_fingerprint, tokenizer_fingerprint;"
        "m, t = load_target('tiny'); print(target_fingerprint(m), tokenizer_fingerprint(t))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    m, t = load_target("tiny")
    assert out == [target_fingerprint(m), tokenizer_fingerprint(t)]


def _random_llama(out: Path, tied: bool) -> tuple[object, dict]:
    """A random 2-layer Llama saved as a Hugging Face checkpoint with the tiny target's tokenizer; its target spec."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = load_target("tiny")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=len(tok), tie_word_embeddings=tied)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return tok, {"name": "t", "kind": "hf", "hf_id": str(out), "dtype": "auto"}


@pytest.mark.parametrize("tied", [False, True])
def test_head_only_load_equals_the_full_load_where_it_holds_weights(tmp_path: Path, tied: bool) -> None:
    """``load_target_head`` reads only the embedding, the head and the final norm of an ``hf`` checkpoint: those
    equal the full load's, the decoder layers stay on the meta device, and the fingerprint is the full load's."""
    from hedgespec.models import load_target_head

    tok, spec = _random_llama(tmp_path, tied)
    full, _ = load_target(spec)
    head, head_tok = load_target_head(spec)
    assert target_fingerprint(head) == target_fingerprint(full) and head.dtype == full.dtype
    assert tokenizer_fingerprint(head_tok) == tokenizer_fingerprint(tok)
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        assert torch.equal(head.get_parameter(name), full.get_parameter(name)), name
    assert (head.lm_head.weight.data_ptr() == head.model.embed_tokens.weight.data_ptr()) == tied
    assert all(p.is_meta for p in head.model.layers.parameters())
    assert load_target_head("tiny")[0].model.layers[0].self_attn.q_proj.weight.is_meta is False  # small: whole


def test_head_only_load_without_the_head_in_the_checkpoint_names_it(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from hedgespec.models import load_target_head

    _, spec = _random_llama(tmp_path, tied=False)
    f = tmp_path / "model.safetensors"
    save_file({k: v for k, v in load_file(f).items() if k != "model.norm.weight"}, f, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"\['model\.norm\.weight'\] not found in the safetensors files"):
        load_target_head(spec)
