"""Late feedback: the γ of rounds whose pool evaluation was skipped, from the heads' catch-up passes.

On a skipped round only the chosen head is extended over the verified rows; the others fall behind and process
those rows later, in one batched catch-up pass (:class:`~hedgespec.engine.pool.DrafterPool`). That pass computes
every lagging head's logits on the missed rows, which are exactly the logits a full evaluation of those rounds
would have produced (a head's rows depend only on the committed prefix). :class:`LateRounds` keeps each skipped
round's target rows, fills its γ matrix [emitted, N] as the pool's passes compute (row, head) logits, and hands
the rounds over, oldest first, with the next evaluated round, after whose pass every live head is current.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from hedgespec.types import LateGamma

#: γ [rows, len(heads)] of draft logits [len(heads), rows, V_d] against target logits [rows, V] for ``heads``
GammaFn = Callable[[torch.Tensor, torch.Tensor, Sequence[int]], np.ndarray]


@dataclass
class _Round:
    start: int  # the round's first emitted position
    row: int  # the pool row of that position
    tlogits: torch.Tensor  # [emitted, V]: the target's logits at the round's emitted positions
    gamma: np.ndarray  # [emitted, N], NaN until a pass computes the (row, head) logits


class LateRounds:
    """The skipped rounds of one request whose γ is still being computed (see the module docstring)."""

    def __init__(self, n: int, gamma_fn: GammaFn) -> None:
        self.n, self.gamma_fn = n, gamma_fn
        self._rounds: list[_Round] = []

    def __len__(self) -> int:
        return len(self._rounds)

    def add(self, start: int, row: int, tlogits: torch.Tensor, known: np.ndarray) -> None:
        """A skipped round: emitted positions ``start..`` at pool rows ``row..``, target logits [emitted, V], and
        the γ known so far ([emitted, N], NaN where not computed yet: the heads that did not run over the rows)."""
        e = int(tlogits.shape[0])
        if known.shape != (e, self.n):
            raise ValueError(f"known γ must have shape [{e}, {self.n}], got {known.shape}")
        self._rounds.append(_Round(start, row, tlogits.detach().clone(), np.array(known, dtype=np.float64)))

    def see(self, heads: Sequence[int], row: int, logits: torch.Tensor) -> None:
        """A pool pass computed ``heads``' logits [len(heads), T, V_d] at pool rows ``row..row+T−1``; γ is computed
        only where a held round still misses it (a pass that recomputes a current head's rows adds nothing)."""
        end = row + int(logits.shape[1])
        for r in self._rounds:
            a, b = max(row, r.row), min(end, r.row + r.gamma.shape[0])
            if a >= b:
                continue
            rows = slice(a - r.row, b - r.row)
            need = [j for j, h in enumerate(heads) if np.isnan(r.gamma[rows, h]).any()]
            if not need:
                continue
            g = self.gamma_fn(logits[need, a - row : b - row], r.tlogits[rows], [heads[j] for j in need])
            r.gamma[rows, [heads[j] for j in need]] = g

    def take(self, alive: Sequence[bool]) -> tuple[LateGamma, ...]:
        """Every held round's γ (dead heads 0, as in an evaluated round), oldest first; the store is emptied.

        Called after an evaluated round's pass, when every live head has processed every committed row.
        """
        out = []
        dead = [j for j in range(self.n) if not alive[j]]
        for r in self._rounds:
            g = r.gamma.copy()
            g[:, dead] = 0.0
            if np.isnan(g).any():
                missing = sorted({int(j) for j in np.where(np.isnan(g))[1]})
                raise RuntimeError(f"late γ of the round at position {r.start} misses heads {missing} after the pass")
            out.append(LateGamma(r.start, g))
        self._rounds.clear()
        return tuple(out)
