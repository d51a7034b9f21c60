"""γ of sampled requests under SGLang's target-only chain verification (hedgespec/serving/sampled_gamma.py and
the worker's use of it), against independent truth: a numpy law built row by row, a simulation of the
verification kernel's coin walk, and the greedy γ of rounds_batched for greedy rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _requires import SGLANG, installed_or_skip

from hedgespec.serving.rounds_batched import greedy_gamma_batch
from hedgespec.serving.sampled_gamma import (
    Kernels,
    SamplingRows,
    acceptance_prob,
    proposals,
    sampled_gamma,
    target_law,
    tree_acceptance_prob,
    tree_rows,
)

V, NDT, N = 11, 3, 4


# ---------------------------------------------------------------- kernels with flashinfer's renorm semantics
def torch_softmax(logits: torch.Tensor, temperatures: torch.Tensor | None = None) -> torch.Tensor:
    return torch.softmax(logits if temperatures is None else logits / temperatures, dim=-1)


def torch_top_k(probs: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:
    pivot = torch.stack([torch.topk(row, int(k)).values[-1] for row, k in zip(probs, ks)])
    kept = torch.where(probs >= pivot[:, None], probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def torch_top_p(probs: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    val, idx = probs.sort(dim=-1, descending=True)
    before = val.cumsum(dim=-1) - val  # mass of the tokens ranked above
    keep_sorted = before < ps[:, None]
    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


KERNELS = Kernels(torch_softmax, torch_top_k, torch_top_p)


def numpy_law(logits: np.ndarray, t: float, k: int | None, p: float | None) -> np.ndarray:
    """One row's law, independently: softmax at t, keep the k most likely, keep the smallest top set with mass ≥ p."""
    z = logits / t
    law = np.exp(z - z.max())
    law /= law.sum()
    order = list(np.argsort(-law))
    if k is not None:
        law[order[k:]] = 0.0
        law /= law.sum()
    if p is not None:
        mass, keep = 0.0, []
        for tok in order:
            if mass >= p:
                break
            keep.append(tok)
            mass += law[tok]
        cut = np.zeros_like(law)
        cut[keep] = law[keep]
        law = cut / cut.sum()
    return law


def numpy_accept(p: float, ts: float, ta: float) -> float:
    """P(c < p / ta or p ≥ ts, and p > 0) for c uniform in [0, 1)."""
    if p <= 0.0:
        return 0.0
    return 1.0 if p >= ts else min(1.0, p / max(ta, 1e-9))


# Requests: greedy (SGLang gives it temperature 1, top-k 1), hot with top-k 5, cool with top-p 0.8, plain T=1.
SETTINGS = [(1.0, 1, 1.0), (1.4, 5, 1.0), (0.6, V, 0.8), (1.0, V, 1.0)]


def _batch(seed: int = 0) -> tuple[torch.Tensor, SamplingRows]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(SETTINGS) * NDT, V, generator=g, dtype=torch.float64) * 2.0
    t = torch.tensor([[s[0]] for s in SETTINGS], dtype=torch.float64)
    ks = torch.tensor([s[1] for s in SETTINGS])
    ps = torch.tensor([s[2] for s in SETTINGS], dtype=torch.float64)
    return logits, SamplingRows(t, ks, ps, need_top_k=True, need_top_p=True)


def _reference_law(logits: torch.Tensor) -> np.ndarray:
    rows = logits.numpy().reshape(len(SETTINGS), NDT, V)
    return np.stack(
        [
            [numpy_law(rows[b, u], t, k if k < V else None, p if p < 1.0 else None) for u in range(NDT)]
            for b, (t, k, p) in enumerate(SETTINGS)
        ]
    )


def test_target_law_matches_an_independent_law_per_request():
    logits, rows = _batch()
    got = target_law(logits, rows, NDT, KERNELS).numpy()
    assert got.shape == (len(SETTINGS), NDT, V)
    np.testing.assert_allclose(got, _reference_law(logits), atol=1e-12)
    assert np.all((got[0] == 0.0) | (got[0] == 1.0))  # the greedy request: a point mass on its argmax
    plain = target_law(logits, SamplingRows(rows.temperatures, need_top_k=False), NDT, KERNELS).numpy()
    assert np.count_nonzero(plain) == plain.size  # no renorm asked: top_ks / top_ps are not read


