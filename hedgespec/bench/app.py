"""The job behind ``scripts/bench.py``: resolved config dict in, run dir with results out (tests call it directly)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from hedgespec.bench.report import run_table, write_run
from hedgespec.bench.runners import run_bench
from hedgespec.io import portable_paths, write_json_atomic
from hedgespec.tracking import make_logger


def note_trace(trace: str | Path, res: Mapping[str, Any]) -> Path:
    """Record next to a trace file (``<trace>.meta.json``) which pool and commands appended to it (read by replay)."""
    meta_path = Path(str(trace) + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {"pool": res["pool"]["name"], "commands": []}
    if meta.get("pool") != res["pool"]["name"]:
        raise ValueError(
            f"trace {trace} already holds requests of pool {meta.get('pool')!r}, not {res['pool']['name']!r}"
        )
    meta["commands"].append(portable_paths(res["command"]))
    return write_json_atomic(meta, meta_path)


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
    bar = tqdm(desc="bench", unit="req", disable=not cfg.get("progress", True) or not sys.stderr.isatty())
    res = run_bench(cfg, command=command, progress=lambda j, rec: bar.update(1), **inject)
    bar.close()
    logger_cfg = dict(cfg.get("logger") or {"name": "none"})
    name = logger_cfg.pop("name", "none")
    logger = make_logger(name, run_dir, {k: v for k, v in cfg.items() if k != "hydra"}, **logger_cfg)
    files = write_run(run_dir, res, logger)
    if cfg.get("trace"):
        note_trace(cfg["trace"], res)
    logger.finish()
    print(run_table(res))
    print("files: " + ", ".join(sorted(Path(f).name for f in files.values())) + f" in {run_dir}")
    return res
