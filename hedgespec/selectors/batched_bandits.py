"""The bandit baselines UCBSpec and EXP3Spec (BanditSpec, Hou et al. 2025) for a batch of request slots.

Same policies as :mod:`hedgespec.selectors.bandits`, slot by slot and operation for operation (so the same
decisions and probabilities, bit for bit): one bandit round per verification, reward Y = accepted drafts + 1,
and only the chosen drafter's outcome is read (``BatchFeedback.accepted``; γ is never touched). A round drafted
by another drafter than the chosen one (``BatchFeedback.drafters``: a runner's substitute) counts as that
drafter's pull for UCBSpec and updates nothing for EXP3Spec, as the per-request selectors do with
``RoundFeedback.decision.drafter``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hedgespec.selectors.batched import BatchDecision, BatchFeedback, SlotBatch, sample_rows


class BatchedUCBSpec(SlotBatch):
    """UCBSpec for B slots: round-robin for the first N rounds, then argmax_i μ̂_i + cr_i with
    cr_i = (K/2) sqrt(((1+n_i)/n_i²) (1 + 2 ln(N t² sqrt(1+n_i) / δ)))."""

    name = "ucbspec"

    def __init__(self, capacity: int, n_drafters: int, k: int, delta: float = 0.5, seed: int = 0) -> None:
        if not 0.0 < delta < 1.0:
            raise ValueError(f"UCBSpec: delta must be in (0, 1), got {delta!r}")
        super().__init__(capacity, n_drafters, k, seed)
        self.delta = delta
        self.count = np.zeros((capacity, n_drafters))
        self.total = np.zeros((capacity, n_drafters))
        self._chosen = np.zeros(capacity, dtype=np.int64)

    def _reset(self, slots: np.ndarray) -> None:
        self.count[slots] = 0.0
        self.total[slots] = 0.0

    def _select(self, s: np.ndarray) -> BatchDecision:
        t = self.rounds[s] + 1
        drafters = t - 1  # round-robin while t <= N
        idx = np.flatnonzero(t > self.n)
        if idx.size:
            n_i, tt = self.count[s[idx]], t[idx]
            with np.errstate(divide="ignore", invalid="ignore"):  # an untried drafter: +inf (see UCBSpec)
                cr = (self.k / 2.0) * np.sqrt(
                    (1.0 + n_i)
                    / n_i**2
                    * (1.0 + 2.0 * np.log((self.n * tt * tt)[:, None] * np.sqrt(1.0 + n_i) / self.delta))
                )
                index = np.where(n_i > 0, self.total[s[idx]] / n_i + cr, np.inf)
            drafters[idx] = self._argmax_ties(s[idx], index)
        self._chosen[s] = drafters
        return BatchDecision(s, drafters, None, np.zeros(s.size, dtype=np.int64))

    def _observe(self, s: np.ndarray, fb: BatchFeedback, accepted: np.ndarray, emitted: np.ndarray) -> None:
        chosen = self._chosen[s] if fb.drafters is None else np.asarray(fb.drafters, dtype=np.int64)
        self.count[s, chosen] += 1
        self.total[s, chosen] += accepted + 1.0  # Y = accepted drafts + 1

    def state_dict(self, slot: int) -> dict[str, Any]:
        return {**super().state_dict(slot), "pulls": self.count[self._slot(slot)].tolist()}


class BatchedEXP3Spec(SlotBatch):
    """EXP3Spec for B slots: η_t = sqrt(ln N / (t N)), p_t ∝ exp(−η_t Σ_{s<t} Ẑ_s), I_t ~ p_t,
    Ẑ_{i,t} = 1{i = I_t} (K + 1 − Y_t) / (K p_{t,i})."""

    name = "exp3spec"

    def __init__(self, capacity: int, n_drafters: int, k: int, seed: int = 0) -> None:
        super().__init__(capacity, n_drafters, k, seed)
        self.z = np.zeros((capacity, n_drafters))
        self._p = np.zeros((capacity, n_drafters))
        self._chosen = np.zeros(capacity, dtype=np.int64)

    def _reset(self, slots: np.ndarray) -> None:
        self.z[slots] = 0.0

    def probabilities(self, slots: object) -> np.ndarray:
        """p_t [b, N] of the slots' next decisions."""
        return self._probabilities(self._check_begun(slots))

    def _probabilities(self, s: np.ndarray) -> np.ndarray:
        t = self.rounds[s] + 1
        eta = np.sqrt(math.log(self.n) / (t * self.n)) if self.n > 1 else np.zeros(s.size)
        z = self.z[s]
        p = np.exp(-eta[:, None] * (z - z.min(axis=1)[:, None]))
        return p / p.sum(axis=1)[:, None]

    def _select(self, s: np.ndarray) -> BatchDecision:
        p = self._probabilities(s)
        drafters = sample_rows([self._rng(x) for x in s.tolist()], p)
        self._p[s] = p
        self._chosen[s] = drafters
        return BatchDecision(s, drafters, p, np.zeros(s.size, dtype=np.int64))

    def _observe(self, s: np.ndarray, fb: BatchFeedback, accepted: np.ndarray, emitted: np.ndarray) -> None:
        chosen = self._chosen[s]
        if fb.drafters is not None:  # rounds drafted by a substitute update nothing (see EXP3Spec)
            keep = np.asarray(fb.drafters, dtype=np.int64) == chosen
            s, chosen, accepted = s[keep], chosen[keep], accepted[keep]
        self.z[s, chosen] += (self.k + 1 - (accepted + 1.0)) / (self.k * self._p[s, chosen])
