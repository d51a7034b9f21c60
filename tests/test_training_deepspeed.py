"""DeepSpeed ZeRO-Inference capture backend (hedgespec.training.capture_deepspeed) against the transformers path.

The second implementation is hedgespec.training.features' in-process transformers forward of the same tiny
target: the ZeRO-3 run (parameters offloaded to CPU, one process under torch.distributed.run, DS_ACCELERATOR=cpu)
must write the same files with the same token ids and loss masks and, in float32, the same hidden states.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from _requires import DEEPSPEED, installed_or_skip
from _train_helpers import CONVERSATIONS, compose_train, specforge_or_skip, tiny_overrides

AUX = [0, 1, 3]
KW = {"target_hash": "tiny-h", "aux_layer_ids": AUX, "max_length": 96, "max_samples": 4, "dtype": "float32"}


def deepspeed_or_skip() -> None:
    installed_or_skip("deepspeed", DEEPSPEED)


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Both backends on the same 4-layer tiny target (saved with save_pretrained for the DeepSpeed child)."""
    deepspeed_or_skip()
    from hedgespec.models import load_target
    from hedgespec.models.spec import resolve_target
    from hedgespec.training.capture_deepspeed import capture_features_deepspeed, target_model_dir
    from hedgespec.training.features import generate_features

    tmp = tmp_path_factory.mktemp("ds")
    torch.set_num_threads(1)
    spec = resolve_target({"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}})
    model, tok = load_target(spec)
    model_dir = target_model_dir(spec, tmp, loaded=(model, tok))
    ref = generate_features(model, tok, CONVERSATIONS, tmp / "hf", progress=False, **KW)
    ds = capture_features_deepspeed(model_dir, CONVERSATIONS, tmp / "ds", progress=False, **KW)
    return {"tmp": tmp, "ref": ref, "ds": ds, "model_dir": model_dir, "spec": spec, "loaded": (model, tok)}


@pytest.mark.slow
def test_zero3_features_equal_transformers(captured: dict[str, object]) -> None:
    ref, ds = captured["ref"], captured["ds"]
    assert not ds.reused and ds.key == ref.key and ds.path.name == ref.path.name
    assert (ds.num_samples, ds.num_tokens, ds.num_loss_tokens) == (ref.num_samples, ref.num_tokens, ref.num_loss_tokens)
    assert ref.num_samples >= 2
    files = sorted(p.relative_to(ref.path) for p in ref.path.rglob("*.ckpt"))
    assert files == sorted(p.relative_to(ds.path) for p in ds.path.rglob("*.ckpt"))
    for rel in files:
        a = torch.load(ref.path / rel, weights_only=True)
        b = torch.load(ds.path / rel, weights_only=True)
        assert set(a) == set(b) == {"input_ids", "loss_mask", "hidden_state", "aux_hidden_state"}
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["loss_mask"], b["loss_mask"])
        for name in ("hidden_state", "aux_hidden_state"):
            assert a[name].shape == b[name].shape and a[name].dtype == b[name].dtype == torch.float32
            torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=1e-5)
    m_ref = json.loads((ref.path / "features.json").read_text())
    m_ds = json.loads((ds.path / "features.json").read_text())
    assert m_ds.pop("backend") == "deepspeed-zero3" and m_ds.pop("offload") == "cpu"
    assert m_ds.pop("compute_dtype") == "float32"
    assert m_ds == m_ref


