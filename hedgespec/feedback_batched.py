"""The feedback ledger of :mod:`hedgespec.feedback` for a batch of request slots (HedgeSpec's ETAP / EAL losses
under delayed feedback), with the γ rows of every slot in one ring buffer [slots, 2K, N].

Same rules as :class:`~hedgespec.feedback.FeedbackLedger`, slot by slot: every verified position's loss is
emitted exactly once, ETAP (1 − γ_t) at once, EAL (1 − AL_t/(K+1), Theorem 3's acceptance-length estimator over
γ_t..γ_{t+K−1}) once t+K−1 is verified, never on a censored window; at a slot's end the incomplete windows are
dropped or scored with ETAP (``tail_policy``). Between rounds at most K−1 positions of a slot await their EAL
window and a round adds at most K+1, so a ring of 2K rows per slot holds every row still needed.

A round's γ arrives as one array [b, U, N] with each slot's ``emitted`` rows first (U ≥ the largest
``emitted``); the rows past a slot's ``emitted`` are ignored, whatever they hold. Completed losses come back
as [b, V, N] arrays whose absent entries are exactly 0, so the learners apply them without masking.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hedgespec.feedback import OBJECTIVES, TAIL_POLICIES

_SLACK = 1e-9  # γ tolerance of hedgespec.acceptance.check_gammas before clipping to [0, 1]


class CompletedBatch(NamedTuple):
    """Completed losses of b slots: entry (j, v) is ``loss[j, v]`` for ticket ``ticket[j]`` (one ticket per slot,
    1-D) or ``ticket[j, v]``, in position order along v, present where ``valid[j, v]``; absent entries have
    loss exactly 0 (so they change no learner)."""

    loss: np.ndarray  # [b, V, N]
    ticket: np.ndarray  # [b] or [b, V]
    valid: np.ndarray  # [b, V] bool


def prefix_table(k: int) -> np.ndarray:
    """table[e, u] = u < e for e in 0..K+1, u in 0..K: the valid rows of a round that emitted e tokens."""
    return np.arange(k + 1) < np.arange(k + 2)[:, None]


def check_gamma_batch(
    gamma: object, emitted: np.ndarray, n: int, table: np.ndarray, fill: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(γ [b, max emitted, N] clipped to [0, 1] with the ignored rows set to ``fill``, valid rows [b, U]).

    ``emitted`` must already lie in 1..K+1 (``table`` from :func:`prefix_table`); the default fill makes the
    ETAP loss 1 − γ of an ignored row exactly 0.
    """
    g = gamma if type(gamma) is np.ndarray and gamma.dtype == np.float64 else np.asarray(gamma, dtype=np.float64)
    b = emitted.shape[0]
    u = int(emitted.max()) if b else 0
    if g.ndim != 3 or g.shape[0] != b or g.shape[2] != n or g.shape[1] < u:
        raise ValueError(f"gamma must have shape [{b}, U >= {u} (the largest emitted), {n}], got {g.shape}")
    valid = table[emitted, :u]
    # Every slot emitted u rows: nothing to fill (the result is then a view of ``gamma``; nothing writes to it).
    g = g[:, :u] if b and int(emitted.min()) == u else np.where(valid[:, :, None], g[:, :u], fill)
    lo, hi = (float(g.min()), float(g.max())) if g.size else (0.0, 0.0)
    if not (lo >= 0.0 and hi <= 1.0):
        if not np.all(np.isfinite(g)):
            raise ValueError("gamma contains NaN or inf in an emitted row")
        if lo < -_SLACK or hi > 1.0 + _SLACK:
            raise ValueError(f"gamma must lie in [0, 1] (got range [{lo:.3g}, {hi:.3g}] over the emitted rows)")
        g = np.clip(g, 0.0, 1.0)
    return g, valid


