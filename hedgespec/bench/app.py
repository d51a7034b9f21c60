"""The job behind ``scripts/bench.py``: resolved config dict in, run dir with results out (tests call it directly)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hedgespec.bench.report import run_table, write_run
from hedgespec.bench.run_files import request_log_metrics
from hedgespec.bench.runners import run_bench
from hedgespec.io import portable_paths, write_json_atomic
from hedgespec.tracking import NullLogger, make_logger


def note_trace(trace: str | Path, res: Mapping[str, Any]) -> Path:
    """Record next to a trace file (``<trace>.meta.json``) which pool, commands and runs (seed, workload and its
    draw) appended to it (read by replay and by ``report.py seeds``)."""
    meta_path = Path(str(trace) + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {"pool": res["pool"]["name"], "commands": []}
    if meta.get("pool") != res["pool"]["name"]:
        raise ValueError(
            f"trace {trace} already holds requests of pool {meta.get('pool')!r}, not {res['pool']['name']!r}"
        )
    meta["commands"].append(portable_paths(res["command"]))
    wl = dict((res.get("config") or {}).get("workload") or {})
    run = {"seed": res.get("seed"), "workload": res.get("workload")}
    run.update({k: wl[k] for k in ("draw", "n_per_domain") if k in wl})
    meta.setdefault("runs", []).append(run)
    return write_json_atomic(meta, meta_path)


def open_logger(cfg: Mapping[str, Any], run_dir: Path) -> Any:
    """The run's logger, opened before the first request; wandb runs get a sweep group and pool/selector tags."""
    logger_cfg = dict(cfg.get("logger") or {"name": "none"})
    name = logger_cfg.pop("name", "none")
    if name == "wandb":
        sel = cfg.get("selector") or {}
        tags = [
            f"pool:{(cfg.get('pool') or {}).get('name')}",
            f"selector:{sel.get('label') or sel.get('name')}",
            f"workload:{(cfg.get('workload') or {}).get('name')}",
            f"backend:{(cfg.get('backend') or {}).get('name', 'engine')}",
        ]
        logger_cfg["tags"] = [*tags, *(logger_cfg.get("tags") or [])]
        logger_cfg["group"] = logger_cfg.get("group") or _sweep_group()
        logger_cfg.setdefault("job_type", "bench")
    return make_logger(name, run_dir, {k: v for k, v in cfg.items() if k != "hydra"}, **logger_cfg)


def _sweep_group() -> str | None:
    """The Hydra multirun's sweep directory name (one group per ``-m`` sweep); None outside a multirun."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except (ImportError, ValueError):  # not under @hydra.main (tests, library use)
        return None
    return Path(str(hc.sweep.dir)).name if str(hc.mode) == "RunMode.MULTIRUN" else None


def log_artifacts(logger: Any, cfg: Mapping[str, Any], res: Mapping[str, Any], files: Mapping[str, str]) -> None:
    """Results (JSON, table, plots) as one artifact; the pool manifest as another when the pool has one.

    The manifest travels as a copy in the run directory (``pool/<its name>``) with machine-local path prefixes
    made portable (:func:`~hedgespec.io.portable_paths`): its ``training`` records name the cache files SpecForge
    read, which are home- or scratch-relative on the machine that trained; the local manifest is left as it is.
    """
    run_dir = Path(files["results.json"]).parent
    logger.log_artifact(f"results-{run_dir.name}", "bench-results", list(files.values()))
    manifest = (cfg.get("pool") or {}).get("manifest")
    if manifest and Path(manifest).is_file() and not isinstance(logger, NullLogger):  # no copy nobody records
        copy = run_dir / "pool" / Path(manifest).name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(portable_paths(Path(manifest).read_text()))
        logger.log_artifact(f"pool-{res['pool']['name']}", "pool-manifest", [str(copy)])


def bench_main(
    cfg: Mapping[str, Any],
    run_dir: str | Path,
    command: str | None = None,
    selector_choice: str | None = None,
    **inject: Any,
) -> dict[str, Any]:
    """Run the benchmark of ``cfg`` and write its files into ``run_dir``; returns the result dict.

    ``selector_choice`` is the ``selector=`` group option (used as the label of configs without one, e.g.
    ``hedgespec_eal``); ``inject`` may pass ``model``, ``tokenizer``, ``drafters`` (tests).
    """
    cfg = dict(cfg)
    if (
        selector_choice
        and not (cfg.get("selector") or {}).get("label")
        and selector_choice != (cfg.get("selector") or {}).get("name")
    ):
        cfg["selector"] = {**cfg["selector"], "label": selector_choice}
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    logger = open_logger(cfg, run_dir)
    bar = tqdm(desc="bench", unit="req", disable=not cfg.get("progress", True) or not sys.stderr.isatty())

    def progress(j: int, rec: Mapping[str, Any]) -> None:
        bar.update(1)
        logger.log(request_log_metrics(rec), step=j)  # live: a crashed run keeps the requests it finished

    try:
        res = run_bench(cfg, command=command, progress=progress, **inject)
        bar.close()
        files = write_run(run_dir, res, logger, requests_logged=True)
        if cfg.get("trace"):
            note_trace(cfg["trace"], res)
        log_artifacts(logger, cfg, res, files)
    finally:
        logger.finish()
    print(run_table(res))
    print("files: " + ", ".join(sorted(Path(f).name for f in files.values())) + f" in {run_dir}")
    return res
