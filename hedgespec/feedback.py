"""Per-request feedback ledger: γ rows by position -> completed loss vectors (HedgeSpec's
ETAP / EAL losses and the delayed-feedback handling of the paper).

Learning is token-level: every generated position t is one online round, covered by the decision of the
verification round that emitted t. The ETAP loss of t is complete as soon as t is verified; the EAL loss
needs γ at t..t+K−1 and is emitted only once the trajectory is verified through t+K−1 (at most 2K
positions after the decision). A loss is never computed on a truncated ("censored") window: at the end
of the request incomplete windows are dropped (``tail_policy="drop"``) or scored with the ETAP loss
(``tail_policy="etap"``).

Label-efficient feedback (Cesa-Bianchi, Lugosi & Stoltz 2005): a round may carry an importance weight (its
positions' losses are multiplied by it, Z/ε for an evaluation coin Z ~ Bernoulli(ε)), or no γ at all
(:meth:`FeedbackLedger.add_unobserved`: weight 0). A weight-0 position still emits its loss, the zero vector,
so every position is one learner round and a ticket's positions all come back.

Late feedback: a round whose γ will come later (:meth:`FeedbackLedger.add_pending`) holds its positions open;
:meth:`FeedbackLedger.fill` supplies the γ, and losses keep leaving in position order, so the learner gets
exactly the loss sequence of full information, only later. Positions still open when the request ends are
dropped like censored windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hedgespec.acceptance import check_gammas

OBJECTIVES = ("etap", "eal")
TAIL_POLICIES = ("drop", "etap")


@dataclass(frozen=True)
class CompletedLoss:
    """A loss vector over drafters for generated position ``position``, routed to ``ticket``'s learner."""

    position: int
    loss: np.ndarray
    ticket: int


