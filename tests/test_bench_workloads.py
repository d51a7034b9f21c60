"""Workloads (hedgespec.bench.workloads): streams, labels, the shift transform and bad input."""

from __future__ import annotations

import pytest
from _bench_helpers import DATA, compose_bench

from hedgespec.bench.workloads import TRAIN_DOMAINS, load_workload, read_prompts

DATA_CFG = {"dir": str(DATA), "source": "offline", "prepare_missing": False}


def test_mixed_is_a_shuffled_stream_of_the_seven_domains():
    reqs = load_workload({"name": "mixed", "n_per_domain": 2}, DATA_CFG, seed=0)
    assert len(reqs) == 14
    assert sorted({r.domain for r in reqs}) == sorted(TRAIN_DOMAINS)
    assert all(sum(r.domain == d for r in reqs) == 2 for d in TRAIN_DOMAINS)
    in_order = [r.domain for r in sorted(reqs, key=lambda r: (TRAIN_DOMAINS.index(r.domain), r.request_id))]
    assert [r.domain for r in reqs] != in_order  # shuffled
    again = load_workload({"name": "mixed", "n_per_domain": 2}, DATA_CFG, seed=0)
    assert [r.request_id for r in again] == [r.request_id for r in reqs]  # seeded
    other = load_workload({"name": "mixed", "n_per_domain": 2}, DATA_CFG, seed=1)
    assert [r.request_id for r in other] != [r.request_id for r in reqs]
    # the prompts are the eval split's user turns, verbatim
    sql = dict(read_prompts(DATA / "offline" / "sql" / "eval.jsonl"))
    assert all(r.prompt == sql[r.request_id] for r in reqs if r.domain == "sql")


def test_domain_ood_and_shift():
    dom = load_workload({"name": "domain", "domain": "sql", "n_per_domain": None}, DATA_CFG)
    assert len(dom) == 3 and {r.domain for r in dom} == {"sql"}
    ood = load_workload({"name": "ood", "n_per_domain": 2}, DATA_CFG)
    assert [r.domain for r in ood] == ["gsm8k", "gsm8k", "humaneval", "humaneval"]
    mixed = load_workload({"name": "mixed", "n_per_domain": 1}, DATA_CFG, seed=3)
    shift = load_workload({"name": "shift", "n_per_domain": 1, "variant": "two_answers"}, DATA_CFG, seed=3)
    assert [r.domain for r in shift] == [r.domain for r in mixed]
    for a, b in zip(mixed, shift):
        assert b.prompt != a.prompt and a.prompt in b.prompt and b.request_id == a.request_id + "@two_answers"


def test_workload_configs_compose():
    for w in ("mixed", "ood", "shift", "prompts"):
        assert compose_bench([f"workload={w}"])["workload"]["name"] == w
    cfg = compose_bench(["workload=domain", "domain=math"])
    assert cfg["workload"]["domain"] == "math"
    reqs = load_workload(cfg["workload"], cfg["data"])
    assert {r.domain for r in reqs} == {"math"}


def test_bad_workloads_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        load_workload({"name": "nope"}, DATA_CFG)
    with pytest.raises(ValueError, match="empty"):
        load_workload({"name": "mixed", "n_per_domain": 0}, DATA_CFG)
    with pytest.raises(ValueError, match="empty"):
        load_workload({"name": "prompts", "prompts": []}, DATA_CFG)
    (tmp_path / "offline" / "sql").mkdir(parents=True)
    (tmp_path / "offline" / "sql" / "eval.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_workload({"name": "domain", "domain": "sql"}, {**DATA_CFG, "dir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"math/eval.jsonl, which does not exist.*prepare_data.py domain=math"):
        load_workload({"name": "domain", "domain": "math"}, {**DATA_CFG, "dir": str(tmp_path)})
    with pytest.raises(ValueError, match="workload=domain needs a domain"):
        load_workload({"name": "domain", "domain": None}, DATA_CFG)
    with pytest.raises(ValueError, match="variant='nope' is unknown"):
        load_workload({"name": "shift", "n_per_domain": 1, "variant": "nope"}, DATA_CFG)


def test_seeded_draw_picks_independent_requests_per_seed():
    """draw=seeded: each seed draws n_per_domain of a domain's eval prompts (a sample, not the first ones), the
    same seed the same ones; the first n under the default draw; a bad draw is named."""
    ids = {r for r, _ in read_prompts(DATA / "offline" / "sql" / "eval.jsonl")}
    cfg = {"name": "mixed", "n_per_domain": 1, "draw": "seeded"}
    draws = {s: {r.request_id for r in load_workload(cfg, DATA_CFG, seed=s)} for s in range(12)}
    assert all(len(d) == 7 for d in draws.values())
    assert draws[5] == {r.request_id for r in load_workload(cfg, DATA_CFG, seed=5)}
    sql_picks = {next(i for i in d if i in ids) for d in draws.values()}
    assert len(sql_picks) == len(ids) == 3  # 12 seeds reach all three sql prompts, not only the first
    first = {r.request_id for r in load_workload({**cfg, "draw": "first"}, DATA_CFG, seed=7)}
    assert first == {r.request_id for r in load_workload({"name": "mixed", "n_per_domain": 1}, DATA_CFG, seed=0)}
    whole = load_workload({"name": "domain", "domain": "sql", "n_per_domain": 9, "draw": "seeded"}, DATA_CFG, seed=1)
    assert {r.request_id for r in whole} == ids  # a split shorter than n_per_domain is used whole
    with pytest.raises(ValueError, match="workload.draw must be one of"):
        load_workload({**cfg, "draw": "random"}, DATA_CFG)
