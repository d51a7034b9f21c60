"""Cluster dispatch of training multiruns: Hydra's submitit launcher (conf/hydra/launcher/slurm.yaml).

The SLURM launcher's settings are read from the composed Hydra config; the dispatch itself runs through the
same plugin's local executor (real submitit jobs on this machine), and a SLURM launcher where SLURM is absent is
refused before anything is submitted or written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _requires import SUBMITIT, installed_or_skip
from _train_helpers import CONF

from hedgespec.training.launcher import SLURM_LAUNCHER, check_launcher

ROOT = Path(__file__).resolve().parents[1]
PAPER = ["target=llama8b", "train=paper", "train.gpus=8"]


def submitit_or_skip() -> None:
    installed_or_skip("hydra_plugins.hydra_submitit_launcher", SUBMITIT)


def run_train(tmp: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if path is not None:
        env["PATH"] = path
    argv = [sys.executable, str(ROOT / "train" / "run.py"), *args]
    argv += [f"paths.outputs={tmp}/out", f"paths.pools={tmp}/pools", f"paths.cache={tmp}/cache", "progress=false"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("nodes", [None, 2])
def test_slurm_launcher_settings_follow_the_budget(nodes: int | None) -> None:
    submitit_or_skip()
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    extra = [f"train.nodes={nodes}"] if nodes else []
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["hydra/launcher=slurm", "domain=sql", *PAPER, "hydra.launcher.partition=gpu", *extra],
            return_hydra_config=True,
        )
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launcher["_target_"] == SLURM_LAUNCHER
    assert (launcher["tasks_per_node"], launcher["partition"]) == (1, "gpu")  # one hedgespec process per node
    # GPUs per node and nodes per drafter: each one setting, defined once in the budget
    assert OmegaConf.select(cfg, "hydra.launcher.gpus_per_node") == cfg.train.gpus == 8
    assert OmegaConf.select(cfg, "hydra.launcher.nodes") == cfg.train.nodes == (nodes or 1)


def test_check_launcher() -> None:
    slurm = {"_target_": SLURM_LAUNCHER}
    with pytest.raises(RuntimeError, match=r"SLURM's sbatch, which is not on PATH"):
        check_launcher(slurm, which=lambda _name: None)
    check_launcher(slurm, which=lambda name: f"/usr/bin/{name}")
    check_launcher({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, which=lambda _n: None)


def test_slurm_without_slurm_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    submitit_or_skip()
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "sbatch").exists())
    proc = run_train(tmp_path, "-m", "hydra/launcher=slurm", "domain=sql,math", *PAPER, path=path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "error: hydra/launcher=slurm submits each run with SLURM's sbatch" in proc.stderr
    assert not any(tmp_path.iterdir()), "nothing may be written"


def test_domains_dispatched_as_submitit_jobs(tmp_path: Path) -> None:
    """Two domains as two submitit jobs (the local executor: the same plugin and job function as on SLURM); each
    job's log holds the plan of its domain, with the paper target's real capture layers and 8 trainer processes."""
    submitit_or_skip()
    proc = run_train(tmp_path, "-m", "hydra/launcher=submitit_local", "domain=sql,math", *PAPER, "train.plan_only=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = sorted((tmp_path / "out" / "hydra").glob("multirun-*/.submitit/*/*_log.out"))
    assert len(logs) == 2, proc.stderr[-3000:]
    plans = {}
    for log in logs:
        text = log.read_text()
        res, _end = json.JSONDecoder().raw_decode(text, text.index("{"))  # submitit logs after the printed plan
        plans[res["drafter"]] = res
    assert sorted(plans) == ["math", "sql"]
    for res in plans.values():
        assert res["plan"]["aux_layer_ids"] == [1, 15, 28] and res["pool"] == "llama8b"
        assert res["specforge"]["deployment"]["trainer"]["nproc_per_node"] == 8


def test_missing_plugin_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import runpy

    check = runpy.run_path(str(ROOT / "train" / "run.py"), run_name="train_run")["launcher_plugin_error"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if "submitit" in name else real(name, *a))
    msg = check(["domain=sql", "hydra/launcher=slurm"])
    assert msg is not None and "bash scripts/install.d/30-train.sh" in msg and msg.startswith("hydra/launcher=slurm")
    assert check(["domain=sql"]) is None and check(["hydra/launcher=basic"]) is None
