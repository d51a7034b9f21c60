"""Fig 5a/5b from engine traces: bench.py trace=<path> + exact replay reproduce the live engine runs."""

from __future__ import annotations

import json

import pytest
from _bench_helpers import compose_bench, inject

from hedgespec.bench.app import bench_main
from hedgespec.bench.replay import replay_selectors, sub_pool
from hedgespec.bench.report import results_markdown
from hedgespec.bench.runners import run_bench

BASE = ["workload=prompts", "chat_template=false", "max_new_tokens=20"]
# the baselines evaluate the pool here (not their deployed default) so that their live ETAP regret exists to compare
EVAL = {"eagle", "ucbspec", "exp3spec", "metasd", "oracle"}


def _sel(sel: str) -> list[str]:
    return [f"selector={sel}"] + (["selector.evaluate=true"] if sel in EVAL else [])


def test_replay_of_traces_equals_live_engine_runs(tmp_path):
    trace = tmp_path / "trace.jsonl"
    live = {}
    for sel in ("eagle", "hedgespec", "hedgespec_running", "ucbspec", "exp3spec", "oracle"):
        extra = [f"trace={trace}"] if sel == "eagle" else []
        live[sel] = run_bench(compose_bench(BASE + [*_sel(sel), *extra]), **inject())
    out = replay_selectors(trace, sizes=[2, 4])
    # the running prior carries weights across requests, so its replay is a real check of the request order
    assert live["hedgespec_running"]["requests"][1]["weights"][0] != live["hedgespec"]["requests"][1]["weights"][0]
    assert out["n_requests"] == 3 and out["drafters"] == ["general", "code", "sql", "clinical"]
    for sel, res in live.items():
        rep = out["results"][sel]["4"]
        assert rep["mat"] == pytest.approx(res["aggregate"]["mat"]), sel  # exact replay under greedy decoding
        assert rep["avg_regret"] == pytest.approx(res["aggregate"]["avg_regret"], abs=1e-9), sel
    oracle_mat = live["oracle"]["aggregate"]["mat"]
    assert out["results"]["hedgespec"]["4"]["oracle_mat"] == pytest.approx(oracle_mat)
    assert out["results"]["oracle"]["2"]["mat"] <= oracle_mat + 1e-9  # a sub-pool cannot beat the full pool's oracle


def test_replay_of_all_drafters_uses_the_live_pool_order(tmp_path):
    # the generalist last, as in the embedded pool: replay of N=all must run the selectors on the pool as the live
    # run saw it (same indices, hence the same tie-breaks and random draws), not with the generalist moved first
    model, tok, drafters = inject().values()
    by = {d.name: d for d in drafters}
    live_order = [by["code"], by["clinical"], by["sql"], by["general"]]
    trace = tmp_path / "trace.jsonl"
    live = {}
    for sel in ("eagle", "hedgespec", "ucbspec", "exp3spec", "metasd", "oracle"):
        extra = [f"trace={trace}"] if sel == "eagle" else []
        res = run_bench(compose_bench(BASE + [*_sel(sel), *extra]), model=model, tokenizer=tok, drafters=live_order)
        live[sel] = res
    out = replay_selectors(trace, sizes=[2, 4])
    assert out["drafters"] == ["code", "clinical", "sql", "general"]
    for sel, res in live.items():
        rep = out["results"][sel]["4"]
        # decisions equal: same rounds (MAT) and the same per-position drafters (ETAP regret); measured difference
        # 0 up to float summation order
        assert rep["mat"] == pytest.approx(res["aggregate"]["mat"], rel=1e-12), sel
        assert rep["avg_regret"] == pytest.approx(res["aggregate"]["avg_regret"], abs=1e-9), sel
    # the eagle baseline is the generalist at every N; the N=2 sub-pool is {code, general} in pool order
    assert sub_pool(out["drafters"], 2) == [0, 3]
    assert out["results"]["eagle"]["2"]["mat"] == pytest.approx(live["eagle"]["aggregate"]["mat"])
    assert out["results"]["oracle"]["2"]["mat"] <= out["results"]["oracle"]["4"]["mat"] + 1e-9


def test_replay_without_a_traced_drafter_equals_live_runs_that_left_it_out(tmp_path):
    # one trace of the whole pool; live runs with exclude_drafters=[sql] and another generalist: the replay of that
    # sub-pool (the other drafters in the trace's order) must make the live runs' decisions exactly
    trace = tmp_path / "trace.jsonl"
    run_bench(compose_bench(BASE + ["selector=eagle", f"trace={trace}"]), **inject())
    drop = ["exclude_drafters=[sql]", "pool.generalist=code"]
    live = {sel: run_bench(compose_bench(BASE + [*_sel(sel), *drop]), **inject()) for sel in ("eagle", "hedgespec")}
    out = replay_selectors(trace, sizes=[3], exclude=["sql"], generalist="code")
    assert out["drafters"] == ["general", "code", "clinical"] and out["excluded"] == ["sql"]
    assert out["generalist"] == "code"
    for sel, res in live.items():
        assert res["pool"]["drafters"] == out["drafters"]
        rep = out["results"][sel]["3"]
        assert rep["mat"] == pytest.approx(res["aggregate"]["mat"], rel=1e-12), sel
        assert rep["avg_regret"] == pytest.approx(res["aggregate"]["avg_regret"], abs=1e-9), sel
    full = replay_selectors(trace, sizes=[4])
    assert full["generalist"] == "general" and full["excluded"] == []
    with pytest.raises(ValueError, match=r"does not have: \['nope'\]"):
        replay_selectors(trace, exclude=["nope"])
    with pytest.raises(ValueError, match="leaves no drafter"):
        replay_selectors(trace, exclude=["general", "code", "sql", "clinical"])
    with pytest.raises(ValueError, match="generalist 'sql' is not in the replayed pool"):
        replay_selectors(trace, exclude=["sql"], generalist="sql")


def test_replay_cli_and_results_section(tmp_path):
    from test_bench_report import _report_main

    trace = tmp_path / "trace.jsonl"
    bench_main(
        compose_bench(BASE + ["selector=eagle", f"trace={trace}"]),
        tmp_path / "run",
        command="python scripts/bench.py X",
        **inject(),
    )
    out = tmp_path / "res" / "engine_replay.json"
    assert _report_main(["replay", str(trace), "--sizes", "2", "4", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["command"].startswith("python scripts/report.py replay") and d["pool"] == "tiny"
    assert d["trace_commands"] == ["python scripts/bench.py X"]
    assert out.with_suffix(".regret.png").is_file() and out.with_suffix(".scaling.png").is_file()
    text = results_markdown(out.parent)
    assert "Engine traces, exact replay — pipeline check on pool `tiny`" in text
    assert f"| hedgespec | {d['results']['hedgespec']['2']['mat']:.2f} / " in text
    assert "Engine-trace half of Fig 5a/5b on the embedded default awaits the trained pool" in text
    assert "trace recorded by `python scripts/bench.py X`" in text


def test_replay_bad_input(tmp_path):
    with pytest.raises(ValueError, match="sub-pool size 9"):
        sub_pool(["general", "a"], 9)
    trace = tmp_path / "live.jsonl"
    with pytest.raises(ValueError, match="temperature=0"):
        run_bench(compose_bench(BASE + ["selector=eagle", f"trace={trace}", "sampling.temperature=0.7"]), **inject())
