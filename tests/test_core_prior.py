"""HedgeSpec warm-started from a prior over the drafters: prior-weighted NormalHedge against NormalHedge over
replicated drafters (the second implementation), uniform against today's HedgeSpec, the stated regret bound on
adversarial streams, fixed-seed gains of a right prior, the batched selector against per-request ones, and the
input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_core_batched import _Driver

from hedgespec.learners import NormalHedge, mix_prior
from hedgespec.learners_batched import NormalHedgeBank
from hedgespec.selectors import BatchedHedgeSpec, HedgeSpec, make_selector
from hedgespec.selectors.hedgespec import RouterPrior, RunningPrior
from hedgespec.sim.greedy import best_fixed_mat, replay_greedy
from hedgespec.sim.markov import make_requests, make_world
from hedgespec.sim.runner import greedy_table
from hedgespec.types import RequestContext, RoundFeedback


def _stream(sel, n, k, rounds, seed, ctx=None):
    """Drive a per-request selector on a random continuous-γ stream; returns its decisions (drafter, weights)."""
    rng = np.random.default_rng(seed)
    means = rng.random(n)
    sel.begin_request(n, k, ctx or RequestContext(request_id=seed))
    out, pos = [], 0
    for _ in range(rounds):
        d = sel.select()
        out.append((d.drafter, d.weights))
        emitted = int(rng.integers(1, k + 2))
        sel.observe(RoundFeedback(d, emitted - 1, emitted, pos, rng.random((emitted, n)) * means))
        pos += emitted
    sel.end_request()
    return out


# ------------------------------------------------------------------ the learner
@pytest.mark.parametrize("m", [(1, 1, 1), (3, 1, 2, 2), (5, 1, 1, 1, 2, 6)])
def test_prior_normalhedge_is_normalhedge_over_replicated_drafters(m):
    """π_i = m_i/M: the weights are NormalHedge's over M experts (m_i copies of drafter i), summed per drafter."""
    n, big = len(m), sum(m)
    owner = np.repeat(np.arange(n), m)
    nh, rep = NormalHedge(n, prior=np.array(m) / big), NormalHedge(big)
    rng = np.random.default_rng(big)
    for t in range(300):
        w_rep = np.bincount(owner, weights=rep.weights(), minlength=n)
        np.testing.assert_allclose(nh.weights(), w_rep, rtol=1e-9, atol=1e-12, err_msg=f"round {t}")
        loss = rng.random(n) * (0.3 + np.arange(n) / n)
        nh.update(loss)
        rep.update(loss[owner])


def test_uniform_prior_is_todays_normalhedge_bit_for_bit():
    rng = np.random.default_rng(0)
    a, b = NormalHedge(6), NormalHedge(6, prior=np.full(6, 1 / 6))
    assert b.prior is None  # the uniform prior takes the code path without one
    for _ in range(200):
        assert np.array_equal(a.weights(), b.weights())
        loss = rng.random(6)
        a.update(loss)
        b.update(loss)


@pytest.mark.parametrize("opts", [{}, {"objective": "eal", "delay": "bold"}, {"choice": "sample"}])
def test_uniform_prior_is_decision_identical_to_todays_hedgespec(opts):
    n = 5
    today = _stream(HedgeSpec(seed=3, **opts), n, 4, 120, seed=1)
    for prior in ("uniform", [1 / n] * n):
        for alpha in (0.3, 1.0):
            assert _stream(HedgeSpec(seed=3, prior=prior, prior_alpha=alpha, **opts), n, 4, 120, seed=1) == today
    # alpha = 1 mixes any prior into the uniform law: today's HedgeSpec again
    assert _stream(HedgeSpec(seed=3, prior=[0.9, 0.1, 0, 0, 0], prior_alpha=1.0, **opts), n, 4, 120, seed=1) == today


def test_round_zero_weights_are_the_mixed_prior():
    p, alpha, n = [0.6, 0.3, 0.1, 0.0], 0.2, 4
    want = [(1 - alpha) * x + alpha / n for x in p]
    sel = HedgeSpec(prior=p, prior_alpha=alpha)
    sel.begin_request(n, 3, RequestContext(request_id=0))
    d = sel.select()
    np.testing.assert_allclose(d.weights, want, rtol=0, atol=1e-15)
    assert d.drafter == 0 and sel.state_dict()["prior_weights"] == pytest.approx(want)
    sel.observe(RoundFeedback(d, 1, 2, 0, np.full((2, n), 0.5)))  # equal losses: no positive regret, still π
    np.testing.assert_allclose(sel.select().weights, want, rtol=0, atol=1e-15)
    nh = NormalHedge(n, prior=want)
    np.testing.assert_allclose(nh.weights(), want, rtol=0, atol=1e-15)


