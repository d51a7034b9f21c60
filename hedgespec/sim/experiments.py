"""Simulator experiments: regret curves (paper Fig 5a) and scaling in the pool size N (Fig 5b)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hedgespec.selectors import make_selector
from hedgespec.selectors.base import Selector
from hedgespec.sim.markov import make_requests, make_world
from hedgespec.sim.runner import MODES, RunMetrics, greedy_table, oracle_index, run_greedy, run_sampling
from hedgespec.types import RequestContext

EXPERIMENTS = ("regret", "scaling")
DEFAULT_SELECTORS: tuple[Mapping[str, Any], ...] = (
    {"name": "hedgespec"},
    {"name": "hedgespec_eal"},
    {"name": "ucbspec"},
    {"name": "exp3spec"},
    {"name": "metasd"},
    {"name": "fixed", "label": "eagle_generalist", "drafter": "general"},
    {"name": "oracle"},
)


@dataclass
class SimConfig:
    experiment: str = "scaling"
    mode: str = "sampling"
    k: int = 7
    n_drafters: int = 28  # regret experiment
    pool_sizes: Sequence[int] = (2, 4, 7, 14, 28, 56)  # scaling experiment
    n_requests: int = 42
    length: int = 256
    vocab: int = 48
    seed: int = 0
    selectors: Sequence[Mapping[str, Any]] = field(default_factory=lambda: list(DEFAULT_SELECTORS))

    def validate(self) -> None:
        if self.experiment not in EXPERIMENTS:
            raise ValueError(f"experiment must be one of {EXPERIMENTS}, got {self.experiment!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be an int >= 1, got {self.k!r}")
        sizes = [self.n_drafters] if self.experiment == "regret" else list(self.pool_sizes)
        if not sizes or any((not isinstance(n, int)) or n < 1 for n in sizes):
            raise ValueError(f"pool sizes must be ints >= 1 (an empty pool cannot draft), got {sizes}")
        if not self.selectors:
            raise ValueError("selectors must list at least one selector")


def _label(spec: Mapping[str, Any]) -> str:
    return str(spec.get("label", spec["name"]))


def _build(spec: Mapping[str, Any], names: list[str]) -> Selector:
    kwargs = {k: v for k, v in spec.items() if k not in ("name", "label", "drafter")}
    if spec["name"] == "fixed" and "drafter" in spec:
        if spec["drafter"] not in names:
            raise ValueError(f"fixed selector names drafter {spec['drafter']!r}, not in the pool {names}")
        kwargs["index"] = names.index(spec["drafter"])
    return make_selector(str(spec["name"]), **kwargs)


def run_pool(cfg: SimConfig, n: int, progress: Callable[[int], None] | None = None) -> dict[str, dict[str, Any]]:
    """Every configured selector on the same request stream with a pool of the first ``n`` drafters."""
    world = make_world(n, vocab=cfg.vocab, seed=cfg.seed)
    names = [d.name for d in world.drafters]
    reqs = make_requests(world, cfg.n_requests, cfg.length, seed=cfg.seed)
    out: dict[str, dict[str, Any]] = {}
    per: dict[str, list[RunMetrics]] = {_label(s): [] for s in cfg.selectors}
    oracle_mats: list[float] = []
    for r, req in enumerate(reqs):
        table = greedy_table(req) if cfg.mode == "greedy" else None
        best, best_mat = oracle_index(req, cfg.k, cfg.mode, table)
        oracle_mats.append(best_mat)
        ctx = RequestContext(request_id=r, domain=str(req.domain), best_drafter=best)
        for spec in cfg.selectors:
            sel = _build(spec, names)
            m = run_greedy(req, sel, cfg.k, table, ctx) if cfg.mode == "greedy" else run_sampling(req, sel, cfg.k, ctx)
            per[_label(spec)].append(m)
        if progress:
            progress(1)
    for label, runs in per.items():
        curve = np.mean([m.cumulative_regret for m in runs], axis=0)
        out[label] = {
            "mat": float(np.mean([m.mat for m in runs])),
            "avg_regret": float(np.mean([m.regret / m.tokens for m in runs])),
            "oracle_mat": float(np.mean(oracle_mats)),
            "eval_rate": float(np.mean([m.eval_rate for m in runs])),
            "regret_curve": [float(x) for x in curve],
        }
    return out


def run_experiment(cfg: SimConfig, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Returns ``{"experiment", "config", "results": {selector: {N: {mat, avg_regret, oracle_mat, ...}}}}``."""
    cfg.validate()
    sizes = [cfg.n_drafters] if cfg.experiment == "regret" else list(cfg.pool_sizes)
    results: dict[str, dict[str, Any]] = {_label(s): {} for s in cfg.selectors}
    for n in sizes:
        for label, metrics in run_pool(cfg, n, progress).items():
            if cfg.experiment == "scaling":
                metrics = {k: v for k, v in metrics.items() if k != "regret_curve"}
            results[label][str(n)] = metrics
    return {"experiment": cfg.experiment, "config": _cfg_dict(cfg), "results": results}


def _cfg_dict(cfg: SimConfig) -> dict[str, Any]:
    return {
        "experiment": cfg.experiment,
        "mode": cfg.mode,
        "k": cfg.k,
        "n_drafters": cfg.n_drafters,
        "pool_sizes": list(cfg.pool_sizes),
        "n_requests": cfg.n_requests,
        "length": cfg.length,
        "vocab": cfg.vocab,
        "seed": cfg.seed,
        "selectors": [dict(s) for s in cfg.selectors],
    }
