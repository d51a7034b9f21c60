"""Regret in accepted tokens (MAT gap to the best fixed drafter in hindsight), per request and pooled, and its
recovery for committed greedy runs from the oracle run on the same requests."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from hedgespec.bench.collect import load_results_dir
from hedgespec.bench.metrics import aggregate, mat_regret_fields, request_metrics
from hedgespec.bench.tables import with_fixed_mats

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def test_mat_regret_fields_by_hand() -> None:
    got = mat_regret_fields(1.3, 10, [1.2, 1.5, 1.1])
    assert got["mat_regret"] == pytest.approx(0.2) and got["accepted_regret"] == pytest.approx(2.0)
    assert mat_regret_fields(1.3, 10, None) == {"mat_regret": None, "accepted_regret": None}
    assert mat_regret_fields(1.6, 5, [1.2, 1.5])["mat_regret"] == pytest.approx(-0.1)  # beat every fixed drafter


def test_request_and_aggregate_regret() -> None:
    a = request_metrics(
        request_id="a", domain="x", generated=12, rounds=8, wall_s=1.0, histogram=[8, 0], fixed_mats=[2.0, 1.0]
    )
    b = request_metrics(request_id="b", domain="x", generated=6, rounds=6, wall_s=1.0, histogram=[0, 6])
    c = request_metrics(
        request_id="c", domain="y", generated=9, rounds=3, wall_s=1.0, histogram=[3, 0], fixed_mats=[3.0, 1.5]
    )
    assert a["mat_regret"] == pytest.approx(0.5) and a["accepted_regret"] == pytest.approx(4.0)
    assert b["mat_regret"] is None and c["mat_regret"] == pytest.approx(0.0)
    agg = aggregate([a, b, c])
    assert agg["mat_regret"] == pytest.approx(0.25) and agg["accepted_regret"] == pytest.approx(4.0)
    assert agg["n_mat_regret"] == 2


@pytest.fixture(scope="module")
def committed():
    runs = load_results_dir(RESULTS)
    if not any(r["selector"] == "oracle" and r["workload"] == "mixed" for r in runs):
        pytest.skip("no committed oracle run on the mixed workload")
    return runs


def test_committed_mixed_runs_get_the_oracle_runs_fixed_mats(committed) -> None:
    oracle = json.loads((RESULTS / "smollm2_oracle_mixed.json").read_text())
    fm = np.array([q["fixed_mats"] for q in oracle["requests"]])
    by = {(r["selector"], r["workload"], r["pool"]["name"]): r for r in with_fixed_mats(committed)}
    for sel in ("eagle", "hedgespec", "ucbspec"):
        res = by[(sel, "mixed", "smollm2")]
        raw = json.loads((RESULTS / f"smollm2_{sel}_mixed.json").read_text())
        mats = np.array([q["mat"] for q in raw["requests"]])
        rounds = np.array([q["rounds"] for q in raw["requests"]])
        gap = fm.max(axis=1) - mats  # independent: straight from the two JSON files
        assert res["aggregate"]["mat_regret"] == pytest.approx(gap.mean())
        assert res["aggregate"]["accepted_regret"] == pytest.approx((gap * rounds).sum())
        assert res["fixed_mats_from"].endswith("smollm2_oracle_mixed.json")
    # the generalist run is drafter `general` alone: its MATs are the oracle run's fixed MATs of that drafter
    eagle = json.loads((RESULTS / "smollm2_eagle_mixed.json").read_text())
    i = eagle["pool"]["drafters"].index("general")
    assert [q["mat"] for q in eagle["requests"]] == pytest.approx(list(fm[:, i]), abs=1e-12)
    # no oracle run on the ood requests: nothing is invented
    assert by[("hedgespec", "ood", "smollm2")]["aggregate"].get("mat_regret") is None


def test_a_fixed_run_that_disagrees_with_the_donor_is_refused(committed) -> None:
    bad = copy.deepcopy([r for r in committed if r["pool"]["name"] == "smollm2" and r["workload"] == "mixed"])
    eagle = next(r for r in bad if r["selector"] == "eagle")
    eagle["requests"][3]["mat"] += 0.01
    with pytest.raises(ValueError, match="differs from drafter general"):
        with_fixed_mats(bad)


def test_sampled_runs_borrow_nothing(committed) -> None:
    runs = copy.deepcopy([r for r in committed if r["pool"]["name"] == "smollm2" and r["workload"] == "mixed"])
    h = next(r for r in runs if r["selector"] == "hedgespec")
    h["decoding"]["temperature"] = 0.7
    out = next(r for r in with_fixed_mats(runs) if r["selector"] == "hedgespec")
    assert "fixed_mats_from" not in out and out["aggregate"].get("mat_regret") is None
