"""hedgespec.serving.cpu_kernels, op by op, against straightforward reference computations (no sglang needed)."""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

from hedgespec.serving import cpu_kernels as ck

torch.set_num_threads(1)


# ------------------------------------------------------------------ attention
def _dense_reference(q, keys, values, visible, scale):
    """Per head: softmax(q·k·scale with −inf outside `visible`) · v, heads mapped to kv heads by GQA groups."""
    tq, heads, _ = q.shape
    kv_heads = keys.shape[1]
    out = torch.zeros(tq, heads, values.shape[-1], dtype=torch.float64)
    for h in range(heads):
        kh = h // (heads // kv_heads)
        for t in range(tq):
            s = [
                float(q[t, h].double() @ keys[j, kh].double()) * scale if visible[t][j] else -math.inf
                for j in range(keys.shape[0])
            ]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            z = sum(w)
            out[t, h] = sum(w[j] / z * values[j, kh].double() for j in range(keys.shape[0]))
    return out


def _pool(n_slots=64, kv_heads=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_slots, kv_heads, dim, generator=g), torch.randn(n_slots, kv_heads, dim, generator=g)


def test_decode_attention_matches_dense_reference():
    g = torch.Generator().manual_seed(1)
    kb, vb = _pool()
    heads, kv_heads, dim = 4, 2, 8
    req_to_token = torch.zeros(3, 32, dtype=torch.int32)
    req_to_token[1, :5] = torch.tensor([3, 9, 4, 20, 11])
    req_to_token[2, :3] = torch.tensor([7, 30, 31])
    rpi, seq_lens = torch.tensor([1, 2]), torch.tensor([5, 3])
    q = torch.randn(2, heads, dim, generator=g)
    k_new, v_new = torch.randn(2, kv_heads, dim, generator=g), torch.randn(2, kv_heads, dim, generator=g)
    loc = torch.tensor([11, 31])  # the new tokens' slots (last slot of each request)
    o = torch.empty(2, heads, dim)
    kb0, vb0 = kb.clone(), vb.clone()
    ck.decode_attention(
        q,
        kb,
        vb,
        1.0,
        1.0,
        o,
        k_new,
        v_new,
        loc,
        torch.zeros(1),
        req_to_token,
        rpi,
        seq_lens,
        0.35,
        0.0,
        False,
        0,
        None,
        None,
    )
    assert torch.equal(kb[loc], k_new) and torch.equal(vb[loc], v_new)
    kb0[loc], vb0[loc] = k_new, v_new
    for i in range(2):
        slots = req_to_token[int(rpi[i]), : int(seq_lens[i])].long()
        ref = _dense_reference(q[i : i + 1], kb0[slots], vb0[slots], [[True] * len(slots)], 0.35)
        torch.testing.assert_close(o[i : i + 1].double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("use_tree_mask", [False, True])
def test_extend_attention_prefix_plus_causal_or_tree(use_tree_mask):
    g = torch.Generator().manual_seed(2)
    kb, vb = _pool()
    heads, dim = 4, 8
    req_to_token = torch.zeros(2, 32, dtype=torch.int32)
    req_to_token[0, :6] = torch.tensor([1, 2, 3, 40, 41, 42])  # prefix 3 + extend 3
    req_to_token[1, :5] = torch.tensor([10, 11, 50, 51, 52])  # prefix 2 + extend 3
    ext = 3
    q = torch.randn(2 * ext, heads, dim, generator=g)
    k_ext = torch.randn(2 * ext, 2, dim, generator=g)
    v_ext = torch.randn(2 * ext, 2, dim, generator=g)
    tree = None
    inner = [[True, False, False], [True, True, False], [True, True, True]]
    if use_tree_mask:  # row 2 sees the root and itself only (a sibling of row 1)
        inner = [[True, False, False], [True, True, False], [True, False, True]]
        tree = torch.tensor([inner, inner]).flatten()
    o = torch.empty_like(q)
    ck.extend_attention(
        q,
        k_ext,
        v_ext,
        o,
        kb,
        vb,
        1.0,
        1.0,
        req_to_token,
        torch.tensor([0, 1]),
        torch.tensor([6, 5]),
        torch.tensor([ext, ext]),
        torch.tensor([0, ext]),
        ext,
        0.3,
        0.0,
        False,
        0,
        None,
        None,
        tree,
        True,
    )
    for i, prefix in enumerate((3, 2)):
        slots = req_to_token[i, :prefix].long()
        keys = torch.cat([kb[slots], k_ext[i * ext : (i + 1) * ext]])
        values = torch.cat([vb[slots], v_ext[i * ext : (i + 1) * ext]])
        visible = [[True] * prefix + row for row in inner]
        ref = _dense_reference(q[i * ext : (i + 1) * ext], keys, values, visible, 0.3)
        torch.testing.assert_close(o[i * ext : (i + 1) * ext].double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("budget", [None, 1])
def test_extend_attention_batches_sequences_of_different_lengths(monkeypatch, budget):
    """A prefill-like extend: three sequences with different prefixes (0, 3, 1) and extends (4, 1, 2), new keys
    read from the cache (``k_extend`` None), causal, a logit cap; each row equals the dense reference. With a
    score budget of 1 every sequence runs in its own group (the split path)."""
    if budget is not None:
        monkeypatch.setattr(ck, "SCORE_BUDGET", budget)
    g = torch.Generator().manual_seed(5)
    kb, vb = _pool(kv_heads=1)
    heads, dim, cap, scale = 2, 8, 3.0, 0.4
    req_to_token = torch.zeros(4, 16, dtype=torch.int32)
    layout = {0: [5, 6, 7, 8], 2: [20, 21, 22, 23], 3: [30, 31, 32]}  # slots: prefix then extend
    for r, sl in layout.items():
        req_to_token[r, : len(sl)] = torch.tensor(sl)
    rpi = torch.tensor([0, 2, 3])
    prefixes, exts = [0, 3, 1], [4, 1, 2]
    starts = [0, 4, 5]
    q = torch.randn(sum(exts), heads, dim, generator=g)
    o = torch.full_like(q, float("nan"))
    ck.extend_attention(
        q, None, None, o, kb, vb, 1.0, 1.0, req_to_token, rpi,
        torch.tensor([p + e for p, e in zip(prefixes, exts)]), torch.tensor(exts), torch.tensor(starts), max(exts),
        scale, cap, False, 0, None, None, None, True,
    )  # fmt: skip
    for i, (prefix, ext, start) in enumerate(zip(prefixes, exts, starts)):
        slots = req_to_token[int(rpi[i]), : prefix + ext].long()
        visible = [[True] * prefix + [m <= t for m in range(ext)] for t in range(ext)]
        qi = q[start : start + ext].double()
        ref = _capped_reference(qi, kb[slots].double(), vb[slots].double(), visible, scale, cap)
        torch.testing.assert_close(o[start : start + ext].double(), ref, atol=1e-5, rtol=1e-5)


def test_extend_groups_fit_the_score_budget(monkeypatch):
    """Sequences (extends 4, 1, 2; prefixes 0, 3, 1; 2 heads) group while padded scores fit the budget: one group
    under a large budget, each alone under a budget of 1, and [0], [1, 2] under 100 (the first two would need
    2·2·4·(3+4) = 112 scores, the last two 2·2·2·(3+2) = 40)."""
    exts, prefixes = [4, 1, 2], [0, 3, 1]
    monkeypatch.setattr(ck, "SCORE_BUDGET", 1 << 20)
    assert ck._groups(exts, prefixes, 2) == [(range(0, 3), 4, 3)]
    monkeypatch.setattr(ck, "SCORE_BUDGET", 1)
    assert ck._groups(exts, prefixes, 2) == [(range(0, 1), 4, 0), (range(1, 2), 1, 3), (range(2, 3), 2, 1)]
    monkeypatch.setattr(ck, "SCORE_BUDGET", 100)
    assert ck._groups(exts, prefixes, 2) == [(range(0, 1), 4, 0), (range(1, 3), 2, 3)]


def _capped_reference(q, keys, values, visible, scale, cap):
    tq, heads, _ = q.shape
    out = torch.zeros(tq, heads, values.shape[-1], dtype=torch.float64)
    for h in range(heads):
        kh = h // (heads // keys.shape[1])
        for t in range(tq):
            s = [
                cap * math.tanh(float(q[t, h] @ keys[j, kh]) * scale / cap) if visible[t][j] else -math.inf
                for j in range(keys.shape[0])
            ]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            out[t, h] = sum(w[j] / sum(w) * values[j, kh] for j in range(keys.shape[0]))
    return out


def test_attention_refuses_unsupported_features():
    kb, vb = _pool()
    q, o = torch.zeros(1, 4, 8), torch.zeros(1, 4, 8)
    rtt = torch.zeros(1, 8, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="sliding-window"):
        ck.decode_attention(
            q,
            kb,
            vb,
            1.0,
            1.0,
            o,
            None,
            None,
            None,
            torch.zeros(1),
            rtt,
            torch.tensor([0]),
            torch.tensor([1]),
            1.0,
            0.0,
            False,
            5,
            None,
            None,
        )
    with pytest.raises(NotImplementedError, match="cross-attention"):
        ck.extend_attention(
            q,
            None,
            None,
            o,
            kb,
            vb,
            1.0,
            1.0,
            rtt,
            torch.tensor([0]),
            torch.tensor([1]),
            torch.tensor([1]),
            torch.tensor([0]),
            1,
            1.0,
            0.0,
            True,
            0,
            None,
            None,
            None,
            True,
        )


# ------------------------------------------------------------------ speculative bookkeeping
def test_verify_tree_greedy_chain_is_longest_matching_prefix():
    bs, n = 3, 4
    candidates = torch.tensor([[9, 5, 6, 7], [9, 5, 1, 7], [9, 2, 6, 7]])  # col 0 = last verified token
    target = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]])  # target argmax after each slot
    ri = torch.arange(bs * n).view(bs, n)
    nxt = torch.tensor([[1, 2, 3, -1]] * bs)
    sib = torch.full((bs, n), -1)
    predicts = torch.full((bs * n,), -7, dtype=torch.int32)
    accept_index = torch.full((bs, n), -1, dtype=torch.int32)
    accept_num = torch.zeros(bs, dtype=torch.int32)
    ck.verify_tree_greedy(predicts, accept_index, accept_num, candidates, ri, nxt, sib, target)
    for b in range(bs):  # reference: count matching drafts, emit target tokens along the accepted prefix + bonus
        m = 0
        while m < n - 1 and int(candidates[b, m + 1]) == int(target[b, m]):
            m += 1
        assert int(accept_num[b]) == m
        assert accept_index[b, : m + 1].tolist() == [b * n + j for j in range(m + 1)]
        assert predicts[b * n : b * n + m + 1].tolist() == target[b, : m + 1].tolist()
    assert accept_num.tolist() == [3, 1, 0]