def test_target_law_uses_sglangs_own_softmax():
    installed_or_skip("sglang.kernels.ops.sampling", SGLANG)
    from sglang.kernels.ops.sampling import softmax

    logits, rows = _batch(1)
    got = target_law(logits.float(), rows, NDT, Kernels(softmax, torch_top_k, torch_top_p)).double().numpy()
    np.testing.assert_allclose(got, _reference_law(logits.float().double()), atol=1e-6)


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.3, 0.5), (0.9, 0.0)])
def test_sampled_gamma_is_the_acceptance_probability_of_each_proposal(thresholds):
    ts, ta = thresholds
    logits, rows = _batch(2)
    law = target_law(logits, rows, NDT, KERNELS)
    rng = np.random.default_rng(0)
    first = rng.integers(0, V, size=(len(SETTINGS), N))
    row_preds = torch.as_tensor(rng.integers(0, V, size=(N, len(SETTINGS), NDT)))
    row_preds[2, 1, 0] = -1  # a dropped drafter's row: read as token 0, zeroed by the worker
    ref = _reference_law(logits)
    gamma = sampled_gamma(law, proposals(first, row_preds, NDT), ts, ta)
    assert gamma.shape == (len(SETTINGS), NDT, N) and gamma.dtype == np.float64
    for b in range(len(SETTINGS)):
        for i in range(N):
            for u in range(NDT):
                tok = first[b, i] if u == 0 else max(int(row_preds[i, b, u - 1]), 0)
                assert gamma[b, u, i] == pytest.approx(
                    numpy_accept(ref[b, u, tok], ts, ta), abs=1e-6
                )  # float32, as the kernel


def test_default_thresholds_give_the_target_probability():
    logits, rows = _batch(3)
    law = target_law(logits, rows, NDT, KERNELS)
    props = proposals(np.zeros((len(SETTINGS), N), dtype=np.int64), torch.arange(N * 4 * 2).view(N, 4, 2) % V, NDT)
    np.testing.assert_allclose(sampled_gamma(law, props), law.gather(2, props).numpy(), rtol=1e-6)


def test_greedy_rows_give_the_greedy_gamma():
    """Requests with top-k 1 (SGLang's greedy requests in a sampled batch): γ equals rounds_batched's greedy γ
    against the target's argmax, the token greedy verification commits."""
    g = torch.Generator().manual_seed(4)
    b = 5
    logits = torch.randn(b * NDT, V, generator=g, dtype=torch.float64)
    rows = SamplingRows(torch.ones(b, 1, dtype=torch.float64), torch.ones(b, dtype=torch.long), need_top_k=True)
    argmax = logits.view(b, NDT, V).argmax(dim=-1).numpy()
    rng = np.random.default_rng(1)
    first = np.where(rng.random((b, N)) < 0.5, argmax[:, :1], rng.integers(0, V, (b, N)))
    row_preds = np.where(
        rng.random((N, b, NDT)) < 0.5, np.roll(argmax, -1, axis=1)[None], rng.integers(0, V, (N, b, NDT))
    )
    got = sampled_gamma(target_law(logits, rows, NDT, KERNELS), proposals(first, torch.as_tensor(row_preds), NDT))
    np.testing.assert_array_equal(got, greedy_gamma_batch(first, row_preds, argmax))


def _kernel_walk(laws: np.ndarray, chain: np.ndarray, ts: float, ta: float, rng: np.random.Generator) -> int:
    """The target-only chain walk of SGLang's verification kernel for one request: depth by depth one coin,
    accept while the draft token has mass and (coin < its mass / ta or its mass ≥ ts); returns the accepted
    count."""
    accepted = 0
    for u, tok in enumerate(chain):
        p = laws[u, tok]
        coin = rng.random()
        if p > 0 and (coin < p / max(ta, 1e-9) or p >= ts):
            accepted += 1
        else:
            break
    return accepted


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.25, 0.6)])
def test_gamma_predicts_the_kernels_acceptance_frequencies(thresholds):
    """Simulated verification of one fixed chain: the fraction of walks that accept depth u among those that
    reached it matches γ at u (binomial, 5 standard errors, fixed seed)."""
    ts, ta = thresholds
    logits, rows = _batch(5)
    law = target_law(logits, rows, NDT, KERNELS)[3].numpy()  # request 3: T = 1, no renorm
    chain = np.array([int(np.argsort(-law[0])[1]), int(np.argsort(-law[1])[0]), int(np.argsort(-law[2])[2])])
    gamma = acceptance_prob(torch.as_tensor(law[np.arange(NDT), chain]), ts, ta).numpy()
    rng = np.random.default_rng(0)
    walks = np.array([_kernel_walk(law, chain, ts, ta, rng) for _ in range(40_000)])
    for u in range(NDT):
        reached = np.count_nonzero(walks >= u)
        freq = np.count_nonzero(walks >= u + 1) / reached
        se = max(np.sqrt(gamma[u] * (1 - gamma[u]) / reached), 1e-12)
        assert abs(freq - gamma[u]) <= 5 * se, (u, freq, gamma[u])


