"""Published EAGLE-3 drafters (not trained here) registered into a pool, served by the engine's pool loader.

Both public layouts are built in the test for the tiny target: SGLang/SpecForge (``LlamaForCausalLMEagle3``
config, ``model.safetensors``) and the EAGLE repository's (a one-layer ``LlamaForCausalLM`` config without aux
ids, float16 weights with d2t/t2d in ``pytorch_model.bin``). Independent truth: transformers greedy decoding of
the target, and the same engine run with the in-memory head the checkpoint was written from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from _engine_helpers import GREEDY, decoding
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from hedgespec.build import build_pool
from hedgespec.engine import SpeculativeEngine
from hedgespec.engine.eagle3 import WEIGHT_KEYS, Eagle3Drafter
from hedgespec.fixtures import agreeing_drafter, greedy_reference, random_drafter, tiny_llama
from hedgespec.models import load_target
from hedgespec.pools import PoolMismatchError, TargetInfo, load_pool, weights_hash
from hedgespec.pools_import import PublishedDrafterError, add_published_drafter
from hedgespec.selectors import make_selector

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [torch.tensor([5, 17, 33, 2, 9]), torch.tensor([40, 41, 42])]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def tiny():
    """The tiny target, its identity, and a head distilled to agree with it (draft vocab 300 of 512)."""
    model, tok = load_target("tiny")
    info = TargetInfo.from_model("tiny", model, tok)
    head = agreeing_drafter(model, [p[None] for p in PROMPTS], seed=3, steps=150, length=24, draft_vocab_size=300)
    return model, tok, info, head


def sglang_layout(root: Path, head: Eagle3Drafter) -> Path:
    """What ``specforge export --to sglang`` writes (``Eagle3Drafter.save``)."""
    head.save(root)
    return root


def eagle_config(head: Eagle3Drafter) -> dict:
    """The EAGLE repository's config.json: a one-layer LlamaForCausalLM with draft_vocab_size, no aux ids."""
    cfg = {k: v for k, v in head.config.raw.items() if k not in ("eagle_config", "target_hidden_size", "head_dim")}
    return {**cfg, "architectures": ["LlamaForCausalLM"], "torch_dtype": "float16", "bias": False}


def eagle_state(head: Eagle3Drafter) -> dict[str, torch.Tensor]:
    state = {key: head.weights[short].half() for key, short in WEIGHT_KEYS.items()}
    return {**state, "d2t": head.d2t.clone(), "t2d": head.t2d.clone()}


def eagle_layout(root: Path, head: Eagle3Drafter, state: dict | None = None, config: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config or eagle_config(head)))
    torch.save(eagle_state(head) if state is None else state, root / "pytorch_model.bin")
    return root


def _pool_cfg(manifest: Path) -> dict:
    return {"pool": {"name": "pub", "manifest": str(manifest), "target": "tiny"}, "target": {"name": "tiny"}}


def _run(model, heads, index: int, prompt: torch.Tensor):
    engine = SpeculativeEngine(model, heads, make_selector("fixed", index=index), decoding("chain", 4))
    return engine.generate(prompt, 20, GREEDY)


def _fp16(head: Eagle3Drafter) -> Eagle3Drafter:
    """The head as the float16 EAGLE checkpoint stores it (what the pool must reproduce exactly)."""
    weights = {k: v.half().float() for k, v in head.weights.items()}
    return Eagle3Drafter(head.config, weights, head.d2t, head.t2d, name=head.name)


