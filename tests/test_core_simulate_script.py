"""scripts/simulate.py through the Hydra compose API: results.json and the figure land in the run dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hedgespec.sim.app import run_simulation

CONF = Path(__file__).resolve().parents[1] / "conf"


def _cfg(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="simulate", overrides=overrides), resolve=True)


@pytest.mark.parametrize("experiment", ["scaling", "regret"])
def test_simulate_writes_results_and_plot(tmp_path, experiment):
    over = [
        f"experiment={experiment}",
        "n_requests=2",
        "length=48",
        "progress=false",
        "logger=jsonl",
        "experiment.pool_sizes=[2,4]",
        "experiment.n_drafters=4",
    ]
    out = run_simulation(_cfg(over), tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data == json.loads(json.dumps(out))
    for label, by_n in data["results"].items():
        for m in by_n.values():
            assert {"mat", "avg_regret", "oracle_mat"} <= set(m)
            assert 1.0 <= m["mat"] <= 8.0
    assert (tmp_path / ("scaling.png" if experiment == "scaling" else "regret.png")).stat().st_size > 1000
    assert (tmp_path / "metrics.jsonl").exists()


def test_simulate_with_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb comes with the [track] extra (scripts/install.sh installs it)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = run_simulation(
        _cfg(["n_requests=1", "length=16", "progress=false", "logger=wandb", "experiment.pool_sizes=[2]"]), tmp_path
    )
    assert out["results"]
    assert any(tmp_path.rglob("*.wandb"))


def test_unknown_key_is_rejected(tmp_path):
    cfg = _cfg(["n_requests=1"])
    cfg["n_request"] = 3
    with pytest.raises(ValueError, match="n_request"):
        run_simulation(cfg, tmp_path)
