"""Label-efficient HedgeSpec (Cesa-Bianchi, Lugosi & Stoltz 2005): evaluate the pool with probability ε per round.

Truths used: ε = 1 against HedgeSpec composed by hand from the ledger, the queue reduction and NormalHedge;
the exact expectation of the fed losses over every evaluation-coin sequence of a small request (enumeration);
the regret bound of the label-efficient Hedge step on fixed-seed oblivious sequences.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hedgespec.acceptance import eal_loss
from hedgespec.feedback import FeedbackLedger
from hedgespec.learners import Hedge, LabelEfficientHedge, NormalHedge, Queued
from hedgespec.selectors import HedgeSpec, make_selector
from hedgespec.selectors._rng import argmax_random_ties, request_rng
from hedgespec.sim.experiments import SimConfig, run_pool
from hedgespec.sim.greedy import replay_greedy, run_lengths
from hedgespec.types import Decision, RequestContext, RoundFeedback


def _table(n=4, total=200, seed=0, binary=True):
    rng = np.random.default_rng(seed)
    rates = rng.uniform(0.2, 0.95, n)
    g = (rng.random((total, n)) < rates).astype(float)
    if not binary:
        g = np.clip(0.8 * g + 0.2 * rng.random((total, n)), 0.0, 1.0)
    return g, run_lengths(g > 0.5)


def _hand_hedgespec(gamma, runs, k, request_id, seed=0):
    """The paper's HedgeSpec (ETAP, queue, NormalHedge, argmax) composed directly from its parts."""
    total, n = gamma.shape
    ledger, red, rng = FeedbackLedger(n, k), Queued(NormalHedge(n)), request_rng(seed, request_id)
    chosen, weights, s = [], [], 0
    while s < total:
        ticket, w = red.predict()
        w = np.array(w, copy=True)
        i = argmax_random_ties(w, rng)
        chosen.append(i)
        weights.append(tuple(float(x) for x in w))
        emitted = int(min(runs[s, i], k, total - s - 1)) + 1
        for c in ledger.add_round(s, gamma[s : s + emitted], ticket):
            red.feedback(c.ticket, c.loss, w)
        s += emitted
    return chosen, weights


@pytest.mark.parametrize(("seed", "k", "binary"), [(0, 3, True), (1, 7, False), (2, 1, True)])
def test_epsilon_one_is_the_papers_hedgespec(seed, k, binary):
    gamma, runs = _table(seed=seed, binary=binary)
    want_chosen, want_weights = _hand_hedgespec(gamma, runs, k, request_id=seed)
    for sel in (HedgeSpec(epsilon=1.0), HedgeSpec(epsilon=1, evaluation="random"), make_selector("hedgespec")):
        res = replay_greedy(gamma, runs, sel, k, RequestContext(request_id=seed))
        assert res.chosen == want_chosen and res.weights == want_weights
        assert res.evaluated == res.rounds and sel.name == "hedgespec"
        assert "epsilon" not in sel.state_dict()  # the ε = 1 selector reports exactly what it always did


class _Coins:
    """A coin stream that replays a fixed sequence (1: evaluate), counting how many coins were drawn."""

    def __init__(self, seq):
        self.seq, self.used = list(seq), 0

    def random(self):
        z = self.seq[self.used]
        self.used += 1
        return 0.0 if z else 1.0  # 0.0 < ε always; 1.0 < ε never


def _run_with_coins(sel, gamma, runs, k, coins):
    """Replay a greedy table with a fixed coin sequence; returns the loss fed at each learner update, in order."""
    total, n = gamma.shape
    sel.begin_request(n, k, RequestContext(request_id=1))
    sel._coins = coins
    fed = []
    base_feedback = sel.reduction.feedback

    def record(ticket, loss, w=None):
        fed.append(np.array(loss, dtype=float))
        base_feedback(ticket, loss, w)

    sel.reduction.feedback = record
    s, sel.chosen = 0, []
    while s < total:
        d = sel.select()
        sel.chosen.append(d.drafter)
        emitted = int(min(runs[s, d.drafter], k, total - s - 1)) + 1
        sel.observe(RoundFeedback(d, emitted - 1, emitted, s, gamma[s : s + emitted] if d.evaluate else None))
        s += emitted
    sel.end_request()
    return fed