def test_verify_tree_greedy_follows_siblings():
    # root -> children slots 1 (token 4) and 2 (token 5, sibling); slot 3 child of slot 2
    candidates = torch.tensor([[0, 4, 5, 8]])
    target = torch.tensor([[5, 0, 8, 9]])  # after root the target says 5 -> slot 2; after slot 2 -> 8 -> slot 3
    ri = torch.arange(4).view(1, 4)
    nxt = torch.tensor([[1, -1, 3, -1]])
    sib = torch.tensor([[-1, 2, -1, -1]])
    predicts = torch.zeros(4, dtype=torch.int32)
    ai = torch.full((1, 3), -1, dtype=torch.int32)
    an = torch.zeros(1, dtype=torch.int32)
    ck.verify_tree_greedy(predicts, ai, an, candidates, ri, nxt, sib, target)
    assert an.tolist() == [2] and ai.tolist() == [[0, 2, 3]] and predicts[[0, 2, 3]].tolist() == [5, 8, 9]


def _reference_tree(parents, sel, topk, n):
    """Parent tree slot of each slot 1..n-1, from the EAGLE selection bookkeeping (slot 0 = root)."""
    par = {}
    for slot in range(1, n):
        tb = sel[slot - 1] // topk
        par[slot] = 0 if tb == 0 else sel.index(parents[tb]) + 1
    return par


