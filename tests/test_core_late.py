"""Late feedback: skipped rounds' γ delivered with the next evaluated round, nothing lost.

Truths used: the ledger fed every round at once (the same losses must come out, in the same order, only later);
NormalHedge updated directly, position by position, with the full loss sequence (no ledger, no selector).
"""

from __future__ import annotations

import numpy as np
import pytest
from _engine_helpers import Recorder

from hedgespec.feedback import FeedbackLedger
from hedgespec.learners import NormalHedge
from hedgespec.selectors import HedgeSpec, make_selector
from hedgespec.sim.experiments import SimConfig, run_pool
from hedgespec.sim.greedy import replay_greedy, run_lengths
from hedgespec.types import LateGamma, RequestContext, RoundFeedback


def _table(n=4, total=240, seed=0):
    rng = np.random.default_rng(seed)
    g = (rng.random((total, n)) < rng.uniform(0.2, 0.95, n)).astype(float)
    return g, run_lengths(g > 0.5)


def _rounds(total, k, rng):
    s, out = 0, []
    while s < total:
        e = int(min(rng.integers(1, k + 2), total - s))
        out.append((s, e))
        s += e
    return out


@pytest.mark.parametrize("objective", ["etap", "eal"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pending_rounds_emit_the_full_information_losses_in_order(objective, seed):
    rng = np.random.default_rng(seed)
    n, k, total = 3, 4, 80
    gamma = rng.random((total, n))
    rounds = _rounds(total, k, rng)
    full, late = FeedbackLedger(n, k, objective), FeedbackLedger(n, k, objective)
    want, got, held = [], [], []
    for ticket, (s, e) in enumerate(rounds):
        want += full.add_round(s, gamma[s : s + e], ticket)
        if rng.random() < 0.6:  # skipped: its γ comes with a later evaluated round
            got += late.add_pending(s, e, ticket)
            held.append((s, e))
            assert late.pending == [h[0] for h in held]
            continue
        for hs, he in held:
            got += late.fill(hs, gamma[hs : hs + he])
        held = []
        got += late.add_round(s, gamma[s : s + e], ticket)
    want += full.finish()
    got += late.finish()
    if held:  # positions still pending at the end are dropped, and so are EAL windows reaching into them
        need = 1 if objective == "etap" else k
        want = [c for c in want if c.position + need <= held[0][0]]
    assert [(c.position, c.ticket) for c in got] == [(c.position, c.ticket) for c in want]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.loss, b.loss)
    assert late.pending == []


def test_fill_refuses_what_was_not_pending_or_has_the_wrong_shape():
    led = FeedbackLedger(3, 2)
    led.add_pending(0, 2)
    with pytest.raises(ValueError, match="no pending round starts at position 1"):
        led.fill(1, np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"shape \[2, 3\]"):
        led.fill(0, np.ones((3, 3)))
    with pytest.raises(ValueError, match="gamma"):
        led.fill(0, np.full((2, 3), 1.5))
    assert led.add_round(2, np.ones((1, 3))) == []  # waits behind the pending round
    assert [c.position for c in led.fill(0, np.ones((2, 3)))] == [0, 1, 2]


@pytest.mark.parametrize(("seed", "k", "threshold", "recheck"), [(0, 3, 0.5, 4), (1, 4, 0.35, 8), (2, 1, 0.6, 2)])
def test_the_learner_gets_every_position_loss_once_evaluation_comes(seed, k, threshold, recheck):
    """Before each decision the weights are NormalHedge's after exactly the positions up to the last evaluated
    round, each fed with the weights of the decision that covered it."""
    gamma, runs = _table(seed=seed)
    sel = Recorder(make_selector("hedgespec", evaluation="adaptive", late=True, threshold=threshold, recheck=recheck))
    res = replay_greedy(gamma, runs, sel, k, RequestContext(request_id=seed))
    decisions = [fb.decision for fb in sel.feedback]
    assert sel.inner.name == "hedgespec_adaptive_late"
    assert 0 < res.evaluated < res.rounds  # some rounds were skipped, some evaluated
    nh, fed, s = NormalHedge(gamma.shape[1]), 0, 0
    round_of = np.zeros(len(gamma), dtype=int)
    for r, (d, acc) in enumerate(zip(decisions, res.accepted)):
        np.testing.assert_allclose(d.weights, nh.weights(), rtol=0, atol=1e-12)
        round_of[s : s + acc + 1] = r
        s += acc + 1
        if d.evaluate:
            for t in range(fed, s):
                nh.update(1.0 - gamma[t], np.asarray(decisions[round_of[t]].weights))
            fed = s


def test_never_skipping_is_hedgespec_decision_for_decision():
    gamma, runs = _table(seed=4)
    a = replay_greedy(gamma, runs, make_selector("hedgespec"), 3, RequestContext(request_id=4))
    late = make_selector("hedgespec", evaluation="adaptive", late=True, recheck=1)  # evaluates every round
    b = replay_greedy(gamma, runs, late, 3, RequestContext(request_id=4))
    assert a.chosen == b.chosen and a.weights == b.weights and b.evaluated == b.rounds


@pytest.mark.parametrize("mode", ["greedy", "sampling"])
def test_late_feedback_loses_less_than_unobserved_rounds_in_the_simulator(mode):
    """Same skip rule, same requests (fixed seed): with the skipped rounds' γ delivered later the MAT is at least
    the adaptive rule's without them; rounds are still skipped."""
    sels = [
        {"name": "hedgespec", "label": "adaptive", "evaluation": "adaptive"},
        {"name": "hedgespec", "label": "adaptive_late", "evaluation": "adaptive", "late": True},
    ]
    cfg = SimConfig(experiment="regret", mode=mode, k=4, n_requests=12, length=192, seed=0, selectors=sels)
    out = run_pool(cfg, 8)
    assert out["adaptive_late"]["mat"] >= out["adaptive"]["mat"]
    assert out["adaptive_late"]["eval_rate"] < 1.0


def test_bad_late_options_are_named():
    with pytest.raises(ValueError, match="late=true .* evaluation='adaptive' only"):
        HedgeSpec(late=True)
    with pytest.raises(ValueError, match="late=true .* evaluation='adaptive' only"):
        HedgeSpec(late=True, evaluation="random", epsilon=0.5)
    with pytest.raises(ValueError, match="late must be true or false"):
        HedgeSpec(late="yes", evaluation="adaptive")
    sel = HedgeSpec()
    sel.begin_request(2, 2)
    d = sel.select()
    with pytest.raises(ValueError, match="RoundFeedback.late without late=true"):
        sel.observe(RoundFeedback(d, 0, 1, 0, np.ones((1, 2)), late=(LateGamma(0, np.ones((1, 2))),)))


def test_bold_holds_the_predictions_that_wait_for_late_feedback():
    gamma, runs = _table(seed=5)
    sel = make_selector("hedgespec", evaluation="adaptive", late=True, delay="bold", threshold=0.3, recheck=6)
    res = replay_greedy(gamma, runs, sel, 3, RequestContext(request_id=5))
    assert 0 < res.evaluated < res.rounds
