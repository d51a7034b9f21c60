"""Reports render from fixture results: run files, sweep collections (scripts/report.py) and docs/RESULTS.md."""

from __future__ import annotations

import json
import shutil

from _bench_helpers import FIXTURES, REPO

from hedgespec.bench.report import FIGURES, load_results, results_markdown, write_run

RESULTS = FIXTURES / "results"


def _report_main(argv):
    import importlib.util

    spec = importlib.util.spec_from_file_location("report_script", REPO / "scripts" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(argv)


def test_write_run_from_fixture(tmp_path):
    res = json.loads((RESULTS / "tiny_prompts_hedgespec_s0.json").read_text())
    files = write_run(tmp_path, res)
    assert set(files) == {"results.json", "results.md", *FIGURES}
    md = (tmp_path / "results.md").read_text()
    agg = res["aggregate"]
    assert f"| **all** | 3 | {agg['mat']:.2f} | {agg['tokens_per_s']:.1f} |" in md
    assert res["command"] in md


def test_collect_table_and_figures(tmp_path, capsys):
    assert _report_main(["collect", str(RESULTS), "--out", str(tmp_path)]) == 0
    table = (tmp_path / "table.md").read_text()
    runs = load_results([RESULTS])
    assert len(runs) == 17
    # seeds are averaged: the prompts fixtures have two seeds per selector
    hs = [r for r in runs if r["workload"] == "prompts" and r["selector"] == "hedgespec"]
    mean = sum(r["aggregate"]["mat"] for r in hs) / 2
    assert f"| tiny | prompts | engine | hedgespec | 2 | {mean:.2f}" in table
    ea = [r for r in runs if r["workload"] == "prompts" and r["selector"] == "eagle"]
    ratio = mean / (sum(r["aggregate"]["mat"] for r in ea) / 2)
    assert f"{ratio:.3f} |" in table.split("| tiny | prompts | engine | hedgespec |")[1].splitlines()[0]
    assert "## Reproduction goals, measured ratios" in table and "HedgeSpec MAT ≥ 0.97 × oracle" in table
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["runs"]) == 17 and summary["goals"]
    for key in ("tiny_prompts_engine", "tiny_mixed_engine", "tiny_shift_engine"):
        assert (tmp_path / f"mat_by_domain_{key}.png").stat().st_size > 0
        assert (tmp_path / f"regret_{key}.png").stat().st_size > 0


def test_collect_errors(tmp_path, capsys):
    assert _report_main(["collect", str(tmp_path)]) == 2
    assert "no bench results" in capsys.readouterr().err
    bad = json.loads((RESULTS / "tiny_mixed_eagle.json").read_text())
    bad.pop("requests")
    (tmp_path / "results.json").write_text(json.dumps(bad))
    assert _report_main(["collect", str(tmp_path)]) == 2
    assert "lacks field 'requests'" in capsys.readouterr().err


def test_results_markdown_awaits_trained_pool_and_uses_simulator(tmp_path):
    for f in ("sim_scaling.json", "sim_regret.json", "bench_learners.json"):
        shutil.copy(REPO / "docs" / "results" / f, tmp_path / f)
    shutil.copy(RESULTS / "tiny_prompts_oracle_s0.json", tmp_path / "bench_tiny_oracle.json")
    text = results_markdown(tmp_path)
    assert "5.69 / 74.34" in text and "7.15 / 90.41" in text  # the paper's main table next to ours
    assert "awaits the trained pool" in text.lower()
    assert "python scripts/simulate.py experiment=scaling" in text
    assert "python scripts/simulate.py experiment=regret" in text
    scal = json.loads((tmp_path / "sim_scaling.json").read_text())["results"]
    assert f"{scal['hedgespec']['56']['mat']:.2f} / {scal['hedgespec']['56']['avg_regret']:.4f}" in text
    assert "python scripts/bench_learners.py" in text
    assert "Pipeline checks on other pools" in text and "docs/results/bench_tiny_oracle.json" in text


def test_results_markdown_fills_tables_from_embedded_runs(tmp_path):
    """Embedded-pool sections fill from results whose pool is the embedded one (fixtures relabelled here)."""
    for sel in ("hedgespec", "eagle", "ucbspec", "exp3spec", "oracle"):
        r = json.loads((RESULTS / f"tiny_prompts_{sel}_s0.json").read_text())
        r["pool"]["name"], r["workload"] = "smollm2", "mixed"
        (tmp_path / f"main_{sel}.json").write_text(json.dumps(r))
    r = json.loads((RESULTS / "tiny_prompts_oracle_s0.json").read_text())
    r["pool"]["name"], r["workload"] = "smollm2", "domain:sql"
    (tmp_path / "table1_sql.json").write_text(json.dumps(r))
    for wl in ("mixed", "shift"):
        r = json.loads((RESULTS / f"tiny_{wl}_router.json").read_text())
        r["pool"]["name"] = "smollm2"
        (tmp_path / f"router_{wl}.json").write_text(json.dumps(r))
    text = results_markdown(tmp_path)
    hs = json.loads((tmp_path / "main_hedgespec.json").read_text())
    assert f"| hedgespec | 7.15 / 90.41 | {hs['aggregate']['mat']:.2f} |" in text
    assert "HedgeSpec MAT ≥ 1.25 × eagle: measured" in text
    fm = r  # router shift
    assert f"| shift | {fm['router']['accuracy']:.3f} |" in text
    assert "| domain:sql | " in text
    assert "Pipeline checks" not in text


def test_results_markdown_in_repo_is_generated():
    """docs/RESULTS.md is exactly what `python scripts/report.py results` writes from docs/results/."""
    path = REPO / "docs" / "RESULTS.md"
    assert path.is_file(), "docs/RESULTS.md is missing: python scripts/report.py results"
    assert path.read_text() == results_markdown(REPO / "docs" / "results")
