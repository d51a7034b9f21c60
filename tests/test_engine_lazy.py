"""Lazy catch-up of the drafter pool (label-efficient HedgeSpec in the reference engine).

Truths used: a pool extended with every head every round (the ε = 1 engine), per-head solo pools, and
transformers greedy decoding.
"""

from __future__ import annotations

import warnings

import _lazy_fixtures
import numpy as np
import pytest
import torch
from _engine_helpers import GREEDY, LAZY_PROMPT, Recorder, decoding, sampling

from hedgespec.engine import DrafterPool, SpeculativeEngine, TargetModel
from hedgespec.engine.eagle3 import stacked_forward
from hedgespec.fixtures import greedy_reference
from hedgespec.selectors import make_selector
from hedgespec.types import RequestContext

torch.set_num_threads(1)
model, heads = _lazy_fixtures.model, _lazy_fixtures.heads  # the module-scoped fixtures of this pool
PROMPT = LAZY_PROMPT


def _rows(model, pool):
    tgt = TargetModel(model, pool.capture_ids)
    seq = torch.tensor([3, 9, 27, 17, 51, 1, 2, 60, 33, 8, 12, 40, 41, 7, 19, 23, 5, 6])
    _, feats = tgt.prefill(seq)
    return seq, feats, tgt.embed(seq)


# chunks after a 4-row prefill, and which heads each round extends (None = the whole pool)
CHUNKS = [(4, 6), (6, 7), (7, 10), (10, 12), (12, 13), (13, 17)]
PLAN = [[1], [1], [3], None, [0], [2]]


def test_lazily_caught_up_heads_match_heads_extended_every_round(model, heads):
    eager, lazy = DrafterPool(heads, model), DrafterPool(heads, model)
    seq, feats, emb = _rows(model, eager)
    for pool in (eager, lazy):
        pool.prefill(seq[1:5], feats[:4], emb[1:5][None])
    for (a, b), idx in zip(CHUNKS, PLAN):
        want = eager.evaluate(seq[a + 1 : b + 1], feats[a:b], emb[a + 1 : b + 1][None])
        if idx is None:
            got = lazy.evaluate(seq[a + 1 : b + 1], feats[a:b], emb[a + 1 : b + 1][None])
            assert lazy.behind == []
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        else:
            got = lazy.extend(idx, seq[a + 1 : b + 1], feats[a:b], emb[a + 1 : b + 1][None])
            torch.testing.assert_close(got, want[idx], atol=1e-5, rtol=1e-5)  # the chosen head is current
            assert lazy.behind == [j for j in range(4) if j not in idx]  # only the extended heads are current
        assert lazy.length == eager.length == b
    lazy.catch_up()
    assert lazy.behind == [] and lazy.filled == [lazy.length] * 4
    torch.testing.assert_close(lazy.k, eager.k, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lazy.v, eager.v, atol=1e-5, rtol=1e-5)
    assert lazy._log_emb is None  # no missed rows are kept once every head is current


