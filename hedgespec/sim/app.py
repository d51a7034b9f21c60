"""The simulator job behind ``scripts/simulate.py``: config dict in, results.json + PNGs out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hedgespec.io import write_json_atomic
from hedgespec.sim.experiments import SimConfig, run_experiment
from hedgespec.tracking import make_logger


def sim_config_from_dict(cfg: dict[str, Any]) -> SimConfig:
    exp = cfg.get("experiment", {})
    exp_name = exp.get("name", "scaling") if isinstance(exp, dict) else str(exp)
    known = {"experiment", "logger", "progress", "mode", "k", "n_requests", "length", "vocab", "seed", "selectors"}
    unknown = set(cfg) - known - {"hydra"}
    if unknown:
        raise ValueError(f"unknown simulate config keys {sorted(unknown)}; known: {sorted(known)}")
    return SimConfig(
        experiment=exp_name,
        mode=cfg.get("mode", "sampling"),
        k=int(cfg.get("k", 7)),
        n_drafters=int(exp.get("n_drafters", 28)) if isinstance(exp, dict) else 28,
        pool_sizes=[int(n) for n in exp.get("pool_sizes", [2, 4, 7, 14, 28, 56])] if isinstance(exp, dict) else [],
        n_requests=int(cfg.get("n_requests", 42)),
        length=int(cfg.get("length", 256)),
        vocab=int(cfg.get("vocab", 48)),
        seed=int(cfg.get("seed", 0)),
        selectors=[dict(s) for s in cfg.get("selectors", [])],
    )


def growth_summary(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Average-regret growth between the smallest-but-one and largest pools, per selector (Fig 5b claim)."""
    out: dict[str, dict[str, float]] = {}
    for label, by_n in results.items():
        ns = sorted(by_n, key=int)
        if len(ns) < 2 or label == "oracle":
            continue
        lo = "7" if "7" in by_n and ns[-1] != "7" else ns[0]
        hi = ns[-1]
        a, b = by_n[lo]["avg_regret"], by_n[hi]["avg_regret"]
        out[label] = {
            "from_n": int(lo),
            "to_n": int(hi),
            "regret_from": a,
            "regret_to": b,
            "growth": b / a if a > 0 else float("inf"),
        }
    return out


def run_simulation(cfg: dict[str, Any], run_dir: str | Path) -> dict[str, Any]:
    """Run the configured experiment, write ``results.json`` and PNG plots into ``run_dir``."""
    from hedgespec.plots import plot_regret_curves, plot_scaling  # lazy: hedgespec.plots imports matplotlib

    run_dir = Path(run_dir)
    sim_cfg = sim_config_from_dict(cfg)
    sim_cfg.validate()
    logger_cfg = dict(cfg.get("logger") or {"name": "none"})
    logger = make_logger(logger_cfg.pop("name", "none"), run_dir, cfg, **logger_cfg)
    sizes = [sim_cfg.n_drafters] if sim_cfg.experiment == "regret" else list(sim_cfg.pool_sizes)
    bar = tqdm(
        total=len(sizes) * sim_cfg.n_requests,
        desc=f"simulate {sim_cfg.experiment}",
        disable=not cfg.get("progress", True),
        unit="req",
    )
    out = run_experiment(sim_cfg, progress=bar.update)
    bar.close()
    if sim_cfg.experiment == "scaling":
        out["growth"] = growth_summary(out["results"])
    write_json_atomic(out, run_dir / "results.json")
    if sim_cfg.experiment == "regret":
        png = plot_regret_curves(
            out["results"],
            run_dir / "regret.png",
            f"Cumulative regret, N={sim_cfg.n_drafters}, K={sim_cfg.k}, {sim_cfg.mode}",
        )
    else:
        png = plot_scaling(out["results"], run_dir / "scaling.png", f"Scaling with N (K={sim_cfg.k}, {sim_cfg.mode})")
    for label, by_n in out["results"].items():
        for n, m in by_n.items():
            logger.log({f"{label}/mat": m["mat"], f"{label}/avg_regret": m["avg_regret"], "N": int(n)})
    logger.log_image(png.stem, png)
    logger.finish()
    return out


def format_table(out: dict[str, Any]) -> str:
    """Markdown table: selector x N -> MAT / avg regret."""
    results = out["results"]
    ns = sorted({n for by_n in results.values() for n in by_n}, key=int)
    head = "| selector | " + " | ".join(f"N={n} MAT / regret" for n in ns) + " |"
    rows = [head, "|---" * (len(ns) + 1) + "|"]
    for label, by_n in results.items():
        cells = [f"{by_n[n]['mat']:.2f} / {by_n[n]['avg_regret']:.4f}" if n in by_n else "" for n in ns]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
