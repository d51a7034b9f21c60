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
    from _requires import SPECFORGE, installed_or_skip

    installed_or_skip("specforge", SPECFORGE)
