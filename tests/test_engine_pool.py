"""Batched pool evaluation == per-drafter serial evaluation; γ agrees with verification and with
hedgespec.acceptance; a failing drafter is dropped without changing the output."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from _engine_helpers import GREEDY, Recorder, decoding, sampling

from hedgespec.acceptance import gamma_chain, gamma_greedy, gamma_tree
from hedgespec.engine import DrafterPool, SpeculativeEngine, TargetModel
from hedgespec.engine.verify import target_probs
from hedgespec.fixtures import agreeing_drafter, greedy_reference, random_drafter, tiny_llama
from hedgespec.selectors import make_selector

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=4, layers=4)


def _heads(model):
    return [
        random_drafter(model, seed=0),
        random_drafter(model, seed=1, draft_vocab_size=40, intermediate_size=20),
        random_drafter(model, seed=2, aux_layer_ids=[0, 2, 3]),  # its own layers: sliced from the union
        random_drafter(model, seed=3, draft_vocab_size=50),
    ]


def test_batched_equals_serial(model):
    heads = _heads(model)
    pool = DrafterPool(heads, model)
    tgt = TargetModel(model, pool.capture_ids)
    seq = torch.tensor([3, 9, 27, 17, 51, 1, 2, 60, 33, 8, 12])
    _, feats = tgt.prefill(seq)
    emb = tgt.embed(seq)
    # prefill 6 rows, then evaluate 4 more, batched vs each head alone
    pool.prefill(seq[1:7], feats[:6], emb[1:7][None])
    batched = pool.evaluate(seq[7:11], feats[6:10], emb[7:11][None])
    for i, h in enumerate(heads):
        solo = DrafterPool([h], model)
        solo_tgt = TargetModel(model, solo.capture_ids)
        _, f1 = solo_tgt.prefill(seq)
        solo.prefill(seq[1:7], f1[:6], emb[1:7][None])
        ref = solo.evaluate(seq[7:11], f1[6:10], emb[7:11][None])
        vd = h.config.draft_vocab_size
        assert torch.allclose(batched[i, :, :vd], ref[0, :, :vd], atol=1e-5, rtol=1e-5), h.name
        assert torch.isinf(batched[i, :, vd:]).all()
        assert torch.allclose(pool.k[i], solo.k[0], atol=1e-5)


def test_stacked_matrices_keep_each_heads_row_major_storage(model):
    """The stacked [N, in, out] matrices are views of [N, out, in] storage (torch.bmm's transposed-B kernels, the
    faster ones on CPU), holding each head's own rows, zero-padded; a pool in bfloat16 keeps the layout."""
    from hedgespec.engine.eagle3 import MATRICES, stack_weights

    heads = _heads(model)
    for dtype in (torch.float32, torch.bfloat16):
        w = stack_weights(heads, dtype=dtype)
        for key in MATRICES:
            assert w[key].transpose(1, 2).is_contiguous() and w[key].dtype == dtype, key
            for i, h in enumerate(heads):
                rows, cols = h.weights[key].shape
                assert torch.equal(w[key][i, :cols, :rows], h.weights[key].t().to(dtype)), (key, i)
        assert DrafterPool(heads, model, dtype=dtype).w["lm_head"].transpose(1, 2).is_contiguous()


def test_gamma_matches_acceptance_module(model):
    heads = _heads(model)
    g = torch.Generator().manual_seed(0)
    dl = torch.randn(4, 3, 64, generator=g) * 2
    tl = torch.randn(3, 64, generator=g) * 2
    for mode, topk in (("chain", 1), ("tree", 3)):
        eng = SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding(mode, 2, topk))
        dl_m = dl.masked_fill(~eng.pool.valid[:, None, :], float("-inf"))
        for temp in (0.0, 0.7):
            got = eng._gamma(dl_m, tl, sampling(temperature=temp, top_p=0.9))
            for i in range(4):
                q = eng.pool.to_target((dl_m[i : i + 1] / (temp or 1.0)).softmax(-1), [i])[0]
                if temp == 0:
                    want = gamma_greedy(tl.softmax(-1), q, topk=topk)
                else:
                    p = target_probs(tl, temp, 0, 0.9)
                    want = gamma_chain(p, q) if mode == "chain" else gamma_tree(p, q, topk)
                np.testing.assert_allclose(got[:, i], want, atol=1e-5)


