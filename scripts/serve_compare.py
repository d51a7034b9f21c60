"""Plain decoding, stock EAGLE-3 and HEDGESPEC servers side by side (see hedgespec/serving/compare.py).

Usage:
    python scripts/serve_compare.py pool=smollm2 device=cpu
    python scripts/serve_compare.py pool=tiny device=cpu compare.concurrency=[1]
    python scripts/serve_compare.py pool=smollm2 device=cpu logger=wandb    # one W&B run per server (offline)
Writes serve_compare.json (with the command line, the machine and the wall time) and serve_compare.md into the
Hydra run dir and prints the table.
"""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hedgespec.io import write_json_atomic, write_text_atomic
from hedgespec.provenance import command_line, machine_info
from hedgespec.serving.compare import run_compare, table
from hedgespec.serving.compare_log import CompareLogger


@hydra.main(version_base="1.3", config_path="../conf", config_name="serve_compare")
def main(cfg: DictConfig) -> None:
    t0 = time.monotonic()
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    plain_cfg = OmegaConf.to_container(cfg, resolve=True)
    tracker = CompareLogger(plain_cfg, run_dir)  # logger=wandb: one run per server, logged as each pass ends
    res = run_compare(plain_cfg, run_dir, on_row=tracker.row)
    res["command"] = command_line("scripts/serve_compare.py", list(hydra_cfg.overrides.task))
    res["machine"] = machine_info()
    res["wall_s"] = round(time.monotonic() - t0, 1)
    md = table(res)
    print(md)
    files = [
        write_text_atomic(md + "\n", run_dir / "serve_compare.md"),
        write_json_atomic(res, run_dir / "serve_compare.json"),
    ]
    tracker.finish(res, files)
    print(f"wrote {files[1]}")


if __name__ == "__main__":
    main()
