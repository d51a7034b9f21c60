"""Table-1 analog: {drafter: {domain: MAT}} pooled from oracle-probe runs, JSON + heatmap."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hedgespec.bench.report import mat_matrix

REPO = Path(__file__).resolve().parents[1]


def _run(domain, mats_per_request, gens):
    return {
        "workload": f"domain:{domain}",
        "pool": {"drafters": ["sql", "math", "general"]},
        "requests": [{"generated": g, "fixed_mats": m} for m, g in zip(mats_per_request, gens)],
    }


def test_pooled_mat_is_tokens_over_rounds():
    runs = [_run("sql", [[4.0, 1.0, 2.0], [2.0, 1.0, 2.0]], [40, 20]), _run("math", [[1.0, 5.0, 2.5]], [50])]
    m = mat_matrix(runs)
    # sql drafter on sql: 60 tokens over 40/4 + 20/2 = 20 rounds -> 3.0
    assert m["sql"]["sql"] == pytest.approx(3.0)
    assert m["math"]["math"] == pytest.approx(5.0) and m["general"]["sql"] == pytest.approx(2.0)
    assert set(m["sql"]) == {"sql", "math"}


def test_errors():
    with pytest.raises(ValueError, match="oracle_probe"):
        mat_matrix([{"workload": "mixed", "pool": {"drafters": ["a"]}, "requests": []}])
    bad = [_run("sql", [[1.0, 1.0, 1.0]], [5]), {**_run("math", [[1.0, 1.0]], [5]), "pool": {"drafters": ["a", "b"]}}]
    with pytest.raises(ValueError, match="differs"):
        mat_matrix(bad)


def test_cli_writes_json_and_heatmap(tmp_path, monkeypatch):
    from hedgespec.bench import report

    monkeypatch.setattr(
        report,
        "load_results",
        lambda paths: [_run("sql", [[3.0, 1.0, 2.0]], [30]), _run("math", [[1.0, 4.0, 2.0]], [30])],
    )
    spec = importlib.util.spec_from_file_location("report_cli", REPO / "scripts" / "report.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    out = tmp_path / "mat_matrix.json"
    assert cli.main(["mat-matrix", "x", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["sql"]["sql"] == 3.0
    assert out.with_suffix(".png").stat().st_size > 1000
