"""Full-information experts learners and the delayed-feedback reductions HedgeSpec uses.

Base learners (full information: every drafter's loss is observed) expose ``weights()`` and
``update(loss_vector, weights_used=None)``:

* :class:`NormalHedge` (Chaudhuri, Freund, Hsu 2009): parameter-free; the default. An optional prior π over the
  experts warm-starts it (see the class docstring for the regret bound that then holds).
* :class:`Hedge`: exponential weights with the anytime step η_t = sqrt(8 ln N / t).
* :class:`LabelEfficientHedge`: exponential weights for importance-weighted losses ℓ·Z/ε (label-efficient
  prediction, Cesa-Bianchi, Lugosi & Stoltz 2005), step η_t = sqrt(ε ln N / t).

Delayed-feedback reductions (Joulani, György, Szepesvári 2013, as the paper applies them) expose
``predict() -> (ticket, weights)``, ``feedback(ticket, loss, weights_used)`` and ``release(ticket)``:

* :class:`Queued`: one base learner; completed losses are fed in FIFO order; predictions use the current
  weights (the "stochastic setting" reduction).
* :class:`Bold`: up to ``max_delay + 1`` independent base learners; each prediction is made by a learner
  with no outstanding feedback, and the losses of that prediction are returned to the same learner.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

_E = math.e


def _check_n(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n (number of experts/drafters) must be an int >= 1, got {n!r}")
    return int(n)


def _check_loss(loss: object, n: int, name: str = "loss_vector") -> np.ndarray:
    arr = loss if type(loss) is np.ndarray and loss.dtype == np.float64 else np.asarray(loss, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    if not math.isfinite(arr.sum()):  # one reduction: NaN or ±inf anywhere makes the sum non-finite
        raise ValueError(f"{name} contains NaN or inf")
    return arr


class Learner(Protocol):
    n: int

    def weights(self) -> np.ndarray: ...

    def update(self, loss_vector: np.ndarray, weights_used: np.ndarray | None = None) -> None: ...


_SMALL_N = 48  # below this, plain-Python floats beat numpy's per-call overhead


def _bracketed_newton(evaluate, slope, lo: float, hi: float, s0: float | None, tol: float, max_iter: int):  # type: ignore[no-untyped-def]
    """Root of a convex increasing g in [lo, hi] (g(lo) <= 0 <= g(hi)) by Newton with bisection fallback.

    ``evaluate(s) -> (g, z, zmax, e, tot)`` and ``slope(e, tot) -> g'(s)``; starts at ``s0`` when it lies in the
    bracket (warm start from the previous scale), else at ``hi``. Returns (s, z, zmax) of the last evaluation.
    """
    s = hi if s0 is None or not (lo < s0 <= hi) else s0
    for _ in range(max_iter):
        g, z, zmax, e, tot = evaluate(s)
        if abs(g) <= tol:
            break
        if g > 0:
            hi = s
        else:
            lo = s
        s_new = s - g / slope(e, tot)
        # Newton on a convex increasing g converges monotonically from the right; from the left it
        # overshoots to the right once. Anything outside the current bracket falls back to bisection.
        s = s_new if lo < s_new < hi else 0.5 * (lo + hi)
    return s, z, zmax


def _scale_root(a, s0: float | None, tol: float, max_iter: int):  # type: ignore[no-untyped-def]
    """Root s of g(s) = log Σ_i exp(a_i s) − ln N − 1 (a = [R]_+², list or ndarray); returns (s, z, zmax)."""
    target = math.log(len(a)) + 1.0
    if isinstance(a, list):
        amax = max(a)

        def evaluate(s):  # type: ignore[no-untyped-def]
            z = [x * s for x in a]
            zmax = max(z)
            e = [math.exp(v - zmax) for v in z]
            tot = math.fsum(e)
            return zmax + math.log(tot) - target, z, zmax, e, tot

        def slope(e, tot):  # type: ignore[no-untyped-def]
            return math.fsum(x * y for x, y in zip(a, e)) / tot
    else:
        amax = float(a.max())
        evaluate, slope = _array_root_fns(a, 0.0, target)
    # g(hi) >= 0 >= g(lo): NormalHedge scale bracket in s = 1/(2c)
    return _bracketed_newton(evaluate, slope, 1.0 / amax, target / amax, s0, tol, max_iter)


def _array_root_fns(a: np.ndarray, b: np.ndarray | float, target: float):  # type: ignore[no-untyped-def]
    """``evaluate``/``slope`` of g(s) = log Σ_i exp(a_i s + b_i) − target for :func:`_bracketed_newton`."""

    def evaluate(s):  # type: ignore[no-untyped-def]
        z = a * s + b if not isinstance(b, float) else a * s
        zmax = float(z.max())
        e = np.exp(z - zmax)
        tot = float(e.sum())
        return zmax + math.log(tot) - target, z, zmax, e, tot

    def slope(e, tot):  # type: ignore[no-untyped-def]
        return float((a * e).sum()) / tot

    return evaluate, slope


def normalhedge_scale(positive_regrets: np.ndarray, tol: float = 1e-13, max_iter: int = 200) -> float:
    """Solve (1/N) Σ_i exp(R_i² / 2c) = e for c > 0, given R_i = [R_i]_+ (not all zero).

    Works in s = 1/(2c): g(s) = logsumexp(a s) − ln N − 1 with a_i = R_i² is convex and increasing;
    Newton's method inside the bracket s ∈ [1/r², (1 + ln N)/r²] (c ∈ [r²/(2(1+ln N)), r²/2],
    r = max R_i), with bisection as the fallback. Every exponent a_i s is ≤ 1 + ln N, so
    nothing overflows for regrets of 1e6 and beyond.
    """
    a = np.asarray(positive_regrets, dtype=np.float64) ** 2
    s, _, _ = _scale_root(a, None, tol, max_iter)
    return 1.0 / (2.0 * s)


def check_prior(prior: object, n: int, name: str = "prior") -> np.ndarray:
    """A prior over ``n`` experts as a float array: shape (n,), finite, >= 0, summing to 1 (within 1e-6)."""
    try:
        arr = np.array(prior, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a sequence of {n} probabilities, got {prior!r}") from err
    if arr.shape != (n,):
        raise ValueError(f"{name} must have one probability per drafter, shape ({n},), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {arr.tolist()}")
    if abs(float(arr.sum()) - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1, got sum {float(arr.sum())!r}; normalise it")
    return arr / arr.sum()


def check_alpha(alpha: object, name: str = "prior_alpha") -> float:
    """The weight of the uniform law in a mixed prior, in (0, 1]."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0.0 < alpha <= 1.0:
        raise ValueError(
            f"{name} (weight of the uniform law mixed into the prior, so that every drafter keeps at least "
            f"{name}/N) must be in (0, 1], got {alpha!r}"
        )
    return float(alpha)


