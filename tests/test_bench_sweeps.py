"""scripts/sweeps/*.yaml: valid wandb grid specs whose runs compose with Hydra (the same grid as a multirun)."""

from __future__ import annotations

import itertools
import re

import pytest
import yaml
from _bench_helpers import REPO

from hedgespec.bench.runners import BENCH_SELECTORS

SWEEPS = sorted((REPO / "scripts" / "sweeps").glob("*.yaml"))


def _grid(spec):
    keys, values = [], []
    for k, p in spec["parameters"].items():
        keys.append(k)
        values.append(p["values"] if "values" in p else [p["value"]])
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def test_there_are_sweeps_and_main_covers_every_selector():
    assert {p.stem for p in SWEEPS} >= {"main", "table1", "tiny"}
    main = yaml.safe_load((REPO / "scripts" / "sweeps" / "main.yaml").read_text())
    assert set(main["parameters"]["selector"]["values"]) == set(BENCH_SELECTORS) - {"fixed"}
    assert set(main["parameters"]["workload"]["values"]) == {"mixed", "ood", "shift"}
    assert len(main["parameters"]["seed"]["values"]) >= 2


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_spec_parses_and_every_run_composes(path):
    text = path.read_text()
    assert text.startswith("# wandb sweep scripts/sweeps/")
    spec = yaml.safe_load(text)
    assert spec["program"] == "scripts/bench.py" and spec["method"] == "grid"
    assert spec["command"] == ["${env}", "${interpreter}", "${program}", "${args_no_hyphens}"]
    multirun = re.search(r"python scripts/bench.py -m (.+)", text)
    assert multirun, "each sweep documents its Hydra multirun equivalent"
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    grid = _grid(spec)
    seen, unique = set(), []
    for run in grid:  # seeds only change one scalar: compose each other combination once (plus one seed override)
        key = tuple(sorted((k, str(v)) for k, v in run.items() if k != "seed"))
        if key not in seen:
            seen.add(key)
            unique.append(run)
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        for run in unique:
            args = [
                f"{k}={v}" for k, v in run.items()
            ]  # what wandb's ${args_no_hyphens} passes (Python literals: True)
            cfg = OmegaConf.to_container(compose("bench", overrides=args), resolve=True)
            _check(cfg, run)
    # the documented multirun sweeps the same values
    mr = dict(a.split("=", 1) for a in multirun.group(1).split())
    for k, p in spec["parameters"].items():
        if "values" in p:
            assert mr[k].split(",") == [str(v) for v in p["values"]], k


def _check(cfg, run):
    assert cfg["selector"]["name"] and cfg["workload"]["name"] == run["workload"]
    if "pool" in run:
        assert cfg["pool"]["name"] == run["pool"] and cfg["target"]["name"] == run["pool"]
    if "logger" in run:
        assert (
            cfg["progress"] is False
            and cfg["logger"]["name"] == run["logger"]
            and cfg["logger"]["mode"] == run.get("logger.mode", "offline")
        )
    if "domain" in run:
        assert cfg["workload"]["domain"] == run["domain"]
