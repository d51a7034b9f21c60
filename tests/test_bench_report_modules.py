"""The report modules behind hedgespec.bench.report: tables (one MAT pooling rule), results_doc (template + the
paper's numbers), plots (matplotlib on first use) and the facade's names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hedgespec.bench import report, results_doc, results_fair, results_lowrank, tables

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "tests" / "fixtures" / "bench" / "results"


def _probe_run(domain, mats_per_request, gens, pool="smollm2"):
    """A valid ``workload=domain oracle_probe=true`` result on the fixture's 4-drafter pool, renamed ``pool``."""
    r = json.loads((RESULTS / "tiny_prompts_oracle_s0.json").read_text())
    r["pool"]["name"], r["workload"] = pool, f"domain:{domain}"
    base = r["requests"][0]
    r["requests"] = [{**base, "generated": g, "fixed_mats": m} for m, g in zip(mats_per_request, gens)]
    r["aggregate"]["n_requests"] = len(r["requests"])
    return r


def test_pooled_fixed_mats_is_tokens_over_rounds():
    reqs = [
        {"generated": 40, "fixed_mats": [4.0, 1.0]},
        {"generated": 20, "fixed_mats": [2.0, 1.0]},
        {"generated": 7},
    ]  # no probe: left out
    # drafter 0: 60 tokens over 40/4 + 20/2 = 20 rounds
    assert list(tables.pooled_fixed_mats(reqs)) == pytest.approx([3.0, 1.0])


def test_table1_and_mat_matrix_pool_the_same_way(tmp_path):
    runs = [
        _probe_run("sql", [[1.0, 1.5, 4.0, 2.0], [1.0, 1.5, 2.0, 2.0]], [40, 20]),
        _probe_run("math", [[2.5, 1.0, 1.0, 5.0]], [50]),
    ]
    for r in runs:
        (tmp_path / f"table1_{r['workload'].split(':')[1]}.json").write_text(json.dumps(r))
    m = tables.mat_matrix(runs)
    text = results_doc.results_markdown(tmp_path)
    names = runs[0]["pool"]["drafters"]
    for dom in ("math", "sql"):
        cells = " | ".join(f"{m[d][dom]:.2f}" for d in names)
        assert f"| domain:{dom} | {cells} | `" in text
    assert "| domain:sql | 1.00 | 1.50 | 3.00 | 2.00 |" in text  # 60 tokens over 40/4 + 20/2 rounds


def test_goals_table_and_words():
    runs = report.load_results([RESULTS])
    g = tables.goals(runs)
    assert [x["goal"] for x in g if x["pool"] == "tiny"][:2] == [
        "HedgeSpec MAT ≥ 0.97 × oracle",
        "HedgeSpec MAT ≥ 1.25 × eagle",
    ]
    md = tables.goals_table(g)
    assert md.startswith("| pool | backend | goal | measured | met |\n|---|---|---|---|---|\n")
    assert md.count("\n") == len(g) + 2
    assert [tables.met_word(x) for x in (True, False, None)] == ["yes", "no", "–"]
    assert tables.met_word(None, "met", "missed", "n/a") == "n/a"


def test_template_blocks_and_fill():
    blocks = results_doc.load_blocks()
    assert "document" in blocks and "table1_awaits" in blocks
    assert not any(b.endswith("\n") for b in blocks.values())
    lines = results_doc.fill("a $x\n$sec\n$$b", {"sec": ["1", "2"], "empty": []}, {"x": 3})
    assert lines == ["a 3", "1", "2", "$b"]
    with pytest.raises(KeyError):
        results_doc.fill("$missing value", {}, {})


def test_every_template_block_is_used_by_the_code():
    src = "".join(Path(m.__file__).read_text() for m in (results_doc, results_lowrank, results_fair))
    blocks = set(results_doc.load_blocks()) - {"document"}
    unused = sorted(b for b in blocks if f'"{b}"' not in src)
    assert not unused, f"template blocks no code fills: {unused}"
    sections = re.findall(r"^\$(\w+)$", results_doc.load_blocks()["document"], flags=re.M)
    assert sections == [
        "table1",
        "seeds",
        "fair",
        "main_table",
        "sim",
        "overhead",
        "label_efficient",
        "lowrank",
        "table4",
        "pipeline",
    ]