def test_both_layouts_register_and_serve_greedy_exact(tiny, tmp_path):
    model, tok, info, head = tiny
    manifest = tmp_path / "pools" / "pub.yaml"
    sgl = add_published_drafter(manifest, "eagle3-sgl", str(sglang_layout(tmp_path / "src_sgl", head)), target=info)
    eag = add_published_drafter(
        manifest, "eagle3-eagle", str(eagle_layout(tmp_path / "src_eagle", head)), domain="sql", target=info
    )
    assert not sgl.converted and eag.converted
    man = load_pool(manifest, info)  # validated against the target, files included
    assert man.names == ["eagle3-sgl", "eagle3-eagle"] and man.drafter("eagle3-eagle").domain == "sql"
    for e in man.drafters:
        assert e.training["source"] == "published" and e.path == f"pub/{e.name}" and not e.external
        assert e.draft_vocab_size == 300 and e.aux_layer_ids == head.aux_layer_ids(info.num_layers)
        assert e.weights_hash == weights_hash(man.drafter_path(e) / "model.safetensors")
    assert man.drafter("eagle3-eagle").training["layout"] == "eagle"
    assert man.drafter("eagle3-sgl").training["origin"] == str((tmp_path / "src_sgl").resolve())
    assert sgl.entry.vocab_mapping_hash == eag.entry.vocab_mapping_hash  # the same d2t/t2d in both layouts
    assert sgl.entry.weights_hash == weights_hash(tmp_path / "src_sgl" / "model.safetensors")  # copied as it is
    converted = Eagle3Drafter.load(man.drafter_path("eagle3-eagle"))
    assert converted.config.aux_layer_ids == head.aux_layer_ids(info.num_layers)  # recorded explicitly
    pool = build_pool(_pool_cfg(manifest), model, tok)
    assert pool.names == ["eagle3-sgl", "eagle3-eagle"] and pool.domains == ["general", "sql"]
    for i, original in enumerate([head, _fp16(head)]):
        mats = []
        for prompt in PROMPTS:
            out, stats = _run(model, pool.drafters, i, prompt)
            assert torch.equal(out, greedy_reference(model, prompt, 20)[0])
            _, want = _run(model, [original], 0, prompt)
            assert stats.accepted_per_round == want.accepted_per_round  # the registered head drafts as the original
            mats.append(stats.mat)
        assert max(mats) > 2.0  # and its drafts are accepted (through the d2t mapping: draft vocab 300 of 512)


def test_pickle_is_converted_with_its_dtype_and_tensors(tiny, tmp_path):
    _, _, info, head = tiny
    manifest = tmp_path / "pub.yaml"
    add_published_drafter(manifest, "g", str(eagle_layout(tmp_path / "src", head)), target=info)
    from safetensors.torch import load_file

    got, want = load_file(tmp_path / "pub" / "g" / "model.safetensors"), eagle_state(head)
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert got["fc.weight"].dtype == torch.float16 and not (tmp_path / "pub" / "g" / "pytorch_model.bin").exists()


def test_sharded_safetensors_with_a_trainer_prefix_are_merged(tiny, tmp_path):
    """Two ``model.``-prefixed shards listed by ``model.safetensors.index.json`` become one unprefixed file."""
    from safetensors.torch import load_file, save_file

    _, _, info, head = tiny
    src = sglang_layout(tmp_path / "src", head)
    state = load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, keys in shards.items():
        save_file({f"model.{k}": state[k] for k in keys}, str(src / fname))
    weight_map = {f"model.{k}": fname for fname, keys in shards.items() for k in keys}
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    res = add_published_drafter(tmp_path / "pub.yaml", "g", str(src), target=info)
    got = load_file(res.export / "model.safetensors")
    assert sorted(got) == names and all(torch.equal(got[k], state[k]) for k in names)
    assert res.entry.training["weights_files"] == sorted(shards)


def _hf_cache(root: Path, repo: str, files_from: Path) -> Path:
    """A Hugging Face hub cache holding ``repo`` at COMMIT (refs/main -> snapshots/COMMIT), as the hub writes it."""
    base = root / f"models--{repo.replace('/', '--')}"
    snap = base / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for f in files_from.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(COMMIT)
    return root