class BatchedLedger:
    """Per-slot γ rows by position → each position's loss exactly once (see the module docstring)."""

    def __init__(self, slots: int, n_drafters: int, k: int, objective: str = "etap", tail_policy: str = "drop"):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if tail_policy not in TAIL_POLICIES:
            raise ValueError(f"tail_policy must be one of {TAIL_POLICIES}, got {tail_policy!r}")
        for val, what in ((slots, "slots"), (n_drafters, "n_drafters"), (k, "K")):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{what} must be an int >= 1, got {val!r}")
        self.n, self.k, self.objective, self.tail_policy = n_drafters, k, objective, tail_policy
        self.verified = np.zeros(slots, dtype=np.int64)  # verified positions per slot
        self.next_emit = np.zeros(slots, dtype=np.int64)  # first position whose loss is not yet emitted
        self.window = 2 * k
        if objective == "eal":  # ETAP completes every row at once: nothing to keep
            self.ring = np.zeros((slots, self.window, n_drafters))
            self.ring_ticket = np.zeros((slots, self.window), dtype=np.int64)

    def reset(self, slots: np.ndarray) -> None:
        self.verified[slots] = 0
        self.next_emit[slots] = 0

    def add_rounds(
        self,
        slots: np.ndarray,
        gamma: np.ndarray,
        valid: np.ndarray,
        emitted: np.ndarray,
        tickets: np.ndarray,
        start: object = None,
    ) -> CompletedBatch:
        """Record each slot's round (γ and its valid rows from :func:`check_gamma_batch`, ``emitted`` = valid rows
        per slot, the decision's ticket) and return the losses it completes. ``start`` (optional, [b]): each
        round's first generated-token position, which must equal the slot's verified count."""
        v0 = self.verified[slots]
        if start is not None:
            st = np.asarray(start)
            if st.shape != slots.shape or not np.array_equal(st, v0):
                raise ValueError(f"start must equal each slot's verified positions {v0.tolist()}, got {st.tolist()}")
        v1 = v0 + emitted
        self.verified[slots] = v1
        if self.objective == "etap":
            self.next_emit[slots] = v1
            return CompletedBatch(1.0 - gamma, tickets, valid)
        j, u = np.nonzero(valid)
        at = (v0[j] + u) % self.window
        self.ring[slots[j], at] = gamma[j, u]
        self.ring_ticket[slots[j], at] = tickets[j]
        first = self.next_emit[slots]
        count = np.maximum(v1 - (self.k - 1) - first, 0)  # windows t..t+K−1 now fully verified
        self.next_emit[slots] = first + count
        return self._eal_losses(slots, first, count)

    def _eal_losses(self, slots: np.ndarray, first: np.ndarray, count: np.ndarray) -> CompletedBatch:
        v = int(count.max()) if count.size else 0
        t = first[:, None] + np.arange(v)  # [b, V] positions
        at = (t[:, :, None, None] + np.arange(self.k)) % self.window  # [b, V, 1, K]
        win = self.ring[slots[:, None, None, None], at, np.arange(self.n)[:, None]]  # [b, V, N, K], as FeedbackLedger
        loss = 1.0 - (1.0 + np.cumprod(win, axis=-1).sum(axis=-1)) / (self.k + 1)  # AL_t tail-sum form (Thm 3)
        ticket = self.ring_ticket[slots[:, None], t % self.window]
        valid = np.arange(v) < count[:, None]
        return CompletedBatch(np.where(valid[:, :, None], loss, 0.0), ticket, valid)

    def finish(self, slots: np.ndarray) -> CompletedBatch:
        """End of the slots' requests: incomplete EAL windows dropped or scored with ETAP (``tail_policy``)."""
        first, last = self.next_emit[slots], self.verified[slots]
        self.next_emit[slots] = last
        count = last - first
        v = int(count.max()) if count.size else 0
        if self.tail_policy == "drop" or v == 0:
            b = slots.size
            return CompletedBatch(np.zeros((b, 0, self.n)), np.zeros((b, 0), np.int64), np.zeros((b, 0), bool))
        t = first[:, None] + np.arange(v)
        loss = 1.0 - self.ring[slots[:, None], t % self.window]
        ticket = self.ring_ticket[slots[:, None], t % self.window]
        valid = np.arange(v) < count[:, None]
        return CompletedBatch(np.where(valid[:, :, None], loss, 0.0), ticket, valid)
