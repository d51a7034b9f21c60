"""Every shipped Hydra config composes, with every option of every group it uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONF = Path(__file__).resolve().parents[1] / "conf"
PRIMARY = sorted(p.stem for p in CONF.glob("*.yaml"))


def _groups_of(primary: str) -> list[str]:
    defaults = yaml.safe_load((CONF / f"{primary}.yaml").read_text()).get("defaults", [])
    groups = []
    for d in defaults:
        if isinstance(d, dict):
            key = next(iter(d))
            key = key.split("@")[0].removeprefix("override ").strip()
            if (CONF / key).is_dir():
                groups.append(key)
    return groups


def _cases():
    for primary in PRIMARY:
        yield primary, None
        for group in _groups_of(primary):
            for opt in sorted((CONF / group).glob("*.yaml")):
                yield primary, f"{group}={opt.stem}"


@pytest.mark.parametrize(("primary", "override"), list(_cases()))
def test_config_composes(primary, override):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=primary, overrides=[override] if override else [], return_hydra_config=True)
    assert cfg is not None


def test_every_shipped_yaml_starts_with_its_command():
    for path in CONF.rglob("*.yaml"):
        lines = path.read_text().lstrip().splitlines()
        header = [ln for ln in lines[: next((i for i, ln in enumerate(lines) if not ln.startswith("#")), len(lines))]]
        assert header and any("python " in ln for ln in header), f"{path} must begin with the command that runs it"


def test_there_are_configs():
    assert "simulate" in PRIMARY


@pytest.mark.parametrize(
    ("target", "budget"), [("llama8b", "paper"), ("qwen8b", "paper"), ("qwen32b", "paper"), ("smollm2", "embedded")]
)
def test_pool_names_train_to_serve(target, budget):
    """What `train/run.py target=T train=B` registers is the manifest `serve/launch.py pool=T` serves."""
    from hedgespec.pools import pool_path

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        train = compose(config_name="train", overrides=[f"target={target}", f"train={budget}"])
        serve = compose(config_name="serve", overrides=[f"pool={target}"])
    assert pool_path(Path(train.paths.pools), train.pool) == Path(serve.pool.manifest)
    assert serve.pool.target == train.target.name
