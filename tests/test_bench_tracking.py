"""The bench run's logger: opened before the first request, live per-request metrics, artifacts, wandb tags."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from _bench_helpers import compose_bench, inject

import hedgespec.bench.runners as runners
from hedgespec.bench.app import bench_main
from hedgespec.bench.report import FIGURES
from hedgespec.tracking import WandbLogger, _artifact_name, make_logger

BASE = ["workload=prompts", "chat_template=false"]


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_requests_are_logged_live_and_a_crash_keeps_them(tmp_path, monkeypatch):
    real = runners.EngineRunner.run_one

    def fail_on_third(self, req, j, *a, **k):
        if j == 2:
            raise RuntimeError("injected failure on the third request")
        return real(self, req, j, *a, **k)

    monkeypatch.setattr(runners.EngineRunner, "run_one", fail_on_third)
    cfg = compose_bench(BASE + ["selector=hedgespec", "logger=jsonl"])
    with pytest.raises(RuntimeError, match="third request"):
        bench_main(cfg, tmp_path, **inject())
    lines = _lines(tmp_path / "metrics.jsonl")
    assert "config" in lines[0]
    assert [x["step"] for x in lines if "request/mat" in x] == [0, 1]


def test_results_and_pool_manifest_are_artifacts(tmp_path):
    from hedgespec.pools import DrafterEntry, TargetInfo, register_drafter

    manifest = tmp_path / "pool.yaml"  # a manifest of one entry (the run's drafters are injected)
    features, head = str(tmp_path / "features" / "ab12"), str(Path.home() / ".cache" / "hs" / "head")
    training = {"budget": "tiny", "specforge": {"hidden_states_path": features, "target_model_path": head}}
    entry = DrafterEntry("sql", "sql", "p/sql", "sha256:t", "v", 64, (0, 1, 2), "d", training)
    register_drafter(manifest, "tiny", TargetInfo("tiny", "sha256:t", 64, 512, 4), entry)
    cfg = compose_bench(BASE + ["selector=hedgespec", "logger=jsonl", f"+pool.manifest={manifest}"])
    res = bench_main(cfg, tmp_path / "run", **inject())
    assert res["pool"]["provenance"]["drafters"][0]["budget"] == "tiny"  # the manifest's, in the result
    lines = _lines(tmp_path / "run" / "metrics.jsonl")
    arts = {x["type"]: x for x in lines if "artifact" in x}
    assert set(arts) == {"bench-results", "pool-manifest"}
    logged = {p.rsplit("/", 1)[-1] for p in arts["bench-results"]["paths"]}
    assert logged == {"results.json", "results.md", *FIGURES}
    # the artifact is a copy of the manifest with the machine's path prefixes made portable; the local one is kept
    assert arts["pool-manifest"]["paths"] == [str(tmp_path / "run" / "pool" / "pool.yaml")]
    assert arts["pool-manifest"]["artifact"] == f"pool-{res['pool']['name']}"
    local, copy = (yaml.safe_load(Path(p).read_text()) for p in (manifest, *arts["pool-manifest"]["paths"]))
    assert local["drafters"][0]["training"]["specforge"] == {"hidden_states_path": features, "target_model_path": head}
    assert copy["drafters"][0]["training"]["specforge"] == {
        "hidden_states_path": "$TMPDIR/" + str(Path(features).relative_to(tempfile.gettempdir())),
        "target_model_path": "~/.cache/hs/head",
    }
    assert {k: v for k, v in copy.items() if k != "drafters"} == {k: v for k, v in local.items() if k != "drafters"}
    # per-request steps come before the aggregate step, each once
    steps = [x["step"] for x in lines if "step" in x and any(k.startswith("request/") for k in x)]
    assert steps == list(range(len(res["requests"])))


def test_wandb_run_gets_tags_group_and_artifacts(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="wandb comes with the [track] extra (scripts/install.sh installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    seen: dict = {"artifacts": []}
    real_init = wandb.init

    def recording_init(**kw):
        seen["init"] = kw
        run = real_init(**kw)
        real_log_artifact = run.log_artifact

        def log_artifact(art, *a, **k):
            seen["artifacts"].append((art.name, art.type, sorted(art.manifest.entries)))
            return real_log_artifact(art, *a, **k)

        run.log_artifact = log_artifact
        return run

    monkeypatch.setattr(wandb, "init", recording_init)
    cfg = compose_bench(BASE + ["selector=eagle", "logger=wandb", "logger.group=sweep-a", "logger.tags=[mine]"])
    bench_main(cfg, tmp_path, **inject())
    kw = seen["init"]
    assert kw["mode"] == "offline" and kw["group"] == "sweep-a" and kw["job_type"] == "bench"
    assert kw["reinit"] == "finish_previous"
    assert kw["tags"] == ["pool:tiny", "selector:eagle", "workload:prompts", "backend:engine", "mine"]
    (name, kind, entries), *rest = seen["artifacts"]
    assert kind == "bench-results" and not rest
    assert set(entries) == {"results.json", "results.md", *FIGURES}
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_logger_bad_input_names_the_option(tmp_path):
    with pytest.raises(ValueError, match=r"unknown logger 'tensorboard'"):
        make_logger("tensorboard", tmp_path)
    pytest.importorskip("wandb")
    with pytest.raises(ValueError, match=r"logger\.mode='onlin' is unknown"):
        WandbLogger(tmp_path, mode="onlin")
    assert _artifact_name("results-2026/12:01 run") == "results-2026-12-01-run"


def test_no_manifest_copy_without_a_logger(tmp_path):
    from hedgespec.pools import DrafterEntry, TargetInfo, register_drafter

    manifest = tmp_path / "pool.yaml"
    entry = DrafterEntry("sql", "sql", "p/sql", "sha256:t", "v", 64, (0, 1, 2), "d", {"budget": "tiny"})
    register_drafter(manifest, "tiny", TargetInfo("tiny", "sha256:t", 64, 512, 4), entry)
    bench_main(compose_bench(BASE + ["selector=eagle", f"+pool.manifest={manifest}"]), tmp_path / "run", **inject())
    assert (tmp_path / "run" / "results.json").is_file() and not (tmp_path / "run" / "pool").exists()
