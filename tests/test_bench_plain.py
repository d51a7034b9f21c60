"""Plain decoding as the baseline of every bench run: hedgespec.engine.plain, selector=none, "× plain"."""

from __future__ import annotations

import pytest
import torch
from _bench_helpers import compose_bench, inject, tiny_stack

from hedgespec.bench.metrics import validate_result
from hedgespec.bench.runners import EngineRunner, run_bench
from hedgespec.bench.tables import collection_table, run_table
from hedgespec.bench.workloads import load_workload
from hedgespec.build import build
from hedgespec.decoding import SamplingParams
from hedgespec.engine.plain import plain_generate
from hedgespec.fixtures import greedy_reference

GREEDY = SamplingParams(0.0, 1.0, 0, None)
BASE = ["workload=prompts", "max_new_tokens=10"]


def test_plain_generate_is_transformers_greedy_and_stops_at_eos():
    model, tok, _ = tiny_stack()
    ids = torch.tensor(tok("SELECT name FROM users WHERE")["input_ids"])
    want = greedy_reference(model, ids, 12)[0, len(ids) :].tolist()
    res = plain_generate(model, ids, 12, GREEDY, eos_token_id=None)
    assert res.tokens == want and res.wall_s > 0
    stop = want[3]  # pretend the 4th token is EOS: decoding ends right after it
    assert plain_generate(model, ids, 12, GREEDY, eos_token_id=stop).tokens == want[: want.index(stop) + 1]


def test_plain_sampling_is_seeded():
    model, tok, _ = tiny_stack()
    ids = torch.tensor(tok("def add(a, b):")["input_ids"])
    a, b, c = (plain_generate(model, ids, 12, SamplingParams(1.0, 1.0, 0, s)).tokens for s in (1, 1, 2))
    assert a == b and a != c


def test_bad_plain_input_is_named():
    model, _, _ = tiny_stack()
    with pytest.raises(ValueError, match="max_new_tokens"):
        plain_generate(model, [1, 2], 0, GREEDY)
    with pytest.raises(ValueError, match="input_ids"):
        plain_generate(model, [], 4, GREEDY)


def test_every_engine_run_measures_plain_decoding_side_by_side():
    res = run_bench(compose_bench(BASE + ["selector=hedgespec"]), **inject())
    validate_result(res)
    agg = res["aggregate"]
    want = sum(r["plain_generated"] for r in res["requests"]) / sum(r["plain_wall_s"] for r in res["requests"])
    assert agg["plain_tokens_per_s"] == pytest.approx(want)
    assert agg["speedup_vs_plain"] == pytest.approx(agg["tokens_per_s"] / want)
    assert agg["plain_match_rate"] == 1.0  # lossless: greedy speculative output == plain output, request by request
    assert all(r["plain_generated"] == r["generated"] for r in res["requests"])
    assert "× plain" in run_table(res) and "× plain" in collection_table([{**res, "_path": "x"}])


def test_selector_none_is_plain_decoding():
    res = run_bench(compose_bench(BASE + ["selector=none"]), **inject())
    validate_result(res)
    agg = res["aggregate"]
    assert res["selector"] == "none" and res["pool"]["drafters"] == []
    assert agg["mat"] == 1.0 and agg["target_forwards_per_token"] == 1.0 and agg["speedup_vs_plain"] == 1.0
    spec = run_bench(compose_bench(BASE + ["selector=eagle", "plain_baseline=false"]), **inject())
    assert spec["aggregate"]["plain_tokens_per_s"] is None and "× plain" not in run_table(spec)
    assert [r["generated"] for r in spec["requests"]] == [r["generated"] for r in res["requests"]]


@pytest.mark.parametrize("extra", [["backend=server"], ["oracle_probe=true"]])
def test_selector_none_refuses_what_it_cannot_do(extra):
    with pytest.raises(ValueError, match="selector=none decodes with the target alone"):
        run_bench(compose_bench(BASE + ["selector=none", *extra]), **inject())


def test_warmup_request_is_untimed_and_unseen_by_the_runs_selector():
    """An untimed warm-up request runs first (speculative and plain); the run's selector never sees it: the
    running prior (each request starts from the mean of earlier requests' final weights) has recorded no request
    after the warm-up and exactly one after the first timed request, and the timed records equal a cold run's."""
    cfg = compose_bench(["workload=prompts", "selector=hedgespec_running", "warmup_tokens=4"])
    runner = EngineRunner(cfg, build(cfg, **inject()))
    selector = runner.engine.selector
    req = load_workload(cfg["workload"], cfg["data"], 0)[0]
    runner.warmup(req, 4)
    assert runner.engine.selector is selector and selector.prior_source.count == 0
    runner.run_one(req, 0, False, True, None)
    assert selector.prior_source.count == 1

    cold = run_bench(compose_bench(["workload=prompts", "selector=hedgespec_running", "warmup_tokens=0"]), **inject())
    warm = run_bench(cfg, **inject())
    assert "warmup_s" not in cold["timing"] and warm["timing"]["warmup_s"] > 0
    for a, b in zip(cold["requests"], warm["requests"], strict=True):
        assert (a["request_id"], a["chosen"], a["accepted"]) == (b["request_id"], b["chosen"], b["accepted"])
    plain = run_bench(compose_bench(BASE + ["selector=none", "warmup_tokens=4"]), **inject())
    assert plain["timing"]["warmup_s"] > 0 and plain["aggregate"]["n_requests"] == 3


@pytest.mark.parametrize("bad", ["-1", "x", "1.5", "true"])
def test_bad_warmup_tokens_is_named(bad):
    with pytest.raises(ValueError, match="warmup_tokens"):
        run_bench(compose_bench(BASE + ["selector=none", f"warmup_tokens={bad}"]), **inject())
