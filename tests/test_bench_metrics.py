"""Bench metrics against hand/brute-force computations; result-schema checks."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from _bench_helpers import FIXTURES

from hedgespec.bench.metrics import (
    aggregate,
    chosen_per_position,
    overhead,
    regret_from_trace,
    request_metrics,
    validate_result,
)


def _brute_regret(gamma, chosen_pos):
    n = gamma.shape[1]
    totals = [sum(1 - gamma[t, i] for t in range(len(gamma))) for i in range(n)]
    own = sum(1 - gamma[t, chosen_pos[t]] for t in range(len(gamma)))
    return own - min(totals), int(np.argmin(totals))


def test_regret_matches_brute_force():
    rng = np.random.default_rng(0)
    gamma = rng.random((23, 4))
    rounds, s = [], 0
    while s < 23:
        e = min(int(rng.integers(1, 5)), 23 - s)
        rounds.append({"start": s, "emitted": e, "chosen": int(rng.integers(0, 4))})
        s += e
    pos = chosen_per_position(rounds, 23)
    assert all(pos[r["start"] + j] == r["chosen"] for r in rounds for j in range(r["emitted"]))
    curve, best = regret_from_trace(gamma.tolist(), rounds)
    want, want_best = _brute_regret(gamma, pos)
    assert curve[-1] == pytest.approx(want) and best == want_best
    assert len(curve) == 23


def test_request_and_aggregate_metrics():
    a = request_metrics(
        request_id="a",
        domain="sql",
        generated=12,
        rounds=4,
        wall_s=2.0,
        histogram=[4, 0],
        timings={"draft": 1.0, "verify": 2.0, "evaluate": 0.5, "update": 0.5},
        oracle_mat=4.0,
    )
    b = request_metrics(
        request_id="b",
        domain="math",
        generated=6,
        rounds=6,
        wall_s=1.0,
        histogram=[3, 3],
        timings={"draft": 1.0, "verify": 1.0, "evaluate": 0.0, "update": 0.0},
        oracle_mat=2.0,
    )
    assert a["mat"] == 3.0 and a["tokens_per_s"] == 6.0 and a["target_forwards_per_token"] == pytest.approx(5 / 13)
    assert a["selection_overhead"] == pytest.approx(1.0 / 4.0) and a["evaluate_x_verify"] == pytest.approx(0.25)
    agg = aggregate([a, b])
    assert agg["mat"] == pytest.approx(18 / 10)  # pooled: Σ tokens / Σ rounds
    assert agg["mat_mean"] == pytest.approx(2.0)
    assert agg["tokens_per_s"] == pytest.approx(18 / 3)
    assert agg["selection_overhead"] == pytest.approx(1.0 / 6.0)
    # oracle pooled the same way: 12/4 + 6/2 = 3 + 3 rounds for 18 tokens
    assert agg["oracle_mat"] == pytest.approx(3.0) and agg["mat_vs_oracle"] == pytest.approx(1.8 / 3.0)
    assert overhead({})["selection_overhead"] is None
    with pytest.raises(ValueError, match="no request records"):
        aggregate([])


def test_validate_result_on_fixture_and_broken_copies():
    res = json.loads((FIXTURES / "results" / "tiny_mixed_hedgespec.json").read_text())
    validate_result(res)
    for mutate, msg in [
        (lambda r: r.pop("aggregate"), "lacks field 'aggregate'"),
        (lambda r: r.__setitem__("version", 99), "v1"),
        (lambda r: r["requests"][0].pop("mat"), r"requests\[0\] lacks field 'mat'"),
        (lambda r: r["requests"][0].__setitem__("histogram", [1]), "histogram"),
        (lambda r: r["aggregate"].__setitem__("n_requests", 99), "n_requests"),
    ]:
        bad = copy.deepcopy(res)
        mutate(bad)
        with pytest.raises(ValueError, match=msg):
            validate_result(bad)


def test_results_carry_no_machine_local_paths(tmp_path, monkeypatch):
    import os

    from hedgespec.bench.runners import portable_paths

    monkeypatch.chdir(tmp_path)
    home = os.path.expanduser("~")
    cfg = {
        "pool_cache": f"{home}/.cache/hedgespec/bench_pools",
        "data": {"dir": str(tmp_path / "data")},
        "list": [f"{home}/x"],
        "rel": "data",
        "n": 3,
    }
    out = portable_paths(cfg)
    assert out["pool_cache"] == "~/.cache/hedgespec/bench_pools"
    assert out["data"]["dir"] == "./data" and out["list"] == ["~/x"] and out["rel"] == "data" and out["n"] == 3
    cmd = f"python scripts/bench.py trace={tmp_path}/traces/t.jsonl pool_cache='{home}/c' other=/srv/x"
    assert portable_paths(cmd) == "python scripts/bench.py trace=./traces/t.jsonl pool_cache='~/c' other=/srv/x"
