"""docs/RESULTS.md's label-efficient section: the simulator's ε sweep and the engine's ε runs, rendered from real
simulator output (a small run here) and the committed engine summary; the ε of each engine run as Hydra composes it."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hedgespec.bench.results_doc import (
    LE_ENGINE,
    LE_ENGINE_MORE,
    LE_SIM,
    engine_policy,
    regret_exponent,
    results_markdown,
)
from hedgespec.selectors import make_selector
from hedgespec.sim.app import run_simulation

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
SELECTORS = [
    {"name": "hedgespec"},
    {"name": "hedgespec", "label": "le_half", "epsilon": 0.5},
    {"name": "hedgespec", "label": "le_adaptive", "evaluation": "adaptive"},
    {"name": "hedgespec", "label": "le_late", "evaluation": "adaptive", "late": True},
    {"name": "oracle"},
]


def _compose(config: str, overrides: list[str]) -> dict:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return OmegaConf.to_container(compose(config_name=config, overrides=overrides), resolve=True)
    finally:
        GlobalHydra.instance().clear()


def test_regret_exponent_recovers_a_power_law():
    for s in (0.5, 0.87, 1.0, 1.3):
        pairs = [(1.0, 1.0)] + [(e, e**-s) for e in (0.5, 0.25, 0.1)]
        assert regret_exponent(pairs) == pytest.approx(s, rel=1e-12)
    # noisy points: the through-origin least squares of (ln 1/ε, ln ratio), computed here by hand for two points
    pairs = [(0.5, 2.2), (0.1, 7.0)]
    x, y = [math.log(2), math.log(10)], [math.log(2.2), math.log(7.0)]
    assert regret_exponent(pairs) == pytest.approx((x[0] * y[0] + x[1] * y[1]) / (x[0] ** 2 + x[1] ** 2))
    assert regret_exponent([(1.0, 1.0)]) is None and regret_exponent([]) is None


def _composed_policy(command: str) -> tuple[str, float | None]:
    """The run's selector as scripts/bench.py composes it (Hydra, its overrides), built by make_selector."""
    over = [a for a in shlex.split(command)[2:] if a.startswith(("selector", "~selector"))]
    sel = dict(_compose("bench", over)["selector"])
    name, sel = sel.pop("name"), {k: v for k, v in sel.items() if k != "label"}
    obj = make_selector(name, **sel)
    if obj.policy == "adaptive":
        return ("adaptive, late γ" if obj.late_feedback else "adaptive"), None
    return f"ε={obj.epsilon:g}", obj.epsilon


def test_engine_policy_matches_the_composed_selector_of_every_committed_run():
    runs = json.loads((REPO / "docs" / "results" / LE_ENGINE).read_text())["runs"]
    assert len(runs) >= 2
    seen = set()
    for r in runs:
        got = engine_policy(r["command"])
        assert got == _composed_policy(r["command"]), r["command"]
        seen.add(got[0])
    assert {"ε=1", "adaptive", "adaptive, late γ"} <= seen
    assert engine_policy("python scripts/bench.py selector=nosuch_selector") == ("–", None)
    for command in (
        "python scripts/bench.py selector=hedgespec_late",
        "python scripts/bench.py selector=hedgespec_le "
        "selector.evaluation=adaptive selector.late=true selector.epsilon=1.0",
    ):
        assert engine_policy(command) == _composed_policy(command) == ("adaptive, late γ", None), command


def _sim_results(tmp: Path) -> dict[str, dict]:
    """A small real ε sweep for each acceptance rule, laid out as the committed one."""
    out = {}
    for mode, rel in LE_SIM:
        over = ["experiment=regret", f"mode={mode}", "n_requests=2", "length=48", "progress=false"]
        over += ["experiment.n_drafters=4", "experiment.pool_sizes=[4]"]
        cfg = _compose("simulate", over)
        cfg["selectors"] = SELECTORS
        run_dir = (tmp / rel).parent
        out[mode] = run_simulation(cfg, run_dir)
    return out


def _row(text: str, *cells: str) -> list[str]:
    for line in text.split("\n"):
        parts = [c.strip() for c in line.strip("|").split("|")]
        if parts[: len(cells)] == list(cells):
            return parts
    raise AssertionError(f"no row {cells} in:\n{text}")


