"""docs/RESULTS.md's low-rank section, rendered from drafter x domain matrices and a real bench_engine run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hedgespec.bench.results_doc import results_markdown
from hedgespec.bench.results_lowrank import cross_domain, generalist, in_domain
from hedgespec.engine.bench import bench_engine

DOMAINS = ["math", "sql"]


def _matrix(scale: float) -> dict:
    return {
        "general": {"math": 1.2, "sql": 1.1},
        "math": {"math": 2.0 * scale, "sql": 1.0},
        "sql": {"math": 1.1, "sql": 1.5 * scale},
    }


def test_matrix_summaries_by_hand():
    m = _matrix(1.0)
    assert in_domain(m) == {"math": 2.0, "sql": 1.5}
    assert cross_domain(m) == pytest.approx((1.0 + 1.1) / 2)
    assert generalist(m) == pytest.approx(1.15)


def _write(root: Path, kinds: dict[str, float], bench: list | None) -> Path:
    d = root / "lowrank"
    d.mkdir(parents=True)
    for kind, scale in kinds.items():
        (d / f"mat_matrix_{kind}.json").write_text(json.dumps(_matrix(scale)))
    if bench is not None:
        (d / "bench_engine.json").write_text(json.dumps(bench))
    return root


def test_section_renders_a_real_bench_run(tmp_path):
    torch.set_num_threads(1)
    res = bench_engine("tiny", ns=(1, 8), context=16, rows=2, repeats=1, ranks=(2,))
    bench = json.loads(json.dumps([res]))  # as bench_engine.py writes it (int keys become strings)
    text = results_markdown(_write(tmp_path, {"dense": 1.0, "rfull": 1.0, "r2": 0.9}, bench))
    rows = [line for line in text.splitlines() if line.startswith(("| dense", "| full rank", "| r = 2"))]
    assert [r.split(" | ")[0] for r in rows] == ["| dense experts (as trained)", "| r = 2", "| full rank"]
    r2 = rows[1].split(" | ")
    assert r2[1:3] == ["1.800", "1.350"] and r2[3] == "1.575" and r2[4].startswith("0.900 (worst domain 0.900)")
    low = res["lowrank"][2][8]
    assert r2[7] == f"{low['weights_read_x_one_head']:.2f}"
    assert r2[8] == f"{low['evaluate_s'] * 1e3:.1f} ({low['x_dense_evaluate']:.2f}) |"
    assert "Goal (experts keep ≥ 97%" in text and "missed: no measured rank meets both" in text


def test_goal_met_picks_the_cheapest_rank_that_keeps_the_mat(tmp_path):
    def cost(reads: float) -> dict:
        return {"8": {"evaluate_s": 0.01, "x_dense_evaluate": 0.4, "weights_read_x_one_head": reads}}

    bench = [{"pool": {"8": {"evaluate_s": 0.03, "weights_read_x_one_head": 8.0}}, "lowrank": {}}]
    bench[0]["lowrank"] = {"8": cost(1.1), "32": cost(1.25), "128": cost(3.0)}
    text = results_markdown(_write(tmp_path, {"dense": 1.0, "r8": 0.95, "r32": 0.99, "r128": 1.0}, bench))
    assert "met at r = 32 (1.25 × one head)" in text  # r8 reads less but loses 5% of the MAT


def test_section_says_what_is_missing(tmp_path):
    (tmp_path / "lowrank").mkdir()
    assert "`docs/results/lowrank/mat_matrix_dense.json` missing" in results_markdown(tmp_path)


def test_budget_pools_render_in_their_own_table_and_count_for_the_goal(tmp_path):
    bench = [{"pool": {"8": {"evaluate_s": 0.03, "weights_read_x_one_head": 8.0}}, "lowrank": {}}]
    bench[0]["lowrank"] = {"8": {"8": {"evaluate_s": 0.01, "x_dense_evaluate": 0.4, "weights_read_x_one_head": 1.16}}}
    _write(tmp_path, {"dense": 1.0, "r8": 0.9}, bench)
    d = tmp_path / "lowrank_budget"
    d.mkdir()
    for kind, scale in {"dense": 1.0, "r8": 0.92, "b1.3-frobenius": 0.98, "b1.3-relative": 0.96}.items():
        (d / f"mat_matrix_{kind}.json").write_text(json.dumps(_matrix(scale)))
    for kind, reads in {"b1.3-frobenius": 1.29, "b1.3-relative": 1.3}.items():
        (d / f"pool_{kind}.json").write_text(json.dumps({"n_drafters": 8, "reads_x_one_head": reads}))
    text = results_markdown(tmp_path)
    lines = text.splitlines()
    second = lines.index(next(x for x in lines if x.startswith("**Ranks per matrix for a reads budget.**")))
    rows = [x for x in lines[second:] if x.startswith("| ") and not x.startswith(("| pool", "|---"))]
    labels = [r.split(" | ")[0] for r in rows]
    assert labels == [
        "| dense experts (as trained)",
        "| r = 8",
        "| reads ≤ 1.3, frobenius (ranks per matrix)",
        "| reads ≤ 1.3, relative (ranks per matrix)",
    ]
    frob = rows[2].split(" | ")
    assert frob[4].startswith("0.980") and frob[7] == "1.29" and frob[8] == "– |"
    # r8 of the budget table has no bench_engine.json there and no pool file: no cost, so it cannot meet the goal
    assert rows[1].split(" | ")[7] == "–"
    assert "met at reads ≤ 1.3, frobenius (ranks per matrix) (1.29 × one head)" in text


def test_budget_pool_costs_come_from_a_bench_run_at_its_own_ranks(tmp_path):
    """bench_engine at the ranks per matrix of a lowrank_pool.py record: its reads equal pool_reads' count, and the
    budget table shows its time."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from hedgespec.engine.bench import DIMS, rank_pools_from_files
    from hedgespec.engine.lowrank import pool_reads
    from hedgespec.fixtures import random_drafter
    from hedgespec.ranks import MATRICES

    torch.set_num_threads(1)
    rank = {m: (2 if m in ("fc", "q", "lm_head") else 0) for m in MATRICES}
    rec = tmp_path / "pool_b1.3-frobenius.json"
    rec.write_text(json.dumps({"rank": rank, "n_drafters": 8, "budget": {"reads": 1.3, "allocation": "frobenius"}}))
    labelled = rank_pools_from_files([rec])
    assert labelled == {"b1.3-frobenius": rank}
    res = json.loads(json.dumps([bench_engine("tiny", ns=(1, 8), context=16, rows=2, repeats=1, ranks=labelled)]))
    low = res[0]["lowrank"]["b1.3-frobenius"]["8"]
    dims = {k: v for k, v in DIMS["tiny"].items() if k != "draft_vocab"}
    target = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True, **dims))
    base = random_drafter(target, seed=0, draft_vocab_size=res[0]["draft_vocab"])
    assert low["weights_read_x_one_head"] == pytest.approx(pool_reads(base, 8, rank))

    _write(tmp_path / "docs", {"dense": 1.0}, None)
    d = tmp_path / "docs" / "lowrank_budget"
    d.mkdir()
    for kind, scale in {"dense": 1.0, "b1.3-frobenius": 0.98}.items():
        (d / f"mat_matrix_{kind}.json").write_text(json.dumps(_matrix(scale)))
    (d / "bench_engine.json").write_text(json.dumps(res))
    row = next(x for x in results_markdown(tmp_path / "docs").splitlines() if x.startswith("| reads ≤ 1.3"))
    cells = row.split(" | ")
    assert cells[7] == f"{low['weights_read_x_one_head']:.2f}"
    assert cells[8] == f"{low['evaluate_s'] * 1e3:.1f} ({low['x_dense_evaluate']:.2f}) |"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json", r"pool_x.json: cannot read it as JSON"),
        ('{"reads_x_one_head": 1.3}', r"pool_x.json: no 'rank' \(expected a record of scripts/lowrank_pool.py"),
        ('{"rank": {"fc": 2}}', r"pool_x.json: rank=.*names each of"),
        ('{"rank": -1}', r"pool_x.json: rank=-1: expected a positive integer"),
    ],
)
def test_bad_rank_files_are_named(tmp_path, content, match):
    from hedgespec.engine.bench import rank_pools_from_files

    (tmp_path / "pool_x.json").write_text(content)
    with pytest.raises(ValueError, match=match):
        rank_pools_from_files([tmp_path / "pool_x.json"])