def mix_prior(p: np.ndarray | None, n: int, alpha: float) -> np.ndarray:
    """π = (1 − α) p + α/N (p = None: uniform), so π_i >= α/N and ln(1/π_i) <= ln(N/α)."""
    u = np.full(n, 1.0 / n)
    return u if p is None else (1.0 - alpha) * check_prior(p, n) + alpha * u


def _scale_root_prior(a: np.ndarray, b: np.ndarray, s0: float | None, tol: float, max_iter: int):  # type: ignore[no-untyped-def]
    """Root s of g(s) = log Σ_i exp(a_i s + b_i) − 1 (a = [R]_+², b = ln π); returns (s, z, zmax).

    The prior's scale equation Σ_i π_i exp(a_i s) = e; with b = −ln N it is :func:`_scale_root`'s. g is convex and
    increasing; g(1/amax) <= amax/amax − 1 = 0 and g((1 − b_j)/amax) >= 0 for j = argmax a, so the same
    Newton iteration with bisection fallback works inside that bracket.
    """
    j = int(a.argmax())
    amax = float(a[j])
    evaluate, slope = _array_root_fns(a, b, 1.0)
    return _bracketed_newton(evaluate, slope, 1.0 / amax, (1.0 - float(b[j])) / amax, s0, tol, max_iter)


