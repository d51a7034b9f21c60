"""serve/launch.py without a server: argv building, dry_run, and the refusals that happen before SGLang starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from hedgespec.serving.argv import build_plan, check_drafters
from hedgespec.serving.launch import serve
from hedgespec.serving.server import CPU_SHIM_DIR, is_cpu_argv
from hedgespec.serving.tiny import make_drafter, make_target

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="serve", overrides=list(overrides))


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve")


def test_tiny_cpu_plan_sets_every_speculative_flag(tiny_dir, capsys):
    cfg = _compose("pool=tiny", "device=cpu", "dry_run=true", f"workdir={tiny_dir}")
    plan = serve(cfg)
    out = capsys.readouterr().out
    assert "hedgespec.serving.server" in out and "--speculative-algorithm HEDGESPEC" in out
    a = plan.argv
    assert _flag(a, "--host") == "127.0.0.1" and _flag(a, "--device") == "cpu"
    assert _flag(a, "--speculative-num-steps") == "3" and _flag(a, "--speculative-eagle-topk") == "1"
    assert _flag(a, "--speculative-num-draft-tokens") == "4" and _flag(a, "--max-running-requests") == "16"
    assert _flag(a, "--attention-backend") == "intel_amx" and "--disable-overlap-schedule" in a
    assert is_cpu_argv(a)
    worker = json.loads(plan.env["HEDGESPEC_CONFIG"])
    assert worker["names"] == ["general", "code", "sql", "clinical"]
    assert worker["drafters"][0] == _flag(a, "--speculative-draft-model-path")
    assert worker["selector"] == "hedgespec" and worker["selector_kwargs"]["objective"] == "etap"
    assert str(CPU_SHIM_DIR) in plan.env["PYTHONPATH"] and plan.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert plan.openai_base_url == "http://127.0.0.1:30000/v1"
    assert "note: on CPU SGLang verifies every speculative round greedily" in out


def test_only_speculative_cpu_servers_carry_the_greedy_verification_note(tiny_dir):
    assert not build_plan(_compose("pool=tiny", "device=cpu", "selector=none", f"workdir={tiny_dir}")).notes
    assert not build_plan(_compose("pool=tiny", "device=cuda", f"workdir={tiny_dir}")).notes
    assert len(build_plan(_compose("pool=tiny", "device=cpu", "selector=eagle", f"workdir={tiny_dir}")).notes) == 1


def test_selector_eagle_is_stock_eagle3_with_the_generalist(tiny_dir):
    plan = build_plan(_compose("pool=tiny", "device=cpu", "selector=eagle", f"workdir={tiny_dir}"))
    assert _flag(plan.argv, "--speculative-algorithm") == "EAGLE3"
    assert plan.drafter_names == ["general"] and "HEDGESPEC_CONFIG" not in plan.env
    # the pool's generalist setting picks the drafter (a published EAGLE-3 head registered in the pool, say)
    other = build_plan(
        _compose("pool=tiny", "device=cpu", "selector=eagle", "pool.generalist=sql", f"workdir={tiny_dir}")
    )
    assert other.drafter_names == ["sql"]


def test_fixed_and_bandit_selectors_run_in_the_same_server(tiny_dir):
    fixed = build_plan(_compose("pool=tiny", "device=cpu", "selector=fixed", "selector.index=2", f"workdir={tiny_dir}"))
    # evaluate travels with the selector's options; the worker still evaluates every drafter (docs/serving.md)
    assert json.loads(fixed.env["HEDGESPEC_CONFIG"])["selector_kwargs"] == {"index": 2, "evaluate": False}
    ucb = build_plan(_compose("pool=tiny", "device=cpu", "selector=ucbspec", f"workdir={tiny_dir}"))
    assert json.loads(ucb.env["HEDGESPEC_CONFIG"])["selector"] == "ucbspec"


def test_cuda_plan_has_no_cpu_pieces(tiny_dir):
    plan = build_plan(_compose("pool=tiny", f"workdir={tiny_dir}", "port=31234"))
    assert "--device" not in plan.argv and "PYTHONPATH" not in plan.env and _flag(plan.argv, "--port") == "31234"


def test_unknown_selector_is_refused(tiny_dir):
    cfg = _plain(_compose("pool=tiny", "device=cpu", f"workdir={tiny_dir}"))
    cfg["selector"] = {"name": "nope"}
    with pytest.raises(ValueError, match="unknown selector 'nope'"):
        build_plan(cfg)


def _plain(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def test_bad_tree_settings_are_refused(tiny_dir):
    with pytest.raises(ValueError, match="topk=2"):
        build_plan(_compose("pool=tiny", "device=cpu", "decoding.topk=2", f"workdir={tiny_dir}"))
    with pytest.raises(ValueError, match="num_draft_tokens=6"):
        build_plan(_compose("pool=tiny", "device=cpu", "decoding.num_draft_tokens=6", f"workdir={tiny_dir}"))
    with pytest.raises(ValueError, match="unknown key"):
        build_plan(_compose("pool=tiny", "device=cpu", "+decoding.steps=3", f"workdir={tiny_dir}"))
    with pytest.raises(ValueError, match="device='tpu'"):
        build_plan(_compose("pool=tiny", "device=tpu", f"workdir={tiny_dir}"))


def test_hedgespec_serves_trees_with_the_decoding_groups_shape(tiny_dir):
    plan = build_plan(_compose("pool=tiny", "device=cpu", "decoding=tree", f"workdir={tiny_dir}"))
    flags = dict(zip(plan.argv, plan.argv[1:]))
    assert plan.algorithm == "HEDGESPEC"
    assert (flags["--speculative-num-steps"], flags["--speculative-eagle-topk"]) == ("3", "4")  # serve.yaml: 3 steps
    assert flags["--speculative-num-draft-tokens"] == "16"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ckpt")
    make_target(root / "target", seed=0)
    make_drafter(root / "d0", root / "target", seed=0)
    make_drafter(root / "d1", root / "target", seed=1)
    make_drafter(root / "d_aux", root / "target", seed=2, aux_layer_ids=(1, 2, 0))
    other = root / "other"
    make_target(other, seed=0, num_layers=4)
    cfg = json.loads((other / "config.json").read_text())
    cfg["vocab_size"] += 7
    (other / "config.json").write_text(json.dumps(cfg))
    make_drafter(root / "d_other", other, seed=3)
    return root


def _manifest_pool(root: Path, drafters: list[str], manifest_target: str = "tiny4", pool_target: str = "tiny4") -> dict:
    entries = []
    for d in drafters:
        entries.append(
            {
                "name": d,
                "domain": "general",
                "path": str(root / d),
                "target_hash": "h",
                "vocab_mapping_hash": "v",
                "draft_vocab_size": 10,
                "aux_layer_ids": [0, 1, 2],
                "data_manifest_hash": "d",
            }
        )
    man = {
        "version": 1,
        "pool": "p",
        "target": {"name": manifest_target, "hash": "h", "hidden_size": 64, "vocab_size": 10, "num_layers": 4},
        "decoding": {},
        "drafters": entries,
    }
    path = root / f"manifest-{'-'.join(drafters)}-{manifest_target}.yaml"
    path.write_text(yaml.safe_dump(man))
    return {
        "name": "p",
        "target": pool_target,
        "target_path": str(root / "target"),
        "manifest": str(path),
        "generalist": drafters[0],
    }


def _cfg(pool: dict, **kw) -> dict:
    base = _plain(_compose("device=cpu"))
    base["pool"] = pool
    base.update(kw)
    return base


def test_manifest_pool_builds(ckpts):
    plan = build_plan(_cfg(_manifest_pool(ckpts, ["d0", "d1"])))
    assert plan.drafter_names == ["d0", "d1"] and _flag(plan.argv, "--model-path") == str(ckpts / "target")


def test_pool_for_another_target_is_refused(ckpts):
    with pytest.raises(ValueError, match="trained for target 'llama8b'.*pool for another target"):
        build_plan(_cfg(_manifest_pool(ckpts, ["d0"], manifest_target="llama8b")))
    with pytest.raises(ValueError, match="drafter 'd_other'.*another target"):
        build_plan(_cfg(_manifest_pool(ckpts, ["d0", "d_other"])))


def test_missing_drafter_path_is_refused(ckpts):
    pool = _manifest_pool(ckpts, ["d0", "d1"])
    man = yaml.safe_load(Path(pool["manifest"]).read_text())
    man["drafters"][1]["path"] = "does-not-exist"  # inside the pool directory, but never written
    Path(pool["manifest"]).write_text(yaml.safe_dump(man))
    with pytest.raises(ValueError, match="drafter 'd1'.*missing drafter checkpoint"):
        build_plan(_cfg(pool))


def test_different_aux_layer_ids_are_refused(ckpts):
    with pytest.raises(ValueError, match="different aux layer ids"):
        build_plan(_cfg(_manifest_pool(ckpts, ["d0", "d_aux"])))


def test_uncapturable_aux_ids_are_refused(ckpts, tmp_path):
    bad = tmp_path / "bad"
    make_drafter(bad, ckpts / "target", aux_layer_ids=(1, 2, 3))  # 3 = the last layer's output: not captured
    tcfg = json.loads((ckpts / "target" / "config.json").read_text())
    with pytest.raises(ValueError, match=r"aux layer ids \[1, 2, 3\] cannot be captured"):
        check_drafters(tcfg, [("bad", bad)])


def test_every_shipped_serve_pool_composes():
    for pool in ("tiny", "llama8b", "qwen8b", "qwen32b", "smollm2"):
        cfg = _compose(f"pool={pool}")
        assert cfg.pool.name == pool and cfg.host == "127.0.0.1"
        if pool != "tiny":
            assert cfg.pool.manifest == f"pools/{pool}.yaml" and cfg.pool.target == pool
    for path in Path(CONF, "pool").glob("*.yaml"):
        assert path.read_text().startswith("# python "), path
    assert Path(CONF, "serve.yaml").read_text().startswith("# python serve/launch.py")


def test_plugin_pool_sizing_hook_counts_all_drafters(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from hedgespec.serving import plugin

    monkeypatch.setenv("HEDGESPEC_CONFIG", json.dumps({"drafters": ["a", "b", "c"]}))
    algo = SimpleNamespace(name="HEDGESPEC")
    cfg = plugin._count_all_draft_pools(
        SimpleNamespace(eagle_draft_num_layers=1), spec_algorithm=algo, is_draft_worker=False
    )
    assert cfg.eagle_draft_num_layers == 3
    same = plugin._count_all_draft_pools(
        SimpleNamespace(eagle_draft_num_layers=1), spec_algorithm=algo, is_draft_worker=True
    )
    assert same.eagle_draft_num_layers == 1  # each draft runner sizes only its own pool
    other = plugin._count_all_draft_pools(
        SimpleNamespace(eagle_draft_num_layers=1), spec_algorithm=SimpleNamespace(name="EAGLE3"), is_draft_worker=False
    )
    assert other.eagle_draft_num_layers == 1
    # the fused pool: its layers layout has one draft layer per drafter, SGLang's count is already the pool's; its
    # heads layout has one layer of every drafter's KV heads, which the target must budget as 3 layers
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    monkeypatch.setenv("HEDGESPEC_CONFIG", json.dumps({"drafters": ["a", "b", "c"], "pool_dir": str(pool_dir)}))
    for layout, counted, want in (("layers", 3, 3), ("heads", 1, 3)):
        (pool_dir / "config.json").write_text(json.dumps({"hedgespec_pool": {"layout": layout}}))
        fused = plugin._count_all_draft_pools(
            SimpleNamespace(eagle_draft_num_layers=counted), spec_algorithm=algo, is_draft_worker=False
        )
        assert fused.eagle_draft_num_layers == want, layout


def test_greedy_gamma_rows_and_acceptance_run():
    from hedgespec.serving.rounds import greedy_gamma

    # emitted e = [7, 8, 9]; drafter 0 proposed 7 then (rows) 8, 5; drafter 1 proposed 6 then 8, 9
    gamma = greedy_gamma([7, 6], [[8, 5, 1], [8, 9, 1]], [7, 8, 9])
    assert gamma.tolist() == [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match="at least one token"):
        greedy_gamma([1], [[1]], [])


def test_fused_pool_plan_writes_one_draft_model_directory(tiny_dir, tmp_path):
    """fused=true: the draft model path is a pool directory holding drafter 0's config with the pool
    architecture, one draft layer with every drafter's attention heads and the drafter list with their names; a dry
    run names it without writing it."""
    from hedgespec.serving.pool_dir import ARCH, MARKER, MODEL_TYPE, POOL_KEY

    work = tmp_path / "work"
    dry = build_plan(_compose("pool=tiny", "device=cpu", "fused=true", "fused_layout=heads", f"workdir={work}"))
    pool_dir = Path(_flag(dry.argv, "--speculative-draft-model-path"))
    assert not pool_dir.exists() and json.loads(dry.env["HEDGESPEC_CONFIG"])["pool_dir"] == str(pool_dir)
    plan = build_plan(
        _compose("pool=tiny", "device=cpu", "fused=true", "fused_layout=heads", f"workdir={work}"), prepare=True
    )
    assert _flag(plan.argv, "--speculative-draft-model-path") == str(pool_dir)
    cfg = json.loads((pool_dir / "config.json").read_text())
    drafter0 = json.loads((Path(plan.drafter_paths[0]) / "config.json").read_text())
    # the heads layout: one draft layer holding the 4 drafters' attention heads side by side
    hq, hkv = drafter0["num_attention_heads"], drafter0["num_key_value_heads"]
    head_dim = drafter0.get("head_dim") or drafter0["hidden_size"] // hq
    assert cfg["architectures"] == [ARCH] and cfg["num_hidden_layers"] == 1 and len(plan.drafter_paths) == 4
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (4 * hq, 4 * hkv, head_dim)
    assert cfg[POOL_KEY]["layout"] == "heads"
    assert cfg[POOL_KEY]["drafters"] == plan.drafter_paths and (pool_dir / MARKER).is_file()
    assert cfg[POOL_KEY]["names"] == plan.drafter_names  # a low-rank expert's factors name their base
    assert cfg["model_type"] == MODEL_TYPE and cfg[POOL_KEY]["head_model_type"] == drafter0["model_type"]
    shape = (
        "architectures",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "model_type",
    )
    assert {k: v for k, v in cfg.items() if k not in (*shape, POOL_KEY)} == {
        k: v for k, v in drafter0.items() if k not in shape
    }
    worker = json.loads(plan.env["HEDGESPEC_CONFIG"])
    assert worker["drafters"] == plan.drafter_paths and worker["pool_dir"] == str(pool_dir)
    # the per-drafter default and the stock baseline carry no pool directory
    assert "pool_dir" not in json.loads(
        build_plan(_compose("pool=tiny", "device=cpu", f"workdir={work}")).env["HEDGESPEC_CONFIG"]
    )
    eagle = build_plan(_compose("pool=tiny", "device=cpu", "selector=eagle", "fused=true", f"workdir={work}"))
    assert "HEDGESPEC_CONFIG" not in eagle.env
    with pytest.raises(ValueError, match="fused='yes'"):
        build_plan(_compose("pool=tiny", "device=cpu", "fused=yes", f"workdir={work}"))
    with pytest.raises(ValueError, match="fused_layout='rows'"):
        build_plan(_compose("pool=tiny", "device=cpu", "fused=true", "fused_layout=rows", f"workdir={work}"))
    # the default fused_layout=layers: one KV layer per drafter, in a directory of its own
    layers = build_plan(_compose("pool=tiny", "device=cpu", "fused=true", f"workdir={work}"), prepare=True)
    layers_dir = Path(_flag(layers.argv, "--speculative-draft-model-path"))
    assert layers_dir != pool_dir
    cfg = json.loads((layers_dir / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 4 and cfg["num_attention_heads"] == hq and cfg[POOL_KEY]["layout"] == "layers"
    assert cfg[POOL_KEY]["layout_reason"] == "fused_layout=layers"


def test_pool_vocabulary_is_the_union_of_the_heads_maps():
    import torch

    from hedgespec.serving.pool_model import union_vocab

    maps = [torch.tensor([0, 5, 9]), None, torch.tensor([2, 5, 7])]
    union, cols = union_vocab(maps, draft_vocab=3)
    assert union.tolist() == [0, 1, 2, 5, 7, 9]
    for m, c in zip([[0, 5, 9], [0, 1, 2], [2, 5, 7]], cols):
        assert union[c].tolist() == m  # each head's draft id d lands on the column of its target id


def test_pool_directory_falls_back_to_one_layer_per_head_and_says_why(tmp_path):
    """Heads the one-attention pass does not compute (a norm before the fc) or that differ in rotary embedding get
    the layers layout (one KV layer per head), with the reason recorded; equal plain heads get the heads layout."""
    from hedgespec.serving.pool_dir import POOL_KEY, stacked_refusal, write_pool_dir

    plain = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0}
    assert stacked_refusal([plain, dict(plain)], ["a", "b"]) is None
    normed = {**plain, "eagle_config": {"norm_before_fc": True}}
    assert stacked_refusal([plain, normed], ["a", "b"]) == "drafter 'b' sets norm_before_fc"
    assert "rope_theta" in stacked_refusal([plain, {**plain, "rope_theta": 5e5}], ["a", "b"])
    assert stacked_refusal([plain, {**plain, "head_dim": 8}], ["a", "b"]) == "the drafters differ in attention shape"
    assert stacked_refusal([plain, {**plain, "head_dim": 16}], ["a", "b"]) is None  # 64 / 4 heads, said explicitly
    cfg = json.loads(
        (write_pool_dir(tmp_path / "p", ["a", "b"], [plain, normed], ["a", "b"]) / "config.json").read_text()
    )
    assert cfg["num_hidden_layers"] == 2 and cfg["num_attention_heads"] == 4 and "head_dim" not in cfg
    assert cfg[POOL_KEY]["layout"] == "layers" and "norm_before_fc" in cfg[POOL_KEY]["layout_reason"]
    cfg = json.loads((write_pool_dir(tmp_path / "p", ["a", "b"], [plain, plain]) / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        1,
        8,
        4,
        16,
    )
