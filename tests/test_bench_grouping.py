"""Runs that differ in more than their seed are never pooled as seeds of one row (report.py collect's tables)."""

from __future__ import annotations

from typing import Any

from hedgespec.bench.tables import collection_table, goals, group_runs, run_settings


def _run(selector: str, mat: float, seed: int = 0, workload: str = "mixed", **cfg: Any) -> dict[str, Any]:
    config = {
        "target": {"name": "smollm2", "dtype": "float32", "compute_dtype": cfg.pop("compute_dtype", None)},
        "decoding": {"mode": "chain", "num_steps": cfg.pop("num_steps", 4), "topk": 1},
        "sampling": {"temperature": 0.0},
        "workload": {"name": workload, "n_per_domain": 2},
        "backend": {"name": "engine", "threads": 1},
        "selector": {"name": selector, **cfg.pop("options", {})},
        "max_new_tokens": 64,
        "seed": seed,
    }
    assert not cfg, cfg
    return {
        "pool": {"name": "p"},
        "workload": workload,
        "backend": "engine",
        "selector": selector,
        "seed": seed,
        "config": config,
        "aggregate": {"mat": mat, "selection_overhead": 0.1},
        "_path": f"{selector}-{seed}.json",
    }


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_seeds_of_one_setting_are_one_row_without_a_settings_column() -> None:
    runs = [_run("hedgespec", 1.2, seed=0), _run("hedgespec", 1.4, seed=1), _run("eagle", 1.0, seed=0)]
    assert run_settings(runs) == [("", "")] * 3
    table = collection_table(runs)
    assert "settings" not in table.splitlines()[0]
    rows = {r[3]: r for r in _rows(table)}
    assert rows["hedgespec"][4] == "2" and rows["hedgespec"][5].startswith("1.30 ±")
    assert rows["hedgespec"][-1] == "1.300"  # × eagle


def test_another_target_dtype_is_another_row_and_pairs_with_its_own_baseline() -> None:
    runs = [
        _run("hedgespec", 1.3),
        _run("eagle", 1.1),
        _run("hedgespec", 1.2, compute_dtype="bfloat16"),
        _run("eagle", 1.0, compute_dtype="bfloat16"),
    ]
    labels = [s for s, _ in run_settings(runs)]
    assert labels == ["target.compute_dtype=null", "target.compute_dtype=null"] + ["target.compute_dtype=bfloat16"] * 2
    assert len(group_runs(runs)) == 4
    rows = {(r[3], r[4]): r for r in _rows(collection_table(runs))}
    assert rows[("hedgespec", "target.compute_dtype=bfloat16")][5] == "1"  # one seed each, not two
    assert rows[("hedgespec", "target.compute_dtype=bfloat16")][-1] == f"{1.2 / 1.0:.3f}"
    assert rows[("hedgespec", "target.compute_dtype=null")][-1] == f"{1.3 / 1.1:.3f}"
    assert {g["pool"] for g in goals(runs)} == {"p target.compute_dtype=null", "p target.compute_dtype=bfloat16"}
    ratios = {g["pool"]: g["ratio"] for g in goals(runs) if "eagle" in g["goal"]}
    assert ratios["p target.compute_dtype=bfloat16"] == 1.2 / 1.0


def test_a_selector_option_splits_only_that_selector_and_the_baseline_still_pairs() -> None:
    runs = [
        _run("hedgespec", 1.3, options={"epsilon": 1.0}),
        _run("hedgespec", 1.25, options={"epsilon": 0.25}),
        _run("eagle", 1.0, options={"drafter": "general"}),
    ]
    assert run_settings(runs) == [("", "selector.epsilon=1.0"), ("", "selector.epsilon=0.25"), ("", "")]
    rows = {(r[3], r[4]): r for r in _rows(collection_table(runs))}
    assert set(rows) == {("hedgespec", "selector.epsilon=1.0"), ("hedgespec", "selector.epsilon=0.25"), ("eagle", "–")}
    assert rows[("hedgespec", "selector.epsilon=0.25")][-1] == "1.250"


def test_settings_of_another_workload_do_not_label_a_row() -> None:
    runs = [_run("hedgespec", 1.3, num_steps=4), _run("hedgespec", 1.1, workload="ood", num_steps=2)]
    assert run_settings(runs) == [("", ""), ("", "")]
    assert "settings" not in collection_table(runs).splitlines()[0]


def test_a_long_differing_value_is_shown_as_a_digest() -> None:
    a, b = _run("hedgespec", 1.3), _run("hedgespec", 1.1)
    a["config"]["workload"]["prompts"] = [{"prompt": "x" * 60}]
    b["config"]["workload"]["prompts"] = [{"prompt": "y" * 60}]
    (la, _), (lb, _) = run_settings([a, b])
    assert la.startswith("workload.prompts=sha256:") and la != lb and len(la) < 40
