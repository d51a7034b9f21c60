"""Seeded per-request random streams, stable across processes (no Python ``hash`` randomisation)."""

from __future__ import annotations

import zlib

import numpy as np


def request_rng(seed: int, request_id: int | str) -> np.random.Generator:
    rid = request_id if isinstance(request_id, int) else zlib.crc32(str(request_id).encode())
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(rid) & 0xFFFFFFFF])


def argmax_random_ties(w: np.ndarray, rng: np.random.Generator) -> int:
    """Argmax with ties broken uniformly at random (a uniform start must not favour drafter 0)."""
    m = w.max()
    best = np.flatnonzero(w >= m - 1e-15)
    return int(best[0]) if best.size == 1 else int(rng.choice(best))