class FeedbackLedger:
    """Stores γ rows of the verified trajectory and emits each position's loss exactly once."""

    def __init__(self, n_drafters: int, k: int, objective: str = "etap", tail_policy: str = "drop") -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if tail_policy not in TAIL_POLICIES:
            raise ValueError(f"tail_policy must be one of {TAIL_POLICIES}, got {tail_policy!r}")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"K must be an int >= 1, got {k!r}")
        if not isinstance(n_drafters, int) or n_drafters < 1:
            raise ValueError(f"n_drafters must be an int >= 1, got {n_drafters!r}")
        self.n, self.k, self.objective, self.tail_policy = n_drafters, k, objective, tail_policy
        self._gamma: list[np.ndarray] = []  # row t = γ_t over drafters, for verified t
        self._ticket: list[int] = []  # ticket of the decision covering t
        self._next_emit = 0  # first position whose loss is not yet emitted
        self._weight: list[float] | None = None  # importance weight of t; None while every weight is 1
        self._pending: dict[int, int] = {}  # start -> emitted of the rounds whose γ comes later (fill)

    @property
    def verified(self) -> int:
        """Number of verified positions (positions 0..verified−1 have γ rows)."""
        return len(self._gamma)

    def add_round(self, start: int, gamma: np.ndarray, ticket: int = 0, weight: float = 1.0) -> list[CompletedLoss]:
        """Record the γ rows [emitted, N] of the round that verified positions start..start+emitted−1.

        ``weight`` multiplies these positions' losses (the importance weight Z/ε of label-efficient feedback).
        """
        g = check_gammas(gamma, "gamma")
        if g.ndim != 2 or g.shape[1] != self.n:
            raise ValueError(f"gamma must have shape [emitted, {self.n}], got {g.shape}")
        self._check_start(start)
        if g.shape[0] < 1:
            raise ValueError("a verification round emits at least one token; gamma has no rows")
        self._set_weight(weight, g.shape[0])
        for row in g:
            self._gamma.append(row)
            self._ticket.append(ticket)
        return self._emit_ready()

    def add_unobserved(self, start: int, emitted: int, ticket: int = 0) -> list[CompletedLoss]:
        """Record a round whose γ was not observed: its ``emitted`` positions have weight 0 (zero losses)."""
        return self._add_without_gamma(start, emitted, ticket, pending=False)

    def add_pending(self, start: int, emitted: int, ticket: int = 0) -> list[CompletedLoss]:
        """Record a round whose γ comes later (:meth:`fill`): its positions wait, and so do the ones after them."""
        return self._add_without_gamma(start, emitted, ticket, pending=True)

    def _add_without_gamma(self, start: int, emitted: int, ticket: int, pending: bool) -> list[CompletedLoss]:
        self._check_start(start)
        if isinstance(emitted, bool) or not isinstance(emitted, (int, np.integer)) or emitted < 1:
            raise ValueError(f"emitted must be an int >= 1 (a round emits at least one token), got {emitted!r}")
        self._set_weight(1.0 if pending else 0.0, int(emitted))
        for _ in range(int(emitted)):
            self._gamma.append(None)  # type: ignore[arg-type]
            self._ticket.append(ticket)
        if pending:
            self._pending[int(start)] = int(emitted)
        return self._emit_ready()

    def fill(self, start: int, gamma: np.ndarray) -> list[CompletedLoss]:
        """The γ rows [emitted, N] of the pending round that started at ``start``; returns the losses now complete."""
        if start not in self._pending:
            raise ValueError(f"no pending round starts at position {start} (pending: {sorted(self._pending)})")
        g = check_gammas(gamma, "gamma")
        emitted = self._pending[start]
        if g.shape != (emitted, self.n):
            raise ValueError(
                f"gamma of the round at position {start} must have shape [{emitted}, {self.n}], got {g.shape}"
            )
        for j, row in enumerate(g):
            self._gamma[start + j] = row
        del self._pending[start]
        return self._emit_ready()

    @property
    def pending(self) -> list[int]:
        """Starts of the rounds whose γ has not come yet (:meth:`add_pending`)."""
        return sorted(self._pending)

    def _check_start(self, start: int) -> None:
        if start != self.verified:
            raise ValueError(f"round starts at position {start}, but the ledger has verified {self.verified} positions")

    def _set_weight(self, weight: float, rows: int) -> None:
        w = float(weight)
        if not (math.isfinite(w) and w >= 0.0):
            raise ValueError(
                f"weight (importance weight of the round's losses) must be finite and >= 0, got {weight!r}"
            )
        if self._weight is None and w == 1.0:
            return
        if self._weight is None:
            self._weight = [1.0] * self.verified
        self._weight.extend([w] * rows)

    def weight_at(self, t: int) -> float:
        """Importance weight of position ``t``'s loss (1 unless a round said otherwise)."""
        return 1.0 if self._weight is None else self._weight[t]

    def _loss_at(self, t: int) -> np.ndarray:
        # Rows were validated once in add_round; the losses are computed directly here (hot path):
        # ETAP 1 − γ_t, EAL 1 − AL_t/(K+1) with AL_t = 1 + Σ_k Π_{j≤k} γ_{t+j−1} (Thm 3, tail-sum form).
        if self._weight is not None:
            return self._weighted_loss(t, self.objective)
        if self.objective == "etap":
            return 1.0 - self._gamma[t]
        window = np.stack(self._gamma[t : t + self.k], axis=-1)  # [N, K]
        return 1.0 - (1.0 + np.cumprod(window, axis=-1).sum(axis=-1)) / (self.k + 1)

    def _weighted_loss(self, t: int, objective: str) -> np.ndarray:
        """weight_t × loss_t; weight 0 is the zero vector whatever was observed (no γ row is read)."""
        w = self.weight_at(t)
        if w == 0.0:
            return np.zeros(self.n)
        rows = self._gamma[t : t + (1 if objective == "etap" else self.k)]
        if any(r is None for r in rows):
            raise RuntimeError(
                f"position {t} has importance weight {w} but its {objective.upper()} window has unobserved γ rows; "
                "the rounds that complete a weighted window must be evaluated"
            )
        if objective == "etap":
            loss = 1.0 - rows[0]
        else:
            window = np.stack(rows, axis=-1)
            loss = 1.0 - (1.0 + np.cumprod(window, axis=-1).sum(axis=-1)) / (self.k + 1)
        return loss if w == 1.0 else w * loss

    def _known(self) -> int:
        """Positions 0.._known()−1 have their γ (or weight 0): up to the first pending round."""
        return min(self._pending) if self._pending else self.verified

    def _emit_ready(self) -> list[CompletedLoss]:
        need = 1 if self.objective == "etap" else self.k
        out: list[CompletedLoss] = []
        known = self._known()
        while self._next_emit + need <= known:  # window t..t+need−1 verified and known
            t = self._next_emit
            out.append(CompletedLoss(t, self._loss_at(t), self._ticket[t]))
            self._next_emit += 1
        return out

    def pending_tickets(self) -> set[int]:
        """Tickets with at least one verified position whose loss has not been emitted yet."""
        return set(self._ticket[self._next_emit :])

    def finish(self) -> list[CompletedLoss]:
        """End of request: incomplete windows are dropped or scored with ETAP (``tail_policy``); positions from the
        first still pending round on have no γ and are dropped."""
        out: list[CompletedLoss] = []
        if self.tail_policy == "etap":
            for t in range(self._next_emit, self._known()):
                loss = 1.0 - self._gamma[t] if self._weight is None else self._weighted_loss(t, "etap")
                out.append(CompletedLoss(t, loss, self._ticket[t]))
        self._next_emit = self.verified
        self._pending.clear()
        return out