def test_build_tree_chain_topk1():
    n, seq_len = 4, 7
    parents = torch.tensor([[-1, 0, 1]])  # topk=1, depth=3 chain
    sel = torch.tensor([[0, 1, 2]])
    mask = torch.zeros(n * n, dtype=torch.bool)
    pos, ri = torch.zeros(n, dtype=torch.long), torch.zeros(1, n, dtype=torch.long)
    nxt, sib = torch.full((1, n), -1), torch.full((1, n), -1)
    ck.build_tree_kernel_efficient(parents, sel, torch.tensor([seq_len]), mask, pos, ri, nxt, sib, 1, 3, n, 1)
    assert pos.tolist() == [7, 8, 9, 10]
    assert nxt.tolist() == [[1, 2, 3, -1]] and sib.tolist() == [[-1] * 4] and ri.tolist() == [[0, 1, 2, 3]]
    assert torch.equal(mask.view(n, n), torch.ones(n, n, dtype=torch.bool).tril())


def test_build_tree_topk2_matches_reference_tree():
    topk, depth, n, seq_len = 2, 2, 4, 5
    # step-0 candidates are ids 1, 2 (parent root); step-1 candidates ids 3..6 have parent list index 1 -> id 1
    parents = torch.tensor([[-1, 0, 1, 2, 3]])
    sel = torch.tensor([[0, 1, 2]])  # selected score indices -> tree slots 1..3 (parent = sel // topk)
    mask = torch.zeros(n * n, dtype=torch.bool)
    pos, ri = torch.zeros(n, dtype=torch.long), torch.zeros(1, n, dtype=torch.long)
    nxt, sib = torch.full((1, n), -1), torch.full((1, n), -1)
    ck.build_tree_kernel_efficient(parents, sel, torch.tensor([seq_len]), mask, pos, ri, nxt, sib, topk, depth, n, 1)
    par = _reference_tree(parents[0].tolist(), sel[0].tolist(), topk, n)
    m = mask.view(n, n)
    for t in range(n):  # ancestors (incl. self and root) visible, depth = #ancestors excluding root
        anc, cur = {0, t}, t
        while cur:
            cur = par[cur]
            anc.add(cur)
        assert {j for j in range(n) if m[t, j]} == anc
        assert int(pos[t]) == seq_len + len(anc - {0})
    children = {p: sorted(c for c in par if par[c] == p) for p in range(n)}
    for p, kids in children.items():  # first child = newest, siblings chain through the rest
        walk, cur = [], int(nxt[0, p])
        while cur != -1:
            walk.append(cur)
            cur = int(sib[0, cur])
        assert sorted(walk) == kids


