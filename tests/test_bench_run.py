"""scripts/bench.py's job on the tiny stack: every selector, the promised files, oracle truth, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _bench_helpers import DATA, REPO, compose_bench, inject

from hedgespec.bench.app import bench_main
from hedgespec.bench.metrics import validate_result
from hedgespec.bench.report import FIGURES
from hedgespec.bench.runners import run_bench

SELECTOR_RUNS = {  # overrides -> expected label
    "hedgespec": (["selector=hedgespec"], "hedgespec"),
    "hedgespec_eal": (["selector=hedgespec_eal"], "hedgespec_eal"),
    "hedgespec_prior": (["selector=hedgespec_prior"], "hedgespec_prior"),
    "hedgespec_running": (["selector=hedgespec_running"], "hedgespec_running"),
    "eagle": (["selector=eagle"], "eagle"),
    "fixed": (["selector=fixed", "fixed=sql"], "fixed:sql"),
    "ucbspec": (["selector=ucbspec"], "ucbspec"),
    "exp3spec": (["selector=exp3spec"], "exp3spec"),
    "metasd": (["selector=metasd"], "metasd"),
    "router": (["selector=router"], "router"),
    "oracle": (["selector=oracle"], "oracle"),
    "eagle_evaluating": (["selector=eagle", "selector.evaluate=true"], "eagle"),
}
#: baselines that read no other drafter's γ run at their deployed cost by default: no pool evaluation, no ETAP regret
DEPLOYED = {"eagle", "fixed", "ucbspec", "exp3spec", "metasd", "router", "oracle"}
BASE = ["workload=prompts", "chat_template=false"]


@pytest.mark.parametrize("name", list(SELECTOR_RUNS))
def test_every_selector_writes_the_promised_files(name, tmp_path):
    overrides, label = SELECTOR_RUNS[name]
    cfg = compose_bench(BASE + overrides)
    res = bench_main(cfg, tmp_path, command="python scripts/bench.py " + " ".join(overrides), **inject())
    for f in ("results.json", "results.md", *FIGURES):
        assert (tmp_path / f).is_file() and (tmp_path / f).stat().st_size > 0, f
    on_disk = json.loads((tmp_path / "results.json").read_text())
    validate_result(on_disk)
    assert on_disk["selector"] == label and on_disk["aggregate"]["n_requests"] == 3
    assert on_disk["pool"]["drafters"] == ["general", "code", "sql", "clinical"]
    assert on_disk["pool"]["domains"] == ["general", "python", "sql", "medqa"]
    assert "| **all** | 3 |" in (tmp_path / "results.md").read_text()
    for q in on_disk["requests"]:
        if name in DEPLOYED:
            assert q["regret"] is None and q["selection_overhead"] is not None
        else:
            assert q["regret"] is not None and q["regret"] >= -1e-9 and q["selection_overhead"] is not None
        assert len(q["chosen"]) == q["rounds"] and sum(q["accepted"]) + q["rounds"] == q["generated"]
    if name == "fixed":
        assert all(q["histogram"] == [0, 0, q["rounds"], 0] for q in on_disk["requests"])
    if name in ("eagle", "eagle_evaluating"):
        assert all(q["histogram"][0] == q["rounds"] for q in on_disk["requests"])
    if name == "router":
        assert on_disk["router"]["classes"] == ["medqa", "python", "sql"]
        assert on_disk["router"]["n_scored"] == 3 and 0.0 <= on_disk["router"]["accuracy"] <= 1.0
        assert all("predicted_domain" in q for q in on_disk["requests"])
    if name in ("hedgespec", "hedgespec_eal"):
        assert on_disk["requests"][0]["weights"][0] == pytest.approx([0.25] * 4, abs=1e-3)  # uniform start
    assert res["aggregate"] == on_disk["aggregate"]


def test_oracle_matches_independent_fixed_runs():
    """The oracle's per-request Fixed(i) MATs (one full-counterfactual pass) equal real Fixed(i) engine runs."""
    orc = run_bench(compose_bench(BASE + ["selector=oracle", "max_new_tokens=20"]), **inject())
    fixed = [
        run_bench(compose_bench(BASE + ["selector=fixed", f"selector.index={i}", "max_new_tokens=20"]), **inject())
        for i in range(4)
    ]
    for j, q in enumerate(orc["requests"]):
        real = [f["requests"][j]["mat"] for f in fixed]
        assert q["fixed_mats"] == pytest.approx(real)
        assert q["oracle_drafter"] == max(range(4), key=lambda i: real[i])
        assert q["mat"] == pytest.approx(max(real))  # the oracle run itself achieves the best fixed MAT
    assert orc["aggregate"]["mat_vs_oracle"] == pytest.approx(1.0)
    assert any(q["mat"] > 1.5 for q in orc["requests"])  # the fitted heads matter on their own prompts


