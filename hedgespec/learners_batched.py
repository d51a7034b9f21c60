"""The learners of :mod:`hedgespec.learners` for many requests at once: one row of arrays per learner.

A bank holds S learner rows over the same N experts ([S, N] regrets or cumulative losses); ``weights(rows)``
solves or normalises every stale row in one vectorized step and ``update(rows, losses, weights_used, valid)``
applies a batch of loss sequences. Each row computes what its per-request counterpart computes:

* :class:`NormalHedgeBank` (Chaudhuri, Freund, Hsu 2009), as :class:`hedgespec.learners.NormalHedge`: the
  scale equation (1/N) Σ_i exp([R_i]_+² / 2c) = e is solved for all rows together by the same warm-started
  Newton iteration with its bisection fallback (:func:`scale_root_batch`); rows freeze once they converge. When
  at most four rows are stale (N <= 48) they are solved one by one with NormalHedge's own Python-float code,
  cheaper than numpy's per-call cost at that size (a batch of one request, or requests deciding at different
  times). A row given a prior (:meth:`NormalHedgeBank.set_prior`, as ``NormalHedge(n, prior=π)``) solves
  Σ_i π_i exp([R_i]_+² / 2c) = e instead (:func:`scale_root_prior_batch`) and starts from w = π.
* :class:`HedgeBank`, as :class:`hedgespec.learners.Hedge`: η_t = sqrt(8 ln N / t), operation for operation,
  so the same weights bit for bit.

The delayed-feedback reductions (Joulani, György, Szepesvári 2013) map request slots to learner rows:

* :class:`QueuedBatch`: one learner row per slot; completed losses go to it as they complete.
* :class:`BoldBatch`: up to ``max_delay + 1`` learner rows per slot; each prediction is made by the lowest free
  one and its losses return to it, as :class:`hedgespec.learners.Bold`.

NormalHedge sums with ``math.fsum``, exponentiates with ``math.exp`` (small N) and adds one loss at a time;
numpy's sums and vectorized ``exp``, and a row's losses summed before they are added, differ from those in the
last bits, so :class:`NormalHedgeBank`'s weights agree with the per-request ones to rounding (about 1e-15).
"""

from __future__ import annotations

import math

import numpy as np

from hedgespec.learners import _SMALL_N, _uniform_or, small_normalhedge_weights

TOL, MAX_ITER = 1e-13, 200  # the tolerance and iteration cap of NormalHedge._compute_weights
_SCALAR_ROWS = 4  # up to this many stale rows (N <= 48), NormalHedge's Python-float solve beats numpy's per-call cost


_sum0, _max0 = np.add.reduce, np.maximum.reduce  # column sums / maxima of [N, r] (axis 0, their default)


def _check_rows(rows: int) -> int:
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ValueError(f"rows (learner rows in the bank) must be an int >= 1, got {rows!r}")
    return int(rows)


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (number of experts/drafters) must be an int >= 1, got {n!r}")
    return int(n)