def _expected_fed(objective, eps, gamma, runs, k, learner="normal_hedge"):
    """E[fed loss at each learner update] over every coin sequence, by enumeration (distinct used prefixes)."""
    total = gamma.shape[0]
    seen, mean, n_fed, paths = set(), None, None, set()
    for seq in itertools.product((0, 1), repeat=total):  # at most one coin per round, ≤ total rounds
        coins = _Coins(seq)
        sel = HedgeSpec(objective=objective, epsilon=eps, learner=learner)
        fed = _run_with_coins(sel, gamma, runs, k, coins)
        prefix = seq[: coins.used]
        if prefix in seen:
            continue
        seen.add(prefix)
        paths.add(tuple(sel.chosen))
        p = math.prod(eps if z else 1.0 - eps for z in prefix)
        arr = np.stack(fed)
        mean = p * arr if mean is None else mean + p * arr
        n_fed = len(fed) if n_fed is None else n_fed
        assert len(fed) == n_fed  # every position is one learner round, observed or not
    total_p = sum(math.prod(eps if z else 1.0 - eps for z in pre) for pre in seen)
    return mean, total_p, len(paths)


@pytest.mark.parametrize("learner", ["normal_hedge", "hedge"])
@pytest.mark.parametrize("eps", [0.5, 0.25])
def test_etap_losses_are_unbiased_exact_enumeration(eps, learner):
    gamma, runs = _table(n=3, total=11, seed=3, binary=False)
    mean, total_p, paths = _expected_fed("etap", eps, gamma, runs, 1, learner)
    assert total_p == pytest.approx(1.0, abs=1e-12) and paths > 3  # the decisions really depend on the coins
    np.testing.assert_allclose(mean, 1.0 - gamma, atol=1e-12)  # E[ℓ Z/ε] = ℓ at every position


def test_eal_losses_are_unbiased_under_greedy_exact_enumeration():
    k = 2
    gamma, runs = _table(n=3, total=11, seed=5, binary=False)
    mean, total_p, paths = _expected_fed("eal", 0.5, gamma, runs, k)
    assert total_p == pytest.approx(1.0, abs=1e-12) and paths > 1
    want = np.stack([eal_loss(gamma[t : t + k].T, k) for t in range(len(gamma) - k + 1)])  # complete windows
    np.testing.assert_allclose(mean, want, atol=1e-12)


def test_fed_losses_are_zero_or_scaled_by_one_over_epsilon():
    gamma, runs = _table(n=3, total=40, seed=1, binary=False)
    sel = HedgeSpec(epsilon=0.25)
    fed = _run_with_coins(sel, gamma, runs, 3, _Coins([1, 0, 0, 1] * 20))
    for t, loss in enumerate(fed):
        assert np.allclose(loss, 0.0) or np.allclose(loss, (1.0 - gamma[t]) / 0.25)
    assert any(np.allclose(x, 0.0) for x in fed) and not all(np.allclose(x, 0.0) for x in fed)


def test_evaluation_rate_is_epsilon_and_skipped_rounds_need_no_gamma():
    gamma, runs = _table(n=4, total=3000, seed=2)
    for eps in (0.5, 0.25, 0.1):
        res = replay_greedy(gamma, runs, HedgeSpec(epsilon=eps), 3, RequestContext(request_id=7))
        assert abs(res.eval_rate - eps) < 0.05, (eps, res.eval_rate)  # fixed seed; sd ≈ 0.01 at ~1500 rounds
    sel = HedgeSpec(epsilon=0.25)
    sel.begin_request(4, 3, RequestContext(request_id=7))
    d = sel.select()
    while d.evaluate:
        sel.observe(RoundFeedback(d, 0, 1, sel.ledger.verified, gamma[sel.ledger.verified : sel.ledger.verified + 1]))
        d = sel.select()
    sel.observe(RoundFeedback(d, 0, 1, sel.ledger.verified, None))  # skipped: only the outcome comes back
    d = sel.select()
    while not d.evaluate:
        sel.observe(RoundFeedback(d, 0, 1, sel.ledger.verified, None))
        d = sel.select()
    with pytest.raises(ValueError, match="asked for this round's evaluation"):
        sel.observe(RoundFeedback(d, 0, 1, sel.ledger.verified, None))