# ------------------------------------------------------------------ the stated bound
def _adversarial(kind, n, t, rng):
    if kind == "alternating":  # the leader flips every 7 rounds: followers pay each switch
        loss = np.ones(n)
        loss[(t // 7) % 2] = 0.0
        return loss
    if kind == "wrong_prior":  # the prior's favourite (drafter 0) is the worst; the best is drafter n-1
        loss = rng.random(n) * 0.5 + 0.25
        loss[0], loss[-1] = 1.0, 0.2 * rng.random()
        return loss
    if kind == "shift":  # the best drafter changes half way
        loss = rng.random(n)
        loss[1 if t < 500 else 2] *= 0.2
        return loss
    return rng.random(n)


@pytest.mark.parametrize("kind", ["alternating", "wrong_prior", "shift", "random"])
@pytest.mark.parametrize("prior", ["uniform", "concentrated"])
def test_regret_stays_within_the_stated_bound(kind, prior):
    """Every round and drafter: R_i <= sqrt(2 c_t (1 + ln 1/π_i)) (exact), and the regret is within the leading
    term sqrt(3 t (1 + ln 1/π_i)) of the ε-quantile bound with ε = π_i (the bound adds a positive lower-order
    term, so this is stricter than what is claimed)."""
    n = 8
    pi = np.full(n, 1 / n) if prior == "uniform" else mix_prior(np.eye(n)[0], n, 0.25)
    nh, rng = NormalHedge(n, prior=pi), np.random.default_rng(7)
    cum_alg, cum = 0.0, np.zeros(n)
    for t in range(1, 1001):
        loss = _adversarial(kind, n, t, rng)
        cum_alg += float(nh.weights() @ loss)
        cum += loss
        nh.update(loss)
        regret = cum_alg - cum
        np.testing.assert_allclose(regret, nh.regret, rtol=1e-9, atol=1e-9)
        nh.weights()
        if not math.isnan(nh.scale):
            assert np.all(regret <= np.sqrt(2 * nh.scale * (1 + np.log(1 / pi))) + 1e-9), t
        assert np.all(regret <= np.sqrt(3 * t * (1 + np.log(1 / pi)))), t


def test_a_right_prior_lowers_cumulative_loss_on_short_streams():
    """64 rounds, drafter 0 the best: a prior concentrated on it (α = 0.5) against uniform, 200 fixed seeds."""
    n, gains = 8, []
    pi = mix_prior(np.eye(n)[0], n, 0.5)
    for seed in range(200):
        rng = np.random.default_rng(seed)
        means = rng.uniform(0.3, 0.7, n)
        means[0] = 0.2
        losses = (rng.random((64, n)) < means).astype(float)
        tot = []
        for prior in (None, pi):
            nh, c = NormalHedge(n, prior=prior), 0.0
            for loss in losses:
                c += float(nh.weights() @ loss)
                nh.update(loss)
            tot.append(c)
        gains.append(tot[0] - tot[1])
    gains = np.array(gains)
    assert gains.mean() / (gains.std(ddof=1) / math.sqrt(gains.size)) > 5  # paired t-statistic
    assert np.mean(gains >= 0) >= 0.9


def test_a_right_prior_raises_mat_in_the_markov_simulator():
    """HedgeSpec with a prior on each request's home expert vs uniform, greedy replay, 64-token requests."""
    world = make_world(8, seed=0)
    reqs = make_requests(world, 24, 64, seed=0)
    tot = {"uniform": 0.0, "home": 0.0, "oracle": 0.0}
    for r, req in enumerate(reqs):
        gamma, runs = greedy_table(req)
        best, mats = best_fixed_mat(runs, 4)
        home = np.zeros(8)
        home[1 + req.domain] = 1.0  # make_pool: the generalist, then one expert per domain in domain order
        for label, prior in (("uniform", "uniform"), ("home", home.tolist())):
            res = replay_greedy(gamma, runs, HedgeSpec(prior=prior, prior_alpha=0.5), 4, RequestContext(request_id=r))
            tot[label] += res.mat
        tot["oracle"] += mats[best]
    assert tot["home"] > tot["uniform"] and tot["home"] <= tot["oracle"] + 1e-9


# ------------------------------------------------------------------ running and router priors
def test_running_prior_is_the_mean_of_earlier_final_weights():
    src = RunningPrior()
    sel = HedgeSpec(prior="running", prior_alpha=0.25, prior_source=src)
    finals = []
    for r in range(3):
        out = _stream(sel, 4, 3, 30, seed=r)
        want = np.full(4, 0.25) if not finals else 0.75 * np.mean(finals, axis=0) + 0.25 / 4
        np.testing.assert_allclose(out[0][1], want, rtol=0, atol=1e-15)
        finals.append(sel.weights())
    assert src.count == 3
    own = HedgeSpec(prior="running")  # without a source: its own, kept across its requests
    _stream(own, 4, 3, 10, seed=0)
    assert own.prior_source.count == 1


def _router():
    sklearn = pytest.importorskip("sklearn")
    del sklearn
    from test_core_router import _data

    from hedgespec.selectors import train_router

    return train_router(*_data())


def test_router_prior_is_the_posterior_on_the_domains_drafters():
    clf = _router()
    mapping = {"sql": 1, "math": 2, "python": 0}
    prompt = "SELECT the invoices per country"
    proba = dict(zip(clf.classes_, clf.predict_proba([prompt])[0]))
    want = np.array([proba["python"], proba["sql"], proba["math"], 0.0])
    sel = HedgeSpec(prior="router", prior_alpha=0.5, prior_source=RouterPrior(clf, mapping))
    out = _stream(sel, 4, 3, 5, seed=0, ctx=RequestContext(request_id=0, prompt=prompt))
    np.testing.assert_allclose(out[0][1], 0.5 * want + 0.5 / 4, rtol=0, atol=1e-12)
    assert out[0][0] == 1  # the SQL drafter first
    with pytest.raises(ValueError, match="prompt"):
        sel.begin_request(4, 3, RequestContext(request_id=1))
    with pytest.raises(ValueError, match="out of range"):
        sel.begin_request(2, 3, RequestContext(request_id=1, prompt=prompt))


# ------------------------------------------------------------------ batched = per-request
class _PromptDriver(_Driver):
    PROMPTS = ("SELECT the rows of users", "What is 12 percent of 250?", "def parse(items):", "Tell me a story")

    def _start(self, slot):
        super_ids = self.ids
        rid = next(super_ids)
        ctx = RequestContext(request_id=f"req-{rid}", prompt=self.PROMPTS[rid % len(self.PROMPTS)])
        self.refs[slot] = self.make_ref()
        self.refs[slot].begin_request(self.n, self.k, ctx)
        self.bat.begin(slot, ctx)
        self.pos[slot] = 0
        self.means[slot] = self.rng.random(self.n)


@pytest.mark.parametrize("prior", ["fixed", "router", "running"])
@pytest.mark.parametrize("opts", [{}, {"objective": "eal", "delay": "bold"}, {"choice": "sample"}])
def test_batched_prior_decides_as_per_request_selectors(prior, opts):
    b, n, k, seed = 6, 8, 4, 5
    if prior == "fixed":
        kw = {"prior": [0.5, 0.2, 0.1, 0.1, 0.05, 0.05, 0.0, 0.0], "prior_alpha": 0.3}
        make_kw = lambda: kw  # noqa: E731
    elif prior == "router":
        src = RouterPrior(_router(), {"sql": 1, "math": 2, "python": 3})
        make_kw = lambda: {"prior": "router", "prior_alpha": 0.3, "prior_source": src}  # noqa: E731
    else:
        ref_src, bat_src = RunningPrior(), RunningPrior()  # each side its own, fed in the same end order
        make_kw = lambda: {"prior": "running", "prior_alpha": 0.3, "prior_source": ref_src}  # noqa: E731
    bat_kw = make_kw() if prior != "running" else {**make_kw(), "prior_source": bat_src}
    bat = BatchedHedgeSpec(b, n, k, seed=seed, **opts, **bat_kw)
    drv = _PromptDriver(bat, lambda: HedgeSpec(seed=seed, **opts, **make_kw()), seed)
    for _ in range(60):
        drv.round()
    drv.finish()
    assert drv.decisions > 50 * b * 0.7 and drv.mismatch == []
    if prior == "running":
        assert ref_src.count == bat_src.count > b
        np.testing.assert_allclose(bat_src.total, ref_src.total, rtol=1e-9, atol=1e-12)


def test_bank_prior_rows_match_normalhedge_with_that_prior():
    n, rng = 5, np.random.default_rng(2)
    priors = [mix_prior(rng.dirichlet(np.ones(n)), n, 0.2) for _ in range(3)] + [np.full(n, 1 / n)]
    bank, refs = NormalHedgeBank(4, n), [NormalHedge(n, prior=p) for p in priors]
    rows = np.arange(4)
    bank.reset(rows)
    bank.set_prior(rows, np.array(priors))
    for _ in range(100):
        w = bank.weights(rows)
        for j, ref in enumerate(refs):
            np.testing.assert_allclose(w[j], ref.weights(), rtol=1e-9, atol=1e-13)
        loss = rng.random((4, 1, n))
        bank.update(rows, loss, w[:, None, :].copy(), np.ones((4, 1), dtype=bool), np.ones(4, dtype=np.int64))
        for j, ref in enumerate(refs):
            ref.update(loss[j, 0], w[j])


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kw,match",
    [
        ({"prior": "dirichlet"}, "prior must be one of"),
        ({"prior": [0.5, -0.1, 0.6]}, "prior must be finite and >= 0"),
        ({"prior": [0.5, 0.2, 0.2]}, "prior must sum to 1"),
        ({"prior": ["a", "b"]}, "prior must be a sequence"),
        ({"prior": [0.5, float("nan"), 0.5]}, "prior must be finite"),
        ({"prior_alpha": 0.0}, "prior_alpha .* must be in \\(0, 1\\]"),
        ({"prior_alpha": 1.5}, "prior_alpha"),
        ({"prior_alpha": True}, "prior_alpha"),
        ({"prior": "router"}, "prior='router' needs prior_source"),
        ({"prior": "running", "learner": "hedge"}, "needs learner='normal_hedge'"),
    ],
)
def test_bad_prior_options_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        HedgeSpec(**kw)
    with pytest.raises(ValueError, match=match):
        BatchedHedgeSpec(2, 3, 2, **kw)
    with pytest.raises(ValueError, match=match):
        make_selector("hedgespec", **kw)


def test_prior_of_the_wrong_length_raises_at_begin():
    sel = HedgeSpec(prior=[0.5, 0.5])
    with pytest.raises(ValueError, match="prior has 2 entries, the pool has 3"):
        sel.begin_request(3, 2, RequestContext())
    with pytest.raises(ValueError, match="prior has 2 entries, the pool has 3"):
        BatchedHedgeSpec(2, 3, 2, prior=[0.5, 0.5]).begin(0)
    with pytest.raises(ValueError, match=r"prior must have one probability per drafter, shape \(3,\)"):
        NormalHedge(3, prior=[0.5, 0.5])
    with pytest.raises(ValueError, match="prior must be > 0"):
        NormalHedge(2, prior=[1.0, 0.0])
    with pytest.raises(ValueError, match="running.*pool has 3"):
        src = RunningPrior()
        src.record(np.array([0.5, 0.5]))
        HedgeSpec(prior="running", prior_source=src).begin_request(3, 2, RequestContext())


def test_build_shares_one_running_prior_per_selector_factory():
    from hedgespec.build import build_selector

    cfg = {"selector": {"name": "hedgespec", "prior": "running", "prior_alpha": 0.5, "seed": 0}, "pool": {}}
    factory, _ = build_selector(cfg, ["general", "sql"], ["general", "sql"])
    a, b = factory(), factory()
    assert isinstance(a.prior_source, RunningPrior) and a.prior_source is b.prior_source
    _stream(a, 2, 3, 10, seed=0)
    np.testing.assert_allclose(_stream(b, 2, 3, 1, seed=1)[0][1], 0.5 * a.weights() + 0.25, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="prior='router' uses the prompt router: .*needs a prompt classifier"):
        build_selector({**cfg, "selector": {**cfg["selector"], "prior": "router"}}, ["a", "b"], ["a", "b"])