def _round_run(pool: str, selector: str, mat: float, over: float, evaluated: float | None, extra: str = "") -> dict:
    agg = {
        "n_requests": 14, "mat": mat, "tokens_per_s": 10.0 * mat, "plain_tokens_per_s": 12.0,
        "speedup_vs_plain": 10.0 * mat / 12.0, "selection_overhead": over, "evaluated_share": evaluated,
        "rounds": 100, "timings": {"evaluate": 0.5, "draft": 0.1, "verify": 6.0, "update": 0.01, "prefill": 0.2},
    }  # fmt: skip
    command = f"python scripts/bench.py pool=smollm2 ++pool.manifest=pools/{pool}.yaml selector={selector}{extra}"
    return {"selector": selector, "workload": "mixed", "pool": pool, "command": command, "aggregate": agg}


def test_round_table_labels_pools_and_judges_the_goal_against_dense_hedgespec(tmp_path):
    _write(tmp_path, {"dense": 1.0}, None)
    d = tmp_path / "lowrank_budget"
    d.mkdir()
    (d / "mat_matrix_dense.json").write_text(json.dumps(_matrix(1.0)))
    (d / "pool_b1.3-frobenius.json").write_text(json.dumps({"pool": "ft-b1.3", "n_drafters": 8, "rank": 4}))
    runs = [
        _round_run("ft-b1.3", "hedgespec", 1.30, 0.104, 1.0),
        _round_run("ft", "eagle", 1.12, 0.06, None),
        _round_run("ft", "hedgespec", 1.31, 0.19, 1.0),
        _round_run("ft-b1.3", "hedgespec_late", 1.298, 0.048, 0.3),
    ]
    (tmp_path / "lowrank_round").mkdir()
    (tmp_path / "lowrank_round" / "summary.json").write_text(json.dumps({"runs": runs}))
    lines = results_markdown(tmp_path).splitlines()
    at = lines.index(next(x for x in lines if x.startswith("**In the round.**")))
    rows = [x.split(" | ") for x in lines[at:] if x.startswith("| ") and not x.startswith(("| pool", "|---"))][:4]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("| dense experts (as trained)", "eagle", "own head"),
        ("| dense experts (as trained)", "hedgespec", "ε=1"),
        ("| reads ≤ 1.3, frobenius (ranks per matrix)", "hedgespec", "ε=1"),
        ("| reads ≤ 1.3, frobenius (ranks per matrix)", "hedgespec_late", "adaptive, late γ"),
    ]
    assert rows[1][5] == "0.0%" and rows[3][5] == f"{100 * (1.298 / 1.31 - 1):.1f}%" and rows[3][10] == "5.00"
    goal = next(x for x in lines if x.startswith("Goal for a whole round"))
    # the late run is under 5% overhead and within 1% of dense HedgeSpec's MAT (-0.9%)
    assert (
        ": met; the lowest HedgeSpec overhead is 4.8% (reads ≤ 1.3, frobenius (ranks per matrix), hedgespec_late)"
        in goal
    )
    runs[3]["aggregate"]["mat"] = 1.29  # -1.5%: the goal is missed although the overhead is low
    (tmp_path / "lowrank_round" / "summary.json").write_text(json.dumps({"runs": runs}))
    goal = next(x for x in results_markdown(tmp_path).splitlines() if x.startswith("Goal for a whole round"))
    assert ": missed;" in goal and "with MAT 1.5% below dense HedgeSpec" in goal