def small_normalhedge_weights(regret: list[float], s0: float | None) -> tuple[list[float] | None, float | None]:
    """NormalHedge's weights for a few experts (N <= 48) in Python floats: (w, s) with s = 1/(2c) the root of the
    scale equation warm-started at ``s0``, or (None, s0) when no regret is positive (uniform weights)."""
    pos = [r if r > 0.0 else 0.0 for r in regret]
    a = [x * x for x in pos]
    if max(a) == 0.0:
        return None, s0
    s, z, zmax = _scale_root(a, s0, 1e-13, 200)
    w = [x * math.exp(v - zmax) for x, v in zip(pos, z)]  # ∝ ([R]_+/c) exp([R]_+²/2c)
    tot = math.fsum(w)
    return [x / tot for x in w], s


def _uniform_or(prior: object, n: int) -> np.ndarray | None:
    """A checked, strictly positive prior, or None when it is uniform (today's code path, bit for bit)."""
    if prior is None:
        return None
    pi = check_prior(prior, n)
    if np.any(pi <= 0.0):
        raise ValueError(f"prior must be > 0 for every drafter (ln 1/π_i bounds the regret), got {pi.tolist()}")
    return None if np.all(pi == pi[0]) else pi


class NormalHedge:
    """NormalHedge: R_i += ℓ_A − ℓ_i, w_i ∝ π_i ([R_i]_+/c) exp([R_i]_+² / 2c), c > 0 solving
    Σ_i π_i exp([R_i]_+² / 2c) = e; no positive regret: w = π. π uniform (the default) is Chaudhuri, Freund & Hsu
    (2009)'s algorithm, run by the same code as without a prior.

    Regret against drafter i with a prior π (all π_i > 0), after t rounds of losses in [0, 1]:

    * every round, each term of the scale equation is at most its sum e, so π_i exp([R_i]_+²/2c_t) <= e, i.e.
      R_i <= sqrt(2 c_t (1 + ln(1/π_i))): the scale c_t and ln(1/π_i) in place of ln N;
    * for a rational prior π_i = m_i / M this learner *is* NormalHedge over M experts, m_i identical copies of
      drafter i (copies have equal regrets, so their weights add up to w_i, and (1/M) Σ_copies = Σ_i π_i). At
      least a π_i-fraction of the M experts (drafter i's copies) have cumulative loss <= drafter i's, so the
      regret to drafter i is at most the regret to the top π_i-quantile, and the ε-quantile bound of Chaudhuri,
      Freund & Hsu (2009, Thm 1) with ε = π_i gives: regret to drafter i is O(sqrt(t (1 + ln(1/π_i))) + ln² M)
      (their leading term sqrt(3 (1 + 50δ) t (1 + ln(1/ε))), δ ∈ (0, 1/2], plus a lower-order term in ln M and
      1/δ). ln N becomes ln(1/π_i) in the leading term only; the lower-order term grows with ln M, the
      prior's common denominator, and nothing is claimed for priors not on a grid of 1/M.

    Uniform π gives ln(1/π_i) = ln N and M = N: the usual bound. Mixing with uniform, π = (1 − α)p + α/N
    (:func:`mix_prior`), keeps ln(1/π_i) <= ln(N/α) for every drafter, whatever p.
    """

    def __init__(self, n: int, prior: object = None) -> None:
        self.n = _check_n(n)
        self.regret = np.zeros(self.n)
        self.t = 0
        self._w: np.ndarray | None = None
        self._s: float | None = None
        self.scale: float = float("nan")
        self.prior = _uniform_or(prior, self.n)  # None: uniform
        self._logpi = None if self.prior is None else np.log(self.prior)

    def weights(self) -> np.ndarray:
        if self._w is None:
            self._w = self._compute_weights() if self.prior is None else self._prior_weights()
        return self._w

    def _prior_weights(self) -> np.ndarray:
        pos = np.maximum(self.regret, 0.0)
        a = pos * pos
        if not np.any(a > 0.0):  # no positive regret: the prior
            self.scale = float("nan")
            return self.prior.copy()
        self._s, z, zmax = _scale_root_prior(a, self._logpi, self._s, 1e-13, 200)
        w = pos * np.exp(z - zmax)  # ∝ π_i ([R]_+/c) exp([R]_+²/2c)
        self.scale = 1.0 / (2.0 * self._s)
        return w / w.sum()

    def _compute_weights(self) -> np.ndarray:
        n = self.n
        if n <= _SMALL_N:
            w, s = small_normalhedge_weights(self.regret.tolist(), self._s)
            if w is None:  # no positive regret: uniform
                self.scale = float("nan")
                return np.full(n, 1.0 / n)
            self._s = s
            self.scale = 1.0 / (2.0 * s)
            return np.array(w)
        pos_arr = np.maximum(self.regret, 0.0)
        a_arr = pos_arr * pos_arr
        if not np.any(a_arr > 0.0):
            self.scale = float("nan")
            return np.full(n, 1.0 / n)
        self._s, z_arr, zmax_f = _scale_root(a_arr, self._s, 1e-13, 200)
        w_arr = pos_arr * np.exp(z_arr - zmax_f)
        self.scale = 1.0 / (2.0 * self._s)
        return w_arr / w_arr.sum()

    def update(self, loss_vector: np.ndarray, weights_used: np.ndarray | None = None) -> None:
        loss = _check_loss(loss_vector, self.n)
        w = self.weights() if weights_used is None else _check_loss(weights_used, self.n, "weights_used")
        self.regret += float(w @ loss) - loss  # instantaneous regret to each expert, ℓ_A − ℓ_i
        self.t += 1
        self._w = None


