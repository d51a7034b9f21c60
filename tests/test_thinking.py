"""The chat template's thinking switch (``target.thinking``, Qwen3's ``enable_thinking``).

Independent truth: the template's own switch. A tokenizer with the switch pinned must render every conversation
exactly as the unpinned tokenizer does when ``enable_thinking`` is passed to ``apply_chat_template``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import transformers
from _requires import DEEPSPEED, installed_or_skip
from omegaconf import OmegaConf

from hedgespec.models import BUILTIN_TARGETS, TargetSpec, load_target, load_tokenizer
from hedgespec.models.chat import pin_thinking, template_kwargs
from hedgespec.training.features import feature_key, tokenize_conversation

ROOT = Path(__file__).resolve().parents[1]

#: a small template with Qwen3's shape: the last assistant turn carries a (here empty) think block, and the
#: generation prompt closes an empty one when thinking is switched off
TOGGLE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|assistant|>{% if loop.last %}<think></think>{% endif %}{{ m.content }}<|end|>"
    "{%- else %}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think></think>{%- endif %}"
    "{%- endif %}"
)
CONVERSATIONS = [
    [{"role": "user", "content": "Count the rows of t."}],
    [{"role": "user", "content": "Count the rows of t."}, {"role": "assistant", "content": "SELECT COUNT(*) FROM t;"}],
    [
        {"role": "system", "content": "You write SQL."},
        {"role": "user", "content": "List t."},
        {"role": "assistant", "content": "SELECT * FROM t;"},
        {"role": "user", "content": "Only ids."},
    ],
]


@pytest.fixture()
def toggle_tok():
    tok = load_tokenizer("tiny")
    tok.chat_template = TOGGLE
    return tok


@pytest.mark.parametrize("thinking", [False, True])
def test_pinned_template_renders_as_the_switch_does(toggle_tok, thinking) -> None:
    pinned = pin_thinking(copy.deepcopy(toggle_tok), thinking, "t")
    for msgs in CONVERSATIONS:
        for gen in (False, True):
            want = toggle_tok.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=gen, **template_kwargs(thinking)
            )
            assert pinned.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen) == want
    again = pin_thinking(pinned, not thinking, "t")  # pinning again replaces the value
    msgs = CONVERSATIONS[0]
    assert again.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        toggle_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=not thinking)
    )
    assert again.chat_template.count("{% set enable_thinking") == 1


def test_null_keeps_the_template(toggle_tok) -> None:
    assert pin_thinking(toggle_tok, None, "t").chat_template == TOGGLE
    assert template_kwargs(None) == {}


def test_loss_mask_follows_the_switch(toggle_tok) -> None:
    """Thinking off: the empty think block belongs to the prompt (as at serving time), only the answer is trained."""
    conv = CONVERSATIONS[1]

    def supervised(tok) -> str:
        ids, mask = tokenize_conversation(tok, conv, 512)
        return tok.decode([int(i) for i, m in zip(ids, mask) if m])

    off = supervised(pin_thinking(copy.deepcopy(toggle_tok), False, "t"))
    default = supervised(toggle_tok)
    assert "COUNT(*) FROM t;" in off and "COUNT(*) FROM t;" in default
    assert "think" not in off and "think" in default


def test_a_template_without_the_switch_is_refused() -> None:
    with pytest.raises(ValueError, match="no 'enable_thinking' switch.*target.thinking=null"):
        load_tokenizer({"name": "tiny", "kind": "tiny", "thinking": True})
    with pytest.raises(ValueError, match=r"thinking='yes' must be true, false or null"):
        TargetSpec(name="tiny", kind="tiny", thinking="yes")  # type: ignore[arg-type]


def test_hf_target_refused_before_its_weights_load(monkeypatch) -> None:
    tiny = load_tokenizer("tiny")  # its template has no thinking switch, like Llama-3.1's
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tiny)
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("weights loaded")
    )
    with pytest.raises(ValueError, match="target 'llama8b': thinking=false"):
        load_target({"name": "llama8b", "kind": "hf", "hf_id": "meta-llama/Llama-3.1-8B-Instruct", "thinking": False})


def test_paper_targets_set_the_switch_once() -> None:
    for name, want in (("qwen8b", False), ("qwen32b", False), ("llama8b", None), ("smollm2", None), ("tiny", None)):
        node = OmegaConf.load(ROOT / "conf" / "target" / f"{name}.yaml")
        assert TargetSpec.from_dict(node).thinking is want, name
        assert BUILTIN_TARGETS[name].thinking is want, name


def test_feature_key_includes_the_tokenizer_only_when_given() -> None:
    args = ("sha256:t", "sha256:d", [0, 1, 2], 96, None, "float32")
    assert feature_key(*args) == feature_key(*args, tokenizer_hash="")
    assert feature_key(*args, tokenizer_hash="sha256:a") not in (feature_key(*args), feature_key(*args, "sha256:b"))


def test_training_reads_the_answers_of_its_setting(tmp_path) -> None:
    from hedgespec.training.pipeline import resolve_data

    cfg = {
        "target": {"name": "tiny", "kind": "tiny", "thinking": False},
        "data": {"regenerated": True},
        "data_dir": str(tmp_path),
        "source": "offline",
        "train": {},
    }
    with pytest.raises(FileNotFoundError, match=r"train\.tiny\.nothink\.jsonl"):
        resolve_data(cfg, "sql")


def test_deepspeed_child_gets_the_switch(tmp_path, monkeypatch) -> None:
    installed_or_skip("deepspeed", DEEPSPEED)
    from hedgespec.training import capture_deepspeed
    from hedgespec.training.capture_deepspeed import _parser, capture_features_deepspeed, target_model_dir

    spec = TargetSpec(name="tiny", kind="tiny")
    model_dir = target_model_dir(spec, tmp_path, loaded=load_target(spec))
    data = tmp_path / "c.jsonl"
    data.write_text('{"id": "a", "conversations": [{"role": "user", "content": "x"}]}\n')
    seen: list[list[str]] = []

    def launch(argv, echo):  # noqa: ARG001 - the signature of _launch
        seen.append(list(argv))
        raise RuntimeError("stop here")

    monkeypatch.setattr(capture_deepspeed, "_launch", launch)
    kw = {"target_hash": "h", "aux_layer_ids": [0, 1, 1], "max_length": 32, "progress": False}
    with pytest.raises(RuntimeError, match="stop here"):
        capture_features_deepspeed(model_dir, data, tmp_path / "f", tokenizer_hash="sha256:k", thinking=False, **kw)
    args = _parser().parse_args(seen[0])
    assert (args.thinking, args.tokenizer_hash) == ("false", "sha256:k")