def test_caught_up_head_equals_a_solo_pool(model, heads):
    pool = DrafterPool(heads, model)
    seq, feats, emb = _rows(model, pool)
    pool.prefill(seq[1:5], feats[:4], emb[1:5][None])
    for a, b in CHUNKS[:4]:
        pool.extend([0], seq[a + 1 : b + 1], feats[a:b], emb[a + 1 : b + 1][None])
    assert pool.behind == [1, 2, 3] and pool.filled[2] == 4
    pool.catch_up([2])
    assert pool.behind == [1, 3]
    nxt = pool.extend([0, 2], seq[13:15], feats[12:14], emb[13:15][None])
    for j, i in enumerate((0, 2)):
        solo = DrafterPool([heads[i]], model)
        _, f1 = TargetModel(model, solo.capture_ids).prefill(seq)
        solo.prefill(seq[1:13], f1[:12], emb[1:13][None])
        ref = solo.evaluate(seq[13:15], f1[12:14], emb[13:15][None])
        vd = heads[i].config.draft_vocab_size
        torch.testing.assert_close(pool.k[i], solo.k[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(nxt[j, :, :vd], ref[0, :, :vd], atol=1e-5, rtol=1e-5)


def test_a_lagging_head_cannot_be_run_before_it_catches_up(model, heads):
    pool = DrafterPool(heads, model)
    seq, feats, emb = _rows(model, pool)
    pool.prefill(seq[1:5], feats[:4], emb[1:5][None])
    pool.extend([1], seq[5:7], feats[4:6], emb[5:7][None])
    f = pool.features(feats[6:7], [0])
    with pytest.raises(RuntimeError, match="catch_up"):
        pool.run([0], emb[7:8][None], f, True, torch.tensor([pool.length]))
    with pytest.raises(ValueError, match="emb"):
        pool.extend([1], seq[7:9], feats[6:8], emb[7:9])


def _engine(model, heads, sel, mode="chain", **kw):
    return SpeculativeEngine(model, heads, sel, decoding(mode, 3, 2, 6), **kw)


@pytest.mark.parametrize("mode", ["chain", "tree"])
@pytest.mark.parametrize("eps", [0.5, 0.25, 0.1])
def test_greedy_output_matches_transformers(model, heads, mode, eps):
    for seed, prompt in enumerate([PROMPT, torch.tensor([[2]]), torch.tensor([[11, 12, 13, 40, 41, 42, 8]])]):
        eng = _engine(model, heads, make_selector("hedgespec", epsilon=eps, seed=seed), mode)
        out, stats = eng.generate(prompt, 30, GREEDY, ctx=RequestContext(request_id=seed))
        assert torch.equal(out, greedy_reference(model, prompt, 30)), (mode, eps, seed)
        assert stats.selector_state["evaluated_rounds"] < stats.rounds


def test_skipped_rounds_send_no_gamma_and_evaluated_ones_match_the_eager_engine(model, heads):
    rec = Recorder(make_selector("hedgespec", epsilon=0.3, seed=1))
    eng = _engine(model, heads, rec)
    eng.generate(PROMPT, 40, GREEDY)
    ref = _engine(model, heads, make_selector("hedgespec"))
    ref.generate(PROMPT, 40, GREEDY)
    full = np.asarray(ref.last_trace.gamma)  # γ at position u does not depend on the selector under greedy
    tr = np.asarray(eng.last_trace.gamma)
    assert eng.last_trace.tokens == ref.last_trace.tokens
    skipped = 0
    for fb, rnd in zip(rec.feedback, eng.last_trace.rounds):
        rows = slice(fb.start, fb.start + fb.emitted)
        if fb.decision.evaluate:
            np.testing.assert_array_equal(fb.gamma, full[rows])  # lazily caught-up heads, same γ
            assert "evaluated" not in rnd
        else:
            skipped += 1
            assert fb.gamma is None and rnd["evaluated"] is False
            np.testing.assert_array_equal(tr[rows, fb.chosen], full[rows, fb.chosen])  # the chosen head's own γ
            others = [j for j in range(4) if j != fb.chosen]
            assert np.isnan(tr[rows][:, others]).all()
    assert skipped > 0


def test_skipped_rounds_run_only_the_chosen_head(model, heads, monkeypatch):
    sel = make_selector("hedgespec", epsilon=0.25, seed=2)
    eng = _engine(model, heads, sel)
    calls = []
    real = eng.pool.run
    monkeypatch.setattr(eng.pool, "run", lambda idx, *a, **kw: calls.append(list(idx)) or real(idx, *a, **kw))
    eng.generate(PROMPT, 40, GREEDY)
    evaluated = sel.state_dict()["evaluated_rounds"]
    wide = [c for c in calls if len(c) > 1]
    assert len(wide) == evaluated + 1  # the prefill, then one batched pass per evaluated round
    eager = make_selector("hedgespec")
    eng2 = _engine(model, heads, eager)
    calls2 = []
    real2 = eng2.pool.run
    monkeypatch.setattr(eng2.pool, "run", lambda idx, *a, **kw: calls2.append(list(idx)) or real2(idx, *a, **kw))
    eng2.generate(PROMPT, 40, GREEDY)
    assert len([c for c in calls2 if len(c) > 1]) == eager.rounds + 1 > evaluated + 1


def test_trace_mode_evaluates_every_round_with_the_same_decisions(model, heads):
    plain = _engine(model, heads, make_selector("hedgespec", epsilon=0.25, seed=3))
    out_a, st_a = plain.generate(PROMPT, 30, GREEDY)
    traced = _engine(model, heads, make_selector("hedgespec", epsilon=0.25, seed=3), full_counterfactual=True)
    out_b, st_b = traced.generate(PROMPT, 30, GREEDY)
    assert torch.equal(out_a, out_b) and st_a.chosen == st_b.chosen
    tr = traced.last_trace
    assert all("evaluated" not in r for r in tr.rounds) and np.isfinite(np.asarray(tr.gamma)).all()
    assert tr.runs is not None and len(tr.runs) == len(tr.tokens)
    assert any(r.get("evaluated") is False for r in plain.last_trace.rounds)


def test_sampling_runs_and_a_failing_lagging_head_is_dropped(model, heads, monkeypatch):
    eng = _engine(model, heads, make_selector("hedgespec", epsilon=0.25, seed=0))
    out, stats = eng.generate(PROMPT, 30, sampling(temperature=0.8, seed=5))
    assert stats.generated == 29
    eng = _engine(model, heads, make_selector("hedgespec", epsilon=0.25, seed=0))
    real = eng.pool.run

    def flaky(idx, *a, **kw):
        if 3 in list(idx) and kw.get("upto", eng.pool.length) > 8:
            raise RuntimeError("simulated head failure")
        return real(idx, *a, **kw)

    monkeypatch.setattr(eng.pool, "run", flaky)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out, _ = eng.generate(PROMPT, 30, GREEDY)
    assert torch.equal(out, greedy_reference(model, PROMPT, 30))
    assert eng.pool.alive[3] is False and any("dropped" in str(x.message) for x in w)


def test_single_head_forward_uses_weight_views_with_identical_results(model, heads):
    """run([i]) reads head i's stacked weights as views (no per-step copy): bitwise the gathered-copy forward."""
    pool = DrafterPool(heads, model)
    seq, feats, emb = _rows(model, pool)
    pool.prefill(seq[1:9], feats[:8], emb[1:9][None])
    f, pos = pool.features(feats[8:9], [2]), torch.tensor([8])
    got = pool.run([2], emb[9:10][None], f, True, pos)
    cos, sin = pool.rope(pos)
    copy = {k: t[[2]] for k, t in pool.w.items()}  # what run([i]) used to gather on every call
    want = stacked_forward(
        copy, pool.eps, pool.n_heads, pool.n_kv, emb[9:10][None], f, True, cos, sin, pool.k[[2]], pool.v[[2]], None
    )
    vd = heads[2].config.draft_vocab_size
    assert torch.equal(got[0][..., :vd], want[0][..., :vd]) and torch.equal(got[2], want[2])


@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_fixed_without_evaluation_runs_only_its_head_with_the_same_output(model, heads, monkeypatch, mode):
    """Fixed(evaluate=False), the deployed EAGLE-3 cost: no pool pass after the prefill, same tokens and rounds,
    its own γ identical to the evaluating run's column, transformers' greedy output."""
    runs = {}
    for evaluate in (True, False):
        rec = Recorder(make_selector("fixed", index=1, evaluate=evaluate))
        eng = _engine(model, heads, rec, mode)
        calls = []
        real = eng.pool.run
        monkeypatch.setattr(
            eng.pool, "run", lambda idx, *a, _c=calls, _r=real, **kw: _c.append(list(idx)) or _r(idx, *a, **kw)
        )
        out, stats = eng.generate(PROMPT, 30, GREEDY)
        runs[evaluate] = (out, stats, rec.feedback, calls)
    (out_t, st_t, fb_t, calls_t), (out_f, st_f, fb_f, calls_f) = runs[True], runs[False]
    assert torch.equal(out_f, greedy_reference(model, PROMPT, 30)) and torch.equal(out_f, out_t)
    assert st_f.rounds == st_t.rounds and st_f.accepted_per_round == st_t.accepted_per_round
    assert len([c for c in calls_f if len(c) > 1]) == 1, "only the prefill ran the whole pool"
    assert len([c for c in calls_t if len(c) > 1]) == st_t.rounds + 1
    for a, b in zip(fb_t, fb_f):
        assert b.gamma is None and a.gamma is not None and a.accepted == b.accepted
    with pytest.raises(ValueError, match="evaluate must be true or false"):
        make_selector("fixed", index=1, evaluate="no")


@pytest.mark.parametrize("mode", ["chain", "tree"])
@pytest.mark.parametrize("name", ["ucbspec", "exp3spec", "metasd"])
def test_bandits_without_evaluation_decide_as_with_it(model, heads, monkeypatch, mode, name):
    """A bandit at its deployed cost (evaluate=False): no pool pass after the prefill, yet the same drafters,
    accepted lengths and output as the evaluating run, since what it reads (its BanditFeedback, MetaSD's own γ
    included) is the same; under sampling too (same random draws)."""
    for samp in (GREEDY, sampling(temperature=0.8, seed=3)):
        runs = {}
        for evaluate in (True, False):
            rec = Recorder(make_selector(name, seed=2, evaluate=evaluate))
            eng = _engine(model, heads, rec, mode)
            calls = []
            real = eng.pool.run
            monkeypatch.setattr(
                eng.pool, "run", lambda idx, *a, _c=calls, _r=real, **kw: _c.append(list(idx)) or _r(idx, *a, **kw)
            )
            out, stats = eng.generate(PROMPT, 30, samp, ctx=RequestContext(request_id=5))
            runs[evaluate] = (out, stats, rec.feedback, calls)
        (out_t, st_t, fb_t, calls_t), (out_f, st_f, fb_f, calls_f) = runs[True], runs[False]
        assert torch.equal(out_f, out_t) and st_f.chosen == st_t.chosen
        assert st_f.accepted_per_round == st_t.accepted_per_round
        assert len({st_t.chosen[j] for j in range(st_t.rounds)}) > 1, "the bandit should try several drafters"
        assert len([c for c in calls_f if len(c) > 1]) == 1, "only the prefill ran the whole pool"
        assert len([c for c in calls_t if len(c) > 1]) == st_t.rounds + 1
        for a, b in zip(fb_t, fb_f):
            assert b.gamma is None and a.gamma is not None
            va, vb = a.bandit_view(), b.bandit_view()
            assert (va.chosen, va.accepted, va.emitted) == (vb.chosen, vb.accepted, vb.emitted)
            np.testing.assert_allclose(vb.chosen_gamma, va.chosen_gamma, atol=1e-5)
            assert len(vb.chosen_gamma) == b.emitted
        if samp is GREEDY:
            assert torch.equal(out_f, greedy_reference(model, PROMPT, 30))
    with pytest.raises(ValueError, match="evaluate must be true or false"):
        make_selector(name, evaluate=1)