def test_decisions_do_not_depend_on_unrequested_gamma():
    """A backend that evaluates every round anyway (simulator, trace mode) leaves the decisions unchanged."""
    gamma, runs = _table(n=4, total=300, seed=4, binary=False)
    asked = replay_greedy(gamma, runs, HedgeSpec(epsilon=0.25), 3, RequestContext(request_id=2))
    sel = HedgeSpec(epsilon=0.25)
    sel.begin_request(4, 3, RequestContext(request_id=2))
    chosen, s = [], 0
    while s < len(gamma):
        d = sel.select()
        emitted = int(min(runs[s, d.drafter], 3, len(gamma) - s - 1)) + 1
        sel.observe(RoundFeedback(d, emitted - 1, emitted, s, gamma[s : s + emitted]))  # γ every round
        chosen.append(d.drafter)
        s += emitted
    assert chosen == asked.chosen


def test_eal_weighted_windows_force_their_evaluation():
    gamma, runs = _table(n=3, total=400, seed=6, binary=False)
    k = 4
    sel = HedgeSpec(objective="eal", epsilon=0.2)
    sel.begin_request(3, k, RequestContext(request_id=0))
    s, need, forced = 0, -1, 0
    while s < len(gamma):
        d = sel.select()
        coin = sel._weight_of[d.ticket] > 0
        if s <= need:
            assert d.evaluate  # a weighted window reaches into this round
            forced += int(not coin)
        emitted = int(min(runs[s, d.drafter], k, len(gamma) - s - 1)) + 1
        sel.observe(RoundFeedback(d, emitted - 1, emitted, s, gamma[s : s + emitted] if d.evaluate else None))
        if coin:
            need = max(need, s + emitted - 1 + k - 1)
        s += emitted
    sel.end_request()
    assert forced > 0 and sel.name == "hedgespec_eal_le"


def test_adaptive_policy_skips_while_confident_and_rechecks():
    gamma = np.zeros((600, 3))
    gamma[:, 1] = 1.0  # drafter 1 always right: the weights concentrate on it
    runs = run_lengths(gamma > 0.5)
    sel = HedgeSpec(evaluation="adaptive", threshold=0.9, recheck=4)
    sel.begin_request(3, 3, RequestContext())
    s, pattern = 0, []
    while s < len(gamma):
        d = sel.select()
        assert d.evaluate or max(d.weights) >= 0.9
        pattern.append(d.evaluate)
        emitted = int(min(runs[s, d.drafter], 3, len(gamma) - s - 1)) + 1
        sel.observe(RoundFeedback(d, emitted - 1, emitted, s, gamma[s : s + emitted] if d.evaluate else None))
        s += emitted
    assert not all(pattern) and sel.state_dict()["evaluated_rounds"] == sum(pattern)
    gaps = [len(list(g)) for skip, g in itertools.groupby(pattern) if not skip]
    assert max(gaps) <= 3  # at most recheck − 1 skipped rounds in a row