class Hedge:
    """Exponential weights, w_i ∝ exp(−η_t L_i) with the anytime step η_t = sqrt(8 ln N / t)."""

    def __init__(self, n: int) -> None:
        self.n = _check_n(n)
        self.cum_loss = np.zeros(self.n)
        self.t = 0
        self._w: np.ndarray | None = None

    @property
    def eta(self) -> float:
        return math.sqrt(8.0 * math.log(self.n) / self.t) if self.t > 0 else 0.0

    def weights(self) -> np.ndarray:
        if self._w is None:
            z = -self.eta * (self.cum_loss - self.cum_loss.min())
            w = np.exp(z)
            self._w = w / w.sum()
        return self._w

    def update(self, loss_vector: np.ndarray, weights_used: np.ndarray | None = None) -> None:
        self.cum_loss += _check_loss(loss_vector, self.n)
        self.t += 1
        self._w = None


class LabelEfficientHedge(Hedge):
    """Exponential weights on importance-weighted losses ℓ̃_t = ℓ_t Z_t / ε, Z_t ~ Bernoulli(ε), ℓ_t ∈ [0, 1]^N.

    Round t (1-based, every round counts, queried or not) uses η_t = sqrt(ε ln N / t). This is FTRL with the
    entropic regulariser scaled by 1/η_t (non-increasing steps) on non-negative losses, whose regret is at most
    ln N / η_{T+1} + Σ_t (η_t / 2) Σ_i w_{t,i} ℓ̃_{t,i}² (Orabona 2019, "A Modern Introduction to Online
    Learning", FTRL with time-varying regularisers and the local-norm bound of exponential weights). Since Z_t is
    drawn independently of w_t and ℓ_t, E[Σ_i w_{t,i} ℓ̃_{t,i}²] ≤ 1/ε and E[ℓ̃_t] = ℓ_t, so for every fixed
    expert i, E[Σ_t w_t·ℓ_t − Σ_t ℓ_{t,i}] ≤ sqrt((T+1) ln N / ε) + sqrt(T ln N / ε) ≤ 2 sqrt((T+1) ln N / ε).
    The fixed-horizon step η = sqrt(2 ε ln N / T) gives sqrt(2 T ln N / ε) (Cesa-Bianchi, Lugosi & Stoltz 2005;
    Cesa-Bianchi & Lugosi 2006, Thm 6.1). ε = 1 is full information with this second-order step (not
    :class:`Hedge`'s sqrt(8 ln N / t)).
    """

    def __init__(self, n: int, epsilon: float) -> None:
        super().__init__(n)
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0.0 < float(epsilon) <= 1.0:
            raise ValueError(f"epsilon (probability of observing a round's losses) must be in (0, 1], got {epsilon!r}")
        self.epsilon = float(epsilon)

    @property
    def eta(self) -> float:
        return math.sqrt(self.epsilon * math.log(self.n) / (self.t + 1))