def test_cache_loc_helpers_roundtrip():
    rtt = torch.arange(4 * 16, dtype=torch.int32).view(4, 16)
    rpi, start, end = torch.tensor([2, 0]), torch.tensor([3, 5]), torch.tensor([6, 7])
    out = torch.empty(5, dtype=torch.long)
    ck.assign_extend_cache_locs(rpi, rtt, start, end, out, 16)
    assert out.tolist() == rtt[2, 3:6].tolist() + rtt[0, 5:7].tolist()
    fresh = torch.zeros_like(rtt)
    ck.assign_req_to_token_pool(rpi, fresh, start, end, out, 16)
    assert fresh[2, 3:6].tolist() == rtt[2, 3:6].tolist() and fresh[0, 5:7].tolist() == rtt[0, 5:7].tolist()
    draft = torch.empty(2 * 2 * 3, dtype=torch.long)
    ck.assign_draft_cache_locs_contiguous(rpi, rtt, torch.tensor([4, 1]), draft, 16, 2, 3)
    assert draft.tolist() == rtt[2, 4:10].tolist() + rtt[0, 1:7].tolist()
    meta = ck.build_draft_decode_metadata(rtt, rpi, torch.tensor([4, 1]), 2, 3, 16)
    assert meta.shape == (4, 16)
    assert meta[1, :7].tolist() == rtt[2, :4].tolist() + rtt[2, 7:10].tolist()  # request 0, candidate 1
    assert meta[2, :4].tolist() == rtt[0, :1].tolist() + rtt[0, 1:4].tolist()