def test_label_efficient_hedge_step_and_bound():
    le = LabelEfficientHedge(4, 0.25)
    assert le.eta == pytest.approx(math.sqrt(0.25 * math.log(4) / 1))
    le.update(np.zeros(4))
    assert le.eta == pytest.approx(math.sqrt(0.25 * math.log(4) / 2))
    sel = HedgeSpec(learner="hedge", epsilon=0.25)
    sel.begin_request(4, 2, RequestContext())
    assert isinstance(sel.reduction.base, LabelEfficientHedge)
    sel1 = HedgeSpec(learner="hedge")
    sel1.begin_request(4, 2, RequestContext())
    assert type(sel1.reduction.base) is Hedge
    # E regret ≤ 2 sqrt((T+1) ln N / ε) on oblivious losses: mean over 40 fixed-seed coin streams
    n, total, eps = 5, 2000, 0.2
    losses = np.random.default_rng(0).random((total, n)) * np.linspace(0.3, 1.0, n)
    regrets = []
    for seed in range(40):
        rng, h, alg = np.random.default_rng(seed), LabelEfficientHedge(n, eps), 0.0
        for t in range(total):
            alg += float(h.weights() @ losses[t])
            h.update(losses[t] / eps if rng.random() < eps else np.zeros(n))
        regrets.append(alg - losses.sum(axis=0).min())
    assert np.mean(regrets) <= 2 * math.sqrt((total + 1) * math.log(n) / eps)


def test_normal_hedge_is_scale_invariant():
    """Why the 1/ε changes nothing for NormalHedge: same weights on ℓ and on ℓ/ε."""
    rng = np.random.default_rng(1)
    a, b = NormalHedge(6), NormalHedge(6)
    for _ in range(200):
        loss = rng.random(6) * (rng.random() < 0.3)
        a.update(loss)
        b.update(loss / 0.3)
        np.testing.assert_allclose(a.weights(), b.weights(), atol=1e-9)


def test_simulator_reports_evaluation_rate():
    specs = [{"name": "hedgespec"}, {"name": "hedgespec", "label": "le", "epsilon": 0.25}]
    cfg = SimConfig(experiment="regret", mode="greedy", k=3, n_drafters=4, n_requests=2, length=96, selectors=specs)
    out = run_pool(cfg, 4)
    assert out["hedgespec"]["eval_rate"] == 1.0
    assert 0.05 < out["le"]["eval_rate"] < 0.6
    cfg.mode = "sampling"
    out = run_pool(cfg, 4)
    assert out["hedgespec"]["eval_rate"] == 1.0 and out["le"]["eval_rate"] < 0.6


@pytest.mark.parametrize("eps", [0, 0.0, -0.1, 1.0001, 2, float("nan"), "0.5", True, None])
def test_bad_epsilon_names_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        HedgeSpec(epsilon=eps)
    with pytest.raises(ValueError, match="epsilon"):
        make_selector("hedgespec", epsilon=eps)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"evaluation": "sometimes"}, "evaluation"),
        ({"evaluation": "adaptive", "epsilon": 0.5}, "epsilon"),
        ({"evaluation": "adaptive", "threshold": 0.0}, "threshold"),
        ({"evaluation": "adaptive", "threshold": 1.5}, "threshold"),
        ({"evaluation": "adaptive", "recheck": 0}, "recheck"),
        ({"evaluation": "adaptive", "recheck": 2.5}, "recheck"),
    ],
)
def test_bad_policy_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        HedgeSpec(**kw)


def test_ledger_weights_and_unobserved_rounds():
    led = FeedbackLedger(2, 2, "etap")
    (c0,) = led.add_round(0, np.array([[0.5, 1.0]]), ticket=0, weight=4.0)
    np.testing.assert_allclose(c0.loss, [2.0, 0.0])
    out = led.add_unobserved(1, 2, ticket=1)
    assert [c.position for c in out] == [1, 2] and all(np.all(c.loss == 0.0) for c in out)
    with pytest.raises(ValueError, match="emitted"):
        led.add_unobserved(3, 0)
    with pytest.raises(ValueError, match="weight"):
        led.add_round(3, np.array([[0.5, 0.5]]), weight=-1.0)
    eal = FeedbackLedger(2, 2, "eal")
    eal.add_round(0, np.array([[0.5, 1.0]]), weight=2.0)
    with pytest.raises(RuntimeError, match="unobserved"):
        eal.add_unobserved(1, 1)  # the weighted window of position 0 needs position 1's γ


def test_decision_default_asks_for_feedback():
    assert Decision(0).evaluate is True
