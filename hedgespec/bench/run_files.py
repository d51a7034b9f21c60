"""One bench run's files: ``results.json`` (schema v1), ``results.md`` (per-domain table) and four PNGs in the
run dir, also logged to the run's logger (wandb or none) when one is given.

* ``mat_by_domain.png`` — MAT per domain × selector;
* ``regret.png`` — mean cumulative ETAP regret vs generated tokens;
* ``weights.png`` — the selector's weights over the first request that has them;
* ``timeline.png`` — chosen drafter per round over the request stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hedgespec.bench.metrics import validate_result
from hedgespec.bench.tables import run_table
from hedgespec.io import write_json_atomic, write_text_atomic
from hedgespec.plots import plot_bench_regret, plot_mat_by_domain, plot_timeline, plot_weights

FIGURES = ("mat_by_domain.png", "regret.png", "weights.png", "timeline.png")
#: per-request metrics logged as ``request/<key>`` (one step per request)
REQUEST_LOG_KEYS = ("mat", "tokens_per_s", "target_forwards_per_token", "avg_regret", "selection_overhead")


def request_log_metrics(q: Mapping[str, Any]) -> dict[str, Any]:
    """One request's logged metrics: ``request/<key>`` for :data:`REQUEST_LOG_KEYS` it has."""
    return {f"request/{k}": q[k] for k in REQUEST_LOG_KEYS if q.get(k) is not None}


def log_run(logger: Any, res: Mapping[str, Any], files: Mapping[str, str], requests_logged: bool = False) -> None:
    """Per-request metrics (one step each, unless logged live already), then the aggregates, per-domain MATs,
    router accuracy and the PNGs."""
    if not requests_logged:
        for j, q in enumerate(res["requests"]):
            logger.log(request_log_metrics(q), step=j)
    agg = {f"bench/{k}": v for k, v in res["aggregate"].items() if isinstance(v, (int, float)) and v is not None}
    agg.update({f"domain/{d}/mat": a["mat"] for d, a in res["per_domain"].items()})
    if res.get("router") and res["router"].get("accuracy") is not None:
        agg["router/accuracy"] = res["router"]["accuracy"]
    logger.log(agg, step=len(res["requests"]))
    for name in FIGURES:
        logger.log_image(name.removesuffix(".png"), files[name])


def write_run(
    run_dir: str | Path, res: Mapping[str, Any], logger: Any = None, requests_logged: bool = False
) -> dict[str, str]:
    """Write ``results.json``, ``results.md`` and the PNG set into ``run_dir``; log them when a logger is given."""
    validate_result(res)
    run_dir = Path(run_dir)
    files = {
        "results.json": str(write_json_atomic(res, run_dir / "results.json")),
        "results.md": str(write_text_atomic(run_table(res), run_dir / "results.md")),
    }
    files["mat_by_domain.png"] = str(plot_mat_by_domain([res], run_dir / "mat_by_domain.png"))
    files["regret.png"] = str(plot_bench_regret([res], run_dir / "regret.png"))
    files["weights.png"] = str(plot_weights(res, run_dir / "weights.png"))
    files["timeline.png"] = str(plot_timeline(res, run_dir / "timeline.png"))
    if logger is not None:
        log_run(logger, res, files, requests_logged)
    return files
