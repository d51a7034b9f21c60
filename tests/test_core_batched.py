"""Batched selectors against B independent per-request selectors (the second implementation), the batched
ledger against FeedbackLedger, the learner banks against NormalHedge/Hedge, and the input errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import hedgespec.selectors.batched as batched_mod
import hedgespec.selectors.hedgespec as hedgespec_mod
from hedgespec.feedback import FeedbackLedger
from hedgespec.feedback_batched import BatchedLedger, check_gamma_batch, prefix_table
from hedgespec.learners import Hedge, NormalHedge, _scale_root, normalhedge_scale
from hedgespec.learners_batched import HedgeBank, NormalHedgeBank, scale_root_batch
from hedgespec.selectors import (
    BatchDecision,
    BatchedEXP3Spec,
    BatchedHedgeSpec,
    BatchedUCBSpec,
    BatchFeedback,
    EXP3Spec,
    HedgeSpec,
    UCBSpec,
)
from hedgespec.selectors.batched import sample_rows
from hedgespec.serving.rounds import greedy_gamma
from hedgespec.serving.rounds_batched import greedy_gamma_batch
from hedgespec.types import RequestContext, RoundFeedback

W_RTOL, W_ATOL = 1e-9, 1e-12


def _gamma(rng, kind, means, shape):
    if kind == "uniform":  # sampled-chain γ = Σ min(p, q): continuous, drafter-dependent level
        return rng.random(shape) * means[:, None, :]
    return (rng.random(shape) < means[:, None, :]).astype(float)  # greedy γ: target argmax agreement


class _Driver:
    """Runs one batched selector and one per-request selector per slot on the same random stream: a random
    subset of slots (in random order) decides each round; emitted lengths vary; rows past ``emitted`` are NaN;
    requests end (some with a decision still pending) and new ones begin in their slots."""

    def __init__(self, bat, make_ref, seed, gamma="uniform", full_info=True):
        self.bat, self.make_ref, self.kind, self.full_info = bat, make_ref, gamma, full_info
        self.rng = np.random.default_rng(seed)
        self.n, self.k, self.b = bat.n, bat.k, bat.capacity
        self.refs, self.pos = [None] * self.b, [0] * self.b
        self.means = np.zeros((self.b, self.n))
        self.ids = itertools.count()
        self.decisions, self.mismatch, self.max_dw = 0, [], 0.0
        for slot in range(self.b):
            self._start(slot)

    def _start(self, slot):
        ctx = RequestContext(request_id=f"req-{next(self.ids)}")
        self.refs[slot] = self.make_ref()
        self.refs[slot].begin_request(self.n, self.k, ctx)
        self.bat.begin(slot, ctx)
        self.pos[slot] = 0
        self.means[slot] = self.rng.random(self.n)

    def _end(self, slot):
        self.refs[slot].end_request()
        self.bat.end(slot)
        if self.full_info:
            self._weights_match(slot, self.refs[slot].weights(), self.bat.weights([slot])[0])

    def _weights_match(self, slot, ref, got):
        np.testing.assert_allclose(got, ref, rtol=W_RTOL, atol=W_ATOL, err_msg=f"slot {slot}")
        self.max_dw = max(self.max_dw, float(np.abs(np.asarray(ref) - got).max()))

    def round(self):
        rng = self.rng
        slots = rng.permutation(np.flatnonzero(rng.random(self.b) >= 0.2))
        dec = self.bat.select(slots)
        refs = [self.refs[s].select() for s in slots]
        self._compare(dec, refs)
        drop = rng.random(slots.size) < 0.02  # these requests end with their decision pending
        for s in slots[drop]:
            self._end(s)
            self._start(s)
        keep = ~drop
        self._observe(slots[keep], [d for d, k in zip(refs, keep) if k], dec)
        for s in np.flatnonzero(rng.random(self.b) < 0.04):
            self._end(s)
            self._start(s)

    def _compare(self, dec, refs):
        self.decisions += len(refs)
        for j, d in enumerate(refs):
            assert int(dec.tickets[j]) == d.ticket
            if int(dec.drafters[j]) != d.drafter:
                self.mismatch.append((np.array(d.weights), d.drafter, int(dec.drafters[j])))
            if d.weights is None:
                assert dec.weights is None
            else:
                self._weights_match(int(dec.slots[j]), d.weights, dec.weights[j])

    def _observe(self, slots, refs, dec):
        m = slots.size
        emitted = self.rng.integers(1, self.k + 2, size=m)
        accepted = np.minimum(emitted - 1 + (self.rng.random(m) < 0.2), self.k)  # emitted < accepted+1: ended
        gamma = _gamma(self.rng, self.kind, self.means[slots], (m, self.k + 1, self.n))
        rounds = []
        for j, (s, d) in enumerate(zip(slots, refs)):
            g = gamma[j, : emitted[j]] if self.full_info else None
            rounds.append(RoundFeedback(d, int(accepted[j]), int(emitted[j]), self.pos[s], g))
            self.refs[s].observe(rounds[-1])
            self.pos[s] += int(emitted[j])
        if self.rng.random() < 0.3:  # stacked from the per-request feedback (zero padding)
            fb = BatchFeedback.from_rounds(slots.tolist(), rounds, self.n)
        else:
            padded = np.where(np.arange(self.k + 1)[None, :, None] < emitted[:, None, None], gamma, np.nan)
            start = np.array([r.start for r in rounds])
            same = slots.size == dec.slots.size and np.array_equal(slots, dec.slots)
            fb = BatchFeedback(dec.slots if same else slots, accepted, emitted, padded, start)
        self.bat.observe(fb)

    def finish(self):
        for s in range(self.b):
            self._end(s)


HEDGESPEC_OPTIONS = [
    {},
    {"objective": "eal"},
    {"objective": "eal", "tail_policy": "etap"},
    {"delay": "bold"},
    {"objective": "eal", "delay": "bold", "tail_policy": "etap"},
    {"choice": "sample"},
    {"objective": "eal", "choice": "sample", "delay": "bold"},
    {"learner": "hedge"},
    {"learner": "hedge", "objective": "eal", "delay": "bold", "tail_policy": "etap"},
]


def _run_hedgespec(opts, seed, b, n, k, rounds, gamma="uniform"):
    bat = BatchedHedgeSpec(b, n, k, seed=seed, **opts)
    drv = _Driver(bat, lambda: HedgeSpec(seed=seed, **opts), seed, gamma)
    for _ in range(rounds):
        drv.round()
    drv.finish()
    return drv


@pytest.mark.parametrize(
    "opts", HEDGESPEC_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default"
)
@pytest.mark.parametrize("seed,b,n,k", [(0, 16, 8, 4), (1, 7, 56, 3), (2, 5, 3, 1)])
def test_batched_hedgespec_decides_as_per_request_selectors(opts, seed, b, n, k):
    drv = _run_hedgespec(opts, seed, b, n, k, rounds=60)
    assert drv.decisions > 50 * b * 0.7
    assert drv.mismatch == []  # same drafter, ticket, weights (allclose) every round


def test_batched_hedgespec_full_batch():
    """B = 64, N = 56, K = 4 (a whole SGLang batch of a large pool), the default HedgeSpec."""
    drv = _run_hedgespec({}, 7, 64, 56, 4, rounds=40)
    assert drv.decisions > 40 * 64 * 0.7 and drv.mismatch == []


@pytest.mark.parametrize("opts", [{"learner": "hedge"}, {"learner": "hedge", "objective": "eal", "delay": "bold"}])
@pytest.mark.parametrize("gamma", ["uniform", "greedy"])
def test_batched_hedge_learner_is_bitwise_identical(opts, gamma):
    drv = _run_hedgespec(opts, 3, 12, 8, 4, rounds=60, gamma=gamma)
    assert drv.mismatch == [] and drv.max_dw == 0.0


def test_greedy_gamma_decisions_differ_only_between_tied_drafters():
    """Greedy γ ∈ {0, 1}: drafters with equal miss counts have mathematically equal regrets whose last bits
    depend on the order of additions; NormalHedge's math.fsum/math.exp vs numpy round them differently, so a
    1e-15 tie may be seen by one implementation only. Any differing decision is between drafters whose
    per-request weights agree to 1e-12."""
    for seed, n in [(0, 8), (1, 56)]:
        drv = _run_hedgespec({}, seed, 16, n, 4, rounds=80, gamma="greedy")
        for w, ref, got in drv.mismatch:
            assert abs(w[ref] - w[got]) < 1e-12


def test_greedy_gamma_identical_with_a_rounding_proof_tie_tolerance(monkeypatch):
    """With ties taken at 1e-12 instead of 1e-15 in both implementations, greedy γ decisions agree too."""

    def argmax_ties(w, rng):
        best = np.flatnonzero(w >= w.max() - 1e-12)
        return int(best[0]) if best.size == 1 else int(rng.choice(best))

    monkeypatch.setattr(hedgespec_mod, "argmax_random_ties", argmax_ties)
    monkeypatch.setattr(batched_mod, "_TIE", 1e-12)
    for seed, n, opts in [(0, 8, {}), (1, 56, {}), (2, 8, {"objective": "eal"})]:
        drv = _run_hedgespec(opts, seed, 16, n, 4, rounds=80, gamma="greedy")
        assert drv.mismatch == []


@pytest.mark.parametrize("ref_cls,bat_cls", [(UCBSpec, BatchedUCBSpec), (EXP3Spec, BatchedEXP3Spec)])
@pytest.mark.parametrize("n", [1, 3, 8, 56])
def test_batched_bandits_are_bitwise_identical(ref_cls, bat_cls, n):
    bat = bat_cls(16, n, 4, seed=5)
    drv = _Driver(bat, lambda: ref_cls(seed=5), 5, full_info=False)
    for _ in range(120):
        drv.round()
    drv.finish()
    assert drv.mismatch == [] and drv.max_dw == 0.0


def test_state_dict_and_decision_views():
    bat = BatchedHedgeSpec(3, 4, 2, objective="eal")
    ref = HedgeSpec(objective="eal")
    ctx = RequestContext(request_id=11)
    bat.begin(1, ctx)
    ref.begin_request(4, 2, ctx)
    dec = bat.select([1])
    d = ref.select()
    assert isinstance(dec, BatchDecision) and len(dec) == 1 and dec.decision(0) == d
    g = np.array([[0.9, 0.1, 0.5, 0.2], [0.3, 0.8, 0.4, 0.6]])
    ref.observe(RoundFeedback(d, 1, 2, 0, g))
    bat.observe(BatchFeedback(dec.slots, [1], [2], g[None]))
    got, want = bat.state_dict(1), ref.state_dict()
    assert got.keys() == want.keys() and got["name"] == "hedgespec_eal" and got["rounds"] == 1
    np.testing.assert_allclose(got["weights"], want["weights"], rtol=W_RTOL)
    assert list(bat.active) == [1] and list(bat.free_slots()) == [0, 2]


# ---------------------------------------------------------------------------------------------- ledger
@pytest.mark.parametrize("objective,tail", [("etap", "drop"), ("eal", "drop"), ("eal", "etap")])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_batched_ledger_emits_the_losses_of_feedback_ledger(objective, tail, k):
    rng = np.random.default_rng(k)
    b, n = 6, 5
    led = BatchedLedger(b, n, k, objective, tail)
    refs = [FeedbackLedger(n, k, objective, tail) for _ in range(b)]
    got, want = [[] for _ in range(b)], [[] for _ in range(b)]
    table = prefix_table(k)

    def collect(slots, done):
        loss, ticket, valid = done
        for j, s in enumerate(slots):
            for v in np.flatnonzero(valid[j]):
                t = ticket[j] if ticket.ndim == 1 else ticket[j, v]
                got[s].append((int(t), loss[j, v]))

    for r in range(40):
        slots = np.flatnonzero(rng.random(b) < 0.7)
        emitted = rng.integers(1, k + 2, size=slots.size)
        raw = rng.random((slots.size, k + 1, n)) * 1.2 - 0.1  # values past emitted are ignored
        raw[:, :, :] = np.clip(raw, -1e-10, 1.0 + 1e-10) if r % 2 else np.clip(raw, 0.0, 1.0)
        g, valid = check_gamma_batch(raw, emitted, n, table)
        collect(slots, led.add_rounds(slots, g, valid, emitted, np.full(slots.size, r), led.verified[slots]))
        for j, s in enumerate(slots):
            want[s] += [(c.ticket, c.loss) for c in refs[s].add_round(refs[s].verified, raw[j, : emitted[j]], r)]
    collect(np.arange(b), led.finish(np.arange(b)))
    for s in range(b):
        want[s] += [(c.ticket, c.loss) for c in refs[s].finish()]
        assert [t for t, _ in got[s]] == [t for t, _ in want[s]]
        for (_, lg), (_, lw) in zip(got[s], want[s]):
            np.testing.assert_array_equal(lg, lw)  # the same arithmetic: bit for bit


# ---------------------------------------------------------------------------------------------- learners
@pytest.mark.parametrize("n", [1, 2, 7, 48, 49, 112])
def test_normalhedge_bank_weights_match_normalhedge(n):
    rng = np.random.default_rng(n)
    regrets = [scale * rng.standard_normal(n) for scale in (1e-3, 1.0, 30.0, 1e6)]
    regrets.append(-np.abs(rng.standard_normal(n)))  # no positive regret: uniform
    bank = NormalHedgeBank(len(regrets), n)
    bank.regret[:] = np.stack(regrets)
    got = bank.weights(np.arange(len(regrets)))
    for j, r in enumerate(regrets):
        nh = NormalHedge(n)
        nh.regret = r.copy()
        np.testing.assert_allclose(got[j], nh.weights(), rtol=1e-12, atol=1e-15)
        assert (math.isnan(nh.scale) and math.isnan(bank.scale[j])) or bank.scale[j] == pytest.approx(nh.scale)
    # A few stale rows at a time: NormalHedge's own Python-float solve for N <= 48 (bit for bit), numpy above.
    few = NormalHedgeBank(len(regrets), n)
    few.regret[:] = np.stack(regrets)
    for j, r in enumerate(regrets):
        nh = NormalHedge(n)
        nh.regret = r.copy()
        if n <= 48:
            np.testing.assert_array_equal(few.weights(np.array([j]))[0], nh.weights())
        else:
            np.testing.assert_allclose(few.weights(np.array([j]))[0], nh.weights(), rtol=1e-12, atol=1e-15)
        rel = 1e-15 if n <= 48 else 1e-12
        assert (math.isnan(nh.scale) and math.isnan(few.scale[j])) or few.scale[j] == pytest.approx(nh.scale, rel=rel)


def test_scale_root_batch_solves_the_scale_equation_and_stops_like_the_scalar_solver():
    rng = np.random.default_rng(0)
    pos = np.maximum(rng.standard_normal((9, 20)) * 4.0, 0.0)
    pos[0] += 0.1  # every column has a positive regret
    a = pos * pos
    s, e = scale_root_batch(a, a.max(axis=0), np.full(20, np.nan))
    for j in range(20):
        assert 1.0 / (2.0 * s[j]) == pytest.approx(normalhedge_scale(pos[:, j]), rel=1e-12)
    # Out of iterations: the stepped s and the exponentials of the last evaluation, as _scale_root returns them.
    s0 = s * (1.0 + 0.05 * rng.standard_normal(20))
    s1, e1 = scale_root_batch(a, a.max(axis=0), s0, max_iter=1)
    for j in range(20):
        ref_s, z, zmax = _scale_root(a[:, j].tolist(), float(s0[j]), 1e-13, 1)
        assert s1[j] == pytest.approx(ref_s, rel=1e-12)
        np.testing.assert_allclose(e1[:, j], np.exp(np.array(z) - zmax), rtol=1e-12)


def test_scale_root_batch_takes_the_scalar_solvers_steps_when_a_warm_start_overshoots():
    # One positive regret among 112: from a warm start just above the bracket's lower end the Newton step
    # leaves the bracket on the right (the scalar solver bisects there); other columns start right of the root.
    n = 112
    a = np.zeros((n, 3))
    a[0] = [4.0, 9.0, 1.0]
    a[1:5, 2] = 0.7
    amax = a.max(axis=0)
    s0 = np.array([1.0001 / 4.0, 1.5 / 9.0, np.nan])
    for max_iter in (1, 2, 3, 200):
        s, e = scale_root_batch(a, amax, s0, max_iter=max_iter)
        for j in range(3):
            warm = None if np.isnan(s0[j]) else float(s0[j])
            ref_s, z, zmax = _scale_root(a[:, j].tolist(), warm, 1e-13, max_iter)
            assert s[j] == pytest.approx(ref_s, rel=1e-12), (max_iter, j)
            np.testing.assert_allclose(e[:, j], np.exp(np.array(z) - zmax), rtol=1e-12, atol=1e-300)
    assert 1.0 / (2.0 * s[0]) == pytest.approx(normalhedge_scale(np.sqrt(a[:, 0])), rel=1e-12)


def test_hedge_bank_matches_hedge_bitwise():
    rng = np.random.default_rng(1)
    bank, refs = HedgeBank(3, 6), [Hedge(6) for _ in range(3)]
    rows = np.arange(3)
    for _ in range(20):
        loss = rng.random((3, 2, 6))
        bank.update(rows, loss, np.zeros((3, 1, 6)), np.ones((3, 2), bool), np.full(3, 2))
        for j, h in enumerate(refs):
            h.update(loss[j, 0])
            h.update(loss[j, 1])
        np.testing.assert_array_equal(bank.weights(rows), np.stack([h.weights() for h in refs]))


def test_sample_rows_draws_what_generator_choice_draws():
    rng = np.random.default_rng(2)
    p = rng.random((50, 7)) ** 3
    p[::3, 2] = 0.0
    p /= p.sum(axis=1, keepdims=True)
    gens = [np.random.default_rng([9, j]) for j in range(50)]
    got = sample_rows(gens, p)
    want = [int(np.random.default_rng([9, j]).choice(7, p=p[j])) for j in range(50)]
    assert got.tolist() == want


# ---------------------------------------------------------------------------------------------- errors
def _begun(**kw):
    bat = BatchedHedgeSpec(4, 3, 2, **kw)
    bat.begin(0)
    bat.begin(2)
    return bat


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: BatchedHedgeSpec(0, 3, 2), "capacity"),
        (lambda: BatchedHedgeSpec(True, 3, 2), "capacity"),
        (lambda: BatchedHedgeSpec(4, 0, 2), "n_drafters"),
        (lambda: BatchedHedgeSpec(4, 3, 0), "K"),
        (lambda: BatchedHedgeSpec(4, 3, 2, objective="x"), "objective"),
        (lambda: BatchedHedgeSpec(4, 3, 2, delay="x"), "delay"),
        (lambda: BatchedUCBSpec(4, 3, 2, delta=1.5), "delta"),
        (lambda: NormalHedgeBank(0, 3), "rows"),
        (lambda: BatchedLedger(2, 3, 2, tail_policy="x"), "tail_policy"),
    ],
)
def test_bad_construction_raises(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_slot_use_raises():
    bat = _begun()
    with pytest.raises(ValueError, match="slot must be an int in"):
        bat.begin(4)
    with pytest.raises(ValueError, match="holds a request"):
        bat.begin(0)
    with pytest.raises(ValueError, match="not begun"):
        bat.select([1])
    with pytest.raises(ValueError, match="must lie in"):
        bat.select([0, -1])
    with pytest.raises(ValueError, match="distinct"):
        bat.select([0, 0])
    with pytest.raises(ValueError, match="1-D array of slot indices"):
        bat.select([[0]])
    with pytest.raises(ValueError, match="no decision awaiting feedback"):
        bat.observe(BatchFeedback([0], [0], [1], np.zeros((1, 1, 3))))
    with pytest.raises(ValueError, match="not begun"):
        bat.end(1)
    with pytest.raises(ValueError, match="never held a request"):
        bat.weights([3])
    dec = bat.select([0])
    with pytest.raises(ValueError, match="already hold a decision"):
        bat.select([0, 2])
    with pytest.raises(ValueError, match="not begun"):
        bat.observe(BatchFeedback([1], [0], [1], np.zeros((1, 1, 3))))
    bat.observe(BatchFeedback(dec.slots, [0], [1], np.zeros((1, 1, 3))))  # the batch is still usable


@pytest.mark.parametrize(
    "fb,match",
    [
        (dict(accepted=[0, 0], emitted=[1, 1], gamma=np.zeros((1, 2, 3))), "feedback.accepted must be a 1-D"),
        (dict(accepted=[0], emitted=[0], gamma=np.zeros((1, 1, 3))), "feedback.emitted must lie in"),
        (dict(accepted=[0], emitted=[4], gamma=np.zeros((1, 4, 3))), "feedback.emitted must lie in"),
        (dict(accepted=[3], emitted=[1], gamma=np.zeros((1, 1, 3))), "feedback.accepted must lie in"),
        (dict(accepted=[0], emitted=[1.0], gamma=np.zeros((1, 1, 3))), "feedback.emitted must be a 1-D integer"),
        (dict(accepted=[1], emitted=[2], gamma=np.zeros((1, 1, 3))), "gamma must have shape"),
        (dict(accepted=[1], emitted=[2], gamma=np.zeros((1, 2, 4))), "gamma must have shape"),
        (dict(accepted=[1], emitted=[2], gamma=np.zeros((2, 3))), "gamma must have shape"),
        (dict(accepted=[1], emitted=[2], gamma=np.full((1, 2, 3), np.nan)), "NaN or inf"),
        (dict(accepted=[1], emitted=[2], gamma=np.full((1, 2, 3), 1.5)), r"\[0, 1\]"),
        (dict(accepted=[1], emitted=[2], gamma=None), "full-information"),
        (dict(accepted=[1], emitted=[2], gamma=np.zeros((1, 2, 3)), start=[3]), "start must equal"),
    ],
)
def test_bad_feedback_raises_and_leaves_the_decision_pending(fb, match):
    bat = _begun()
    dec = bat.select([0])
    with pytest.raises(ValueError, match=match):
        bat.observe(BatchFeedback(dec.slots, **fb))
    bat.observe(BatchFeedback(dec.slots, [1], [2], np.full((1, 3, 3), 0.5), [0]))
    assert int(bat.rounds[0]) == 1


def test_nan_past_emitted_is_ignored_and_slightly_out_of_range_gamma_is_clipped():
    a, b = _begun(), _begun()
    for bat, g in ((a, [[0.2, 1.0 + 1e-10, 0.0]]), (b, [[0.2, 1.0, -1e-10]])):
        dec = bat.select([0])
        bat.observe(BatchFeedback(dec.slots, [0], [1], np.array([g + [[np.nan] * 3]])))
    np.testing.assert_array_equal(a.weights([0]), b.weights([0]))


def test_greedy_gamma_batch_is_greedy_gamma_row_for_row():
    rng = np.random.default_rng(4)
    b, n, ndt = 9, 5, 4
    first = rng.integers(0, 3, size=(b, n))
    rows = rng.integers(0, 3, size=(n, b, ndt))
    committed = rng.integers(0, 3, size=(b, ndt))
    emitted = rng.integers(1, ndt + 1, size=b)
    got = greedy_gamma_batch(first, rows, committed)
    for j in range(b):
        want = greedy_gamma(first[j].tolist(), rows[:, j].tolist(), committed[j, : emitted[j]].tolist())
        np.testing.assert_array_equal(got[j, : emitted[j]], want)
    with pytest.raises(ValueError, match="row_preds must have shape"):
        greedy_gamma_batch(first, rows[:, :, :1], committed)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_topk_greedy_gamma_batch_is_greedy_gamma_row_for_row():
    """Tree drafting: each proposal is a drafter's top-k ids; γ = 1{the committed token is among them}, checked
    against the per-request definition and against the acceptance module's gamma_greedy with top-k."""
    from hedgespec.acceptance import gamma_greedy

    rng = np.random.default_rng(5)
    b, n, ndt, k, v = 7, 4, 6, 3, 8
    draft = rng.normal(size=(b, ndt, n, v))  # each drafter's logits at each row
    top = np.argsort(-draft, axis=-1, kind="stable")[..., :k]
    first, rows = top[:, 0], top[:, 1:].transpose(2, 0, 1, 3)  # [B, N, k], [N, B, ndt-1, k]
    committed = rng.integers(0, v, size=(b, ndt))
    emitted = rng.integers(1, ndt + 1, size=b)
    got = greedy_gamma_batch(first, rows, committed)
    for j in range(b):
        want = greedy_gamma(first[j].tolist(), rows[:, j].tolist(), committed[j, : emitted[j]].tolist())
        np.testing.assert_array_equal(got[j, : emitted[j]], want)
        target = np.eye(v)[committed[j]]  # a point-mass target law at each emitted token
        for u in range(emitted[j]):
            draft_u = draft[j, u]  # row 0: the first proposal; row u >= 1: draft-extend row u - 1
            np.testing.assert_array_equal(got[j, u], gamma_greedy(target[u][None], _softmax(draft_u), topk=k))
    with pytest.raises(ValueError, match="row_preds must have shape"):
        greedy_gamma_batch(first, rows[..., :2], committed)