@pytest.mark.slow
def test_zero3_cache_reused_without_launch(captured: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    from hedgespec.training import capture_deepspeed

    def no_launch(*_a: object, **_k: object) -> None:
        raise AssertionError("a cached capture must not start a process")

    monkeypatch.setattr(capture_deepspeed, "_launch", no_launch)
    tmp = captured["tmp"]
    again = capture_deepspeed.capture_features_deepspeed(captured["model_dir"], CONVERSATIONS, tmp / "ds", **KW)
    assert again.reused and again.path == captured["ds"].path


@pytest.mark.slow
def test_tiny_target_saved_once(captured: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoConfig

    from hedgespec.training.capture_deepspeed import target_model_dir

    d = captured["model_dir"]
    assert d.parent == captured["tmp"] / "targets" and AutoConfig.from_pretrained(d).num_hidden_layers == 4
    model, tok = captured["loaded"]
    monkeypatch.setattr(type(model), "save_pretrained", lambda *a, **k: pytest.fail("saved twice"))
    assert target_model_dir(captured["spec"], captured["tmp"], loaded=(model, tok)) == d


def test_zero_inference_config_parsed_by_deepspeed(tmp_path: Path) -> None:
    deepspeed_or_skip()
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from hedgespec.training.capture_deepspeed import zero_inference_config

    cpu = zero_inference_config(64, "cpu", compute_dtype="bfloat16")
    z = DeepSpeedZeroConfig(**cpu["zero_optimization"])
    assert int(z.stage) == 3 and z.offload_param.device == "cpu" and z.param_persistence_threshold == 640
    assert cpu["bf16"]["enabled"] and not cpu["fp16"]["enabled"]
    nvme = DeepSpeedZeroConfig(**zero_inference_config(64, "nvme", str(tmp_path))["zero_optimization"])
    assert nvme.offload_param.device == "nvme" and str(nvme.offload_param.nvme_path) == str(tmp_path)


def test_target_model_dir_for_hf_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hedgespec.models.spec import resolve_target
    from hedgespec.training.capture_deepspeed import target_model_dir

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert target_model_dir(resolve_target(f"hf:{tmp_path}"), tmp_path) == tmp_path
    with pytest.raises(ValueError, match="hf_id='no-such/model'.*huggingface-cli download no-such/model"):
        target_model_dir(resolve_target("hf:no-such/model"), tmp_path)
    with pytest.raises(ValueError, match="kind='tiny'.*loaded="):
        target_model_dir(resolve_target("tiny"), tmp_path)


def test_check_features_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hedgespec.training.capture_deepspeed import check_features_backend

    assert check_features_backend(None) == "transformers"
    assert check_features_backend({"max_length": 8, "backend": "transformers"}) == "transformers"
    with pytest.raises(ValueError, match="backend='vllm'.*transformers"):
        check_features_backend({"backend": "vllm"})
    with pytest.raises(ValueError, match=r"unknown keys \['stage'\]"):
        check_features_backend({"backend": "deepspeed", "deepspeed": {"stage": 2}})
    with pytest.raises(ValueError, match="offload='gpu'"):
        check_features_backend({"backend": "deepspeed", "deepspeed": {"offload": "gpu"}})
    with pytest.raises(ValueError, match="nvme_path='/no/such'"):
        check_features_backend({"backend": "deepspeed", "deepspeed": {"offload": "nvme", "nvme_path": "/no/such"}})
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(ImportError, match="(?s)backend=deepspeed.*30-train.sh"):
        check_features_backend({"backend": "deepspeed", "deepspeed": {"offload": "nvme", "nvme_path": str(tmp_path)}})


def _target_dir(tmp: Path, layers: int = 4) -> Path:
    d = tmp / "target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"num_hidden_layers": layers, "hidden_size": 64}))
    return d


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"model_dir": "missing"}, "model_dir=.*config.json"),
        ({"aux_layer_ids": [0, 1, 4]}, r"aux_layer_ids=\[0, 1, 4\].*\[0, 4\)"),
        ({"aux_layer_ids": [0, 1]}, "aux_layer_ids"),
        ({"data_path": "nope.jsonl"}, "data_path="),
        ({"offload": "disk"}, "offload='disk'"),
        ({"offload": "nvme"}, "nvme_path=None"),
        ({"compute_dtype": "int8"}, "compute_dtype='int8'"),
    ],
)
def test_bad_input_fails_before_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict, match: str
) -> None:
    from hedgespec.training import capture_deepspeed

    monkeypatch.setattr(capture_deepspeed, "_launch", lambda *a, **k: pytest.fail("launched despite bad input"))
    args = {"model_dir": _target_dir(tmp_path), "data_path": CONVERSATIONS, "cache_root": tmp_path / "c", **KW}
    for k, v in change.items():
        args[k] = tmp_path / v if k in ("model_dir", "data_path") else v
    with pytest.raises(ValueError, match=match):
        capture_deepspeed.capture_features_deepspeed(**args)


def test_missing_deepspeed_names_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hedgespec.training import capture_deepspeed

    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError, find_spec -> None
    with pytest.raises(ImportError, match="install.d/30-train.sh"):
        capture_deepspeed.require_deepspeed()
    args = {"model_dir": _target_dir(tmp_path), "data_path": CONVERSATIONS, "cache_root": tmp_path / "c", **KW}
    with pytest.raises(ImportError, match="deepspeed==0.19.8"):
        capture_deepspeed.capture_features_deepspeed(**args)


def test_worker_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hedgespec.training.capture_deepspeed import main

    argv = ["--model-dir", str(tmp_path), "--data", str(CONVERSATIONS), "--cache-root", str(tmp_path / "c")]
    rc = main([*argv, "--target-hash", "h", "--aux-layer-ids", "0", "1", "2"])
    assert rc == 2 and "model_dir=" in capsys.readouterr().err


@pytest.mark.slow
def test_train_run_with_the_deepspeed_backend_registers_a_drafter(tmp_path: Path) -> None:
    """`train/run.py ... ++train.features.backend=deepspeed`: the pipeline's features come from the ZeRO-3 child."""
    deepspeed_or_skip()
    specforge_or_skip()
    from hedgespec.training.pipeline import train_drafter

    res = train_drafter(compose_train(tmp_path, *tiny_overrides("++train.features.backend=deepspeed")))
    assert res.final_step == 6 and res.manifest is not None and res.manifest.is_file()
    feats = json.loads(next((tmp_path / "cache").rglob("features.json")).read_text())
    assert feats["backend"] == "deepspeed-zero3"


@pytest.mark.slow
def test_deepspeed_run_of_an_hf_target_loads_only_its_head_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the DeepSpeed backend the training process never loads the whole target (its forward passes run in the
    ZeRO-3 child): ``load_target`` refuses here, and the run still trains and registers a drafter whose target
    hash is the checkpoint's."""
    deepspeed_or_skip()
    specforge_or_skip()
    import hedgespec.models
    from hedgespec.pools import load_pool
    from hedgespec.training.pipeline import train_drafter

    model, tok = hedgespec.models.load_target({"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}})
    target = tmp_path / "target"
    model.save_pretrained(target, safe_serialization=True)
    tok.save_pretrained(target)
    full_hash = hedgespec.models.target_fingerprint(
        hedgespec.models.load_target({"name": "t", "kind": "hf", "hf_id": str(target), "dtype": "float32"})[0]
    )

    def refuse(*a, **k):
        raise AssertionError("the training process loaded the whole target")

    monkeypatch.setattr(hedgespec.models, "load_target", refuse)
    over = ["target.kind=hf", f"+target.hf_id={target}", "target.dtype=float32", "++train.features.backend=deepspeed"]
    res = train_drafter(compose_train(tmp_path, *tiny_overrides(*over)))
    assert res.final_step == 6 and res.manifest is not None
    pool = load_pool(res.manifest)
    assert pool.target.hash == full_hash