def scale_root_batch(
    a: np.ndarray, amax: np.ndarray, s0: np.ndarray, tol: float = TOL, max_iter: int = MAX_ITER
) -> tuple[np.ndarray, np.ndarray]:
    """Root s of g(s) = log Σ_i exp(a_i s) − ln N − 1 for every column of a = [R]_+² ([N, r], one learner per
    column, ``amax`` its column maxima, all > 0) at once.

    Column for column the iteration of ``hedgespec.learners._scale_root``: bracket s ∈ [1/amax, (1 + ln N)/amax],
    warm start ``s0`` when it lies in (lo, hi] (NaN: none), Newton steps, bisection when a step leaves the
    bracket, stop at |g| ≤ tol. A converged column keeps its s, so re-evaluating it gives the same g and it stays
    converged. Returns (s, e) with e = exp(a s' − amax s') [N, r] at the last evaluation point s' (s itself, or
    the point before the last step for a column that ran out of iterations, as ``_scale_root`` returns it).

    The steps are taken in u = amax·s ∈ [1, 1 + ln N], where g = log Σ_i exp((q_i − 1) u) + u − ln N − 1 with
    q = a/amax (the same function; products rounded differently, so s agrees with the scalar solver to rounding).
    The bracket needs no bookkeeping: g is convex and increasing, so a Newton step from a point with g > 0 lands
    in [root, point), inside the bracket, and every later step stays there. A step from a point left of the root
    lands right of it or past the upper end, where it falls back to bisection as the scalar solver does; a
    column lies left of the root only at a warm start or after such a bisection, so the check stops after the
    first round of steps that needed none.
    """
    target = math.log(a.shape[0]) + 1.0  # the bracket's upper end, in u
    q = a / amax
    d = q - 1.0
    u = s0 * amax
    u = np.where((1.0 < u) & (u <= target), u, target)  # NaN s0 compares False: start at the upper end
    e, qe = np.empty_like(a), np.empty_like(a)
    r = a.shape[1]
    left = True  # some column may lie left of the root: at the start and after a bisection
    for _ in range(max_iter):
        np.multiply(d, u, out=e)
        np.exp(e, out=e)
        tot = _sum0(e)
        g = np.log(tot)
        g += u
        g -= target
        conv = np.abs(g) <= tol
        nconv = np.count_nonzero(conv)
        if nconv == r:
            break
        np.multiply(q, e, out=qe)
        step = g * tot
        step /= _sum0(qe)  # Newton: g'(u) = Σ q_i e_i / Σ e_i
        if nconv:  # converged columns keep their u
            step[conv] = 0.0
        u_new = u - step
        if left:  # a step from the left (g < 0) may pass the upper end: bisect between the point and it
            over = u_new >= target
            left = bool(np.count_nonzero(over))
            if left:
                u_new[over] = 0.5 * (u[over] + target)
        u = u_new
    return u / amax, e


def scale_root_prior_batch(
    a: np.ndarray, b: np.ndarray, s0: np.ndarray, tol: float = TOL, max_iter: int = MAX_ITER
) -> tuple[np.ndarray, np.ndarray]:
    """Root s of g(s) = log Σ_i exp(a_i s + b_i) − 1 for every column (a = [R]_+², b = ln π, [N, r], no column
    of a all zero): column for column ``hedgespec.learners._scale_root_prior`` (bracket [1/a_j, (1 − b_j)/a_j],
    j = argmax a, warm start ``s0`` in (lo, hi], NaN: none). Returns (s, e), e = exp(z − max z) at the last
    evaluation point, z = a s + b."""
    r = a.shape[1]
    j = a.argmax(axis=0)
    amax, bj = a[j, np.arange(r)], b[j, np.arange(r)]
    hi, lo = (1.0 - bj) / amax, 1.0 / amax
    s = np.where((lo < s0) & (s0 <= hi), s0, hi)
    for _ in range(max_iter):
        z = a * s + b
        zmax = z.max(axis=0)
        e = np.exp(z - zmax)
        tot = e.sum(axis=0)
        g = zmax + np.log(tot) - 1.0
        conv = np.abs(g) <= tol
        if np.count_nonzero(conv) == r:
            break
        up = g > 0
        hi, lo = np.where(up, s, hi), np.where(up, lo, s)
        s_new = s - g / ((a * e).sum(axis=0) / tot)
        out = (s_new <= lo) | (s_new >= hi)
        s_new = np.where(out, 0.5 * (lo + hi), s_new)
        s = np.where(conv, s, s_new)
    return s, e