def test_paper_numbers_carry_their_source():
    paper = results_doc.load_paper_numbers()

    def leaves(node, path=()):
        if isinstance(node, dict) and ("value" in node or "mat" in node):
            yield path, node
        elif isinstance(node, dict):
            for k, v in node.items():
                yield from leaves(v, (*path, k))

    found = list(leaves(paper))
    assert len(found) >= 15
    for path, entry in found:
        assert str(entry.get("source", "")).strip(), f"{'.'.join(path)} has no source"
    assert paper["main"]["selectors"]["hedgespec"]["mat"] == 7.15
    values = results_doc.paper_values(paper)
    assert values["table1_in_domain_mat"] == "7–8.5" and values["overhead_normalhedge_update_ms"] == 0.41


def test_results_markdown_names_no_issue_or_spec_section(tmp_path):
    committed = results_doc.results_markdown(REPO / "docs" / "results")
    for r in ("tiny_prompts_hedgespec_s0.json", "tiny_mixed_router.json"):
        (tmp_path / r).write_text((RESULTS / r).read_text())
    awaiting = results_doc.results_markdown(tmp_path)  # nothing on the embedded pool: every "awaits" branch
    for text in (committed, awaiting):
        assert not re.search(r"issue[ -]?\d|SPEC §", text, flags=re.I)
    assert (
        "Other paper targets: Qwen-3-8B: eagle 4.23 / 47.53, hedgespec 6.37 / 69.44; "
        "Qwen-3-32B: eagle 2.88 / 20.76, hedgespec 6.21 / 40.41." in awaiting
    )
    assert "| ucbspec | 5.09 / 68.89 | awaits trained pool |" in awaiting
    assert "trace=$PWD/traces/mixed.jsonl" in awaiting
    assert "Reproduction goals:" in committed


def test_package_data_exists():
    assert results_doc.TEMPLATE_PATH.is_file() and results_doc.PAPER_NUMBERS_PATH.is_file()


def test_plots_import_matplotlib_lazily():
    code = "import sys, hedgespec.plots, hedgespec.bench.report; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_facade_keeps_the_public_names():
    for name in (
        "write_run",
        "run_table",
        "write_json_atomic",
        "write_text_atomic",
        "load_results",
        "write_collection",
        "results_markdown",
        "collection_table",
        "mat_matrix",
        "FIGURES",
        "mean_curve",
        "sim_command",
    ):
        assert hasattr(report, name), name


def test_router_rewording_table_and_verdict(tmp_path):
    def row(per):
        return {"accuracy": sum(per.values()) / len(per), "n": 4 * len(per), "per_domain": per, "confusion": {}}

    rows = {
        "original": row({"math": 1.0, "sql": 1.0}),
        "two_answers": row({"math": 1.0, "sql": 0.75}),
        "paraphrase": row({"math": 0.5, "sql": 1.0}),
        "paraphrase[0]": row({"math": 0.75, "sql": 1.0}),
        "paraphrase[1]": row({"math": 0.25, "sql": 1.0}),
    }
    out = tmp_path / results_doc.ROUTER_SHIFT
    out.parent.mkdir()
    out.write_text(json.dumps({"command": "python scripts/router_shift.py --out X", "rows": rows}))
    text = results_doc.results_markdown(tmp_path)
    assert "| original | 1.000 | 0.000 | – |" in text
    assert "| two_answers | 0.875 | 0.125 | sql 0.75 |" in text
    assert "| paraphrase[1] | 0.625 | 0.375 | math 0.25 |" in text
    assert "on 8 held-out eval prompts: `python scripts/router_shift.py --out X`" in text
    assert "the router's accuracy at 0.875 or more, and rewording the task itself brings it to 0.750 (0.625" in text