def test_bad_inputs_raise_clear_errors():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="nope"):
        compose_bench(["selector=nope"])
    cfg = compose_bench(BASE)
    with pytest.raises(ValueError, match="unknown selector 'nope'"):
        run_bench({**cfg, "selector": {"name": "nope"}}, **inject())
    with pytest.raises(
        ValueError, match=r"fixed='chemistry': the pool has no drafter for it; drafters \['general', 'code'"
    ):
        run_bench(compose_bench(BASE + ["selector=fixed", "fixed=chemistry"]), **inject())
    with pytest.raises(ValueError, match="fixed='sql' needs selector=fixed"):
        run_bench(compose_bench(BASE + ["fixed=sql"]), **inject())
    with pytest.raises(ValueError, match="unknown backend"):
        run_bench({**cfg, "backend": {"name": "gpu"}}, **inject())
    with pytest.raises(ValueError, match="empty"):
        run_bench(compose_bench(["workload=mixed", "workload.n_per_domain=0"]), **inject())
    with pytest.raises(ValueError, match="selector=router is not available with backend=server"):
        run_bench(compose_bench(BASE + ["selector=router", "backend=server"]), tokenizer=inject()["tokenizer"])
    two = inject()
    two["drafters"] = [two["drafters"][0], two["drafters"][2]]  # general + sql: one expert only
    with pytest.raises(ValueError, match="at least two expert domains"):
        run_bench(compose_bench(BASE + ["selector=router"]), **two)
    with pytest.raises(
        ValueError, match=r"offline/code/train.jsonl, which does not exist.*prepare_data.py domain=code"
    ):
        rc = compose_bench(BASE + ["selector=router"])
        rc["pool"] = {
            **rc["pool"],
            "drafters": [{k: v for k, v in d.items() if k != "domain"} for d in rc["pool"]["drafters"]],
        }
        run_bench({**rc, "drafter_domains": {}}, **inject())


def _script(args, tmp_path, timeout=240):
    env = {**os.environ, "HEDGESPEC_DATA": str(DATA)}
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench.py"),
            *args,
            f"hydra.run.dir={tmp_path}",
            "progress=false",
            "backend.threads=1",
            "data.prepare_missing=false",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
    )


def test_script_bad_workload_exits_2_with_one_line(tmp_path):
    p = _script(["workload=mixed", "workload.n_per_domain=0"], tmp_path)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "bench: error: workload=mixed is empty" in p.stderr and "Traceback" not in p.stderr


def test_script_end_to_end(tmp_path):
    """The real entry point, fresh process, the conf/pool/tiny.yaml pool fitted from scratch (an empty pool cache):
    seconds. The recorded command line names no path of this machine (the cache is under the temp dir)."""
    cache = tmp_path / "pool_cache"
    p = _script(
        ["pool=tiny", "selector=hedgespec", "workload=prompts", "max_new_tokens=8", f"pool_cache={cache}"],
        tmp_path,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    validate_result(res)
    assert str(tmp_path) not in res["command"] and "pool_cache=$TMPDIR/" in res["command"], res["command"]
    assert all((tmp_path / f).is_file() for f in FIGURES)


def test_jsonl_logger_gets_the_same_metrics_and_figures(tmp_path):
    cfg = compose_bench(BASE + ["selector=hedgespec", "logger=jsonl"])
    res = bench_main(cfg, tmp_path, **inject())
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    final = next(x for x in lines if "bench/mat" in x)
    assert final["bench/mat"] == res["aggregate"]["mat"]
    assert sum("request/mat" in x for x in lines) == 3
    assert {x["image"] for x in lines if "image" in x} == {f.removesuffix(".png") for f in FIGURES}


@pytest.mark.slow
def test_wandb_logger_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb comes with the [track] extra (scripts/install.sh installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_bench(BASE + ["selector=eagle", "logger=wandb"])
    bench_main(cfg, tmp_path, **inject())
    assert list((tmp_path / "wandb").glob("offline-run-*"))
