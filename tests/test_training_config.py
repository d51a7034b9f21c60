"""Training bridge, no training: config composition/validation, bad inputs, CPU loss, feature format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _train_helpers import CONVERSATIONS, compose_train, specforge_or_skip, tiny_overrides

specforge_or_skip()

from hedgespec.training.pipeline import train_drafter  # noqa: E402


@pytest.fixture
def no_target_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything tries to load a target (checks must happen before any work)."""
    import hedgespec.models

    def refuse(*a, **k):
        raise AssertionError("load_target was called: validation did not happen before work")

    monkeypatch.setattr(hedgespec.models, "load_target", refuse)


@pytest.mark.parametrize(
    ("target", "budget"),
    [("tiny", "tiny"), ("smollm2", "embedded"), ("llama8b", "paper"), ("qwen8b", "paper"), ("qwen32b", "paper")],
)
def test_budgets_compose_and_validate(tmp_path: Path, target: str, budget: str, no_target_loading: None) -> None:
    cfg = compose_train(tmp_path, f"target={target}", f"train={budget}", "domain=sql", "train.plan_only=true")
    res = train_drafter(cfg)
    sf = res.specforge_config
    assert res.stages["plan_only"] is True
    assert not any(tmp_path.iterdir()), "plan_only must write nothing"
    if budget == "paper":  # SpecForge's GPU defaults: FSDP, flex attention (and its Triton loss, untouched)
        assert sf["training"]["fsdp_sharding"] == "SHARD_GRAD_OP"
        assert sf["training"]["attention_backend"] == "flex_attention"
        assert sf["training"]["ttt_length"] == 7
        assert res.pool == target  # what serve/launch.py pool=<target> reads (test_pool_names_train_to_serve)
        # SpecForge's own template name for the target (Qwen3 regenerates with thinking off)
        assert sf["data"]["chat_template"] == {"llama8b": "llama3"}.get(target, "qwen3-instruct")
        assert sf["model"]["target_model_path"].count("/") == 1  # the HF id
    else:
        assert sf["training"]["fsdp_sharding"] == "NO_SHARD"
        assert sf["training"]["attention_backend"] == "sdpa"


def test_paper_gpus_map_to_specforge_torchrun(tmp_path: Path, no_target_loading: None) -> None:
    cfg = compose_train(
        tmp_path, "target=llama8b", "train=paper", "domain=math", "train.plan_only=true", "train.gpus=8"
    )
    sf = train_drafter(cfg).specforge_config
    assert sf["deployment"]["trainer"]["nproc_per_node"] == 8


def test_specforge_key_typo_rejected_before_any_work(tmp_path: Path, no_target_loading: None) -> None:
    cfg = compose_train(tmp_path, *tiny_overrides("+train.specforge.training.learning_rat=0.1"))
    with pytest.raises(ValueError, match=r"specforge\.training\.learning_rat: Extra inputs are not permitted"):
        train_drafter(cfg)
    cfg = compose_train(tmp_path, *tiny_overrides("train.specforge.training.fsdp_sharding=SHARDED"))
    with pytest.raises(ValueError, match=r"specforge\.training\.fsdp_sharding"):
        train_drafter(cfg)
    cfg = compose_train(tmp_path, *tiny_overrides("+train.specforge.model.target_model_path=/x"))
    with pytest.raises(ValueError, match=r"model\.target_model_path is set by hedgespec"):
        train_drafter(cfg)
    assert not any(tmp_path.iterdir())


def test_cpu_budget_needs_cpu_settings(tmp_path: Path, no_target_loading: None) -> None:
    cfg = compose_train(tmp_path, *tiny_overrides("train.specforge.training.attention_backend=flex_attention"))
    with pytest.raises(ValueError, match=r"specforge\.training\.attention_backend='flex_attention' cannot run on CPU"):
        train_drafter(cfg)


def test_unknown_domain_and_target(tmp_path: Path, no_target_loading: None) -> None:
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf

    with pytest.raises(ValueError, match=r"domain='astrology' is unknown; expected one of \[.*'sql'.*'general'"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("domain=astrology")))
    with pytest.raises(ValueError, match=r"domain='gsm8k' is an eval-only set"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("domain=gsm8k")))
    with pytest.raises(MissingConfigException, match="target"):
        compose_train(tmp_path, "target=gpt5", "train=tiny", "domain=sql")
    raw = OmegaConf.to_container(compose_train(tmp_path, *tiny_overrides()), resolve=True)
    raw["target"] = "gpt5"
    with pytest.raises(ValueError, match=r"target='gpt5' is unknown"):
        train_drafter(raw)


