"""Write a low-rank pool: a trained pool's experts as its base drafter (the generalist) plus rank-r deltas.

Usage:
    python scripts/lowrank_pool.py pool=smollm2 ++pool.manifest=pools/smollm2-ft.yaml rank=32 out=smollm2-ft-r32
    python scripts/lowrank_pool.py manifest=pools/mine.yaml base=general rank=full out=mine-full
    python scripts/lowrank_pool.py pool=smollm2 ++pool.manifest=pools/smollm2-ft.yaml reads=1.3 out=smollm2-ft-b13

The reference engine evaluates such a pool with the base weights read once per pass
(hedgespec.engine.lowrank), and so does the SGLang server's fused pool (serve fused=true).
Config: conf/lowrank_pool.yaml; details: docs/pools.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from hedgespec.io import portable_paths, write_json_atomic
from hedgespec.pools_lowrank import write_low_rank_pool


def source_manifest(cfg: DictConfig) -> Path:
    """``manifest=`` as given, else the ``manifest:`` of the ``pool=`` config."""
    if cfg.get("manifest"):
        return Path(str(cfg.manifest))
    pool = cfg.get("pool")
    if not pool or not pool.get("manifest"):
        raise ValueError("pass pool=<name> (a conf/pool/ config with a manifest) or manifest=<path>")
    return Path(str(pool.manifest))


def rank_overridden() -> bool:
    """Whether ``rank=`` was given on the command line (the config's default rank is not a choice)."""
    from hydra.core.hydra_config import HydraConfig

    return any(o.lstrip("+").split("=", 1)[0] == "rank" for o in HydraConfig.get().overrides.task)


@hydra.main(version_base="1.3", config_path="../conf", config_name="lowrank_pool")
def main(cfg: DictConfig) -> None:
    try:
        source = source_manifest(cfg)
        keep = None if cfg.get("drafters") is None else [str(d) for d in cfg.drafters]
        reads = cfg.get("reads")
        if reads is not None and not rank_overridden():
            rank = None  # the config's default rank gives way to a reads budget; rank= given too is refused below
        else:
            rank = OmegaConf.to_container(cfg.rank) if isinstance(cfg.rank, DictConfig) else cfg.rank
        written = write_low_rank_pool(
            source,
            str(cfg.out),
            str(cfg.base),
            rank,
            overwrite=bool(cfg.overwrite),
            drafters=keep,
            reads=reads,
            allocation=str(cfg.allocation),
        )
    except (ValueError, FileExistsError, FileNotFoundError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from err
    man = written.manifest
    out = source.parent / f"{man.pool}.yaml"
    print(f"wrote {out}: {len(man.drafters)} drafters, base {cfg.base!r}, rank {written.rank}")
    print(f"  one evaluation of the pool reads {written.reads:.3f} x one head's weights")
    for name, kept in written.delta_kept.items():
        print(f"  {name}: keeps {kept:.3f} of its delta from {cfg.base!r} (1 - relative Frobenius error)")
    print(
        f"use it with: pool={cfg.pool.name if cfg.get('pool') else '<pool>'} ++pool.manifest={out} pool.name={man.pool}"
    )
    if cfg.get("json"):
        record = {
            "pool": man.pool,
            "source": str(source),
            "base": str(cfg.base),
            "rank": written.rank,
            "reads_x_one_head": written.reads,
            "n_drafters": len(man.drafters),
            "budget": None if cfg.get("reads") is None else {"reads": cfg.reads, "allocation": str(cfg.allocation)},
            "delta_kept": written.delta_kept,
        }
        write_json_atomic(portable_paths(record), Path(str(cfg.json)))
        print(f"wrote {cfg.json}")


if __name__ == "__main__":
    main()
