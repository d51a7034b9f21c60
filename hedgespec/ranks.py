"""Ranks of low-rank expert pools, checked where a pool manifest is read (no torch here).

A low-rank expert keeps each weight-matrix delta from its base at a rank (:mod:`hedgespec.engine.lowrank`): one
rank for every matrix, ``"full"`` (every singular value), or one rank per matrix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: an EAGLE-3 head's weight matrices (short names of :data:`hedgespec.engine.eagle3.WEIGHT_KEYS`)
MATRICES = ("fc", "q", "k", "v", "o", "gate", "up", "down", "lm_head")


def check_rank(rank: Any, where: str = "rank") -> int | None | dict[str, int | None]:
    """``rank``: a positive int, None / ``"full"`` (every singular value), or a mapping that names every matrix
    (:data:`~hedgespec.engine.eagle3.MATRICES`) with its own rank: an int >= 0 (0: the base's matrix) or "full"."""
    if isinstance(rank, Mapping):
        unknown = sorted(set(map(str, rank)) - set(MATRICES))
        missing = [k for k in MATRICES if k not in rank]
        if unknown or missing:
            raise ValueError(
                f"{where}={dict(rank)!r}: a per-matrix rank names each of {list(MATRICES)} once"
                + (f"; unknown {unknown}" if unknown else "")
                + (f"; missing {missing}" if missing else "")
            )
        out: dict[str, int | None] = {}
        for k in MATRICES:
            r = rank[k]
            if r is None or r == "full":
                out[k] = None
            elif isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ValueError(f"{where}.{k}={r!r}: expected an integer >= 0 or 'full'")
            else:
                out[k] = int(r)
        return out
    if rank is None or rank == "full":
        return None
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"{where}={rank!r}: expected a positive integer, 'full', or a rank per matrix")
    return int(rank)


def rank_of(rank: int | None | dict[str, int | None], matrix: str) -> int | None:
    """The rank ``rank`` (as :func:`check_rank` returns it) gives ``matrix`` (None: every singular value)."""
    return rank.get(matrix) if isinstance(rank, dict) else rank


def rank_label(rank: int | None | dict[str, int | None]) -> str | int | dict[str, str | int]:
    """``rank`` as a manifest or metadata value: an int, "full", or {matrix: int | "full"}."""
    if isinstance(rank, dict):
        return {k: "full" if v is None else v for k, v in rank.items()}
    return "full" if rank is None else rank
