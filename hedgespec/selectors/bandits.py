"""Bandit-feedback baselines of the paper: UCBSpec, EXP3Spec (BanditSpec, Hou et al. 2025) and MetaSD-UCB.

Each sees only :class:`~hedgespec.types.BanditFeedback` (the chosen drafter's outcome); one bandit round
per verification; state per request; reward Y = accepted drafts + 1 ∈ [1, K+1]. ``evaluate=False`` runs them at
their deployed cost: the runner skips the pool evaluation (they never read it) and extends only the chosen head.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hedgespec.selectors._rng import argmax_random_ties, request_rng
from hedgespec.selectors.base import BanditSelector
from hedgespec.types import BanditFeedback, Decision


class _IndexPolicy(BanditSelector):
    """Shared skeleton of the UCB-style baselines: pull each drafter once (round-robin over the first N
    rounds), then the argmax of a per-drafter index built from pull counts and summed rewards.

    A drafter still without a pull after the round-robin (possible only when a runner observed its turn as
    another drafter's: the SGLang worker's substitute for a dropped drafter) has index +inf, the UCB rule for
    an untried arm, instead of the 0/0 its formula gives."""

    def __init__(self, seed: int = 0, evaluate: bool = True) -> None:
        super().__init__(evaluate)
        self.seed = seed

    def _reset(self) -> None:
        self.rng = request_rng(self.seed, self.ctx.request_id)
        self.count = np.zeros(self.n)
        self.total = np.zeros(self.n)

    def select(self) -> Decision:
        t = self.rounds + 1
        if t <= self.n:
            return self.decide(t - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            index = np.where(self.count > 0, self._index(t), np.inf)
        return self.decide(argmax_random_ties(index, self.rng))

    def _observe_bandit(self, fb: BanditFeedback) -> None:
        self.count[fb.chosen] += 1
        self.total[fb.chosen] += self._reward(fb)

    def _index(self, t: int) -> np.ndarray:
        raise NotImplementedError

    def _reward(self, fb: BanditFeedback) -> float:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pulls": self.count.tolist() if self.n else []}


class UCBSpec(_IndexPolicy):
    """Round-robin for N rounds, then argmax_i μ̂_i + cr_i with
    cr_i = (K/2) sqrt(((1+n_i)/n_i²) (1 + 2 ln(N t² sqrt(1+n_i) / δ)))  (BanditSpec's UCBSpec, δ = 1/2)."""

    name = "ucbspec"

    def __init__(self, delta: float = 0.5, seed: int = 0, evaluate: bool = True) -> None:
        super().__init__(seed, evaluate)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"UCBSpec: delta must be in (0, 1), got {delta!r}")
        self.delta = delta

    def _index(self, t: int) -> np.ndarray:
        n_i = self.count
        cr = (self.k / 2.0) * np.sqrt(
            (1.0 + n_i) / n_i**2 * (1.0 + 2.0 * np.log(self.n * t * t * np.sqrt(1.0 + n_i) / self.delta))
        )
        return self.total / n_i + cr

    def _reward(self, fb: BanditFeedback) -> float:
        return fb.reward  # Y = accepted drafts + 1


class EXP3Spec(BanditSelector):
    """η_t = sqrt(ln N / (t N)); p_t ∝ exp(−η_t Σ_{s<t} Ẑ_s); I_t ~ p_t;
    Ẑ_{i,t} = 1{i = I_t} (K + 1 − Y_t) / (K p_{t,i})  (BanditSpec's EXP3Spec estimator)."""

    name = "exp3spec"

    def __init__(self, seed: int = 0, evaluate: bool = True) -> None:
        super().__init__(evaluate)
        self.seed = seed

    def _reset(self) -> None:
        self.rng = request_rng(self.seed, self.ctx.request_id)
        self.z = np.zeros(self.n)
        self._p: np.ndarray | None = None
        self._drawn = -1

    def probabilities(self) -> np.ndarray:
        t = self.rounds + 1
        eta = math.sqrt(math.log(self.n) / (t * self.n)) if self.n > 1 else 0.0
        x = -eta * (self.z - self.z.min())
        p = np.exp(x)
        return p / p.sum()

    def select(self) -> Decision:
        p = self.probabilities()
        self._p = p
        i = int(self.rng.choice(self.n, p=p))
        self._drawn = i
        return self.decide(i, tuple(float(x) for x in p))

    def _observe_bandit(self, fb: BanditFeedback) -> None:
        """Ẑ for the drawn drafter. A round drafted by another drafter than the one drawn (the SGLang worker's
        substitute for a dropped drafter) has no importance weight: the substitute was not drawn from p_t, and
        its p_{t,i} can be 0. Such a round updates nothing (it still counts in t)."""
        p = self._p if self._p is not None else self.probabilities()
        if self._p is None or fb.chosen == self._drawn:
            self.z[fb.chosen] += (self.k + 1 - fb.reward) / (self.k * p[fb.chosen])
        self._p = None


class MetaSDUCB(_IndexPolicy):
    """MetaSD-UCB: reward = mean over the round's emitted positions of the chosen drafter's 1 − TV(p, q);
    argmax μ̂_i + β sqrt(2 ln t / n_i) after one pull each (MetaSD's UCB)."""

    name = "metasd"

    def __init__(self, beta: float = 1.0, seed: int = 0, evaluate: bool = True) -> None:
        super().__init__(seed, evaluate)
        if beta < 0:
            raise ValueError(f"MetaSDUCB: beta must be >= 0, got {beta!r}")
        self.beta = beta

    def _index(self, t: int) -> np.ndarray:
        return self.total / self.count + self.beta * np.sqrt(2.0 * math.log(t) / self.count)

    def _reward(self, fb: BanditFeedback) -> float:
        if not fb.chosen_gamma:
            raise ValueError("MetaSD-UCB needs the chosen drafter's γ (1 − TV) for the round; the backend gave none")
        return float(np.mean(fb.chosen_gamma))
