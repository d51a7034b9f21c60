"""The load test and the server comparison: their bookkeeping against independent truth, the plain server's
plan, bad input, and (serve tier) one short load test of the tiny pool's CPU server."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from _requires import sglang_or_skip
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hedgespec.serving.argv import build_plan
from hedgespec.serving.compare import _check_entries, _ratios, server_cfg
from hedgespec.serving.loadtest import (
    _client_order,
    _validate,
    pass_summary,
    random_prompts,
    rss_summary,
    run_load_test,
    sharegpt_file,
)

CONF = str(Path(__file__).resolve().parents[1] / "conf")


def _compose(name: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return OmegaConf.to_container(compose(config_name=name, overrides=list(overrides)), resolve=True)


def test_client_order_is_sglang_loaders_order(tmp_path: Path) -> None:
    """Independent truth: SGLang's own ShareGPT loader after the client's ``random.seed(seed)``."""
    sglang_or_skip()
    from sglang.benchmark.datasets.sharegpt import sample_sharegpt_requests
    from transformers import AutoTokenizer

    from hedgespec.fixtures import build_tiny_tokenizer

    tok = build_tiny_tokenizer(512)
    tok.save_pretrained(tmp_path / "tok")
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    prompts = random_prompts(40, seed=3)
    data = sharegpt_file(prompts, tmp_path / "p.json")
    for seed in (0, 7):
        random.seed(seed)
        rows = sample_sharegpt_requests(str(data), len(prompts), tok, fixed_output_len=8)
        assert [r.prompt for r in rows] == _client_order(prompts, seed)


def test_pass_summary_counts_failed_lost_and_mismatched() -> None:
    res = {"completed": 3, "generated_texts": ["a", "b", "", "d"], "errors": ["", "", "boom", ""],
           "output_throughput": 5.0}  # fmt: skip
    s = pass_summary(res, 5, ["a", "x", "c", "d"])
    assert (s["sent"], s["completed"], s["failed"], s["lost"], s["greedy_mismatches"]) == (5, 3, 1, 1, 1)
    assert s["output_throughput"] == 5.0 and pass_summary(res, 4, None)["greedy_mismatches"] is None


def test_rss_summary_measures_growth_after_warmup() -> None:
    samples = [(0.0, 100), (1.0, 200), (2.0, 400), (8.0, 400), (9.0, 404), (10.0, 440)]
    s = rss_summary(samples, 0.2)  # warm-up ends at t = 2.0 s: base 400
    assert s["growth_after_warmup"] == pytest.approx(0.1) and s["peak_growth_after_warmup"] == pytest.approx(0.1)
    assert rss_summary([], 0.1) == {"samples": 0}


def test_sampler_reads_at_start_each_period_and_end_and_skips_failed_readings() -> None:
    import os
    import time

    from hedgespec.serving.loadtest import RssSampler, Sampler

    values = iter([5, 9, RuntimeError("tool missing"), 7] + [1] * 1000)

    def read() -> int:
        v = next(values)
        if isinstance(v, Exception):
            raise v
        return v

    with Sampler(read, period_s=0.05) as s:
        time.sleep(0.3)
    got = [v for _, v in s.samples]
    assert got[:3] == [5, 9, 7] and s.peak == 9 and len(got) >= 4  # start, periods (one failed), end
    with RssSampler(os.getpid(), period_s=10.0) as r:  # no period passes: the start and end readings
        pass
    assert len(r.samples) == 2 and r.peak > 10 * 2**20


def test_ratios_are_against_plain_at_the_same_concurrency() -> None:
    rows = [
        {"label": "plain", "algorithm": "NONE", "concurrency": 1, "output_tokens_per_s": 10.0},
        {"label": "plain", "algorithm": "NONE", "concurrency": 8, "output_tokens_per_s": 40.0},
        {"label": "hs", "algorithm": "HEDGESPEC", "concurrency": 1, "output_tokens_per_s": 12.0},
        {"label": "hs", "algorithm": "HEDGESPEC", "concurrency": 8, "output_tokens_per_s": 20.0},
    ]
    outputs = {("plain", 1): ["a", "b"], ("plain", 8): ["a", "b"], ("hs", 1): ["a", "b"], ("hs", 8): ["a", "c"]}
    _ratios(rows, outputs)
    assert [r["x_plain"] for r in rows] == [1.0, 1.0, 1.2, 0.5]
    assert [r["outputs_equal_plain"] for r in rows] == [2, 2, 2, 1]
    # a second plain server (another dtype) is a row like the others: the first plain server stays the baseline
    rows += [{"label": "plain2", "algorithm": "NONE", "concurrency": 1, "output_tokens_per_s": 5.0}]
    _ratios(rows, {**outputs, ("plain2", 1): ["a", "x"]})
    assert [r["x_plain"] for r in rows] == [1.0, 1.0, 1.2, 0.5, 0.5]
    assert rows[-1]["outputs_equal_plain"] == 1


def test_plain_server_plan_has_no_speculation(tmp_path: Path) -> None:
    base = ["pool=tiny", "device=cpu", f"workdir={tmp_path}"]
    plain = build_plan(_compose("serve", *base, "selector=none"))
    spec = build_plan(_compose("serve", *base))
    assert plain.algorithm == "NONE" and plain.drafter_names == []
    assert not any(a.startswith("--speculative") for a in plain.argv) and "HEDGESPEC_CONFIG" not in plain.env
    assert "--disable-overlap-schedule" in plain.argv  # on CPU every server runs the same (non-overlap) scheduler
    gpu = build_plan(_compose("serve", "pool=tiny", "device=cuda", f"workdir={tmp_path}", "selector=none"))
    assert "--disable-overlap-schedule" not in gpu.argv  # on CUDA plain SGLang keeps its default overlap
    assert plain.dtype == spec.dtype and plain.target_path == spec.target_path


def test_compare_servers_from_selector_options(tmp_path: Path) -> None:
    cfg = _compose("serve_compare", "pool=tiny", "device=cpu", f"workdir={tmp_path}")
    entries = _check_entries(cfg["compare"]["servers"])
    plans = {e["label"]: build_plan(server_cfg(cfg, e)) for e in entries}
    assert {k: p.algorithm for k, p in plans.items()} == {
        "plain": "NONE", "eagle": "EAGLE3", "eagle_sglang_default": "EAGLE3", "hedgespec": "HEDGESPEC",
        "hedgespec_fused": "HEDGESPEC",
    }  # fmt: skip
    assert "pool_dir" in plans["hedgespec_fused"].env["HEDGESPEC_CONFIG"]
    assert "pool_dir" not in plans["hedgespec"].env["HEDGESPEC_CONFIG"]
    assert "--speculative-num-steps" in plans["eagle"].argv
    assert "--speculative-num-steps" not in plans["eagle_sglang_default"].argv
    with pytest.raises(ValueError, match=r"include the plain server"):
        _check_entries([{"label": "hs", "selector": "hedgespec"}])
    with pytest.raises(ValueError, match=r"distinct labels"):
        _check_entries([{"label": "a", "selector": "none"}, {"label": "a", "selector": "none"}])
    with pytest.raises(ValueError, match=r"selector 'nosuch' is not an option of conf/selector/"):
        server_cfg(cfg, {"label": "x", "selector": "nosuch"})


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("concurrency", [], r"load\.concurrency=\[\]: expected a non-empty list"),
        ("concurrency", [0, 8], r"load\.concurrency=\[0, 8\]"),
        ("output_len", 2, r"load\.output_len=2: SGLang's client needs >= 4"),
    ],
)
def test_load_test_bad_input(key, value, match) -> None:
    lt = _compose("load_test", "pool=tiny")["load"]
    lt[key] = value
    with pytest.raises(ValueError, match=match):
        _validate(lt)


@pytest.mark.serve
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_short_load_test_of_the_tiny_server(tmp_path: Path) -> None:
    sglang_or_skip()
    cfg = _compose(
        "load_test", "pool=tiny", "device=cpu", f"workdir={tmp_path}/serve", "load.real_prompts=4",
        "load.random_prompts=4", "load.output_len=4", "load.concurrency=[1,4]", "load.histogram_requests=4",
        "load.soak.requests=24", "load.soak.concurrency=8", "load.soak.rss_period_s=0.5",
        f"data.dir={tmp_path}/data",
    )  # fmt: skip
    res = run_load_test(cfg, tmp_path / "run")
    for p in [*res["passes"], res["soak"]]:
        assert (p["failed"], p["lost"], p["greedy_mismatches"] or 0) == (0, 0, 0), p
        assert p["completed"] == p["sent"]
    assert res["histograms"]["histogram_mismatches"] == 0 and res["histograms"]["requests"] == 4
    assert res["soak"]["sent"] == 24 and res["soak"]["rss"]["samples"] > 0


def test_compare_table_lists_the_hedgespec_round_phases() -> None:
    from hedgespec.serving.compare import table

    row = {
        "label": "hs", "concurrency": 1, "output_tokens_per_s": 10.0, "x_plain": 0.8, "accept_length": 1.5,
        "outputs_equal_plain": 2, "failed": 0, "mean_itl_ms": 50.0,
    }  # fmt: skip
    share = {"draft": 0.1, "verify": 0.6, "evaluate": 0.25, "update": 0.05}
    share8 = {**share, "verify": 0.5, "evaluate": 0.35}
    batched = {"concurrency": 8, "rounds": 40, "ms_per_round": 120.5, "share": share8}
    probe = {"rounds": 12, "ms_per_round": 80.0, "share": share, "at_concurrency": {"8": batched}}
    res = {"prompts": 2, "rows": [row], "round_phases": {"hs": probe}}
    lines = table(res).split("\n")
    assert "| hs | 1 | 12 | 80.0 | 10.0% | 60.0% | 25.0% | 5.0% |" in lines
    assert lines[-1] == "| hs | 8 | 40 | 120.5 | 10.0% | 50.0% | 35.0% | 5.0% |"
    assert "round" not in table({**res, "round_phases": {}}).split("\n")[-1]


def test_round_phases_refuses_a_bad_concurrency() -> None:
    from hedgespec.serving.compare import round_phases

    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="concurrency must be an int >= 1"):
            round_phases(None, ["x"], 4, bad)  # type: ignore[arg-type]


@pytest.mark.serve
@pytest.mark.timeout(900)
def test_round_phases_of_the_tiny_hedgespec_server(tmp_path: Path) -> None:
    """The probe reads each request's ``hedgespec_round_time_s``: the shares of the four phases add up to 1, and
    its rounds are the requests' own verification rounds."""
    sglang_or_skip()
    from hedgespec.serving.compare import round_phases
    from hedgespec.serving.launch import ServerProcess

    plan = build_plan(_compose("serve", "pool=tiny", "device=cpu", f"workdir={tmp_path}", "port=31789"))
    with ServerProcess(plan, tmp_path / "server.log", 400):
        prompts = ["def add(a, b):", "SELECT name FROM", "unused"]
        got = round_phases(plan, prompts, 8)
        two = round_phases(plan, prompts * 3, 8, concurrency=2)
    assert got["requests"] == 3 and got["rounds"] >= 2 * 3  # 8 tokens, at most K + 1 = 4 per round
    assert two["requests"] == 8 and two["concurrency"] == 2 and two["rounds"] >= 2 * 8
    for probe in (got, two):
        assert sum(probe["share"].values()) == pytest.approx(1.0, abs=1e-3)
        assert probe["share"]["verify"] > 0 and probe["share"]["evaluate"] > 0 and probe["ms_per_round"] > 0


def test_compare_rows_carry_no_machine_paths(tmp_path: Path) -> None:
    from hedgespec.serving.compare import _row

    plan = build_plan(_compose("serve", "pool=tiny", "device=cpu", f"workdir={tmp_path}"))
    assert str(tmp_path) in plan.command()
    res = {"completed": 1, "output_throughput": 1.0}
    cmd = _row({"label": "hs"}, plan, 1, res, 1.0)["command"]
    assert str(tmp_path) not in cmd and "$TMPDIR/" in cmd and str(Path.home()) + "/" not in cmd