class NormalHedgeBank:
    """S NormalHedge learners: R_i += ℓ_A − ℓ_i, w_i ∝ ([R_i]_+/c) exp([R_i]_+²/2c), c from the scale equation."""

    def __init__(self, rows: int, n: int) -> None:
        self.rows, self.n = _check_rows(rows), _check_n(n)
        self.regret = np.zeros((self.rows, self.n))
        self.t = np.zeros(self.rows, dtype=np.int64)
        self._s = np.full(self.rows, np.nan)  # warm start of the scale solve (NaN: none yet)
        self._flat = np.ones(self.rows, dtype=bool)  # last weights uniform (no positive regret): no scale
        self._w = np.full((self.rows, self.n), 1.0 / self.n)
        self._fresh = np.zeros(self.rows, dtype=bool)  # _w is current for the row
        self._prior = np.full((self.rows, self.n), 1.0 / self.n)  # π of rows with a prior (set_prior)
        self._has_prior = np.zeros(self.rows, dtype=bool)  # False: uniform, NormalHedge's own code path
        self._any_prior = False  # some row has a prior (self._has_prior.any(), kept up to date)

    def set_prior(self, rows: np.ndarray, prior: np.ndarray) -> None:
        """Give ``rows`` the prior ``prior`` ([len(rows), N] or [N], each checked by ``NormalHedge``'s rule:
        > 0, summing to 1; an all-equal row is uniform); call after :meth:`reset`."""
        p = np.broadcast_to(np.asarray(prior, dtype=np.float64), (rows.size, self.n))
        for r, row in zip(rows.tolist(), p):
            pi = _uniform_or(row, self.n)
            self._has_prior[r] = pi is not None
            self._prior[r] = 1.0 / self.n if pi is None else pi
        self._any_prior = bool(self._has_prior.any())
        self._fresh[rows] = False

    @property
    def scale(self) -> np.ndarray:
        """c = 1/(2s) of every row's last weights (NaN where they were uniform), as ``NormalHedge.scale``."""
        return np.where(self._flat, np.nan, 1.0 / (2.0 * self._s))

    def reset(self, rows: np.ndarray) -> None:
        self.regret[rows] = 0.0
        self.t[rows] = 0
        self._s[rows] = np.nan
        self._flat[rows] = True
        self._fresh[rows] = False
        if self._any_prior:
            self._has_prior[rows] = False
            self._any_prior = bool(self._has_prior.any())

    def weights(self, rows: np.ndarray) -> np.ndarray:
        """Current weights of ``rows`` (distinct indices), [len(rows), N]; stale rows are solved together."""
        fresh = self._fresh[rows]
        nfresh = np.count_nonzero(fresh)
        if nfresh < rows.size:
            self._solve(rows[~fresh] if nfresh else rows)
        return self._w[rows]

    def _solve(self, rows: np.ndarray) -> None:
        if self._any_prior:
            with_prior = self._has_prior[rows]
            self._solve_prior(rows[with_prior])
            rows = rows[~with_prior]
            if not rows.size:
                return
        if rows.size <= _SCALAR_ROWS and self.n <= _SMALL_N:
            self._solve_each(rows)
            return
        pos = np.maximum(self.regret[rows].T, 0.0)  # [N, r]: one learner per column
        a = pos * pos
        amax = _max0(a)
        self._fresh[rows] = True
        if np.count_nonzero(amax) < rows.size:  # no positive regret: uniform; the warm start is kept
            live = amax > 0.0
            flat = rows[~live]
            self._w[flat] = 1.0 / self.n
            self._flat[flat] = True
            rows, pos, a, amax = rows[live], pos[:, live], a[:, live], amax[live]
            if not rows.size:
                return
        s, e = scale_root_batch(a, amax, self._s[rows])
        w = pos * e  # ∝ ([R]_+/c) exp([R]_+²/2c), shifted by the largest exponent
        w /= _sum0(w)
        self._w[rows] = w.T
        self._s[rows] = s
        self._flat[rows] = False

    def _solve_each(self, rows: np.ndarray) -> None:
        """A few stale rows: NormalHedge's own Python-float solve row by row (the same weights bit for bit)."""
        self._fresh[rows] = True
        for r, regret, s0 in zip(rows.tolist(), self.regret[rows].tolist(), self._s[rows].tolist()):
            w, s = small_normalhedge_weights(regret, None if math.isnan(s0) else s0)
            self._flat[r] = w is None
            if w is None:
                self._w[r] = 1.0 / self.n
            else:
                self._w[r] = w
                self._s[r] = s

    def _solve_prior(self, rows: np.ndarray) -> None:
        """Rows with a prior: w ∝ π ([R]_+/c) exp([R]_+²/2c), c from Σ_i π_i exp([R_i]_+²/2c) = e; w = π without
        positive regret."""
        pos = np.maximum(self.regret[rows], 0.0).T.copy()
        a = pos * pos
        live = a.max(axis=0) > 0.0
        self._fresh[rows] = True
        flat = rows[~live]
        self._w[flat] = self._prior[flat]
        self._flat[flat] = True
        rows, pos, a = rows[live], pos[:, live], a[:, live]
        if not rows.size:
            return
        s, e = scale_root_prior_batch(a, np.log(self._prior[rows]).T, self._s[rows])
        w = pos * e
        w /= w.sum(axis=0)
        self._w[rows] = w.T
        self._s[rows] = s
        self._flat[rows] = False

    def update(
        self, rows: np.ndarray, loss: np.ndarray, weights_used: np.ndarray, valid: np.ndarray, counts: np.ndarray
    ) -> None:
        """Apply loss sequences: entry (b, v) updates row ``rows[b]`` (or ``rows[b, v]``) with ``loss[b, v]``
        under ``weights_used[b, v]`` ([b, V, N], or [b, 1, N] for one decision per b) where ``valid[b, v]``
        (``counts`` valid entries per b). Losses and weights are finite and the losses of entries not valid are
        exactly 0, so they add ℓ_A − ℓ = 0 − 0.

        The regret after a sequence is R + Σ_v (w_v·ℓ_v − ℓ_v), the sum NormalHedge accumulates one loss at a
        time; summed first here (one step per row), it agrees with the per-request order to rounding.
        """
        if rows.ndim == 1:
            lsum = np.matmul(_ones(loss.shape[1]), loss)[:, 0]  # Σ_v ℓ_v [b, N] (a matmul beats a middle-axis sum)
            if weights_used.shape[1] == 1:  # ℓ_A summed over the row's losses: w·Σ_v ℓ_v
                mix = np.matmul(lsum[:, None, :], weights_used[:, 0, :, None])[:, 0, 0]
            else:
                mix = np.matmul(loss[:, :, None, :], weights_used[:, :, :, None])[:, :, 0, 0].sum(axis=1)
            self.regret[rows] += mix[:, None] - lsum
        else:  # entries of one b go to different rows (BOLD): one v at a time
            mix = np.matmul(loss[:, :, None, :], weights_used[:, :, :, None])[:, :, 0, 0]
            _accumulate(self.regret, rows, mix[:, :, None] - loss)  # instantaneous regret ℓ_A − ℓ_i
        _count(self.t, rows, valid, counts)
        self._fresh[rows] = False