def test_hf_id_from_the_local_cache_and_external(tiny, tmp_path):
    _, _, info, head = tiny
    cache = _hf_cache(tmp_path / "hub", "someone/eagle3-tiny", sglang_layout(tmp_path / "src", head))
    manifest = tmp_path / "pools" / "pub.yaml"
    res = add_published_drafter(manifest, "ext", "someone/eagle3-tiny", external=True, target=info, cache_dir=cache)
    e = load_pool(manifest, info).drafter("ext")
    assert e.external and Path(e.path).is_absolute() and Path(e.path).name == COMMIT
    assert (e.training["origin"], e.training["revision"]) == ("someone/eagle3-tiny", COMMIT)
    assert e.weights_hash == weights_hash(tmp_path / "src" / "model.safetensors") and res.export == Path(e.path)
    assert not (manifest.parent / "pub" / "ext").exists()  # external: nothing copied


def _refused(manifest: Path, exc: type, match: str, **kw) -> None:
    """The registration fails with ``match`` and leaves the manifest byte for byte and the pool dir as they were."""
    before = manifest.read_bytes()
    listing = sorted(p.name for p in (manifest.parent / "pub").iterdir())
    with pytest.raises(exc, match=match):
        add_published_drafter(manifest, **kw)
    assert manifest.read_bytes() == before
    assert sorted(p.name for p in (manifest.parent / "pub").iterdir()) == listing


@pytest.fixture
def pool_with_one(tiny, tmp_path):
    _, _, info, head = tiny
    manifest = tmp_path / "pools" / "pub.yaml"
    add_published_drafter(manifest, "first", str(sglang_layout(tmp_path / "ok", head)), target=info)
    return manifest


def test_another_targets_drafter_is_refused(pool_with_one, tmp_path):
    wide = random_drafter(tiny_llama(hidden=32, vocab=512, heads=4, kv_heads=2), seed=1)
    other_vocab = random_drafter(tiny_llama(hidden=64, vocab=300, heads=4, kv_heads=2), seed=1)
    src = sglang_layout(tmp_path / "wide", wide)
    _refused(
        pool_with_one,
        PoolMismatchError,
        r"'h32'.*config\.json.*hidden_size is 32, target 'tiny' has 64",
        name="h32",
        path=str(src),
    )
    src = eagle_layout(tmp_path / "v300", other_vocab)
    _refused(
        pool_with_one,
        PoolMismatchError,
        r"'v300'.*vocab_size is 300, target 'tiny' has 512",
        name="v300",
        path=str(src),
    )


def test_bad_checkpoints_are_refused(tiny, pool_with_one, tmp_path):
    _, _, _, head = tiny
    no_d2t = {k: v for k, v in eagle_state(head).items() if k != "d2t"}
    src = eagle_layout(tmp_path / "nod2t", head, state=no_d2t)
    _refused(
        pool_with_one, PublishedDrafterError, r"'nod2t'.*pytorch_model\.bin.*\['d2t'\]", name="nod2t", path=str(src)
    )
    bad_map = {**eagle_state(head), "d2t": torch.zeros_like(head.d2t)}  # not the t2d of those ids
    src = eagle_layout(tmp_path / "badmap", head, state=bad_map)
    _refused(
        pool_with_one, PoolMismatchError, r"'badmap'.*t2d vocab mapping is inconsistent", name="badmap", path=str(src)
    )
    src = eagle_layout(tmp_path / "meta", head, state={**eagle_state(head), "step": 3})
    _refused(
        pool_with_one, PublishedDrafterError, r"non-tensor pickle content \{'step': 'int'\}", name="m", path=str(src)
    )


