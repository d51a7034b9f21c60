"""The bench records how many rounds ran the pool evaluation: what label-efficient selectors save."""

from __future__ import annotations

from _bench_helpers import compose_bench, inject

from hedgespec.bench.metrics import evaluated_share, validate_result
from hedgespec.bench.runners import run_bench

BASE = ["workload=prompts", "chat_template=false", "max_new_tokens=24", "plain_baseline=false"]


def _run(*over: str) -> dict:
    model, tok, drafters = inject().values()
    res = run_bench(compose_bench([*BASE, *over]), model=model, tokenizer=tok, drafters=drafters)
    validate_result(res)
    return res


def test_evaluated_rounds_follow_what_each_selector_asked_for():
    full = _run("selector=hedgespec")
    assert all(q["evaluated_rounds"] == q["rounds"] for q in full["requests"])
    assert full["aggregate"]["evaluated_share"] == 1.0
    eagle = _run("selector=eagle")  # its deployed cost: no pool evaluation after the prefill
    assert all(q["evaluated_rounds"] == 0 for q in eagle["requests"]) and eagle["aggregate"]["evaluated_share"] == 0.0
    late = _run("selector=hedgespec_late", "selector.threshold=0.3", "selector.recheck=3")
    got = [q["evaluated_rounds"] for q in late["requests"]]
    rounds = sum(q["rounds"] for q in late["requests"])
    assert all(0 < e <= q["rounds"] for e, q in zip(got, late["requests"])) and sum(got) < rounds  # skipped some
    assert late["aggregate"]["evaluated_share"] == sum(got) / rounds


def test_records_without_the_field_give_no_share():
    assert evaluated_share([{"rounds": 3}]) is None
    assert evaluated_share([{"rounds": 4, "evaluated_rounds": 1}, {"rounds": 4, "evaluated_rounds": 3}]) == 0.5
