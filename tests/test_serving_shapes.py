"""scripts/shapes_bench.py's library (hedgespec/serving/shapes.py): dummy checkpoints at a real model's shapes
that the launcher accepts, the plans both servers get, the ratios, and (marked ``serve``) the whole comparison
on CPU at the tiny shapes."""

from __future__ import annotations

import json

import pytest
from _requires import installed_or_skip, sglang_or_skip

from hedgespec.pools import load_pool
from hedgespec.serving.shapes import (
    SHAPES,
    Settings,
    compare,
    phase_ms,
    ratios,
    server_plan,
    shape,
    table,
    write_checkpoints,
)


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_llama8b_checkpoints_have_its_shapes_and_the_launcher_accepts_them(tmp_path):
    sh = shape("llama8b")
    target, manifest = write_checkpoints(sh, tmp_path / "ckpt", 8)
    tcfg = json.loads((target / "config.json").read_text())
    assert (tcfg["hidden_size"], tcfg["num_hidden_layers"], tcfg["vocab_size"]) == (4096, 32, 128256)
    assert tcfg["rope_scaling"]["rope_type"] == "llama3" and not list(target.glob("*.safetensors"))
    pool = load_pool(manifest, check_files=False)
    assert pool.names == [f"d{i}" for i in range(8)]
    dcfg = json.loads((pool.drafter_path("d3") / "config.json").read_text())
    assert dcfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 15, 28]
    assert dcfg["draft_vocab_size"] == 32000 and dcfg["num_hidden_layers"] == 1
    s = Settings(device="cuda", n_drafters=8)
    hedge = server_plan(sh, tmp_path, target, manifest, "hedgespec", s)  # the launcher's own checks pass
    stock = server_plan(sh, tmp_path, target, manifest, "eagle", s)
    assert hedge.algorithm == "HEDGESPEC" and stock.algorithm == "EAGLE3"
    assert len(json.loads(hedge.env["HEDGESPEC_CONFIG"])["drafters"]) == 8 and stock.drafter_names == ["d0"]
    for plan in (hedge, stock):
        a = plan.argv
        assert _flag(a, "--load-format") == "dummy" and "--skip-tokenizer-init" in a
        assert _flag(a, "--model-path") == str(target) and _flag(a, "--speculative-num-steps") == "3"
        assert plan.env["SGLANG_SIMULATE_ACC_LEN"] == "3" and _flag(a, "--max-running-requests") == "64"
        assert plan.env["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected" and _flag(a, "--cuda-graph-max-bs") == "64"


def test_smollm2_shape_is_the_embedded_targets_config():
    """The smollm2 shape against the config of the SmolLM2 checkpoint the project converts (read from its GGUF
    file's metadata, no weights loaded)."""
    installed_or_skip("gguf", "bash scripts/install.d/20-data.sh")
    from transformers import AutoConfig

    from hedgespec.models.smollm2 import gguf_path

    src = gguf_path()
    c = AutoConfig.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True)
    sh = shape("smollm2")
    got = (sh.hidden, sh.intermediate, sh.layers, sh.heads, sh.kv_heads, sh.head_dim, sh.vocab, sh.max_positions)
    want = (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads)
    assert got == (*want, c.hidden_size // c.num_attention_heads, c.vocab_size, c.max_position_embeddings)
    assert sh.target_config()["rope_theta"] == c.rope_parameters["rope_theta"]


def test_ratios_are_run_over_base():
    def run(tps, al, start, kv, mem):
        return {
            "startup_s": start,
            "kv_tokens": kv,
            "peak_memory_gib": mem,
            "batches": [{"batch": 1, "tok_per_s": tps, "accept_length": al}],
        }

    got = ratios(run(100.0, 3.0, 20.0, 1000, 10.0), run(80.0, 3.0, 30.0, 900, 12.0))
    assert got["startup_s"] == pytest.approx(1.5) and got["kv_tokens"] == pytest.approx(0.9)
    assert got["peak_memory"] == pytest.approx(1.2)
    assert got["batches"][0]["tok_per_s"] == pytest.approx(0.8)
    assert got["batches"][0]["round_cost"] == pytest.approx(1.25)  # same tokens per round, 0.8x the rate
    # unequal simulated acceptance: the round cost corrects for it
    got = ratios(run(100.0, 2.0, 1, 1, 1), run(150.0, 4.0, 1, 1, 1))
    assert got["batches"][0]["round_cost"] == pytest.approx((4.0 / 2.0) / 1.5)


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"device": "tpu"}, "device='tpu'"),
        ({"accept_len": 5.0, "num_steps": 3}, "accept_len=5.0"),
        ({"batch_sizes": ()}, "batch_sizes"),
        ({"new_tokens": 0}, "new_tokens=0"),
    ],
)
def test_bad_settings_are_named(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Settings(**kw).check()


def test_bad_shape_and_pool_size_are_named(tmp_path):
    with pytest.raises(ValueError, match="shape='llama70b'"):
        shape("llama70b")
    with pytest.raises(ValueError, match="drafters=0"):
        write_checkpoints(SHAPES["tiny"], tmp_path / "c", 0)


@pytest.mark.serve
@pytest.mark.timeout(900)
def test_tiny_shapes_compare_plain_stock_and_fused_on_cpu(tmp_path):
    """The whole comparison at the tiny shapes on CPU: plain decoding, stock EAGLE-3 and the fused HEDGESPEC pool
    start on config-only checkpoints, the speculative two serve every batch with the same simulated acceptance,
    and the record and table carry each server's ratios to plain and to stock."""
    sglang_or_skip()
    s = Settings(
        device="cpu",
        n_drafters=2,
        batch_sizes=(1, 2),
        new_tokens=12,
        prompt_tokens=8,
        dtype="float32",
        max_total_tokens=4096,
    )
    got = compare("tiny", s, tmp_path, ("plain", "eagle", "hedgespec_fused"))
    plain, stock, hedge = (got["servers"][k] for k in ("plain", "eagle", "hedgespec_fused"))
    assert (plain["algorithm"], stock["algorithm"], hedge["algorithm"]) == ("NONE", "EAGLE3", "HEDGESPEC")
    assert hedge["drafters"] == 2
    for run in (plain, stock, hedge):
        assert [r["batch"] for r in run["batches"]] == [1, 2] and run["kv_tokens"] == 4096
        assert [r["output_tokens"] for r in run["batches"]] == [12, 24]
    assert all(r["accept_length"] is None for r in plain["batches"])
    for run in (stock, hedge):
        assert all(1.0 < r["accept_length"] <= 4.0 for r in run["batches"])
    assert [r["accept_length"] for r in hedge["batches"]] == [r["accept_length"] for r in stock["batches"]]
    rat = got["over_stock"]["hedgespec_fused"]["batches"]
    assert rat[1]["tok_per_s"] == pytest.approx(hedge["batches"][1]["tok_per_s"] / stock["batches"][1]["tok_per_s"])
    vs_plain = got["over_plain"]["eagle"]["batches"]
    want = stock["batches"][0]["tok_per_s"] / plain["batches"][0]["tok_per_s"]
    assert vs_plain[0]["tok_per_s"] == pytest.approx(want)
    assert vs_plain[0]["round_cost"] is None  # plain decoding has no speculative round
    assert set(got["over_plain"]) == {"eagle", "hedgespec_fused"}
    assert set(got["over_stock"]) == {"plain", "hedgespec_fused"}
    # HEDGESPEC reports its rounds' phases; the others have none
    assert all(r["phase_ms_per_round"] is None for r in plain["batches"] + stock["batches"])
    for r in hedge["batches"]:
        assert set(r["phase_ms_per_round"]) == {"draft", "verify", "evaluate", "update"}
        assert all(v > 0 for v in r["phase_ms_per_round"].values())
    md = table(got)
    assert "HEDGESPEC (hedgespec_fused) | 2 |" in md and "NONE (plain) | 1 |" in md


def test_phase_ms_is_the_mean_per_round_over_requests():
    metas = [
        {"hedgespec_round_time_s": [0.2, 0.4, 0.1, 0.01], "hedgespec_rounds": [10]},
        {"hedgespec_round_time_s": [0.3, 0.6, 0.3, 0.03], "hedgespec_rounds": [20]},
    ]
    got = phase_ms(metas)
    assert got == pytest.approx({"draft": 17.5, "verify": 35.0, "evaluate": 12.5, "update": 1.25})
    assert phase_ms([{"spec_accept_length": 2.0}]) is None  # stock EAGLE-3 and plain decoding


def test_low_rank_weights_are_a_base_and_its_rank_r_experts(tmp_path):
    """weights=lowrank writes what the fused pool serves low-rank: drafter 0 dense, every other one its dense
    weights plus factors that make them from drafter 0's (checked by the loader that refuses a mismatch)."""
    from hedgespec.engine.eagle3 import MATRICES, Eagle3Drafter
    from hedgespec.engine.lowrank import FACTORS_FILE, LowRankDrafter

    sh = SHAPES["tiny"]
    _, manifest = write_checkpoints(sh, tmp_path / "c", 3, weights="lowrank", rank=2)
    pool = load_pool(manifest, check_files=False)
    base = Eagle3Drafter.load(pool.drafter_path("d0"), name="d0")
    assert not (pool.drafter_path("d0") / FACTORS_FILE).exists()
    for name in ("d1", "d2"):
        low = LowRankDrafter.load_factors(pool.drafter_path(name), base, name)  # refuses dense != base + factors
        for k in MATRICES:
            a, b = low.factors[k]
            assert a.shape[1] == b.shape[0] == 2, (name, k)
            delta = (low.weights[k] - base.weights[k]).double()
            assert float(delta.norm()) > 0.1 * float(base.weights[k].double().norm()), (name, k)  # a real expert
    with pytest.raises(ValueError, match="weights='random'"):
        write_checkpoints(sh, tmp_path / "d", 2, weights="random")


def test_unknown_server_is_named_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="server='medusa'"):
        compare("tiny", Settings(device="cpu"), tmp_path, ("plain", "medusa"))
    assert not (tmp_path / "ckpt-tiny").exists()


def test_script_refuses_bad_settings_before_starting_anything(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "shapes_bench.py"
    spec = importlib.util.spec_from_file_location("shapes_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--shape", "tiny", "--accept-len", "9", "--workdir", "unused"]) == 2
    assert "accept_len=9.0" in capsys.readouterr().err
