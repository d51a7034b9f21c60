"""Shared helpers for tests/test_training_*.py: Hydra composition of conf/train.yaml into a temp tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
FIXTURES = REPO / "tests" / "fixtures" / "training"
CONVERSATIONS = FIXTURES / "conversations.jsonl"


def tmp_overrides(tmp: Path) -> list[str]:
    return [
        f"paths.pools={tmp}/pools",
        f"paths.outputs={tmp}/outputs",
        f"paths.cache={tmp}/cache",
        f"data_dir={tmp}/data",
        "progress=false",
    ]


def compose_train(tmp: Path, *overrides: str) -> Any:
    """Compose conf/train.yaml like `python train/run.py <overrides>` would, with every path under ``tmp``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", overrides=[*tmp_overrides(tmp), *overrides])


def tiny_overrides(*extra: str) -> list[str]:
    return ["target=tiny", "train=tiny", "domain=sql", f"data.path={CONVERSATIONS}", *extra]


def specforge_or_skip() -> None:
    """Skip without SpecForge locally; under CI (``CI`` set) its absence is a failure, never a silent skip."""
    import importlib
    import os

    import pytest

    if os.environ.get("CI"):
        importlib.import_module("specforge")  # ImportError -> the test module errors: install 30-train.sh
    else:
        pytest.importorskip("specforge", reason="SpecForge is installed by scripts/install.d/30-train.sh")
