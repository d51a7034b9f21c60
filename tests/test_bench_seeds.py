"""Seeds and intervals: the t-interval against scipy and a hand computation; one trace per seed replayed by
``report.py seeds`` equals the live run of that seed, and the summary's intervals are those of the per-seed MATs."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from _bench_helpers import compose_bench, inject

from hedgespec.bench.app import bench_main
from hedgespec.bench.intervals import fmt_ci, mean_ci, t975
from hedgespec.bench.report import results_markdown
from hedgespec.bench.seeds import seed_summary, seeds_markdown

# the tiny pool's fitted heads accept on these prompts (MAT > 1), so an exact replay is a real check; the seeds move
# the selectors' random draws (the seeded request draw itself is tested in test_bench_workloads.py)
WL = ["workload=prompts", "chat_template=false", "max_new_tokens=20"]


def test_t_quantiles_and_interval():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 29, 30, 31, 45, 200, 5000):
        assert t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-4), df
    xs = [1.2, 1.5, 1.4]
    m, h = mean_ci(xs)
    assert m == pytest.approx(statistics.mean(xs))
    assert h == pytest.approx(stats.t.ppf(0.975, 2) * statistics.stdev(xs) / math.sqrt(3), rel=1e-4)
    assert mean_ci([2.0]) == (2.0, None) and fmt_ci(2.0, None) == "2.00" and fmt_ci(1.0, 0.25) == "1.00 ± 0.25"
    for bad in ([], [1.0, float("nan")]):
        with pytest.raises(ValueError, match="mean_ci"):
            mean_ci(bad)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t975(0)


def test_seed_summary_replays_each_seed_and_matches_its_live_run(tmp_path):
    traces = []
    for s in (0, 1):
        t = tmp_path / f"mixed_s{s}.jsonl"
        cfg = compose_bench([*WL, "selector=eagle", f"seed={s}", f"trace={t}", "plain_baseline=false"])
        bench_main(
            cfg,
            tmp_path / f"trace{s}",
            command=f"python scripts/bench.py workload=prompts seed={s} trace={t}",
            **inject(),
        )
        traces.append(t)
    live = []
    for sel in ("hedgespec", "ucbspec", "router"):
        cfg = compose_bench([*WL, f"selector={sel}", "seed=1"])
        bench_main(cfg, tmp_path / sel, command=f"python scripts/bench.py selector={sel} seed=1", **inject())
        live.append(tmp_path / sel / "results.json")
    out = seed_summary(traces, live)
    assert out["seeds"] == [0, 1] and out["requests_per_seed"] == [3, 3]
    assert out["mat"]["oracle"]["mean"] > 1.05  # drafts are accepted: the replay below is not trivially 1.0
    for label, m in out["mat"].items():
        per = [s["mat"][label] for s in out["per_seed"]]
        assert m["mean"] == pytest.approx(statistics.mean(per))
        assert m["ci95"] == pytest.approx(12.7062 * statistics.stdev(per) / math.sqrt(2), abs=1e-9)
    runs = {r["selector"]: r for r in out["live"]}
    for sel in ("hedgespec", "ucbspec"):  # exact replay of seed 1: the live run's MAT to the last digit
        assert runs[sel]["replay_matches"] is True and runs[sel]["seed"] == 1
    assert runs["hedgespec"]["evaluates_pool"] and not runs["ucbspec"]["evaluates_pool"]  # baselines: deployed cost
    assert runs["router"]["replay_mat"] is None  # not a replay selector: tok/s and MAT from its live run only
    for r in runs.values():
        q = json.loads((tmp_path / r["selector"] / "results.json").read_text())["requests"]
        per_req = [(x["generated"] / x["wall_s"]) / (x["plain_generated"] / x["plain_wall_s"]) for x in q]
        assert r["speedup_per_request"]["mean"] == pytest.approx(statistics.mean(per_req))
    ratio = [s["mat"]["hedgespec"] / s["mat"]["eagle"] for s in out["per_seed"]]
    assert out["ratios"]["hedgespec/eagle"]["mean"] == pytest.approx(statistics.mean(ratio))
    text = seeds_markdown(out)
    assert "| hedgespec |" in text and "× plain" in text
    (tmp_path / "results" / "main256").mkdir(parents=True)
    # rendered as the mixed workload's summary (the goals are read on that one)
    (tmp_path / "results" / "main256" / "seeds_mixed.json").write_text(json.dumps({**out, "workload": "mixed"}))
    doc = results_markdown(tmp_path / "results")
    section = doc.split("## Main table over seeds")[1].split("\n## ")[0]
    assert text.split("\n")[2] in section  # the per-selector rows themselves
    hs_x = runs["hedgespec"]["speedup_vs_plain"]
    assert f"HedgeSpec tok/s ≥ 1.5 × plain decoding: measured {hs_x:.3f} (missed)" in section
    assert "seeds_shift.json` is not there yet" in section

    # The equal-budget section: the same traces replayed without one drafter each (here: without sql, with code as
    # the generalist; and without code), the live runs checked against the replayed pool.
    with pytest.raises(ValueError, match=r"a live run of the pool .*set exclude"):
        seed_summary(traces, live[:1], exclude=["sql"])
    full = seed_summary(traces, exclude=["sql"], generalist="code")
    quick = seed_summary(traces, exclude=["code"])
    assert full["drafters"] == ["general", "code", "clinical"] and full["generalist"] == "code"
    assert quick["excluded"] == ["code"] and quick["generalist"] == "general"
    fair = tmp_path / "results" / "fair_generalist"
    fair.mkdir()
    (fair / "seeds_full.json").write_text(json.dumps(full))
    doc = results_markdown(tmp_path / "results")
    section = doc.split("## Main table at equal training budget")[1].split("\n## ")[0]
    assert "| experts' total budget `code` |" in section and "quick budget" not in section  # one row so far
    (fair / "seeds_quick.json").write_text(json.dumps(quick))
    section = results_markdown(tmp_path / "results").split("## Main table at equal training budget")[1]
    section = section.split("\n## ")[0]
    for d, label in ((full, "experts' total budget `code`"), (quick, "quick budget `general`")):
        per = [s["mat"]["hedgespec"] / s["mat"]["eagle"] for s in d["per_seed"]]
        row = next(x for x in section.split("\n") if x.startswith(f"| {label} |"))
        assert fmt_ci(*mean_ci(per), 3) in row
        assert fmt_ci(d["mat"]["oracle"]["mean"], d["mat"]["oracle"]["ci95"], 3) in row
    eagle = [f["mat"]["eagle"] / q["mat"]["eagle"] for f, q in zip(full["per_seed"], quick["per_seed"])]
    assert f"reaches {fmt_ci(*mean_ci(eagle), 3)} × the quick one's MAT" in section


def test_seed_summary_refuses_two_traces_of_one_seed(tmp_path):
    t = tmp_path / "t.jsonl"
    cfg = compose_bench([*WL, "selector=eagle", "seed=0", f"trace={t}", "plain_baseline=false"])
    bench_main(cfg, tmp_path / "run", command=f"python scripts/bench.py workload=prompts seed=0 trace={t}", **inject())
    with pytest.raises(ValueError, match="same seed"):
        seed_summary([t, t])
    with pytest.raises(ValueError, match="meta.json"):
        seed_summary([tmp_path / "nowhere.jsonl"])


def test_trace_meta_records_each_runs_seed_and_workload(tmp_path):
    """The seed comes from the run itself, not from what its command line happened to spell out; a trace
    written before the meta had run records is still read from its commands; two seeds in one trace are refused."""
    t = tmp_path / "t.jsonl"
    cfg = compose_bench([*WL, "selector=eagle", "seed=3", f"trace={t}", "plain_baseline=false"])
    bench_main(cfg, tmp_path / "a", command="python scripts/bench.py (seed from a sweep config)", **inject())
    meta_path = tmp_path / "t.jsonl.meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["runs"] == [{"seed": 3, "workload": "prompts"}]  # a prompts workload has no seeded draw to record
    assert seed_summary([t])["seeds"] == [3]
    legacy = {"pool": meta["pool"], "commands": ["python scripts/bench.py seed=3 workload=prompts"]}
    meta_path.write_text(json.dumps(legacy))
    assert seed_summary([t])["seeds"] == [3]
    meta_path.write_text(json.dumps(meta))
    cfg = compose_bench([*WL, "selector=eagle", "seed=4", f"trace={t}", "plain_baseline=false"])
    bench_main(cfg, tmp_path / "b", command="python scripts/bench.py", **inject())
    with pytest.raises(ValueError, match=r"different seed= values \['3', '4'\]"):
        seed_summary([t])
