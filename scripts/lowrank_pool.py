"""Write a low-rank pool: a trained pool's experts as its base drafter (the generalist) plus rank-r deltas.

Usage:
    python scripts/lowrank_pool.py pool=smollm2 ++pool.manifest=pools/smollm2-ft.yaml rank=32 out=smollm2-ft-r32
    python scripts/lowrank_pool.py manifest=pools/mine.yaml base=general rank=full out=mine-full

The reference engine evaluates such a pool with the base weights read once per pass
(hedgespec.engine.lowrank); SGLang serves its experts' dense rank-r weights. Config: conf/lowrank_pool.yaml;
details: docs/pools.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from hedgespec.pools_lowrank import write_low_rank_pool


def source_manifest(cfg: DictConfig) -> Path:
    """``manifest=`` as given, else the ``manifest:`` of the ``pool=`` config."""
    if cfg.get("manifest"):
        return Path(str(cfg.manifest))
    pool = cfg.get("pool")
    if not pool or not pool.get("manifest"):
        raise ValueError("pass pool=<name> (a conf/pool/ config with a manifest) or manifest=<path>")
    return Path(str(pool.manifest))


@hydra.main(version_base="1.3", config_path="../conf", config_name="lowrank_pool")
def main(cfg: DictConfig) -> None:
    try:
        source = source_manifest(cfg)
        keep = None if cfg.get("drafters") is None else [str(d) for d in cfg.drafters]
        written = write_low_rank_pool(
            source, str(cfg.out), str(cfg.base), cfg.rank, overwrite=bool(cfg.overwrite), drafters=keep
        )
    except (ValueError, FileExistsError, FileNotFoundError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from err
    man = written.manifest
    out = source.parent / f"{man.pool}.yaml"
    print(f"wrote {out}: {len(man.drafters)} drafters, base {cfg.base!r}, rank {cfg.rank}")
    for name, kept in written.delta_kept.items():
        print(f"  {name}: keeps {kept:.3f} of its delta from {cfg.base!r} (1 - relative Frobenius error)")
    print(
        f"use it with: pool={cfg.pool.name if cfg.get('pool') else '<pool>'} ++pool.manifest={out} pool.name={man.pool}"
    )


if __name__ == "__main__":
    main()
