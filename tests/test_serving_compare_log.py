"""serve_compare's tracking: one logger run per server, each pass logged as it ends with × plain once the plain
server has run, a summary run with the result files (jsonl and offline wandb; no server needed)."""

from __future__ import annotations

import json

import pytest

from hedgespec.serving.compare_log import CompareLogger

ROWS = [
    {"label": "plain", "algorithm": "NONE", "selector": "none", "concurrency": 1, "output_tokens_per_s": 10.0},
    {"label": "plain", "algorithm": "NONE", "selector": "none", "concurrency": 8, "output_tokens_per_s": 40.0},
    {"label": "hs", "algorithm": "HEDGESPEC", "selector": "hedgespec", "concurrency": 1, "output_tokens_per_s": 12.0},
    {"label": "hs", "algorithm": "HEDGESPEC", "selector": "hedgespec", "concurrency": 8, "output_tokens_per_s": 20.0},
]
RES = {"rows": [{**r, "x_plain": r["output_tokens_per_s"] / (10.0 if r["concurrency"] == 1 else 40.0)} for r in ROWS]}


def _cfg(logger: dict) -> dict:
    return {"pool": {"name": "tiny"}, "logger": logger, "hydra": {"dropped": True}}


def test_jsonl_one_run_per_server_logged_per_pass(tmp_path):
    files = [tmp_path / "serve_compare.json", tmp_path / "serve_compare.md"]
    for f in files:
        f.write_text("{}")
    tr = CompareLogger(_cfg({"name": "jsonl"}), tmp_path)
    for r in ROWS:
        tr.row(r)
        if r["label"] == "plain":  # live: the plain server's run is written before the next server starts
            assert (tmp_path / "runs" / "plain" / "metrics.jsonl").is_file()
    tr.finish(RES, files)
    lines = {
        lab: [json.loads(x) for x in (tmp_path / "runs" / lab / "metrics.jsonl").read_text().splitlines()]
        for lab in ("plain", "hs", "summary")
    }
    hs = [x for x in lines["hs"] if "step" in x]
    assert [x["step"] for x in hs] == [1, 8]
    assert [x["server/x_plain"] for x in hs] == pytest.approx([1.2, 0.5])
    assert lines["hs"][0]["config"]["server"] == "hs" and "hydra" not in lines["hs"][0]["config"]
    assert [x["server/output_tokens_per_s"] for x in lines["plain"] if "step" in x] == [10.0, 40.0]
    art = [x for x in lines["summary"] if "artifact" in x]
    assert art and art[0]["paths"] == [str(f) for f in files]
    assert any(x.get("x_plain/hs/c8") == pytest.approx(0.5) for x in lines["summary"])


def test_wandb_runs_carry_tags_and_group(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="wandb comes with the [track] extra (scripts/install.sh installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    inits = []
    real_init = wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: inits.append(kw) or real_init(**kw))
    tr = CompareLogger(
        _cfg({"name": "wandb", "project": "hedgespec", "mode": "offline", "group": None, "tags": []}), tmp_path
    )
    for r in ROWS:
        tr.row(r)
    f = tmp_path / "serve_compare.json"
    f.write_text("{}")
    tr.finish(RES, [f])
    assert [kw["name"] for kw in inits] == [f"{tmp_path.name}-plain", f"{tmp_path.name}-hs", f"{tmp_path.name}-summary"]
    assert inits[1]["tags"] == ["pool:tiny", "selector:hedgespec", "server:hs", "backend:server"]
    assert all(kw["group"] == tmp_path.name and kw["mode"] == "offline" for kw in inits)
    assert inits[2]["job_type"] == "serve_compare-summary"