def test_bonus_accept_loc_and_rotate():
    accept = torch.tensor([[10, 11, 12], [20, 21, 22]], dtype=torch.int32)
    bonus = torch.zeros(2, dtype=torch.int32)
    ck.fill_bonus_tokens(accept, torch.tensor([2, 3], dtype=torch.int32), bonus, 3)
    assert bonus.tolist() == [11, 22]
    idx = torch.tensor([0, 1, -1, 4, -1, -1], dtype=torch.int32)
    ocl = torch.tensor([100, 101, 102, 103, 104, 105])
    out = torch.zeros(3, dtype=torch.long)
    ck.fill_accept_out_cache_loc(idx, ocl, out)
    assert out.tolist() == [100, 101, 104]
    ids = torch.tensor([1, 2, 3, 4, 5, 6, 7])
    ck.rotate_input_ids(ids, torch.tensor([0, 3]), torch.tensor([3, 4]), torch.tensor([[9], [8]]))
    assert ids.tolist() == [2, 3, 9, 5, 6, 7, 8]


def test_copy_all_layer_kv_cache_moves_rows_in_every_buffer():
    bufs = [torch.arange(40, dtype=torch.float32).view(10, 4).clone() for _ in range(2)]
    ref = [b.clone() for b in bufs]
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs], dtype=torch.int64)
    tgt, src = torch.tensor([1, 2]), torch.tensor([2, 7])  # overlapping: row 2 is read before it is written
    ck.copy_all_layer_kv_cache(ptrs, strides, tgt, src)
    for b, r in zip(bufs, ref):
        expect = r.clone()
        expect[tgt] = r[src]
        assert torch.equal(b, expect)
    assert ctypes.sizeof(ctypes.c_void_p) == 8


def test_install_registers_cpu_torch_ops_once():
    ck.install()
    ck.install()  # idempotent
    kb, vb = _pool()
    q, o = torch.randn(1, 4, 8), torch.empty(1, 4, 8)
    rtt = torch.tensor([[5, 6, 0, 0]], dtype=torch.int32)
    torch.ops.sgl_kernel.decode_attention_cpu(
        q,
        kb,
        vb,
        1.0,
        1.0,
        o,
        None,
        None,
        None,
        torch.zeros(1),
        rtt,
        torch.tensor([0]),
        torch.tensor([2]),
        0.5,
        0.0,
        False,
        0,
        None,
        None,
    )
    ref = torch.empty_like(o)
    ck.decode_attention(
        q,
        kb,
        vb,
        1.0,
        1.0,
        ref,
        None,
        None,
        None,
        torch.zeros(1),
        rtt,
        torch.tensor([0]),
        torch.tensor([2]),
        0.5,
        0.0,
        False,
        0,
        None,
        None,
    )
    assert torch.equal(o, ref)
    assert ck.SGLANG_VERSION == "0.5.23"


def test_bench_cpu_attention_script_writes_both_timings(tmp_path, capsys):
    """scripts/bench_cpu_attention.py end to end at a tiny budget: every op and batch size timed both ways."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_cpu_attention.py"
    spec = importlib.util.spec_from_file_location("bench_cpu_attention", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "attention.json"
    argv = ["--batch-sizes", "1", "3", "--seq", "16", "--reps", "1", "--rounds", "1", "--threads", "1"]
    assert mod.main([*argv, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["op"], r["batch"]) for r in rows] == [("decode", 1), ("extend", 1), ("decode", 3), ("extend", 3)]
    assert all(r["batched_us"] > 0 and r["per_sequence_us"] > 0 for r in rows)
    assert "one call per sequence" in capsys.readouterr().out