@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_chosen_gamma_matches_verification(model, mode):
    """Greedy: the chosen head's γ at a round's first position is 1 iff its first draft level was accepted.

    Deeper positions use target features instead of the head's own outputs (γ is per position), so only the first
    position is an identity; over a distilled head we also check the per-round γ rows have the right shape.
    """
    prompts = [torch.tensor([1, 5, 7, 9, 3])]
    heads = [agreeing_drafter(model, prompts, seed=0, steps=300), random_drafter(model, seed=1)]
    rec = Recorder(make_selector("hedgespec"))
    eng = SpeculativeEngine(model, heads, rec, decoding(mode, 4, 3, 8))
    eng.generate(prompts[0], 30, GREEDY)
    assert any(fb.accepted > 0 for fb in rec.feedback)
    for fb in rec.feedback[:-1]:  # the last round may be cut by the token budget
        assert fb.gamma.shape == (fb.emitted, 2)
        assert fb.gamma[0, fb.chosen] == float(fb.accepted >= 1)


def test_failing_drafter_is_dropped(model, monkeypatch):
    heads = _heads(model)
    prompt = torch.tensor([5, 6, 7])
    ref = greedy_reference(model, prompt, 20)[0]
    eng = SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding("chain", 3))
    real_run = eng.pool.run

    def flaky(idx, *a, **kw):
        if 2 in list(idx) and eng.pool.length > 4:
            raise RuntimeError("simulated head failure")
        return real_run(idx, *a, **kw)

    monkeypatch.setattr(eng.pool, "run", flaky)
    with pytest.warns(RuntimeWarning, match="drafter 'random2'.*dropped"):
        out, stats = eng.generate(prompt, 20, GREEDY)
    assert torch.equal(out, ref)
    assert eng.last_trace.summary["dropped"] == ["random2"]
    # NaN weights in one head: dropped too, output unchanged
    bad = random_drafter(model, seed=9, name="nan-head")
    bad.weights["lm_head"][0, 0] = float("nan")
    eng2 = SpeculativeEngine(model, [heads[0], bad], make_selector("fixed", index=1), decoding("chain", 3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out2, _ = eng2.generate(prompt, 20, GREEDY)
    assert torch.equal(out2, ref)
    assert any("nan-head" in str(x.message) for x in w)


def test_every_drafter_failing_falls_back_to_plain_decoding(model, monkeypatch):
    heads = _heads(model)[:2]
    prompt = torch.tensor([8, 9])
    eng = SpeculativeEngine(model, heads, make_selector("ucbspec"), decoding("tree", 3, 2, 4))
    real_run = eng.pool.run
    calls = []

    def broken(idx, *a, **kw):
        calls.append(list(idx))
        if eng.pool.length > 3:
            raise RuntimeError("all heads broken")
        return real_run(idx, *a, **kw)

    monkeypatch.setattr(eng.pool, "run", broken)
    with pytest.warns(RuntimeWarning, match="dropped"):
        out, stats = eng.generate(prompt, 15, GREEDY)
    assert torch.equal(out, greedy_reference(model, prompt, 15)[0])
    assert stats.accepted_per_round[-1] == 0 and not any(eng.pool.alive)
    # after the heads are dropped, evaluation never runs them again
    last_drop = max(j for j, c in enumerate(calls) if len(c) == 1)
    assert all(len(c) >= 1 for c in calls[: last_drop + 1]) and len(calls) == last_drop + 1


def test_prefill_runs_the_output_heads_on_the_last_row_only(model):
    """A prefill needs every prompt row's keys and values but the logits of the last row: the target's output
    head and the drafters' lm_heads run on one row, and the caches and the next evaluation equal those left by
    evaluating the prompt rows with all their logits (the path a prefill took before)."""
    from hedgespec.engine.eagle3 import stacked_forward

    heads = _heads(model)
    seq = torch.tensor([3, 9, 27, 17, 51, 1, 2, 60, 33, 8, 12])
    tgt = TargetModel(model, DrafterPool(heads, model).capture_ids)
    rows_seen = []
    hook = model.lm_head.register_forward_pre_hook(lambda _m, a: rows_seen.append(a[0].shape[-2]))
    try:
        last, f_last = tgt.prefill(seq, last_logits=True)
        full, f_full = tgt.prefill(seq)
    finally:
        hook.remove()
    assert rows_seen == [1, len(seq)] and last.shape == (1, full.shape[1])
    assert torch.allclose(last[0], full[-1], atol=1e-5) and torch.equal(f_last, f_full)

    emb = tgt.embed(seq)
    fast, slow = DrafterPool(heads, model), DrafterPool(heads, model)
    fast.prefill(seq[1:7], f_full[:6], emb[1:7][None])
    slow.reset()
    slow.evaluate(seq[1:7], f_full[:6], emb[1:7][None])
    assert torch.equal(fast.k, slow.k) and torch.equal(fast.v, slow.v)
    a = fast.evaluate(seq[7:11], f_full[6:10], emb[7:11][None])
    b = slow.evaluate(seq[7:11], f_full[6:10], emb[7:11][None])
    assert torch.equal(a, b)

    w, t = fast.w, 6
    cos, sin = fast.rope(torch.arange(t))
    args = (w, fast.eps, fast.n_heads, fast.n_kv, emb[1:7][None], fast.features(f_full[:6], range(4)), True)
    whole = stacked_forward(*args, cos, sin, None, None, None)
    tail = stacked_forward(*args, cos, sin, None, None, None, logits_rows=2)
    assert tail[0].shape[1] == 2 and torch.allclose(tail[0], whole[0][:, -2:], atol=1e-6)
    assert all(torch.equal(x, y) for x, y in zip(tail[1:], whole[1:], strict=True))


@pytest.mark.parametrize("special", [float("nan"), float("inf"), float("-inf")])
def test_check_finite_finds_one_bad_logit(special):
    from hedgespec.engine.verify import check_finite

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 1000, generator=g) * 30
    check_finite(x, "target (verification)")
    check_finite(x[:0], "target (verification)")
    for r, c in ((0, 0), (4, 999), (2, 517)):
        y = x.clone()
        y[r, c] = special
        assert not bool(torch.isfinite(y).all())
        with pytest.raises(ValueError, match=r"target \(verification\) produced non-finite"):
            check_finite(y, "target (verification)")


def test_the_pending_row_rides_along_a_pass_and_equals_a_draft_step(model):
    """A pass given the next pending row commits exactly what a pass without it commits, and hands head i the
    forward of that row, equal to head i's own first draft step from it; only for that root token, at that
    length, to the heads the pass ran, until the next pass."""
    heads = _heads(model)
    seq = torch.tensor([3, 9, 27, 17, 51, 1, 2, 60, 33, 8, 12, 44, 5])
    tgt = TargetModel(model, DrafterPool(heads, model).capture_ids)
    _, feats = tgt.prefill(seq)
    emb = tgt.embed(seq)
    ride, plain = DrafterPool(heads, model), DrafterPool(heads, model)
    ride.prefill(seq[1:7], feats[:6], emb[1:7][None], (int(seq[7]), feats[6], emb[7]))
    plain.prefill(seq[1:7], feats[:6], emb[1:7][None])
    assert torch.allclose(ride.k, plain.k, atol=1e-6) and ride.length == plain.length == 6
    assert ride.root_row(0, int(seq[7])) is not None

    got = ride.evaluate(seq[7:10], feats[6:9], emb[7:10][None], (int(seq[10]), feats[9], emb[10]))
    ref = plain.evaluate(seq[7:10], feats[6:9], emb[7:10][None])
    assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5)
    assert torch.allclose(ride.k, plain.k, atol=1e-5) and torch.allclose(ride.v, plain.v, atol=1e-5)
    assert ride.length == plain.length == 9
    assert ride.root_row(0, int(seq[7])) is None  # the prefill's row is stale
    for i in range(len(heads)):
        step = ride.root_row(i, int(seq[10]))
        own = plain.run([i], emb[10][None, None], plain.features(feats[9][None], [i]), True, torch.tensor([9]))
        assert step is not None and len(step) == len(own) == 4
        for a, b in zip(step, own, strict=True):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), i
    assert ride.root_row(0, int(seq[10]) + 1) is None  # another root token

    ride.extend([2], seq[10:12], feats[9:11], emb[10:12][None], (int(seq[12]), feats[11], emb[12]))
    assert ride.root_row(2, int(seq[12])) is not None
    assert ride.root_row(0, int(seq[12])) is None  # not run by that pass (and behind)
    with pytest.warns(RuntimeWarning, match="dropped"):
        ride.drop(2, "raised in a test")
    assert ride.root_row(2, int(seq[12])) is None
    ride.reset()
    assert ride.root_row(2, int(seq[12])) is None


