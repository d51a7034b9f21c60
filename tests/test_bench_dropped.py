"""A drafter that fails is dropped by the engine (with a warning) and named in the bench result JSON."""

from __future__ import annotations

import pytest
from _bench_helpers import compose_bench, inject

from hedgespec.bench.metrics import aggregate, dropped_summary, validate_result
from hedgespec.bench.runners import run_bench
from hedgespec.bench.tables import run_table
from hedgespec.fixtures import random_drafter

BASE = ["workload=prompts", "chat_template=false", "max_new_tokens=8", "selector=hedgespec"]


def test_a_failing_drafter_is_listed_as_dropped():
    model, tok, drafters = inject().values()
    bad = random_drafter(model, seed=9, name="broken")
    bad.weights["lm_head"][0, 0] = float("nan")  # non-finite logits: the pool drops the head
    with pytest.warns(RuntimeWarning, match="drafter 'broken'.*dropped"):
        res = run_bench(compose_bench(BASE), model=model, tokenizer=tok, drafters=[*drafters[:2], bad])
    validate_result(res)
    n = res["aggregate"]["n_requests"]
    assert n >= 2 and all(q["dropped"] == ["broken"] for q in res["requests"])
    assert res["aggregate"]["dropped"] == {"broken": n}
    assert "Dropped drafters (failed; requests affected): broken " in run_table(res)
    healthy = run_bench(compose_bench(BASE), model=model, tokenizer=tok, drafters=drafters[:2])
    assert all(q["dropped"] == [] for q in healthy["requests"]) and healthy["aggregate"]["dropped"] == {}


def test_dropped_summary_counts_requests():
    assert dropped_summary([{"dropped": ["a"]}, {"dropped": ["a", "b"]}, {"dropped": []}]) == {"a": 2, "b": 1}
    assert dropped_summary([{"x": 1}]) is None
    recs = [
        {"request_id": "r", "domain": "d", "generated": 4, "rounds": 2, "wall_s": 1.0, "mat": 2.0, "dropped": ["z"]}
    ]
    assert aggregate(recs)["dropped"] == {"z": 1}
