"""Lossless speculative sampling: emitted tokens follow the target's plain-sampling law (χ², fixed seeds).

1. Rule level, 10⁵ draws per mode (slow tier; 2·10⁴ by default): a toy world with context-dependent target laws
   p(·|prefix) and drafter laws q(·|prefix) (V = 6); rounds of the real verification functions (chain:
   Leviathan/Chen with K = 3 sampled drafts; tree: sequential target-only rejection over a top-k tree) are run
   until two tokens are emitted; the joint law of the first two tokens must be p(x1)·p(x2|x1).
2. End to end (2500 draws slow tier, 400 default): SpeculativeEngine.generate on a tiny 4-token-vocab Llama at
   temperature 0.8 / top-p 0.95; the joint of the first two generated tokens vs the exact law from target forwards.
3. The warp (temperature → top-k → top-p) equals transformers' logits processors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _engine_helpers import decoding, sampling
from scipy.stats import chisquare

from hedgespec.engine import SpeculativeEngine
from hedgespec.engine.tree import DraftTree
from hedgespec.engine.verify import target_probs, verify_chain_sample, verify_tree_sample
from hedgespec.fixtures import random_drafter, tiny_llama
from hedgespec.selectors import make_selector

torch.set_num_threads(1)
V = 6


def _tables(seed: int):
    g = torch.Generator().manual_seed(seed)
    # laws depend on (prefix length, last token); make some entries 0 (top-p-like) to test the residual
    p = (torch.randn(8, V + 1, V, generator=g) * 1.5).softmax(-1)
    p[..., 0] = torch.where(p[..., 0] < 0.1, 0.0, p[..., 0])
    p = p / p.sum(-1, keepdim=True)
    q = (torch.randn(8, V + 1, V, generator=g) * 1.5).softmax(-1)
    return p, q


def _law(t, prefix):
    return t[len(prefix), prefix[-1] if prefix else V]


def _chain_round(p, q, prefix, k, gen):
    drafts, qs = [], []
    for _ in range(k):
        law = _law(q, prefix + drafts)
        qs.append(law)
        drafts.append(int(torch.multinomial(law, 1, generator=gen)))
    ps = torch.stack([_law(p, prefix + drafts[:j]) for j in range(k + 1)])
    a, bonus = verify_chain_sample(drafts, torch.stack(qs), ps, gen)
    return drafts[:a] + [bonus]


def _tree_round(p, q, prefix, depth, topk, gen):
    tokens, parents, deps, paths = [-1], [-1], [0], [[]]
    frontier = [0]
    for d in range(1, depth + 1):
        nxt = []
        for r in frontier:
            law = _law(q, prefix + paths[r])
            for c in torch.topk(law, topk).indices.tolist():
                tokens.append(c)
                parents.append(r)
                deps.append(d)
                paths.append(paths[r] + [c])
                nxt.append(len(tokens) - 1)
        frontier = nxt
    tree = DraftTree(tokens=tokens, parents=parents, depth=deps)
    ps = torch.stack([_law(p, prefix + paths[r]) for r in range(len(tokens))])
    path, bonus = verify_tree_sample(tree.children(), tokens, ps, gen)
    return [tokens[r] for r in path] + [bonus]


def _exact_joint(p):
    j = np.zeros((V, V))
    for x1 in range(V):
        j[x1] = float(_law(p, [])[x1]) * _law(p, [x1]).double().numpy()
    return j.ravel()


def _chi2(counts, probs, min_expected=5.0):
    n = counts.sum()
    exp = probs * n
    keep = exp >= min_expected
    obs = np.append(counts[keep], counts[~keep].sum())
    e = np.append(exp[keep], exp[~keep].sum())
    if e[-1] == 0:
        obs, e = obs[:-1], e[:-1]
    assert counts[probs == 0].sum() == 0, "a zero-probability outcome was emitted"
    return chisquare(obs, e * obs.sum() / e.sum()).pvalue


DRAWS_RULE = [20_000, pytest.param(100_000, marks=pytest.mark.slow)]
DRAWS_ENGINE = [400, pytest.param(2_500, marks=pytest.mark.slow)]


@pytest.mark.parametrize("draws", DRAWS_RULE)
@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_rule_level_first_two_tokens(mode, draws):
    p, q = _tables(7)
    gen = torch.Generator().manual_seed(1234)
    counts = np.zeros(V * V)
    for _ in range(draws):
        out: list[int] = []
        while len(out) < 2:
            out += _chain_round(p, q, out, 3, gen) if mode == "chain" else _tree_round(p, q, out, 2, 2, gen)
        counts[out[0] * V + out[1]] += 1
    pval = _chi2(counts, _exact_joint(p))
    assert pval > 0.01, pval


@torch.no_grad()
def _engine_joint(model, prompt, temperature, top_p):
    logits = model(prompt[None]).logits[0, -1]
    p1 = target_probs(logits, temperature, 0, top_p)
    j = torch.zeros(4, 4, dtype=torch.float64)
    for x in range(4):
        l2 = model(torch.cat([prompt, torch.tensor([x])])[None]).logits[0, -1]
        j[x] = p1[x].double() * target_probs(l2, temperature, 0, top_p).double()
    return j.ravel().numpy()


@pytest.mark.parametrize("draws", DRAWS_ENGINE)
@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_engine_first_two_tokens(mode, draws):
    model = tiny_llama(seed=3, layers=2, vocab=4, hidden=16, heads=2, kv_heads=1, init=0.5)
    pool = [random_drafter(model, seed=s, std=0.3) for s in range(2)]
    eng = SpeculativeEngine(model, pool, make_selector("hedgespec"), decoding(mode, 2, 2, 4))
    prompt = torch.tensor([1, 2, 3])
    # the 2nd generated token comes from a speculative round (the 1st from the prefill)
    counts = np.zeros(16)
    accepted = 0
    for s in range(draws):
        out, stats = eng.generate(prompt, 3, sampling(temperature=0.8, top_p=0.95, seed=s))
        counts[int(out[3]) * 4 + int(out[4])] += 1
        accepted += sum(stats.accepted_per_round)
    assert accepted > 0  # speculation actually happened
    pval = _chi2(counts, _engine_joint(model, prompt, 0.8, 0.95))
    assert pval > 0.01, pval


def test_warp_matches_transformers():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 50, generator=g) * 3
    for t, k, tp in ((0.7, 0, 0.9), (1.3, 10, 1.0), (1.0, 5, 0.5), (0.5, 0, 0.3)):
        x = TemperatureLogitsWarper(t)(None, logits.clone())
        if k:
            x = TopKLogitsWarper(k)(None, x)
        if tp < 1:
            x = TopPLogitsWarper(tp)(None, x)
        assert torch.allclose(x.softmax(-1), target_probs(logits, t, k, tp), atol=1e-6)