class _Planted:
    """Unpickling this would create ``marker`` (any callable runs under plain ``pickle``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_with_code_is_never_executed(tiny, pool_with_one, tmp_path):
    _, _, _, head = tiny
    marker = tmp_path / "ran"
    src = eagle_layout(tmp_path / "evil", head, state={**eagle_state(head), "x": _Planted(marker)})
    _refused(
        pool_with_one,
        PublishedDrafterError,
        r"evil.*pytorch_model\.bin cannot be read as plain tensors",
        name="evil",
        path=str(src),
    )
    assert not marker.exists()


def test_bad_names_sources_and_options(tiny, pool_with_one, tmp_path):
    _, _, _, head = tiny
    ok = str(tmp_path / "ok")
    _refused(pool_with_one, ValueError, "already has a drafter named 'first'.*overwrite=true", name="first", path=ok)
    _refused(
        pool_with_one,
        PublishedDrafterError,
        r"'someone/absent' is not in the local cache.*`huggingface-cli download someone/absent`",
        name="hf",
        path="someone/absent",
        cache_dir=tmp_path / "empty_hub",
    )
    _refused(pool_with_one, PublishedDrafterError, "neither a directory nor a Hugging Face id", name="x", path="./nope")
    src = eagle_layout(tmp_path / "e", head)
    _refused(
        pool_with_one,
        PublishedDrafterError,
        "external=true needs an SGLang-layout",
        name="e",
        path=str(src),
        external=True,
    )
    _refused(pool_with_one, ValueError, "name='a/b'", name="a/b", path=ok)
    (pool_with_one.parent / "pub" / "stray").mkdir()  # e.g. a trained export the manifest does not list
    _refused(pool_with_one, ValueError, r"'stray'.*pub/stray already exists", name="stray", path=ok)


def test_new_manifest_needs_a_target(tiny, tmp_path):
    _, _, _, head = tiny
    manifest = tmp_path / "pools" / "new.yaml"
    with pytest.raises(FileNotFoundError, match="pass target=<name>"):
        add_published_drafter(manifest, "g", str(sglang_layout(tmp_path / "src", head)))
    assert not manifest.exists() and not (manifest.parent / "new").exists()


def test_script_registers_into_a_new_manifest(tiny, tmp_path, capsys):
    _, _, info, head = tiny
    src = eagle_layout(tmp_path / "src", head)
    manifest = tmp_path / "pools" / "tinypub.yaml"
    _script().run(_compose([f"manifest={manifest}", "name=eagle3-general", f"path={src}", "target=tiny"]))
    man = load_pool(manifest, info)
    assert man.pool == "tinypub" and man.names == ["eagle3-general"] and man.target.hash == info.hash
    assert yaml.safe_load(manifest.read_text())["drafters"][0]["training"]["source"] == "published"
    assert "converted to safetensors" in capsys.readouterr().out


def test_converted_eagle_checkpoint_passes_the_servers_drafter_checks(tmp_path):
    """An 8-layer target (distinct default aux ids [1, 3, 4]): the pool copy is what SGLang is given to serve."""
    from hedgespec.serving.argv import check_drafters

    model = tiny_llama(seed=4, layers=8, vocab=128, hidden=32)
    info = TargetInfo.from_model("t8", model)
    head = random_drafter(model, seed=5, draft_vocab_size=100)
    manifest = tmp_path / "t8.yaml"
    add_published_drafter(manifest, "g", str(eagle_layout(tmp_path / "src", head)), target=info)
    man = load_pool(manifest, info)
    (cfg,) = check_drafters(model.config.to_dict(), [("g", man.drafter_path("g"))])
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and man.drafter("g").aux_layer_ids == (1, 3, 4)
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4] and cfg["draft_vocab_size"] == 100


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("add_drafter", ROOT / "scripts" / "add_drafter.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _compose(over: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="add_drafter", overrides=over)


def test_script_pool_names_resolve_to_what_serving_reads(tmp_path):
    script = _script()
    serve = _compose(["pool=llama8b", "name=g", "path=p"])
    assert script.manifest_of(serve) == Path("pools/llama8b.yaml")
    with pytest.raises(ValueError, match="pool='tiny' lists its drafters inline.*manifest=<path>"):
        script.manifest_of(_compose(["pool=tiny", "name=g", "path=p"]))
    with pytest.raises(ValueError, match="pass pool=<name>"):
        script.manifest_of(_compose(["name=g", "path=p"]))


def test_script_refuses_another_target_for_an_existing_manifest(pool_with_one, tmp_path):
    script = _script()
    before = pool_with_one.read_bytes()
    cfg = _compose([f"manifest={pool_with_one}", "name=g", f"path={tmp_path / 'ok'}", "target=smollm2"])
    with pytest.raises(ValueError, match="target='smollm2': pool manifest .* belongs to target 'tiny'"):
        script.run(cfg)
    assert pool_with_one.read_bytes() == before