def test_logger_choice(tmp_path: Path, no_target_loading: None) -> None:
    cfg = compose_train(tmp_path, *tiny_overrides("logger=wandb", "train.plan_only=true"))
    tracking = train_drafter(cfg).specforge_config["tracking"]
    assert tracking["report_to"] == "wandb" and tracking["wandb_offline"] is True
    assert tracking["wandb_dir"].startswith(str(tmp_path))


def test_missing_specforge_gives_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_target_loading: None
) -> None:
    monkeypatch.setitem(sys.modules, "specforge", None)  # import specforge -> ImportError
    cfg = compose_train(tmp_path, *tiny_overrides())
    with pytest.raises(ImportError, match=r"(?s)specforge is not installed.*bash scripts/install.d/30-train.sh"):
        train_drafter(cfg)
    # and importing the package itself never needs SpecForge (nor torch)
    code = (
        "import sys; sys.modules['specforge'] = None; import hedgespec.training, hedgespec.pools; "
        "assert 'torch' not in sys.modules; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_cpu_loss_matches_reference_and_gradient() -> None:
    """Pure-torch loss == an explicit per-position sum, gradient == softmax(z)*sum(m p) - m p (over B*T)."""
    from hedgespec.training.cpu import SoftCrossEntropyLoss

    g = torch.Generator().manual_seed(0)
    B, T, V = 2, 5, 11
    z = torch.randn(B, T, V, generator=g, requires_grad=True)
    p = torch.softmax(torch.randn(B, T, V, generator=g), -1)
    m = (torch.rand(B, T, 1, generator=g) > 0.3).float()
    loss = SoftCrossEntropyLoss.apply(z, p, m)
    ref = 0.0
    for b in range(B):
        for t in range(T):
            zs = z[b, t].double()
            logp = zs - torch.log(torch.exp(zs - zs.max()).sum()) - zs.max()
            ref -= float(m[b, t, 0]) * float((p[b, t].double() * logp).sum().detach())
    assert abs(float(loss) - ref / (B * T)) < 1e-6
    loss.backward()
    mp = m * p
    expected = (torch.softmax(z.detach(), -1) * mp.sum(-1, keepdim=True) - mp) / (B * T)
    torch.testing.assert_close(z.grad, expected, atol=1e-6, rtol=1e-5)


def test_cpu_runtime_is_scoped() -> None:
    import importlib
    import os

    from hedgespec.training.cpu import SoftCrossEntropyLoss, cpu_runtime

    with cpu_runtime():  # without triton this registers the stand-in loss module, so the import works
        eagle3_model = importlib.import_module("specforge.algorithms.eagle3.model")

    class Sentinel:  # stands for the Triton class
        pass

    eagle3_model.LogSoftmaxLoss, env_before = Sentinel, os.environ.get("TORCHDYNAMO_DISABLE")
    try:
        with cpu_runtime():
            assert eagle3_model.LogSoftmaxLoss is SoftCrossEntropyLoss
            assert os.environ["TORCHDYNAMO_DISABLE"] == "1"
            assert torch._dynamo.config.disable
        assert eagle3_model.LogSoftmaxLoss is Sentinel
        assert os.environ.get("TORCHDYNAMO_DISABLE") == env_before
    finally:
        eagle3_model.LogSoftmaxLoss = SoftCrossEntropyLoss


def test_features_match_specforge_format(tmp_path: Path) -> None:
    """Loss mask covers exactly the assistant turns (+ end marker); hidden/aux are the right HF states."""
    from hedgespec.models import load_target
    from hedgespec.training.features import generate_features, read_conversations, tokenize_conversation

    torch.set_num_threads(1)
    model, tok = load_target({"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}})
    rows = read_conversations(CONVERSATIONS)
    conv = next(r["conversations"] for r in rows if len(r["conversations"]) == 4)
    ids, mask = tokenize_conversation(tok, conv, max_length=512)
    supervised = tok.decode(ids[mask.bool()].tolist())
    expected = "".join(m["content"] + "<|im_end|>\n" for m in conv if m["role"] == "assistant")
    assert supervised == expected
    assert tok.decode(ids.tolist()) == tok.apply_chat_template(conv, tokenize=False)

    fs = generate_features(
        model,
        tok,
        CONVERSATIONS,
        tmp_path,
        target_hash="h",
        aux_layer_ids=[0, 1, 2],
        max_length=64,
        max_samples=3,
        progress=False,
    )
    assert fs.num_samples == 3 and not fs.reused
    files = sorted(fs.path.rglob("*.ckpt"))
    rec = torch.load(files[0], weights_only=True)
    assert set(rec) == {"input_ids", "loss_mask", "hidden_state", "aux_hidden_state"}
    T = rec["input_ids"].shape[0]
    assert rec["loss_mask"].shape == (T,) and rec["hidden_state"].shape == (1, T, 64)
    assert rec["aux_hidden_state"].shape == (1, T, 3 * 64) and rec["hidden_state"].dtype == torch.bfloat16
    with torch.no_grad():
        out = model(input_ids=rec["input_ids"][None], output_hidden_states=True)
    states = out.hidden_states  # [embeddings, after layer 0, ..., after layer 3]
    for j, layer in enumerate([0, 1, 2]):  # each aux slice is its layer's output, rounded to bfloat16, no other's
        got = rec["aux_hidden_state"][0, :, 64 * j : 64 * (j + 1)].float()
        err = [float((got - s[0]).abs().max() / s[0].abs().max()) for s in states]
        assert min(range(len(err)), key=err.__getitem__) == layer + 1, err
        assert err[layer + 1] <= 2**-8, err  # bfloat16 rounding (8 significand bits) and summation order
        assert min(e for i, e in enumerate(err) if i != layer + 1) > 10 * max(err[layer + 1], 2**-8), err
    logits = model.lm_head(rec["hidden_state"].float())
    torch.testing.assert_close(logits, out.logits, atol=0.1, rtol=0.05)
    again = generate_features(
        model,
        tok,
        CONVERSATIONS,
        tmp_path,
        target_hash="h",
        aux_layer_ids=[0, 1, 2],
        max_length=64,
        max_samples=3,
        progress=False,
    )
    assert again.reused and again.path == fs.path
    other = generate_features(
        model,
        tok,
        CONVERSATIONS,
        tmp_path,
        target_hash="h",
        aux_layer_ids=[0, 1, 3],
        max_length=64,
        max_samples=3,
        progress=False,
    )
    assert not other.reused and other.path != fs.path


def test_supervise_all_marks_every_token_and_keys_its_own_cache(tmp_path: Path) -> None:
    """``supervise="all"``: the same ids, a mask of ones (prompt included), written as such, under another key; the
    default's key is the key of features made before the setting existed."""
    from hedgespec.models import load_target
    from hedgespec.training.features import feature_key, generate_features, read_conversations, tokenize_conversation

    torch.set_num_threads(1)
    model, tok = load_target({"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}})
    conv = read_conversations(CONVERSATIONS)[0]["conversations"]
    ids, mask = tokenize_conversation(tok, conv, max_length=512)
    ids_all, mask_all = tokenize_conversation(tok, conv, max_length=512, supervise="all")
    assert torch.equal(ids_all, ids) and 0 < int(mask.sum()) < ids.numel()
    assert torch.equal(mask_all, torch.ones_like(ids))
    with pytest.raises(ValueError, match=r"train.features.supervise='prompt': must be one of \['assistant', 'all'\]"):
        tokenize_conversation(tok, conv, max_length=512, supervise="prompt")

    args = ("h", "d", [0, 1, 2], 64, 3, "bfloat16", "tok")
    old = feature_key(*args)  # the key's fields before the setting: no "supervise"
    assert feature_key(*args, supervise="assistant") == old and feature_key(*args, supervise="all") != old
    kw = dict(target_hash="h", aux_layer_ids=[0, 1, 2], max_length=64, max_samples=3, progress=False)
    base = generate_features(model, tok, CONVERSATIONS, tmp_path, **kw)
    every = generate_features(model, tok, CONVERSATIONS, tmp_path, supervise="all", **kw)
    assert every.path != base.path and every.num_tokens == base.num_tokens
    assert every.num_loss_tokens == every.num_tokens > base.num_loss_tokens
    for f in every.path.rglob("*.ckpt"):
        rec = torch.load(f, weights_only=True)
        assert torch.equal(rec["loss_mask"], torch.ones_like(rec["input_ids"]))


def test_draft_config_for_target() -> None:
    from transformers import LlamaConfig

    from hedgespec.training.config import draft_config_dict

    t = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=4,
        vocab_size=512,
        tie_word_embeddings=True,
    )
    d = draft_config_dict(t, draft_vocab_size=256, aux_layer_ids=[0, 1, 2])
    assert d["architectures"] == ["LlamaForCausalLMEagle3"] and d["num_hidden_layers"] == 1
    assert d["tie_word_embeddings"] is False and d["draft_vocab_size"] == 256 and d["vocab_size"] == 512
    assert d["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}


def test_shipped_training_yamls_start_with_their_command() -> None:
    from _train_helpers import CONF

    for path in [CONF / "train.yaml", *sorted((CONF / "train").glob("*.yaml"))]:
        first = path.read_text().splitlines()[0]
        assert first.startswith("#") and "train/run.py" in path.read_text().split("\n\n")[0], path


# SpecForge's default capture layers [1, L//2 - 1, L - 4] for each paper target's real layer count.
PAPER_AUX = {"llama8b": [1, 15, 28], "qwen8b": [1, 17, 32], "qwen32b": [1, 31, 60]}


@pytest.mark.parametrize("target", sorted(PAPER_AUX))
def test_paper_plan_shows_real_aux_layers_and_commands(tmp_path: Path, target: str, no_target_loading: None) -> None:
    cfg = compose_train(
        tmp_path, f"target={target}", "train=paper", "domain=sql", "train.plan_only=true", "train.gpus=8"
    )
    res = train_drafter(cfg)
    assert res.stages["aux_layer_ids"] == PAPER_AUX[target]
    assert res.specforge_config["model"]["aux_hidden_state_layer_ids"] == PAPER_AUX[target]
    train_cmd, export_cmd = res.stages["commands"]
    assert train_cmd == f"specforge train --config {tmp_path / 'outputs' / target / 'sql' / 'run.yaml'}"
    assert res.stages["features"].startswith("8 processes (python -m hedgespec.training.capture_sharded)")
    (launch,) = res.stages["specforge_launch"].values()  # SpecForge's own launch planner, one node
    assert launch.startswith("python -m torch.distributed.run --standalone --nproc_per_node 8 --module specforge.cli")
    assert export_cmd.startswith("specforge export --to sglang")
    assert res.stages["manifest"] == str(tmp_path / "pools" / f"{target}.yaml")


def test_plan_without_layer_count_names_the_fix(tmp_path: Path, no_target_loading: None) -> None:
    cfg = compose_train(tmp_path, "target=llama8b", "train=paper", "train.plan_only=true", "target.num_layers=null")
    with pytest.raises(ValueError, match=r"target\.num_layers=<decoder layers> or train\.aux_layer_ids"):
        train_drafter(cfg)
    cfg = compose_train(
        tmp_path,
        "target=llama8b",
        "train=paper",
        "train.plan_only=true",
        "target.num_layers=null",
        "train.aux_layer_ids=[2,10,20]",
    )
    assert train_drafter(cfg).stages["aux_layer_ids"] == [2, 10, 20]


def test_num_layers_checked_against_the_loaded_target(tmp_path: Path) -> None:
    cfg = compose_train(tmp_path, *tiny_overrides("+target.num_layers=7"))
    with pytest.raises(ValueError, match=r"has \d+ layers but its config says num_layers=7"):
        train_drafter(cfg)


def test_gpu_count_checked_before_any_work(
    tmp_path: Path, no_target_loading: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cfg = compose_train(tmp_path, "target=llama8b", "train=paper", "domain=math", "train.gpus=8")
    with pytest.raises(
        ValueError, match=r"train.gpus=8 but 2 CUDA device\(s\) are visible \(CUDA_VISIBLE_DEVICES=0,1\)"
    ):
        train_drafter(cfg)
    for bad, msg in (("0", r"train.gpus=0 must be an int >= 1"), ("two", r"train.gpus='two' must be an int")):
        with pytest.raises(ValueError, match=msg):
            train_drafter(compose_train(tmp_path, "target=llama8b", "train=paper", "domain=math", f"train.gpus={bad}"))
    with pytest.raises(ValueError, match=r"train.gpus=2 needs train.device=cuda"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("+train.gpus=2")))
    plan = compose_train(
        tmp_path, "target=llama8b", "train=paper", "domain=math", "train.gpus=8", "train.plan_only=true"
    )
    assert train_drafter(plan).specforge_config["deployment"]["trainer"]["nproc_per_node"] == 8  # plans need no GPUs
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("native", [True, False])
def test_train_dtype_is_one_setting(
    tmp_path: Path, native: bool, no_target_loading: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train.dtype=auto trains in bfloat16 where it is native (a GPU, a CPU with oneDNN's bfloat16 path) and in
    float32 on other CPUs; features and SpecForge get the same dtype, and neither can be set apart from it."""
    import hedgespec.models.linear_kernels as lk

    monkeypatch.setattr(lk, "native_bfloat16", lambda: native)

    def plan(*overrides: str, target: str = "tiny", budget: str = "tiny") -> dict:
        extra = ("domain=sql", "train.plan_only=true", f"target={target}", f"train={budget}", *overrides)
        return train_drafter(compose_train(tmp_path, *extra)).specforge_config

    assert plan()["model"]["torch_dtype"] == ("bfloat16" if native else "float32")
    assert plan(target="smollm2", budget="embedded")["model"]["torch_dtype"] == ("bfloat16" if native else "float32")
    assert plan(target="llama8b", budget="paper")["model"]["torch_dtype"] == "bfloat16"  # device=cuda
    assert plan("train.dtype=float16")["model"]["torch_dtype"] == "float16"
    with pytest.raises(ValueError, match=r"train.dtype='fp8' is unknown; expected one of auto, bfloat16"):
        plan("train.dtype=fp8")
    for field in ("train.features.dtype", "train.specforge.model.torch_dtype"):
        with pytest.raises(ValueError, match=rf"{field} is set from train.dtype .*remove it and set train.dtype"):
            plan(f"+{field}=float32")
    with pytest.raises(ValueError, match=r"train.dtype=float32 with train.gpus=8: SpecForge's torchrun workers"):
        plan("train.dtype=float32", "train.gpus=8", target="llama8b", budget="paper")
    assert not any(tmp_path.iterdir())


def test_bfloat16_runs_keep_the_key_they_had_before_train_dtype(tmp_path: Path) -> None:
    """Runs trained before train.dtype existed set both fields to bfloat16 by hand: a bfloat16 run resolves to
    that same budget, so its run key (and its resume) is unchanged."""
    from omegaconf import OmegaConf

    from hedgespec.training.config import resolve_train_dtype
    from hedgespec.training.hashing import json_hash
    from hedgespec.training.pipeline import _keyed_train

    train = OmegaConf.to_container(compose_train(tmp_path, *tiny_overrides("train.dtype=bfloat16"))["train"])
    before = {k: v for k, v in train.items() if k != "dtype"}
    before["features"] = {**before["features"], "dtype": "bfloat16"}
    before["specforge"] = {**before["specforge"], "model": {"torch_dtype": "bfloat16"}}
    assert json_hash(_keyed_train(resolve_train_dtype(train))) == json_hash(_keyed_train(before))


@pytest.mark.parametrize("target", ["llama8b", "qwen8b", "qwen32b"])
def test_paper_budget_trains_on_regenerated_hf_data(
    tmp_path: Path, target: str, no_target_loading: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train=paper chooses the Hugging Face recipes and the target's regenerated answers; missing answers are
    named with the command that makes them, before the target is loaded."""
    import re

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    cfg = compose_train(tmp_path, f"target={target}", "train=paper", "domain=sql")
    assert cfg.source == "hf" and cfg.data.regenerated is True and cfg.train.regenerate.max_examples == 0
    assert cfg.pool == target
    stem = target if target == "llama8b" else f"{target}.nothink"  # Qwen3: thinking off
    cmd = f"python scripts/prepare_data.py domain=sql source=hf regenerate=true target={target}"
    with pytest.raises(
        FileNotFoundError, match=rf"hf/sql/regen/train\.{re.escape(stem)}\.jsonl does not exist: run `{cmd}`"
    ):
        train_drafter(cfg)
    assert not any(tmp_path.iterdir())
    for budget in ("tiny", "embedded"):
        assert compose_train(tmp_path, f"train={budget}").source == "offline"


def test_specforge_template_follows_the_thinking_switch() -> None:
    from hedgespec.models import BUILTIN_TARGETS, TargetSpec
    from hedgespec.training.config import specforge_chat_template

    qwen = BUILTIN_TARGETS["qwen8b"]
    assert specforge_chat_template(qwen) == "qwen3-instruct"
    assert specforge_chat_template(TargetSpec(**{**qwen.__dict__, "thinking": True})) == "qwen3-thinking"
    assert specforge_chat_template(TargetSpec(**{**qwen.__dict__, "thinking": None})) == "qwen3-thinking"  # its default
    assert specforge_chat_template(BUILTIN_TARGETS["tiny"]) is None  # SpecForge's default; offline it is unused
