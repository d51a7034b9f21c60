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
from typing import Any

from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.lowrank import LowRankDrafter, allocate_ranks, delta_svds, pool_reads
from hedgespec.io import atomic_dir
from hedgespec.pools import PoolManifest, load_pool, pool_path, save_pool, weights_hash
from hedgespec.ranks import check_rank, rank_label


@dataclass(frozen=True)
class LowRankPool:
    """The written manifest, per expert the share of its delta the rank keeps
    (:func:`hedgespec.engine.lowrank.delta_kept`), the rank(s) written and what one evaluation of the pool reads
    as a multiple of one head's weights (:func:`hedgespec.engine.lowrank.pool_reads`)."""

    manifest: PoolManifest
    delta_kept: dict[str, float]
    rank: Any = None
    reads: float = 0.0


def write_low_rank_pool(
    source: str | Path,
    out_pool: str,
    base: str,
    rank: int | str | None,
    overwrite: bool = False,
    drafters: list[str] | None = None,
    reads: float | None = None,
    allocation: str = "frobenius",
) -> LowRankPool:
    """``<source dir>/<out_pool>.yaml`` and ``<source dir>/<out_pool>/<drafter>/`` from the pool at ``source``.

    ``rank``: one rank for every matrix, ``full``, or a rank per matrix; or ``reads`` instead: the per-matrix
    ranks :func:`~hedgespec.engine.lowrank.allocate_ranks` chooses (by ``allocation``) so that one evaluation of
    the written pool reads at most ``reads`` × one head's weights. ``drafters``: the source drafters to keep, in
    pool order (None: all; the base is always kept).
    """
    source = Path(source)
    if reads is not None and rank is not None:
        raise ValueError(f"rank={rank!r} and reads={reads!r}: give one (reads chooses a rank per matrix)")
    r = None if reads is not None else check_rank(rank, "rank")
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
    dense = {d.name: Eagle3Drafter.load(man.drafter_path(d), name=d.name) for d in man.drafters if d.name != base}
    svds = {name: delta_svds(base_drafter, e) for name, e in dense.items()}  # once, for the ranks and the factors
    if reads is not None:
        r = allocate_ranks(base_drafter, list(dense.values()), reads, allocation, svds=list(svds.values()))
    experts = {
        name: LowRankDrafter.from_expert(base_drafter, e, r, svds[name]) for name, e in dense.items()
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
            low = {"base": base, "rank": rank_label(r)}
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
    kept = {n: float(e.delta_kept or 0.0) for n, e in experts.items()}
    return LowRankPool(manifest, kept, rank_label(r), pool_reads(base_drafter, len(entries), r))
