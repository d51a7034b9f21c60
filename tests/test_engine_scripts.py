"""scripts/generate.py (Hydra compose API, tiny target) and scripts/bench_engine.py run end to end."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hedgespec.engine.app import format_results, run_generate
from hedgespec.fixtures import greedy_reference

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
# router needs a classifier trained on the data recipes: scripts/bench.py builds it (tests/test_bench_run.py)
#: selectors that need the prompt router, which generate.py does not train (it has no domain data): bench only
ROUTED = ("router", "hedgespec_prior")
SELECTOR_CONFIGS = sorted(p.stem for p in (ROOT / "conf" / "selector").glob("*.yaml") if p.stem not in ROUTED)


def _cfg(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="generate", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.fixture(scope="module")
def tiny():
    from hedgespec.models import load_target

    return load_target("tiny")


def _small_pool(cfg):
    cfg["pool"]["drafters"] = [dict(d, steps=20) if d.get("kind") == "fit" else d for d in cfg["pool"]["drafters"]]
    cfg["prompts"] = cfg["prompts"][:1]
    return cfg


@pytest.mark.parametrize("selector", SELECTOR_CONFIGS)
def test_generate_every_selector_config(tiny, selector):
    model, tok = tiny
    cfg = _small_pool(_cfg("target=tiny", "pool=tiny", f"selector={selector}", "max_new_tokens=8"))
    out = run_generate(cfg, model, tok)
    (res,) = out["results"]
    assert res["generated"] >= 1 and res["rounds"] >= 1
    if selector == "none":  # plain decoding: the target alone, one token per forward
        ids = torch.tensor(tok(cfg["prompts"][0])["input_ids"])
        assert res["histogram"] == [] and res["mat"] == 1.0
        assert res["tokens"] == greedy_reference(model, ids, 8)[0, len(ids) :].tolist()
    else:
        assert sum(res["histogram"]) == res["rounds"]
    assert "MAT=" in format_results(out)


@pytest.mark.parametrize("selector", ROUTED)
def test_generate_refuses_routed_selectors_naming_the_bench(tiny, selector):
    model, tok = tiny
    cfg = _small_pool(_cfg("target=tiny", "pool=tiny", f"selector={selector}", "max_new_tokens=8"))
    with pytest.raises(ValueError, match=r"needs a prompt classifier trained on the domain data.*scripts/bench\.py"):
        run_generate(cfg, model, tok)


def test_generate_tree_sampling_and_trace(tiny, tmp_path):
    model, tok = tiny
    path = tmp_path / "trace.jsonl"
    cfg = _small_pool(
        _cfg("decoding=tree", "sampling.temperature=0.8", "seed=2", "max_new_tokens=8", f"trace.path={path}")
    )
    out = run_generate(cfg, model, tok)
    assert out["results"][0]["generated"] >= 1 and path.exists()


def test_bench_engine_script(capsys):
    spec = importlib.util.spec_from_file_location("bench_engine", ROOT / "scripts" / "bench_engine.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (res,) = mod.main(["--dims", "tiny", "--ns", "1", "2", "--repeats", "2", "--context", "16"])
    assert set(res["pool"]) == {1, 2} and res["target_verify_s"] > 0
    assert "x drafter forward" in capsys.readouterr().out
    (small,) = mod.main(["--dims", "tiny", "--ns", "1", "--repeats", "1", "--context", "8", "--draft-vocab", "64"])
    assert small["draft_vocab"] == 64
    with pytest.raises(ValueError, match="draft_vocab=100000"):
        mod.main(["--dims", "tiny", "--ns", "1", "--repeats", "1", "--draft-vocab", "100000"])


def test_bench_engine_script_times_a_lowrank_pool_record(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_engine", ROOT / "scripts" / "bench_engine.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rec = tmp_path / "pool_r3.json"
    rec.write_text('{"rank": 3, "n_drafters": 2}')
    (res,) = mod.main(
        ["--dims", "tiny", "--ns", "1", "2", "--repeats", "1", "--context", "8", "--ranks", "2"]
        + ["--rank-files", str(rec)]
    )
    assert set(res["lowrank"]) == {2, "3"} and res["lowrank"]["3"][2]["evaluate_s"] > 0
    assert "low-rank r=3    N= 2" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no 'rank'"):
        rec.write_text("{}")
        mod.main(["--dims", "tiny", "--ns", "1", "--repeats", "1", "--rank-files", str(rec)])


def test_generate_refuses_router_with_a_pointer_to_bench(tiny):
    model, tok = tiny
    cfg = _small_pool(_cfg("target=tiny", "pool=tiny", "selector=router", "max_new_tokens=4"))
    with pytest.raises(ValueError, match="scripts/bench.py selector=router"):
        run_generate(cfg, model, tok)


def test_generate_rejects_a_misspelt_decoding_knob(tiny):
    model, tok = tiny
    cfg = _small_pool(_cfg("target=tiny", "pool=tiny", "+decoding.k=3", "max_new_tokens=4"))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['k'\]"):
        run_generate(cfg, model, tok)
