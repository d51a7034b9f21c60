"""The embedded benchmark end to end: train the SmolLM2 drafter pool, then compare the selectors on it.

    python scripts/embedded.py                 # fast version: quick pool + short mixed run (28 min on a fresh machine)
    python scripts/embedded.py full=true       # the full one: train=embedded pool + every selector on mixed/ood/shift
    python scripts/embedded.py dry_run=true    # print the commands only

It only chains the documented entry points, printing each command before running it, so every step can be
rerun (or resumed: training and regeneration pick up where they stopped) by hand:

1. ``train/run.py -m domain=<7 experts>,general target=smollm2 train=embedded train.pool=<pool> ...``
2. ``scripts/bench.py -m pool=smollm2 pool.manifest=pools/<pool>.yaml selector=... workload=... ...``
3. ``scripts/report.py collect <bench multirun dir>`` -> ``table.md`` (printed), ``summary.json``, PNGs.

Settings: ``conf/embedded.yaml`` (``fast:`` and ``full:`` blocks).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[1]


def commands(cfg: dict[str, Any]) -> list[list[str]]:
    """The three steps for the chosen mode (``cfg['full']`` picks the ``full`` block, else ``fast``)."""
    mode = cfg["full_settings"] if cfg["full"] else cfg["fast_settings"]
    pool, stamp = mode["pool"], time.strftime("%Y-%m-%d_%H-%M-%S")
    bench_dir = f"{cfg['out_dir']}/{pool}-{stamp}"
    py = sys.executable
    progress = f"progress={str(cfg['progress']).lower()}"
    train = [
        py,
        "train/run.py",
        "-m",
        "domain=" + ",".join(cfg["domains"]),
        f"target={cfg['train_target']}",
        f"train={cfg['train_budget']}",
        f"train.pool={pool}",
        f"paths.pools={cfg['pools_dir']}",
        progress,
        *mode.get("train_overrides", []),
        *cfg.get("extra_train", []),
    ]
    bench = [
        py,
        "scripts/bench.py",
        "-m",
        f"pool={cfg['bench_pool']}",
        f"++pool.manifest={cfg['pools_dir']}/{pool}.yaml",
        f"pool.name={pool}",
        "selector=" + ",".join(mode["selectors"]),
        "workload=" + ",".join(mode["workloads"]),
        "seed=" + ",".join(str(s) for s in mode["seeds"]),
        f"hydra.sweep.dir={bench_dir}",
        progress,
        *mode.get("bench_overrides", []),
        *cfg.get("extra_bench", []),
    ]
    report = [py, "scripts/report.py", "collect", bench_dir]
    return [train, bench, report]


def run(cfg: dict[str, Any]) -> int:
    steps = commands(cfg)
    for cmd in steps:
        print("$ " + " ".join(shlex.quote(c) for c in [Path(cmd[0]).name, *cmd[1:]]), flush=True)
        if cfg["dry_run"]:
            continue
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=REPO)
        print(f"[embedded] exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
        if rc != 0:
            print("[embedded] step failed; rerun it by hand (it resumes) or this script", file=sys.stderr)
            return rc
    if not cfg["dry_run"]:
        table = Path(steps[2][-1]) / "report" / "table.md"
        if not table.is_absolute():
            table = REPO / table
        if table.is_file():
            print(table.read_text())
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="embedded")
def main(cfg: DictConfig) -> None:
    sys.exit(run(OmegaConf.to_container(cfg, resolve=True)))


if __name__ == "__main__":
    main()
