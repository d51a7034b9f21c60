"""serve/launch.py refusals and defaults decided before any model loads (no server, no sglang import).

Bad pools (drafters disagreeing on aux layers, vocabularies or shapes; dtypes that cannot be reconciled; topk
above the draft vocabulary), rejection sampling with HEDGESPEC, a malformed worker config, the trained-pool
target path and dtype, overlap scheduling per algorithm, SGLang's own speculative defaults, and the security
defaults (bind address, API key, remote code).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

from hedgespec.models.smollm2 import converted_dir
from hedgespec.serving import plugin
from hedgespec.serving.argv import build_plan, check_drafters, checkpoint_dtype
from hedgespec.serving.tiny import make_drafter, make_target

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def _cfg(*overrides: str, **kw) -> dict:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="serve", overrides=list(overrides)), resolve=True)
    cfg.update(kw)
    return cfg


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _edit_config(path: Path, **changes) -> Path:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _to_bf16(path: Path) -> Path:
    state = load_file(str(path / "model.safetensors"))
    save_file(
        {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()},
        str(path / "model.safetensors"),
    )
    return _edit_config(path, dtype="bfloat16")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("refuse")
    make_target(root / "target", seed=0)
    for i in range(2):
        make_drafter(root / f"d{i}", root / "target", seed=i)
    for name in ("b0", "b1"):
        _to_bf16(make_drafter(root / name, root / "target", seed=5))
    _edit_config(make_drafter(root / "d_vocab", root / "target", seed=2), draft_vocab_size=128)
    _edit_config(make_drafter(root / "d_layers", root / "target", seed=3), num_hidden_layers=2)
    _edit_config(make_drafter(root / "d_small", root / "target", seed=4), draft_vocab_size=3)
    return root


def _pool(root: Path, drafters: list[str], **pool) -> dict:
    """A path-kind pool over checkpoints already on disk (served against ``root/target``)."""
    return {
        "name": "t",
        "target": "tiny",
        "drafters": [{"name": d, "kind": "path", "path": str(root / d)} for d in drafters],
        **pool,
    }


def _plan(root: Path, drafters: list[str], *overrides: str, **kw):
    """Plan for a path-kind pool; selector=eagle serves its first drafter as the generalist."""
    if "selector=eagle" in overrides:
        overrides = (*overrides, f"selector.drafter={drafters[0]}")
    return build_plan(_cfg("device=cpu", *overrides, pool=_pool(root, drafters), workdir=str(root), **kw))


# ---------------------------------------------------------------- pools SGLang cannot serve together
def test_drafters_disagreeing_on_draft_vocab_or_shape_are_refused(ckpts):
    with pytest.raises(ValueError, match=r"different draft_vocab_size \('d0': \d+, 'd_vocab': 128\)"):
        _plan(ckpts, ["d0", "d_vocab"])
    with pytest.raises(ValueError, match=r"different num_hidden_layers .*'d_layers': 2"):
        _plan(ckpts, ["d0", "d1", "d_layers"])
    # without a local target config (an HF id), drafters are still compared with each other
    wide = json.loads((ckpts / "d1" / "config.json").read_text()) | {"hidden_size": 128}
    other = ckpts / "d_wide"
    shutil.copytree(ckpts / "d1", other, dirs_exist_ok=True)
    (other / "config.json").write_text(json.dumps(wide))
    with pytest.raises(ValueError, match=r"different hidden_size .*'d_wide': 128"):
        check_drafters(None, [("d0", ckpts / "d0"), ("d_wide", other)])
    assert len(check_drafters(None, [("d0", ckpts / "d0"), ("d1", ckpts / "d1")])) == 2


def test_drafters_disagreeing_on_aux_layers_are_refused_without_a_target_config(ckpts, tmp_path):
    make_drafter(tmp_path / "aux", ckpts / "target", seed=0, aux_layer_ids=(1, 2, 0))
    with pytest.raises(ValueError, match=r"different aux layer ids .*'aux': \[1, 2, 0\]"):
        check_drafters(None, [("d0", ckpts / "d0"), ("aux", tmp_path / "aux")])


def test_topk_larger_than_the_draft_vocab_is_refused(ckpts):
    tree = ("selector=eagle", "decoding=tree", "decoding.topk=4", "decoding.num_draft_tokens=8")
    with pytest.raises(ValueError, match=r"decoding.topk=4 is larger than drafter 'd_small'.*\(3 tokens\).*topk <= 3"):
        _plan(ckpts, ["d_small"], *tree)
    assert _flag(_plan(ckpts, ["d0"], *tree).argv, "--speculative-eagle-topk") == "4"


def test_rejection_sampling_is_refused_for_hedgespec_only(ckpts):
    for flag in ("--speculative-use-rejection-sampling", "--speculative-use-rejection-sampling=true"):
        with pytest.raises(ValueError, match="not lossless.*last drafter extended"):
            _plan(ckpts, ["d0", "d1"], extra_args=[flag])
    stock = _plan(ckpts, ["d0", "d1"], "selector=eagle", extra_args=["--speculative-use-rejection-sampling"])
    assert stock.algorithm == "EAGLE3" and stock.argv[-1] == "--speculative-use-rejection-sampling"


# ---------------------------------------------------------------- dtypes
@pytest.fixture
def native_bf16(monkeypatch):
    """Pretend the CPU has (True) or lacks (False) native bfloat16."""
    import hedgespec.models.linear_kernels as lk

    def set_native(value: bool) -> None:
        monkeypatch.setattr(lk, "native_bfloat16", lambda: value)

    return set_native


def test_dtype_null_serves_target_and_drafters_in_the_drafters_dtype(ckpts, native_bf16):
    native_bf16(True)
    assert checkpoint_dtype(ckpts / "b0", None) == "bfloat16" and checkpoint_dtype(ckpts / "d0", None) == "float32"
    # fp32 target + bf16 drafters: SGLang's auto would give fp16 vs bf16; one explicit dtype for both instead
    plan = _plan(ckpts, ["b0", "b1"])
    assert _flag(plan.argv, "--dtype") == "bfloat16" and plan.dtype == "bfloat16"
    assert _flag(_plan(ckpts, ["d0", "d1"]).argv, "--dtype") == "float32"
    assert _flag(_plan(ckpts, ["b0", "b1"], "dtype=float32").argv, "--dtype") == "float32"  # explicit wins


def test_bfloat16_drafters_of_a_float32_target_are_upcast_on_a_cpu_without_native_bfloat16(ckpts, native_bf16):
    native_bf16(False)
    assert _plan(ckpts, ["b0", "b1"]).dtype == "float32"  # exact upcast instead of emulated bfloat16
    assert _plan(ckpts, ["b0", "b1"], "dtype=bfloat16").dtype == "bfloat16"  # explicit wins
    assert _plan(ckpts, ["b0", "b1"], "device=cuda").dtype == "bfloat16"  # GPUs have it


def test_float32_drafters_of_a_half_precision_target_take_the_targets_dtype(ckpts, tmp_path):
    bf16_target = _to_bf16(shutil.copytree(ckpts / "target", tmp_path / "bf16-target"))
    assert checkpoint_dtype(bf16_target, None) == "bfloat16"
    man = yaml.safe_load(_smollm2_manifest(ckpts, ["d0", "d1"]).read_text())
    man["target"]["name"] = "tiny"
    (ckpts / "fp32-drafters.yaml").write_text(yaml.safe_dump(man))
    pool = {"name": "p", "target": "tiny", "manifest": str(ckpts / "fp32-drafters.yaml")}
    plan = build_plan(_cfg("device=cpu", pool={**pool, "target_path": str(bf16_target)}))
    assert plan.dtype == "bfloat16"  # the target is not upcast to the drafters' float32
    assert build_plan(_cfg("device=cpu", pool={**pool, "target_path": str(ckpts / "target")})).dtype == "float32"


def test_drafters_in_different_dtypes_are_refused_with_the_fix(ckpts):
    with pytest.raises(ValueError, match=r"different dtypes .*pass it, e.g. `dtype=bfloat16`"):
        _plan(ckpts, ["d0", "b0"])
    assert _flag(_plan(ckpts, ["d0", "b0"], "dtype=bfloat16").argv, "--dtype") == "bfloat16"
    with pytest.raises(ValueError, match=r"dtype='fp8'.*expected one of"):
        _plan(ckpts, ["d0"], "dtype=fp8")


# ---------------------------------------------------------------- trained pools: the target the project converted
def _smollm2_manifest(root: Path, drafters: list[str]) -> Path:
    entries = [
        {
            "name": d,
            "domain": "general",
            "path": d,  # relative to the manifest's directory
            "target_hash": "h",
            "vocab_mapping_hash": "v",
            "draft_vocab_size": 512,
            "aux_layer_ids": [0, 1, 2],
            "data_manifest_hash": "d",
        }
        for d in drafters
    ]
    target = {"name": "smollm2", "hash": "h", "hidden_size": 64, "vocab_size": 512, "num_layers": 4}
    man = {"version": 1, "pool": "s", "target": target, "decoding": {}, "drafters": entries}
    path = root / "smollm2-manifest.yaml"
    path.write_text(yaml.safe_dump(man))
    return path


def test_smollm2_pool_serves_the_local_converted_target(ckpts, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEDGESPEC_CACHE", str(tmp_path / "cache"))  # nothing converted there: no target checks
    manifest = _smollm2_manifest(ckpts, ["b0", "b1"])
    from hedgespec.serving.launch import serve

    plan = serve(_cfg("pool=smollm2", "device=cpu", "dry_run=true", f"++pool.manifest={manifest}"))
    local = converted_dir()
    assert str(local).startswith(str(tmp_path)) and plan.target_path == str(local)
    assert _flag(plan.argv, "--model-path") == str(local) and _flag(plan.argv, "--dtype") == "bfloat16"
    assert not local.exists() and str(local) in capsys.readouterr().out  # a dry run converts nothing
    hf = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the Hugging Face id only when the user asks for it
    plan = build_plan(_cfg("pool=smollm2", "device=cpu", f"++pool.manifest={manifest}", f"pool.target_path={hf}"))
    assert _flag(plan.argv, "--model-path") == hf


def test_a_manifest_pool_of_a_target_without_local_copy_needs_target_path(ckpts):
    man = yaml.safe_load(_smollm2_manifest(ckpts, ["d0"]).read_text())
    man["target"]["name"] = "tiny"
    (ckpts / "tiny-manifest.yaml").write_text(yaml.safe_dump(man))
    pool = {"name": "p", "target": "tiny", "manifest": str(ckpts / "tiny-manifest.yaml"), "target_path": None}
    with pytest.raises(ValueError, match="set pool.target_path to the local HF directory"):
        build_plan(_cfg("device=cpu", pool=pool))
    pool["target_path"] = str(ckpts / "target")
    assert _flag(build_plan(_cfg("device=cpu", pool=pool)).argv, "--model-path") == str(ckpts / "target")


# ---------------------------------------------------------------- stock EAGLE-3: overlap and SGLang's defaults
def test_overlap_scheduling_is_on_for_stock_eagle3_on_cuda_only(ckpts):
    cuda = dict(device="cuda")
    pool = _pool(ckpts, ["d0", "d1"])
    stock = build_plan(_cfg("selector=eagle", "selector.drafter=d0", pool=pool, workdir=str(ckpts), **cuda))
    assert stock.algorithm == "EAGLE3" and "--disable-overlap-schedule" not in stock.argv
    hedge = build_plan(_cfg(pool=_pool(ckpts, ["d0", "d1"]), workdir=str(ckpts), **cuda))
    assert hedge.algorithm == "HEDGESPEC" and "--disable-overlap-schedule" in hedge.argv
    # SGLang 0.5.23 has no overlap scheduling for speculative decoding on CPU
    assert "--disable-overlap-schedule" in _plan(ckpts, ["d0"], "selector=eagle").argv


def test_sglang_default_speculative_params_for_stock_eagle3(ckpts):
    plan = _plan(ckpts, ["d0", "d1"], "selector=eagle", "speculative_params=sglang_default")
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        assert flag not in plan.argv  # SGLang picks them for the target's architecture
    same = _plan(ckpts, ["d0", "d1"], "selector=eagle")  # the second row: HEDGESPEC's settings
    assert [_flag(same.argv, f"--speculative-{k}") for k in ("num-steps", "eagle-topk", "num-draft-tokens")] == [
        "3",
        "1",
        "4",
    ]
    with pytest.raises(ValueError, match="sglang_default is for selector=eagle"):
        _plan(ckpts, ["d0", "d1"], "speculative_params=sglang_default")
    with pytest.raises(ValueError, match="speculative_params='auto'"):
        _plan(ckpts, ["d0"], "selector=eagle", "speculative_params=auto")


# ---------------------------------------------------------------- security defaults
def test_security_defaults_host_api_key_and_remote_code(ckpts):
    plan = _plan(ckpts, ["d0"])
    assert _flag(plan.argv, "--host") == "127.0.0.1" and plan.base_url.startswith("http://127.0.0.1:")
    assert "--api-key" not in plan.argv and "--trust-remote-code" not in plan.argv
    keyed = _plan(ckpts, ["d0"], "api_key=s3cret", "trust_remote_code=true")
    assert _flag(keyed.argv, "--api-key") == "s3cret" and "--trust-remote-code" in keyed.argv
    assert "s3cret" not in keyed.command() and "--api-key '***'" in keyed.command()
    assert "s3cret" in keyed.command(redact=False)
    with pytest.raises(ValueError, match="set trust_remote_code=true instead"):
        _plan(ckpts, ["d0"], extra_args=["--trust-remote-code"])


# ---------------------------------------------------------------- the worker config (HEDGESPEC_CONFIG)
def test_the_launchers_worker_config_parses(ckpts):
    plan = _plan(ckpts, ["d0", "d1"])
    cfg = plugin.parse_worker_config(plan.env[plugin.CONFIG_ENV])
    assert cfg["names"] == ["d0", "d1"] and cfg["drafters"] == plan.drafter_paths


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (None, "is not set"),
        ("{drafters: [", "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ('{"drafters": ["/a"], "selectr": "hedgespec"}', "unknown key 'selectr'"),
        ('{"names": ["a"]}', "key 'drafters' is missing"),
        ('{"drafters": "/a"}', "key 'drafters' must be a list"),
        ('{"drafters": []}', "key 'drafters' must be a non-empty list"),
        ('{"drafters": ["/a", 3]}', "key 'drafters' must be a non-empty list"),
        ('{"drafters": ["/a"], "names": ["a", "b"]}', r"key 'names' must list one name per drafter \(1\)"),
        ('{"drafters": ["/a"], "selector_kwargs": [1]}', "key 'selector_kwargs' must be a dict"),
        ('{"drafters": ["/a"], "selector": 7}', "key 'selector' must be a str"),
        ('{"drafters": ["/a"], "stale_state_s": true}', "key 'stale_state_s' must be a int or float"),
        ('{"drafters": ["/a"], "stale_state_s": -1}', "key 'stale_state_s' must be > 0"),
        ('{"drafters": ["/a"], "pool_dir": 3}', "key 'pool_dir' must be a str"),
    ],
)
def test_malformed_worker_config_is_refused_naming_the_key(raw, match):
    with pytest.raises(ValueError, match=match):
        plugin.parse_worker_config(raw)


def test_plugin_pool_sizing_refuses_a_malformed_worker_config(monkeypatch):
    monkeypatch.setenv(plugin.CONFIG_ENV, '{"drafters": ["/a", "/b"], "nme": 1}')
    with pytest.raises(ValueError, match="unknown key 'nme'"):
        plugin._n_drafters()
    monkeypatch.setenv(plugin.CONFIG_ENV, '{"drafters": ["/a", "/b"]}')
    assert plugin._n_drafters() == 2
    monkeypatch.delenv(plugin.CONFIG_ENV)
    assert plugin._n_drafters() == 1


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([5, 10**6], r"input_ids\[1\] = 1000000 is outside the target's vocabulary; valid token ids are \[0, 259\)"),
        ([-3, 5], r"input_ids\[0\] = -3 is outside the target's vocabulary; valid token ids are \[0, 259\)"),
        ([5, 259], r"input_ids\[1\] = 259 is outside"),
    ],
)
def test_prompt_token_ids_outside_the_vocabulary_are_named(ids, message):
    with pytest.raises(ValueError, match=message):
        plugin.check_token_ids(ids, 259)


def test_prompt_token_ids_inside_the_vocabulary_pass():
    plugin.check_token_ids([0, 5, 258], 259)
    plugin.check_token_ids(None, 259)
    plugin.check_token_ids([], 259)
