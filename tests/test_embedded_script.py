"""scripts/embedded.py: the fast and full embedded runs are the documented entry points, and every run composes."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import embedded  # noqa: E402


def _cfg(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return OmegaConf.to_container(compose("embedded", overrides=list(overrides)), resolve=True)


def _expand(args: list[str]) -> list[list[str]]:
    """A Hydra multirun's argument list -> one override list per run (comma values are swept)."""
    keys = [a.split("=", 1) for a in args]
    axes = [
        [f"{k}={v}" for v in (val.split(",") if "," in val and not val.startswith("[") else [val])] for k, val in keys
    ]
    return [list(c) for c in itertools.product(*axes)]


def _compose(name: str, overrides: list[str]) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return OmegaConf.to_container(compose(name, overrides=overrides), resolve=True)


@pytest.mark.parametrize("full", [False, True], ids=["fast", "full"])
def test_every_run_of_both_modes_composes(full: bool) -> None:
    cfg = _cfg(f"full={str(full).lower()}")
    steps = embedded.commands(cfg)
    mode = cfg["full_settings" if full else "fast_settings"]
    trains = [c for c in steps if c[1] == "train/run.py"]
    lowranks = [c for c in steps if c[1] == "scripts/lowrank_pool.py"]
    bench, report = steps[-2:]
    assert steps == [*trains, *lowranks, bench, report]
    assert all(t[2] == "-m" for t in trains) and bench[1:3] == ["scripts/bench.py", "-m"]
    runs = [ov for t in trains for ov in _expand(t[3:])]
    assert len(runs) == 8
    for ov in runs:
        t = _compose("train", ov)
        assert t["train"]["name"] == "embedded" and t["pool"] == mode["pool"] and t["target"]["name"] == "smollm2"
        if not full:
            assert t["train"]["regenerate"]["max_examples"] == t["train"]["features"]["max_samples"] == 32
            assert t["train"]["specforge"]["training"]["max_steps"] == 100
            fine_tune = t["domain"] != "general"  # the experts start from the generalist, trained first
            assert t["train"]["draft"]["init"] == ("general" if fine_tune else "target_head")
            assert t["train"]["draft"]["vocab"] == ("init" if fine_tune else "own")
            # regeneration and capture on packed weights, in float32: the answers the aten kernels give
            assert t["target"]["linear_kernels"] == "auto" and t["target"]["compute_dtype"] is None
            assert t["target"]["dtype"] == "float32"
        else:
            assert t["target"]["linear_kernels"] == "aten" and t["target"]["compute_dtype"] is None
    assert {_compose("train", ov)["domain"] for ov in runs} == set(cfg["domains"])
    if full:
        assert len(trains) == 1 and not lowranks
        benched = mode["pool"]
    else:
        assert [_expand(t[3:])[0][0] for t in trains][0] == "domain=general" and len(lowranks) == 1
        lr = _compose("lowrank_pool", lowranks[0][2:])
        assert lr["manifest"] == f"pools/{mode['pool']}.yaml" and lr["base"] == "general" and lr["reads"] == 1.3
        benched = lr["out"]
        assert benched != mode["pool"]
    bruns = [ov for ov in _expand([a for a in bench[3:] if not a.startswith("hydra.")])]
    assert len(bruns) == len(mode["selectors"]) * len(mode["workloads"]) * len(mode["seeds"])
    for ov in bruns:
        b = _compose("bench", ov)
        assert b["pool"]["manifest"] == f"pools/{benched}.yaml" and b["pool"]["name"] == benched
        assert b["target"]["name"] == "smollm2"
        if not full:
            assert b["target"]["linear_kernels"] == "auto" and b["pool"]["compute_dtype"] == "auto"
            assert b["target"]["compute_dtype"] is None  # verification in float32: the outputs stay the target's
            # K = 2; every core, plain decoding's best setting here
            assert b["decoding"]["num_steps"] == 2 and b["backend"]["threads"] is None
    sweep_dir = next(a for a in bench if a.startswith("hydra.sweep.dir=")).split("=", 1)[1]
    assert report[1:] == ["scripts/report.py", "collect", sweep_dir]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["fast_settings.finetune_from=sql", "domains=[python,general]"], "finetune_from='sql' is not one of domains"),
        (["domains=[general]"], "has no other drafter"),
        (["fast_settings.finetune_from=null"], "lowrank needs finetune_from"),
    ],
)
def test_a_fast_mode_that_cannot_be_built_is_refused_by_name(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        embedded.commands(_cfg(*overrides))


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "scripts/embedded.py", "dry_run=true", f"hydra.run.dir={tmp_path}/h"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("$ ")]
    assert [ln.split()[2] for ln in lines] == [
        "train/run.py",  # the generalist
        "train/run.py",  # the experts, fine-tuned from it
        "scripts/lowrank_pool.py",
        "scripts/bench.py",
        "scripts/report.py",
    ]
    assert "[embedded] exit" not in out.stdout, "dry_run executes nothing"


def _list(key: str, items: list[str]) -> str:
    """A Hydra list override whose items contain '=' (quoted)."""
    return f"{key}=[" + ",".join(f"'{x}'" for x in items) + "]"


@pytest.mark.slow
def test_fast_mode_end_to_end_on_the_tiny_target(tmp_path: Path) -> None:
    """The driver really chains train -> bench -> report (tiny target and budget instead of SmolLM2, ~2 min)."""
    from _train_helpers import specforge_or_skip

    specforge_or_skip()  # a failure under CI, a skip only where the [train] extra is absent
    t = tmp_path
    args = [
        f"hydra.run.dir={t}/h",
        "train_target=tiny",
        "train_budget=tiny",
        "bench_pool=tiny",
        "domains=[chemistry,general]",
        f"pools_dir={t}/pools",
        f"out_dir={t}/multirun",
        "progress=false",
        _list("extra_train", [f"paths.outputs={t}/out", f"paths.cache={t}/cache", f"data_dir={t}/data"]),
        "fast_settings.train_overrides=[]",
        _list(
            "extra_bench",
            [
                f"data.dir={t}/data",
                f"pool_cache={t}/pc",
                "workload.n_per_domain=1",
                "max_new_tokens=8",
                "target.arch.num_hidden_layers=4",
            ],
        ),
    ]  # train=tiny trains against a 4-layer tiny target
    out = subprocess.run(
        [sys.executable, "scripts/embedded.py", *args], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    from hedgespec.pools import load_pool

    assert load_pool(t / "pools" / "smollm2-quick-ft.yaml").names == ["general", "chemistry"]  # generalist first
    lowrank = yaml.safe_load((t / "pools" / "smollm2-quick-lr.yaml").read_text())
    expert = next(d for d in lowrank["drafters"] if d["name"] == "chemistry")
    assert expert["lowrank"]["base"] == "general"  # the expert as the generalist plus low-rank deltas
    runs = sorted((t / "multirun").glob("smollm2-quick-lr-*/*/results.json"))
    assert len(runs) == 3, runs  # three selectors, each measuring plain decoding side by side
    for run in runs:  # on the low-rank pool, with the fast mode's kernels
        res = json.loads(run.read_text())
        assert res["config"]["pool"]["name"] == "smollm2-quick-lr"
        assert res["config"]["target"]["linear_kernels"] == "auto"
    table = next((t / "multirun").glob("smollm2-quick-lr-*/report/table.md")).read_text()
    assert all(s in table for s in ("hedgespec", "eagle", "ucbspec")) and table.strip() in out.stdout
    assert "× plain" in table  # every speculative run is measured side by side with plain decoding
