"""The embedded benchmark end to end: train the SmolLM2 drafter pool, then compare the selectors on it.

    python scripts/embedded.py                 # fast version: quick low-rank pool + short mixed run (15-17 min)
    python scripts/embedded.py full=true       # the full one: train=embedded pool + every selector on mixed/ood/shift
    python scripts/embedded.py dry_run=true    # print the commands only

It only chains the documented entry points, printing each command before running it, so every step can be
rerun (or resumed: training and regeneration pick up where they stopped) by hand:

1. ``train/run.py -m domain=<7 experts>,general target=smollm2 train=embedded train.pool=<pool> ...``; in the
   fast mode (``finetune_from: general``) two multiruns: the generalist, then the seven experts as fine-tunes of it
   (``train.draft.init=general train.draft.vocab=init``).
2. fast mode only: ``scripts/lowrank_pool.py manifest=pools/<pool>.yaml base=general reads=1.3 out=<low-rank pool>``
   (the experts as the generalist plus low-rank deltas, so one evaluation of all eight reads 1.3 heads' weights).
3. ``scripts/bench.py -m pool=smollm2 pool.manifest=pools/<pool>.yaml selector=... workload=... ...``
4. ``scripts/report.py collect <bench multirun dir>`` -> ``table.md`` (printed), ``summary.json``, PNGs.

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


def _train(cfg: dict[str, Any], mode: dict[str, Any], domains: list[str], extra: list[str]) -> list[str]:
    """``train/run.py -m domain=<domains> ...`` into the mode's pool."""
    return [
        sys.executable,
        "train/run.py",
        "-m",
        "domain=" + ",".join(domains),
        f"target={cfg['train_target']}",
        f"train={cfg['train_budget']}",
        f"train.pool={mode['pool']}",
        f"paths.pools={cfg['pools_dir']}",
        f"progress={str(cfg['progress']).lower()}",
        *extra,
        *mode.get("train_overrides", []),
        *mode.get("train_target_overrides", []),
        *cfg.get("extra_train", []),
    ]


def train_commands(cfg: dict[str, Any], mode: dict[str, Any]) -> list[list[str]]:
    """One multirun over all domains, or (``finetune_from: <domain>``) that drafter first and then the others as
    fine-tunes of it with its draft vocabulary (``train.draft.init=<it> train.draft.vocab=init``), the experts a
    low-rank pool needs (docs/pools.md)."""
    domains, base = list(cfg["domains"]), mode.get("finetune_from")
    if not base:
        return [_train(cfg, mode, domains, [])]
    if base not in domains:
        raise ValueError(f"finetune_from={base!r} is not one of domains={domains}")
    rest = [d for d in domains if d != base]
    if not rest:
        raise ValueError(f"finetune_from={base!r}: domains={domains} has no other drafter to fine-tune from it")
    finetune = [f"train.draft.init={base}", "train.draft.vocab=init"]
    return [_train(cfg, mode, [base], []), _train(cfg, mode, rest, finetune)]


def bench_pool_name(mode: dict[str, Any]) -> str:
    """The pool the selectors are benched on: the low-rank pool when the mode writes one, else the trained one."""
    lowrank = mode.get("lowrank") or {}
    return str(lowrank["out"]) if lowrank else str(mode["pool"])


def lowrank_commands(cfg: dict[str, Any], mode: dict[str, Any]) -> list[list[str]]:
    """``scripts/lowrank_pool.py`` writing the trained pool as its base drafter plus per-matrix low-rank deltas
    within a reads budget (``lowrank: {reads: x, out: name}``; nothing without a ``lowrank`` block)."""
    lowrank = mode.get("lowrank") or {}
    if not lowrank:
        return []
    base = mode.get("finetune_from")
    if not base:
        raise ValueError("lowrank needs finetune_from: the experts must be fine-tunes of one drafter (docs/pools.md)")
    return [
        [
            sys.executable,
            "scripts/lowrank_pool.py",
            f"manifest={cfg['pools_dir']}/{mode['pool']}.yaml",
            f"base={base}",
            f"reads={lowrank['reads']}",
            f"out={lowrank['out']}",
            "overwrite=true",  # derived from the trained pool in seconds: a rerun writes it again
        ]
    ]


def commands(cfg: dict[str, Any]) -> list[list[str]]:
    """The steps for the chosen mode (``cfg['full']`` picks the ``full`` block, else ``fast``): train (one or two
    multiruns), the low-rank pool (if the mode has one), bench, report."""
    mode = cfg["full_settings"] if cfg["full"] else cfg["fast_settings"]
    pool, stamp = bench_pool_name(mode), time.strftime("%Y-%m-%d_%H-%M-%S")
    bench_dir = f"{cfg['out_dir']}/{pool}-{stamp}"
    bench = [
        sys.executable,
        "scripts/bench.py",
        "-m",
        f"pool={cfg['bench_pool']}",
        f"++pool.manifest={cfg['pools_dir']}/{pool}.yaml",
        f"pool.name={pool}",
        "selector=" + ",".join(mode["selectors"]),
        "workload=" + ",".join(mode["workloads"]),
        "seed=" + ",".join(str(s) for s in mode["seeds"]),
        f"hydra.sweep.dir={bench_dir}",
        f"progress={str(cfg['progress']).lower()}",
        *mode.get("bench_overrides", []),
        *cfg.get("extra_bench", []),
    ]
    report = [sys.executable, "scripts/report.py", "collect", bench_dir]
    return [*train_commands(cfg, mode), *lowrank_commands(cfg, mode), bench, report]


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
        table = Path(steps[-1][-1]) / "report" / "table.md"
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