@pytest.mark.parametrize(("mode", "epsilon"), [("chain", 1.0), ("chain", 0.3), ("tree", 1.0)])
def test_drafts_take_one_head_forward_fewer_a_round(model, monkeypatch, mode, epsilon):
    """With the first draft step riding along the pool pass, a round runs one head forward fewer after the pass
    (a chain K − 1, a tree's root level none), and decodes exactly as drafting from the root row itself: same
    output (the target's greedy one), rounds, choices and γ. Label-efficient rounds (ε < 1) extend the chosen
    head only, so the next round saves its step only when it chooses that head again."""
    from hedgespec.engine import pool as pool_mod

    heads, k = _heads(model), 3
    prompt = torch.tensor([[1, 5, 7, 9, 3]])
    runs: list[int] = []
    real_run = pool_mod.DrafterPool.run

    def counting_run(self, idx, emb, *a, **kw):
        runs.append(int(emb.shape[1]))
        return real_run(self, idx, emb, *a, **kw)

    def decode():
        selector = make_selector("hedgespec", epsilon=epsilon, seed=1)
        eng = SpeculativeEngine(model, heads, selector, decoding(mode, k, 2, 5))
        runs.clear()
        out, stats = eng.generate(prompt, 20, GREEDY)
        return out, stats, eng.last_trace, list(runs)

    monkeypatch.setattr(pool_mod.DrafterPool, "run", counting_run)
    out, stats, trace, calls = decode()
    monkeypatch.setattr(pool_mod.DrafterPool, "root_row", lambda self, i, token: None)
    out0, stats0, trace0, calls0 = decode()

    assert torch.equal(out, greedy_reference(model, prompt, 20)) and torch.equal(out, out0)
    assert stats.accepted_per_round == stats0.accepted_per_round
    assert [r["chosen"] for r in trace.rounds] == [r["chosen"] for r in trace0.rounds]
    assert np.allclose(
        np.array(trace.gamma, dtype=float), np.array(trace0.gamma, dtype=float), atol=1e-5, equal_nan=True
    )
    rounds = len(stats.accepted_per_round)
    one_row = calls.count(1)  # chain steps and tree roots (a pass over one new row happens only at the budget's edge)
    saved = calls0.count(1) - one_row
    if epsilon == 1.0:
        assert saved == rounds  # one head forward saved in every round
    else:
        skipped = sum(1 for r in trace.rounds if not r.get("evaluated", True))
        assert skipped > 0 and 0 < saved < rounds


def test_one_query_row_in_bfloat16_attends_in_float32():
    """A draft step's one-row attention in bfloat16 is computed in float32 from the same bfloat16 values (SDPA's
    bfloat16 path is slower there): equal to float32 SDPA of those values, close to the bfloat16 path; several
    rows keep the bfloat16 path."""
    import torch.nn.functional as F

    from hedgespec.engine.eagle3 import _attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, t, 64, generator=g).bfloat16() for h, t in ((9, 1), (3, 20), (3, 20)))
    mask = torch.ones(1, 20, dtype=torch.bool)
    out = _attention(q, k, v, mask, True)
    up = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True)
    low = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert out.dtype == torch.bfloat16 and torch.equal(out, up.bfloat16())
    assert torch.allclose(out.float(), low.float(), atol=3e-2)
    q3 = torch.randn(2, 9, 3, 64, generator=g).bfloat16()
    mask3 = torch.ones(3, 20, dtype=torch.bool).tril(diagonal=17)
    low3 = F.scaled_dot_product_attention(q3, k, v, attn_mask=mask3, enable_gqa=True)
    assert torch.equal(_attention(q3, k, v, mask3, True), low3)