def _kernel_tree_level(law: np.ndarray, children: np.ndarray, ts: float, ta: float, coin: float) -> bool:
    """One depth of the target-only tree walk of SGLang's verification kernel: one coin, the children tried in
    order with the running mass; a child is accepted when it has mass and (coin < running mass / ta or its mass
    ≥ ts)."""
    acc = 0.0
    for c in children:
        p = law[c]
        acc += p
        if p > 0 and (coin < acc / max(ta, 1e-9) or p >= ts):
            return True
    return False


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.25, 0.6), (0.05, 0.3)])
def test_tree_gamma_predicts_the_kernels_sibling_walk(thresholds):
    """Tree drafting: the probability that the kernel accepts one of a drafter's top-k children at a depth
    (sibling walk, one coin) equals the tree γ, for proposals ranging from the target's best tokens to its worst
    (binomial, 5 standard errors, fixed seed); at the default thresholds it is the target mass on the children
    (Theorem 2)."""
    ts, ta = thresholds
    logits, rows = _batch(6)
    law = target_law(logits, rows, NDT, KERNELS)[3, 0].numpy()  # one row of request 3: T = 1, no renorm
    order = np.argsort(-law)
    rng = np.random.default_rng(1)
    for children in (order[:3], order[[1, 4, 7]], order[-3:], order[[0]], order[[5, 2]]):
        gamma = float(tree_acceptance_prob(torch.as_tensor(law[children]), ts, ta))
        hits = np.mean([_kernel_tree_level(law, children, ts, ta, rng.random()) for _ in range(20_000)])
        se = max(np.sqrt(gamma * (1 - gamma) / 20_000), 1e-12)
        assert abs(hits - gamma) <= 5 * se, (children, hits, gamma)
        if thresholds == (1.0, 1.0):
            assert gamma == pytest.approx(min(1.0, float(law[children].sum())), abs=1e-6)


def test_sampled_tree_gamma_batch():
    """Top-k proposals [B, ndt, N, k] through ``proposals`` and ``sampled_gamma``: each entry is the tree rule
    applied to its own k children; a k = 1 tree is the chain γ."""
    logits, rows = _batch(7)
    law = target_law(logits, rows, NDT, KERNELS)
    b = law.shape[0]
    rng = np.random.default_rng(2)
    first = rng.integers(0, V, size=(b, N, 2))
    row_preds = torch.as_tensor(rng.integers(0, V, size=(N, b, NDT, 2)))
    props = proposals(first, row_preds, NDT)
    assert tuple(props.shape) == (b, NDT, N, 2)
    got = sampled_gamma(law, props, 0.3, 0.7)
    for j, u, i in np.ndindex(b, NDT, N):
        kids = props[j, u, i]
        want = float(tree_acceptance_prob(law[j, u, kids], 0.3, 0.7))
        assert got[j, u, i] == pytest.approx(want, abs=1e-6)
    chain = sampled_gamma(law, props[..., 0], 0.3, 0.7)
    np.testing.assert_allclose(sampled_gamma(law, props[..., :1], 0.3, 0.7), chain, atol=1e-7)
    with pytest.raises(ValueError, match="row_preds must have shape"):
        proposals(first, row_preds[..., :1], NDT)


def test_tree_rows_gather_the_accepted_path():
    """A tree's law rows are its accepted nodes in path order (SGLang's accept_index: global rows, −1 padded)."""
    logits = torch.arange(2 * 4, dtype=torch.float32)[:, None].repeat(1, 3)  # row r holds r
    accept = torch.tensor([[0, 2, 3], [4, 5, -1]])
    np.testing.assert_array_equal(tree_rows(logits, accept)[:, 0].numpy(), [0, 2, 3, 4, 5, 0])


def test_acceptance_edges():
    p = torch.tensor([0.0, 1e-12, 0.2, 0.5, 1.0])
    np.testing.assert_allclose(acceptance_prob(p).numpy(), p.numpy())
    assert acceptance_prob(p, threshold_single=0.0).tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]  # no mass: never
    np.testing.assert_allclose(acceptance_prob(p, 1.0, 0.4).numpy(), [0.0, 2.5e-12, 0.5, 1.0, 1.0], rtol=1e-6)