LEARNERS: dict[str, Callable[[int], Learner]] = {"normal_hedge": NormalHedge, "hedge": Hedge}


def make_learner(name: str, n: int) -> Learner:
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; expected one of {sorted(LEARNERS)}")
    return LEARNERS[name](n)


class Queued:
    """Delayed feedback through one base learner and a FIFO queue (the "queue" reduction for delayed feedback)."""

    def __init__(self, base: Learner) -> None:
        self.base = base
        self.n = base.n
        self._queue: deque[tuple[np.ndarray, np.ndarray | None]] = deque()
        self._next = 0

    def predict(self) -> tuple[int, np.ndarray]:
        self._drain()
        ticket, self._next = self._next, self._next + 1
        return ticket, self.base.weights()

    def feedback(self, ticket: int, loss: np.ndarray, weights_used: np.ndarray | None = None) -> None:
        self._queue.append((np.asarray(loss, dtype=np.float64), weights_used))
        self._drain()

    def release(self, ticket: int) -> None:
        return None

    def _drain(self) -> None:
        while self._queue:
            loss, w = self._queue.popleft()
            self.base.update(loss, w)

    def weights(self) -> np.ndarray:
        self._drain()
        return self.base.weights()


class Bold:
    """BOLD (Joulani et al. 2013): one base learner per outstanding prediction, at most ``max_delay + 1``."""

    def __init__(self, factory: Callable[[], Learner], max_delay: int) -> None:
        if not isinstance(max_delay, int) or max_delay < 0:
            raise ValueError(f"max_delay must be an int >= 0, got {max_delay!r}")
        self.factory = factory
        self.max_delay = max_delay
        self.learners: list[Learner] = [factory()]
        self.n = self.learners[0].n
        self._busy: dict[int, int] = {}  # ticket -> learner index
        self._next = 0

    def predict(self) -> tuple[int, np.ndarray]:
        busy = set(self._busy.values())
        free = next((j for j in range(len(self.learners)) if j not in busy), None)
        if free is None:
            if len(self.learners) > self.max_delay:
                raise RuntimeError(
                    f"BOLD: {len(self._busy)} predictions are awaiting feedback, more than max_delay={self.max_delay}; "
                    "release tickets whose feedback is complete or raise max_delay"
                )
            self.learners.append(self.factory())
            free = len(self.learners) - 1
        ticket, self._next = self._next, self._next + 1
        self._busy[ticket] = free
        return ticket, self.learners[free].weights()

    def feedback(self, ticket: int, loss: np.ndarray, weights_used: np.ndarray | None = None) -> None:
        if ticket not in self._busy:
            raise ValueError(f"BOLD: unknown or released ticket {ticket}")
        self.learners[self._busy[ticket]].update(loss, weights_used)

    def release(self, ticket: int) -> None:
        self._busy.pop(ticket, None)

    def weights(self) -> np.ndarray:
        return self.learners[0].weights()


DelayedLearner = Queued | Bold
