"""NormalHedge, Hedge and the delayed-feedback reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hedgespec.learners import Bold, Hedge, NormalHedge, Queued, make_learner, normalhedge_scale


def _scale_residual(regret: np.ndarray, c: float) -> float:
    pos = np.maximum(regret, 0.0)
    # relative error of (1/N) Σ exp(R²/2c) = e, computed stably in log space
    z = pos**2 / (2 * c)
    m = z.max()
    return abs(m + math.log(np.exp(z - m).mean()) - 1.0)


@pytest.mark.parametrize("n", [2, 7, 64, 1024])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3, 1e6])
def test_normalhedge_scale_equation_and_numerics(n, scale):
    rng = np.random.default_rng(n)
    regret = scale * rng.standard_normal(n)
    regret[0] = abs(regret[0]) + scale * 1e-3  # at least one positive
    c = normalhedge_scale(np.maximum(regret, 0.0))
    assert np.isfinite(c) and c > 0
    assert _scale_residual(regret, c) < 1e-9
    nh = NormalHedge(n)
    nh.regret = regret.copy()
    w = nh.weights()
    assert np.all(np.isfinite(w)) and w.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(w[regret <= 0] == 0)


def test_normalhedge_uniform_without_positive_regret():
    nh = NormalHedge(5)
    assert np.allclose(nh.weights(), 0.2)
    nh.regret = -np.arange(5.0)
    assert np.allclose(nh.weights(), 0.2)


def test_normalhedge_weights_follow_the_formula():
    """w_i ∝ (R_i/c) exp(R_i²/2c), checked against a direct evaluation at small regrets."""
    nh = NormalHedge(4)
    nh.regret = np.array([0.5, 1.0, -0.3, 0.2])
    w = nh.weights()
    c = nh.scale
    pos = np.maximum(nh.regret, 0)
    direct = pos / c * np.exp(pos**2 / (2 * c))
    assert np.allclose(w, direct / direct.sum())


def _play(learner, losses):
    """Total learner loss (mixture) minus best expert's total loss."""
    total = 0.0
    for row in losses:
        w = learner.weights()
        total += float(w @ row)
        learner.update(row, w)
    return total - losses.sum(axis=0).min()


def _adaptive_adversary(learner, n, t):
    """Gives loss 1 to the currently heaviest expert, 0 to the others (a classic adversarial sequence)."""
    total, cum = 0.0, np.zeros(n)
    for _ in range(t):
        w = learner.weights()
        row = np.zeros(n)
        row[int(np.argmax(w))] = 1.0
        total += float(w @ row)
        cum += row
        learner.update(row, w)
    return total - cum.min()


@pytest.mark.parametrize("name", ["normal_hedge", "hedge"])
@pytest.mark.parametrize("n", [2, 7, 28])
def test_regret_is_order_sqrt_t_log_n(name, n):
    t = 2000
    bound = 2.0 * math.sqrt(t * math.log(n)) + math.log(n) ** 2 + 1
    rng = np.random.default_rng(n)
    # stochastic: Bernoulli losses, expert 0 slightly better
    means = np.full(n, 0.5)
    means[0] = 0.4
    stoch = (rng.random((t, n)) < means).astype(float)
    assert _play(make_learner(name, n), stoch) <= bound
    # adversarial (oblivious): alternating blocks that punish each half in turn
    adv = np.zeros((t, n))
    for s in range(t):
        adv[s, (np.arange(n) + (s // 7)) % 2 == 0] = 1.0
    assert _play(make_learner(name, n), adv) <= bound
    # adversarial (adaptive)
    assert _adaptive_adversary(make_learner(name, n), n, t) <= bound


def _drive(reduction_or_learner, losses):
    ws = []
    for row in losses:
        if hasattr(reduction_or_learner, "predict"):
            ticket, w = reduction_or_learner.predict()
            w = w.copy()
            reduction_or_learner.feedback(ticket, row, w)
            reduction_or_learner.release(ticket)
        else:
            w = reduction_or_learner.weights().copy()
            reduction_or_learner.update(row, w)
        ws.append(w)
    return np.array(ws)


@pytest.mark.parametrize("cls", [NormalHedge, Hedge])
def test_reductions_equal_base_when_delay_is_zero(cls):
    losses = np.random.default_rng(9).random((300, 6))
    base = _drive(cls(6), losses)
    assert np.array_equal(_drive(Queued(cls(6)), losses), base)
    assert np.array_equal(_drive(Bold(lambda: cls(6), max_delay=0), losses), base)
    assert np.array_equal(_drive(Bold(lambda: cls(6), max_delay=5), losses), base)


def test_bold_routes_feedback_to_the_predicting_learner():
    bold = Bold(lambda: NormalHedge(3), max_delay=2)
    t0, _ = bold.predict()
    t1, _ = bold.predict()  # t0 outstanding -> a second learner
    t2, _ = bold.predict()
    assert len(bold.learners) == 3
    with pytest.raises(RuntimeError, match="max_delay=2"):
        bold.predict()
    bold.feedback(t1, np.array([1.0, 0.0, 0.0]))
    assert bold.learners[1].t == 1 and bold.learners[0].t == 0 and bold.learners[2].t == 0
    bold.release(t0)
    t3, _ = bold.predict()  # learner 0 is free again
    bold.feedback(t3, np.zeros(3))
    assert bold.learners[0].t == 1
    with pytest.raises(ValueError, match="unknown or released ticket"):
        bold.feedback(t0, np.zeros(3))


def test_queued_feeds_in_order():
    q = Queued(Hedge(2))
    ticket, _ = q.predict()
    q.feedback(ticket, np.array([1.0, 0.0]))
    q.feedback(ticket, np.array([1.0, 0.0]))
    assert q.base.t == 2 and q.weights()[1] > q.weights()[0]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: NormalHedge(0), "n \\(number of experts"),
        (lambda: Hedge(-1), "n \\(number of experts"),
        (lambda: NormalHedge(3).update(np.ones(2)), "loss_vector must have shape"),
        (lambda: NormalHedge(2).update(np.array([np.nan, 0.0])), "loss_vector contains NaN"),
        (lambda: NormalHedge(2).update(np.zeros(2), np.ones(3)), "weights_used must have shape"),
        (lambda: make_learner("adam", 3), "unknown learner"),
        (lambda: Bold(lambda: Hedge(2), -1), "max_delay"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