def test_bad_inputs_are_named():
    logits, rows = _batch()
    with pytest.raises(ValueError, match="threshold_single"):
        acceptance_prob(torch.tensor([0.5]), threshold_single=1.5)
    with pytest.raises(ValueError, match="threshold_acc"):
        acceptance_prob(torch.tensor([0.5]), threshold_acc=-0.1)
    with pytest.raises(ValueError, match="ndt=5"):
        target_law(logits, rows, 5, KERNELS)
    with pytest.raises(ValueError, match="temperatures has 2 rows"):
        target_law(logits, SamplingRows(torch.ones(2, 1)), NDT, KERNELS)
    with pytest.raises(ValueError, match="top-p"):
        target_law(logits, rows, NDT, Kernels(torch_softmax, torch_top_k, None))
    law = target_law(logits, rows, NDT, KERNELS)
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        sampled_gamma(law, torch.full((len(SETTINGS), NDT, N), V))
    with pytest.raises(ValueError, match="disagree"):
        sampled_gamma(law, torch.zeros(len(SETTINGS), NDT + 1, N, dtype=torch.long))
    with pytest.raises(ValueError, match="row_preds must have shape"):
        proposals(np.zeros((len(SETTINGS), N), dtype=np.int64), torch.zeros(N, len(SETTINGS), 1), NDT)


# ---------------------------------------------------------------- the worker's use of it (sglang must import)
def _spec(**kw):
    base = dict(
        speculative_use_rejection_sampling=False,
        speculative_accept_threshold_single=1.0,
        speculative_accept_threshold_acc=1.0,
    )
    return SimpleNamespace(**{**base, **kw})


def _sampling_info(rows: SamplingRows, all_greedy: bool) -> SimpleNamespace:
    return SimpleNamespace(
        is_all_greedy=all_greedy,
        temperatures=rows.temperatures,
        top_ks=rows.top_ks,
        top_ps=rows.top_ps,
        need_top_k_sampling=rows.need_top_k,
        need_top_p_sampling=rows.need_top_p,
    )


@pytest.fixture
def worker(monkeypatch):
    w = installed_or_skip("hedgespec.serving.worker", SGLANG)
    monkeypatch.setattr(w.eagle_utils, "top_k_renorm_prob", torch_top_k)
    monkeypatch.setattr(w.eagle_utils, "top_p_renorm_prob", torch_top_p)
    monkeypatch.setattr(w, "get_spec", _spec)
    return w


def test_worker_builds_the_law_only_where_sglang_samples(worker, monkeypatch):
    logits, rows = _batch(6)
    out = SimpleNamespace(logits_output=SimpleNamespace(next_token_logits=logits))
    sampled = SimpleNamespace(sampling_info=_sampling_info(rows, all_greedy=False))
    monkeypatch.setattr(worker.eagle_utils, "_is_cpu", True)  # SGLang verifies greedily on CPU
    assert worker.verify_law(sampled, out, NDT) is None
    monkeypatch.setattr(worker.eagle_utils, "_is_cpu", False)
    monkeypatch.setattr(worker.eagle_utils, "_is_xpu", False)
    monkeypatch.setattr(worker.eagle_utils, "_is_hip", False)
    greedy = SimpleNamespace(sampling_info=_sampling_info(rows, all_greedy=True))
    assert worker.verify_law(greedy, out, NDT) is None
    law = worker.verify_law(sampled, out, NDT)
    np.testing.assert_allclose(law.numpy(), _reference_law(logits), atol=1e-6)


