"""Tracking for ``scripts/serve_compare.py``: one logger run per compared server, metrics logged as each pass ends.

The servers run one after another, so each gets its own run (``logger=wandb``: one W&B run per server, grouped by
``logger.group`` or the compare run's directory name, tagged ``pool:``, ``selector:``, ``server:`` and
``backend:server``), opened when its first pass ends and finished when the next server's begins. A pass is logged
at step = its concurrency: output tok/s, request throughput, TTFT / inter-token latency, failures, and ``x_plain``
(tok/s over the plain server's at that concurrency, once the plain server has run). At the end one more run
(``job_type: serve_compare-summary``) carries serve_compare.json/.md as an artifact. ``logger=jsonl`` writes
``<run dir>/runs/<label>/metrics.jsonl`` per server; ``logger=none`` does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hedgespec.tracking import make_logger

#: row fields logged per pass (``server/<field>``)
PASS_FIELDS = (
    "output_tokens_per_s",
    "request_throughput",
    "mean_ttft_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "completed",
    "failed",
    "startup_s",
)


class CompareLogger:
    """``row`` after every pass (live), ``finish`` once with the result and the files written."""

    def __init__(self, cfg: Mapping[str, Any], run_dir: Path) -> None:
        lc = dict(cfg.get("logger") or {"name": "none"})
        self.name = str(lc.pop("name", "none"))
        self.opts = lc
        self.cfg = {k: v for k, v in cfg.items() if k != "hydra"}
        self.pool = (cfg.get("pool") or {}).get("name")
        self.run_dir = Path(run_dir)
        self.group = lc.get("group") or self.run_dir.name
        self.label: str | None = None
        self.logger: Any = None
        self.plain: dict[int, float] = {}

    def _open(self, label: str, selector: str | None, job_type: str = "serve_compare") -> Any:
        kw: dict[str, Any] = {}
        if self.name == "wandb":
            tags = [f"pool:{self.pool}", f"selector:{selector}", f"server:{label}", "backend:server"]
            kw = {
                **self.opts,
                "name": f"{self.group}-{label}",
                "group": self.group,
                "tags": [*tags, *(self.opts.get("tags") or [])],
                "job_type": job_type,
            }
        return make_logger(self.name, self.run_dir / "runs" / label, {**self.cfg, "server": label}, **kw)

    def row(self, r: Mapping[str, Any]) -> None:
        """Log one pass of one server (opening that server's run, closing the previous server's)."""
        if r["label"] != self.label:
            self._close()
            self.label, self.logger = r["label"], self._open(str(r["label"]), r.get("selector"))
        c, tps = int(r["concurrency"]), r.get("output_tokens_per_s")
        if r.get("algorithm") == "NONE" and tps:
            self.plain[c] = float(tps)
        metrics = {f"server/{k}": r.get(k) for k in PASS_FIELDS if r.get(k) is not None}
        if tps and self.plain.get(c):
            metrics["server/x_plain"] = float(tps) / self.plain[c]
        self.logger.log({**metrics, "server/concurrency": c}, step=c)

    def finish(self, res: Mapping[str, Any], files: Sequence[str | Path]) -> None:
        """Close the last server's run; one summary run with every row's ratios and the files as an artifact."""
        self._close()
        summary = self._open("summary", None, job_type="serve_compare-summary")
        for r in res.get("rows") or []:
            if r.get("x_plain") is not None:
                summary.log({f"x_plain/{r['label']}/c{r['concurrency']}": r["x_plain"]})
        summary.log_artifact(f"serve-compare-{self.group}", "serve-compare", list(files))
        summary.finish()

    def _close(self) -> None:
        if self.logger is not None:
            self.logger.finish()
        self.label, self.logger = None, None
