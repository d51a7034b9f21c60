"""Shared tiny stack for tests/test_bench_*.py: the registry's tiny target, a 4-drafter pool built once per session
(two random heads, two heads briefly fitted on one prompt each, so MATs differ), Hydra compose of conf/bench.yaml."""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "bench"


def _build_data() -> Path:
    """The ten recipes at 8 train / 3 eval prompts, built offline once per machine (~7 s).

    Built, not committed: several offline sources (GSM-Symbolic CC-BY-NC-ND, HPO) forbid redistributing
    derived data."""
    from data_recipes.build import DOMAINS, prepare

    root = Path(tempfile.gettempdir()) / f"hedgespec-bench-testdata-{os.getuid()}"
    if not all((root / "offline" / d / "manifest.json").exists() for d in DOMAINS):
        prepare("all", n_train=8, n_eval=3, data_dir=root, log=None)
    return root


DATA = _build_data()
FIT_PROMPTS = {"code": "def add(a, b):", "sql": "SELECT name FROM users WHERE"}


def compose_bench(overrides: list[str] | None = None) -> dict[str, Any]:
    """conf/bench.yaml composed with ``overrides`` (+ test defaults: fixture data, 1 thread, no progress bar)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    base = [f"data.dir={DATA}", "data.prepare_missing=false", "progress=false", "pool_cache=null", "max_new_tokens=12"]
    if "backend=server" not in (overrides or []):
        base.append("backend.threads=1")
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("bench", overrides=base + list(overrides or []))
    return OmegaConf.to_container(cfg, resolve=True)


@lru_cache(maxsize=1)
def tiny_stack() -> tuple[Any, Any, list[Any]]:
    """(model, tokenizer, drafters) named like conf/pool/tiny.yaml: general, code, sql, clinical."""
    import torch

    from hedgespec.engine.fit import fit_drafter
    from hedgespec.fixtures import random_drafter
    from hedgespec.models import load_target

    torch.set_num_threads(1)
    model, tok = load_target("tiny")
    drafters = []
    for seed, name in enumerate(["general", "code", "sql", "clinical"]):
        d = random_drafter(model, seed=seed, name=name)
        if name in FIT_PROMPTS:
            ids = torch.tensor(tok(FIT_PROMPTS[name])["input_ids"])[None]
            seq = model.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)[0]
            d = fit_drafter(d, model, [seq], steps=60, seed=seed)
            d.name = name
        drafters.append(d)
    return model, tok, drafters


def inject() -> dict[str, Any]:
    model, tok, drafters = tiny_stack()
    return {"model": model, "tokenizer": tok, "drafters": drafters}