def test_worker_feeds_the_selectors_the_sampled_gamma(worker, monkeypatch):
    """The γ the worker's observe hands to the selection is a(p_target(proposal)), a dropped drafter's 0."""
    monkeypatch.setattr(worker, "get_spec", lambda: _spec(speculative_accept_threshold_acc=0.5))
    logits, rows = _batch(7)
    law = target_law(logits, rows, NDT, KERNELS)
    b = len(SETTINGS)
    rng = np.random.default_rng(2)
    first = rng.integers(0, V, size=(b, N))
    argmaxes = [torch.as_tensor(rng.integers(0, V, size=(b, NDT))) for _ in range(N)]
    argmaxes[1] = torch.full((b, NDT), -1)  # drafter 1 was dropped
    seen = {}

    class Selection:
        def observe(self, records, choice, drafted, emitted, gamma, timings):
            seen.update(gamma=gamma, emitted=emitted)

        def add_time(self, records, timings):
            seen.update(timings=timings)

        def info(self, rec):
            return {}

    w = object.__new__(worker.HedgeSpecWorker)
    w.speculative_num_draft_tokens = NDT
    w._alive, w._names, w._selector_name, w._selection = (
        [True, False, True, True],
        list("abcd"),
        "hedgespec",
        Selection(),
    )
    reqs = [SimpleNamespace() for _ in range(b)]
    out = SimpleNamespace(accept_lens=torch.tensor([1, 2, 3, 0]), next_token_ids=torch.zeros(b * NDT, dtype=torch.long))
    w._observe(reqs, [None] * b, None, [0] * b, out, first, argmaxes, {}, law)
    ref = _reference_law(logits)
    for j in range(b):
        for i in range(N):
            for u in range(NDT):
                tok = first[j, i] if u == 0 else int(argmaxes[i][j, u - 1])
                want = 0.0 if i == 1 else numpy_accept(ref[j, u, tok], 1.0, 0.5)
                assert seen["gamma"][j, u, i] == pytest.approx(want, abs=1e-6)
    assert seen["emitted"].tolist() == [1, 2, 3, 1] and seen["timings"]["update"] >= 0.0
    assert reqs[0].customized_info["hedgespec_dropped"] == ["b"]


def test_worker_tree_law_and_gamma_follow_the_accepted_path(worker, monkeypatch):
    """A tree: the law is built at each request's accepted nodes (SGLang's accept_index, in path order), and the
    γ the worker feeds is the kernel's sibling-walk acceptance of each drafter's top-k at that node's law."""
    monkeypatch.setattr(worker.eagle_utils, "_is_cpu", False)
    monkeypatch.setattr(worker.eagle_utils, "_is_xpu", False)
    monkeypatch.setattr(worker.eagle_utils, "_is_hip", False)
    monkeypatch.setattr(worker, "get_spec", lambda: _spec(speculative_accept_threshold_single=0.4))
    logits, rows = _batch(8)  # [B·NDT, V] verify rows; path length 2 (steps + 1) per request
    b = len(SETTINGS)
    accept = torch.tensor([[0, 2], [3, 4], [6, -1], [9, 11]])  # global node rows (NDT = 3 per request)
    out = SimpleNamespace(logits_output=SimpleNamespace(next_token_logits=logits), accept_index=accept)
    sampled = SimpleNamespace(sampling_info=_sampling_info(rows, all_greedy=False))
    law = worker.verify_law(sampled, out, NDT, tree=True)
    ref = _reference_law(logits).reshape(b * NDT, V)
    on_path = (accept >= 0).numpy()  # the −1 padding past a path is never read
    np.testing.assert_allclose(law.numpy()[on_path], ref[accept[accept >= 0]], atol=1e-6)

    k = 2
    rng = np.random.default_rng(3)
    first = rng.integers(0, V, size=(b, N, k))
    argmaxes = [torch.as_tensor(rng.integers(0, V, size=(b, NDT, k))) for _ in range(N)]
    seen = {}

    class Selection:
        def observe(self, records, choice, drafted, emitted, gamma, timings):
            seen.update(gamma=gamma)

        def add_time(self, records, timings):
            pass

        def info(self, rec):
            return {}

    w = object.__new__(worker.HedgeSpecWorker)
    w.speculative_num_draft_tokens = NDT
    w._alive, w._names, w._selector_name, w._selection = [True] * N, list("abcd"), "hedgespec", Selection()
    reqs = [SimpleNamespace() for _ in range(b)]
    out.accept_lens, out.next_token_ids = torch.tensor([2, 2, 1, 2]), torch.zeros(b * NDT, dtype=torch.long)
    w._observe(reqs, [None] * b, None, [0] * b, out, first, argmaxes, {}, law)
    for j in range(b):
        for i in range(N):
            for u in range(int(out.accept_lens[j])):
                kids = first[j, i] if u == 0 else argmaxes[i][j, u - 1].numpy()
                p = ref[int(accept[j, u].clamp(min=0))][kids]
                want = 1.0 if ((p > 0) & (p >= 0.4)).any() else min(1.0, float(p.sum()))
                assert seen["gamma"][j, u, i] == pytest.approx(want, abs=1e-6)