class HedgeBank:
    """S Hedge learners: w_i ∝ exp(−η_t L_i), η_t = sqrt(8 ln N / t); ``weights_used`` is ignored."""

    def __init__(self, rows: int, n: int) -> None:
        self.rows, self.n = _check_rows(rows), _check_n(n)
        self.cum_loss = np.zeros((self.rows, self.n))
        self.t = np.zeros(self.rows, dtype=np.int64)
        self._w = np.full((self.rows, self.n), 1.0 / self.n)
        self._fresh = np.zeros(self.rows, dtype=bool)

    def reset(self, rows: np.ndarray) -> None:
        self.cum_loss[rows] = 0.0
        self.t[rows] = 0
        self._fresh[rows] = False

    def eta(self, rows: np.ndarray) -> np.ndarray:
        t = self.t[rows]
        with np.errstate(divide="ignore"):
            return np.where(t > 0, np.sqrt(8.0 * math.log(self.n) / t), 0.0)

    def weights(self, rows: np.ndarray) -> np.ndarray:
        stale = rows[~self._fresh[rows]]
        if stale.size:
            cum = self.cum_loss[stale]
            z = -self.eta(stale)[:, None] * (cum - cum.min(axis=1)[:, None])
            w = np.exp(z)
            self._w[stale] = w / w.sum(axis=1)[:, None]
            self._fresh[stale] = True
        return self._w[rows]

    def update(
        self, rows: np.ndarray, loss: np.ndarray, weights_used: np.ndarray, valid: np.ndarray, counts: np.ndarray
    ) -> None:
        """As :meth:`NormalHedgeBank.update`: cumulative losses += ℓ, in v order, where valid."""
        _accumulate(self.cum_loss, rows, loss)
        _count(self.t, rows, valid, counts)
        self._fresh[rows] = False


_ONES: dict[int, np.ndarray] = {}


def _ones(v: int) -> np.ndarray:
    """A [1, v] row of ones (cached)."""
    if v not in _ONES:
        _ONES[v] = np.ones((1, v))
    return _ONES[v]