def test_section_renders_a_real_simulator_sweep_and_the_engine_summary(tmp_path):
    sims = _sim_results(tmp_path)
    (tmp_path / LE_ENGINE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "docs" / "results" / LE_ENGINE, tmp_path / LE_ENGINE)
    text = results_markdown(tmp_path)
    sec = text[text.index("## Label-efficient") : text.index("## Table 4")]
    for mode, out in sims.items():
        res = {k: v["4"] for k, v in out["results"].items()}
        full, half = res["hedgespec"], res["le_half"]
        row = _row(sec, mode, "le_half")
        assert row[2] == "ε=0.5" and float(row[3]) == pytest.approx(half["eval_rate"], abs=5e-4)
        assert 0.0 < half["eval_rate"] < 1.0  # the coin skipped some evaluations and made some
        assert float(row[4]) == pytest.approx(half["mat"], abs=5e-3)
        if full["avg_regret"] > 0:
            assert float(row[7]) == pytest.approx(half["avg_regret"] / full["avg_regret"], abs=5e-3)
        assert _row(sec, mode, "hedgespec")[2:4] == ["ε=1", "1.000"]
        assert _row(sec, mode, "le_adaptive")[2] == "adaptive" and _row(sec, mode, "oracle")[2:4] == ["–", "–"]
        assert _row(sec, mode, "le_late")[2] == "adaptive, late γ"
    assert "N=4, K=7, 2 requests × 48 tokens, argmax choice, seed 0" in sec
    row = _row(sec, "hedgespec", "ε=1")
    assert row[4] == "0.0%"  # MAT vs ε=1
    data = json.loads((REPO / "docs" / "results" / LE_ENGINE).read_text())
    share = next(r for r in data["runs"] if r["selector"] == "hedgespec")["aggregate"].get("evaluated_share")
    assert row[2] == ("–" if share is None else f"{share:.3f}")
    assert "Goal for partial evaluation" in sec


def _summary_with(tmp: Path, overhead: float, mat_ratio: float) -> None:
    data = json.loads((REPO / "docs" / "results" / LE_ENGINE).read_text())
    full = next(r for r in data["runs"] if engine_policy(r["command"])[0] == "ε=1")["aggregate"]
    for r in data["runs"]:
        if engine_policy(r["command"])[0] != "ε=1":
            r["aggregate"].update(selection_overhead=overhead, mat=full["mat"] * mat_ratio)
    (tmp / LE_ENGINE).parent.mkdir(parents=True, exist_ok=True)
    (tmp / LE_ENGINE).write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("overhead", "mat_ratio", "word"), [(0.04, 0.995, "met"), (0.06, 0.995, "missed"), (0.04, 0.98, "missed")]
)
def test_goal_needs_both_the_overhead_and_the_mat(tmp_path, overhead, mat_ratio, word):
    _summary_with(tmp_path, overhead, mat_ratio)
    text = results_markdown(tmp_path)
    goal = re.search(r"Goal for partial evaluation \(selection overhead ≤ 5% .*?\): (\w+);", text)
    assert goal and goal.group(1) == word
    assert f"MAT at most {100 * (1 - mat_ratio):.1f}% below full evaluation" in text


def test_missing_files_say_how_to_produce_them(tmp_path):
    text = results_markdown(tmp_path)
    sec = text[text.index("## Label-efficient") : text.index("## Table 4")]
    assert "docs/results/label_efficient/sim/greedy/results.json" in sec and "python scripts/simulate.py -m" in sec
    assert f"`docs/results/{LE_ENGINE}` missing" in sec


def test_engine_policy_of_a_selector_without_an_evaluation_rule():
    for command in ("python scripts/bench.py selector=eagle", "python scripts/bench.py selector=ucbspec"):
        assert engine_policy(command) == ("–", None), command


def _lowrank_summary(tmp: Path, eagle_overhead: float) -> dict:
    """The committed low-rank pool summary (with its eagle run) under ``tmp``, the eagle run's overhead replaced."""
    data = json.loads((REPO / "docs" / "results" / LE_ENGINE_MORE[0]).read_text())
    eagle = next(r for r in data["runs"] if r["selector"] == "eagle")["aggregate"]
    eagle["selection_overhead"] = eagle_overhead
    (tmp / LE_ENGINE_MORE[0]).parent.mkdir(parents=True, exist_ok=True)
    (tmp / LE_ENGINE_MORE[0]).write_text(json.dumps(data))
    return data


@pytest.mark.parametrize("eagle_overhead", [0.064, 0.03])
def test_further_summary_renders_with_the_generalists_floor(tmp_path, eagle_overhead):
    data = _lowrank_summary(tmp_path, eagle_overhead)
    text = results_markdown(tmp_path)
    sec = text[text.index("## Label-efficient") : text.index("## Low-rank")]
    assert f"`docs/results/{LE_ENGINE}` missing" in sec  # the primary summary is absent here
    assert f"`docs/results/{LE_ENGINE_MORE[0]}`" in sec
    full = next(r for r in data["runs"] if r["selector"] == "hedgespec")["aggregate"]
    assert _row(sec, "eagle")[1:3] == ["–", "–"]  # no evaluation rule, no evaluated share
    assert float(_row(sec, "hedgespec_late")[3]) == pytest.approx(
        next(r for r in data["runs"] if r["selector"] == "hedgespec_late")["aggregate"]["mat"], abs=5e-4
    )
    floor = re.search(r"The generalist alone .*? shows ([\d.]+)% in the same column.*?against ([\d.]+)%", sec)
    assert floor and float(floor.group(1)) == pytest.approx(100 * eagle_overhead, abs=0.05)
    assert float(floor.group(2)) == pytest.approx(100 * full["selection_overhead"], abs=0.05)
    assert ("the goal is out of reach on this pool" in sec) == (eagle_overhead > 0.05)
