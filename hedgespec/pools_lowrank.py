"""Write a low-rank pool: a trained pool's experts as its base drafter plus rank-r deltas.

``scripts/lowrank_pool.py`` is the entry point. The experts must be fine-tunes of the base with its draft
vocabulary (``python train/run.py -m domain=... train.draft.init=general train.draft.vocab=init``); each one is
truncated to rank ``r`` (:class:`hedgespec.engine.lowrank.LowRankDrafter`) and written as a drafter directory
(dense rank-r ``model.safetensors`` + ``lowrank.safetensors``); the base is copied unchanged. The new manifest
keeps every entry's provenance and adds ``lowrank: {base, rank}`` to the experts.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.lowrank import LowRankDrafter, check_rank
from hedgespec.io import atomic_dir
from hedgespec.pools import PoolManifest, load_pool, pool_path, save_pool, weights_hash


@dataclass(frozen=True)
class LowRankPool:
    """The written manifest and, per expert, the share of its delta the rank keeps
    (:func:`hedgespec.engine.lowrank.delta_kept`)."""

    manifest: PoolManifest
    delta_kept: dict[str, float]


def write_low_rank_pool(
    source: str | Path,
    out_pool: str,
    base: str,
    rank: int | str | None,
    overwrite: bool = False,
    drafters: list[str] | None = None,
) -> LowRankPool:
    """``<source dir>/<out_pool>.yaml`` and ``<source dir>/<out_pool>/<drafter>/`` from the pool at ``source``.

    ``drafters``: the source drafters to keep, in pool order (None: all; the base is always kept).
    """
    source = Path(source)
    r = check_rank(rank, "rank")
    man = load_pool(source)
    out = pool_path(source.parent, out_pool)
    if out.resolve() == source.resolve():
        raise ValueError(f"out={out_pool!r} is the source pool itself; name a new pool")
    if out.exists() and not overwrite:
        raise FileExistsError(f"pool manifest {out} exists; choose another out= or pass overwrite=true")
    if base not in man.names:
        raise ValueError(f"base={base!r}: pool {man.pool!r} ({source}) has no such drafter; it has {man.names}")
    if drafters is not None:
        unknown = [n for n in drafters if n not in man.names]
        if unknown:
            raise ValueError(f"drafters={list(drafters)}: pool {man.pool!r} has no drafter(s) {unknown}")
        keep = set(drafters) | {base}
        man = replace(man, drafters=tuple(d for d in man.drafters if d.name in keep))
    already = [d.name for d in man.drafters if d.lowrank]
    if already:
        raise ValueError(f"pool {man.pool!r} is already low-rank (drafters {already}); start from the dense pool")
    base_drafter = Eagle3Drafter.load(man.drafter_path(base), name=base)
    experts = {
        d.name: LowRankDrafter.from_expert(base_drafter, Eagle3Drafter.load(man.drafter_path(d), name=d.name), r)
        for d in man.drafters
        if d.name != base
    }  # every expert factorised (and refused by name) before anything is written
    entries = []
    for d in man.drafters:
        dest = source.parent / out_pool / d.name
        if d.name == base:
            with atomic_dir(dest) as tmp:
                for f in ("config.json", "model.safetensors"):
                    shutil.copy2(man.drafter_path(d) / f, Path(tmp) / f)
            low = {}
        else:
            experts[d.name].save(dest)
            low = {"base": base, "rank": "full" if r is None else r}
        entries.append(
            replace(
                d,
                path=f"{out_pool}/{d.name}",
                external=False,
                weights_hash=weights_hash(dest / "model.safetensors"),
                lowrank=low,
            )
        )
    manifest = PoolManifest(out_pool, man.target, dict(man.decoding), tuple(entries), out.parent)
    save_pool(manifest, out)
    return LowRankPool(manifest, {n: float(e.delta_kept or 0.0) for n, e in experts.items()})