def _accumulate(state: np.ndarray, rows: np.ndarray, delta: np.ndarray) -> None:
    """state[rows[b, v]] += delta[b, v] one v at a time (the per-request order of additions, so the same
    roundings); ``rows`` [b] when all of a slot's entries go to one row. Distinct b never share a row."""
    if rows.ndim == 1:
        acc = state[rows]
        for v in range(delta.shape[1]):
            acc += delta[:, v]
        state[rows] = acc
        return
    for v in range(delta.shape[1]):
        state[rows[:, v]] += delta[:, v]


def _count(t: np.ndarray, rows: np.ndarray, valid: np.ndarray, counts: np.ndarray) -> None:
    if rows.ndim == 1:
        t[rows] += counts
    else:
        np.add.at(t, rows[valid], 1)


class QueuedBatch:
    """``Queued`` for a batch of slots: one learner row per slot, losses applied as they complete."""

    def __init__(self, bank: NormalHedgeBank | HedgeBank) -> None:
        self.bank = bank
        self.per_slot = 1

    def reset(self, slots: np.ndarray) -> None:
        self.bank.reset(slots)

    def set_prior(self, slots: np.ndarray, prior: np.ndarray) -> None:
        self.bank.set_prior(slots, prior)  # type: ignore[union-attr]

    def predict(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(learner row, weights) of each slot's next decision."""
        return slots, self.bank.weights(slots)

    def release(self, slots: np.ndarray, rows: np.ndarray) -> None:
        return None

    def weights(self, slots: np.ndarray) -> np.ndarray:
        return self.bank.weights(slots)


class BoldBatch:
    """``Bold`` for a batch of slots: rows slot·(max_delay+1) + j, j the learner; the lowest free one predicts."""

    def __init__(self, bank: NormalHedgeBank | HedgeBank, slots: int, max_delay: int) -> None:
        if isinstance(max_delay, bool) or not isinstance(max_delay, int) or max_delay < 0:
            raise ValueError(f"max_delay must be an int >= 0, got {max_delay!r}")
        self.per_slot = max_delay + 1
        if bank.rows != slots * self.per_slot:
            raise ValueError(f"a BOLD bank needs slots*(max_delay+1) = {slots * self.per_slot} rows, got {bank.rows}")
        self.bank, self.max_delay = bank, max_delay
        self.busy = np.zeros((slots, self.per_slot), dtype=bool)
        self.created = np.zeros(slots, dtype=np.int64)  # learners created so far (Bold starts with one)

    def reset(self, slots: np.ndarray) -> None:
        self.bank.reset((slots[:, None] * self.per_slot + np.arange(self.per_slot)).ravel())
        self.busy[slots] = False
        self.created[slots] = 1

    def set_prior(self, slots: np.ndarray, prior: np.ndarray) -> None:
        """Every learner row of the slots starts from ``prior`` ([len(slots), N]), as each of Bold's learners."""
        rows = (slots[:, None] * self.per_slot + np.arange(self.per_slot)).ravel()
        self.bank.set_prior(rows, np.repeat(np.asarray(prior, dtype=np.float64), self.per_slot, axis=0))  # type: ignore[union-attr]

    def predict(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        created = self.created[slots]
        free = ~self.busy[slots] & (np.arange(self.per_slot) < created[:, None])
        has = free.any(axis=1)
        j = np.where(has, free.argmax(axis=1), created)  # no free learner: a fresh one joins the bank
        full = ~has & (created > self.max_delay)
        if full.any():
            raise RuntimeError(
                f"BOLD: slot {int(slots[full][0])} has {self.max_delay + 1} predictions awaiting feedback, more than "
                f"max_delay={self.max_delay}; release tickets whose feedback is complete or raise max_delay"
            )
        self.created[slots] = np.maximum(created, j + 1)
        self.busy[slots, j] = True
        rows = slots * self.per_slot + j
        return rows, self.bank.weights(rows)

    def release(self, slots: np.ndarray, rows: np.ndarray) -> None:
        self.busy[slots, rows - slots * self.per_slot] = False

    def weights(self, slots: np.ndarray) -> np.ndarray:
        return self.bank.weights(slots * self.per_slot)  # Bold.weights: its first learner's
