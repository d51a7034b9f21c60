"""Greedy speculative decoding is token-identical to transformers generate(do_sample=False).

Tiny random Llama targets (2-4 layers, several seeds), random and distilled ("trained to agree") EAGLE-3
heads, chain and tree modes, every registered selector.
"""

from __future__ import annotations

import pytest
import torch
from _engine_helpers import GREEDY, decoding

from hedgespec.engine import SpeculativeEngine
from hedgespec.fixtures import agreeing_drafter, greedy_reference, random_drafter, tiny_llama
from hedgespec.selectors import SELECTORS, make_selector
from hedgespec.types import RequestContext

torch.set_num_threads(1)
PROMPTS = [torch.tensor([[1, 5, 7, 9, 3]]), torch.tensor([[2]]), torch.tensor([[11, 12, 13, 40, 41, 42, 8]])]


@pytest.fixture(scope="module")
def setups():
    """(target, pool) for three target seeds / depths; each pool mixes random and distilled heads."""
    out = []
    for seed, layers in ((0, 2), (1, 3), (2, 4)):
        model = tiny_llama(seed=seed, layers=layers)
        fitted = agreeing_drafter(model, PROMPTS, seed=seed, steps=400, draft_vocab_size=48 if seed == 1 else None)
        pool = [
            random_drafter(model, seed=10 + seed, draft_vocab_size=48 if seed == 1 else None),
            fitted,
            random_drafter(model, seed=20 + seed, intermediate_size=24),
        ]
        out.append((model, pool))
    return out


def _ctx(name: str) -> RequestContext:
    return RequestContext(request_id=3, prompt="SELECT 1", best_drafter=1 if name == "oracle" else None)


class _KeywordClassifier:
    """A stand-in text classifier for the router baseline (any object with ``predict(texts)``)."""

    def predict(self, texts):
        return ["sql" if "SELECT" in (t or "") else "general" for t in texts]


SELECTOR_KWARGS = {"router": {"classifier": _KeywordClassifier(), "drafter_of_domain": {"sql": 1, "general": 0}}}


@pytest.mark.parametrize("mode", ["chain", "tree"])
@pytest.mark.parametrize("name", sorted(SELECTORS))
def test_greedy_matches_transformers(setups, mode, name):
    for j, (model, pool) in enumerate(setups):
        engine = SpeculativeEngine(
            model, pool, make_selector(name, **SELECTOR_KWARGS.get(name, {})), decoding(mode, 4, 3, 10)
        )
        for prompt in PROMPTS[j % 2 : j % 2 + 1]:
            ref = greedy_reference(model, prompt, 24)
            out, stats = engine.generate(prompt, 24, GREEDY, ctx=_ctx(name))
            assert torch.equal(out, ref), (name, mode)
            assert stats.generated == 23 and sum(a + 1 for a in stats.accepted_per_round) == 23
            assert 1.0 <= stats.mat <= 5.0


@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_greedy_all_prompts(setups, mode):
    for model, pool in setups:
        engine = SpeculativeEngine(model, pool, make_selector("hedgespec"), decoding(mode, 5, 2, 7))
        for prompt in PROMPTS:
            assert torch.equal(engine.generate(prompt, 30, GREEDY)[0], greedy_reference(model, prompt, 30))


def test_distilled_head_speeds_up(setups):
    """The distilled head accepts more than random ones, and Fixed on it beats Fixed on a random head."""
    model, pool = setups[0]
    mats = []
    for i in range(3):
        eng = SpeculativeEngine(model, pool, make_selector("fixed", index=i), decoding("chain", 4))
        mats.append(eng.generate(PROMPTS[0], 30, GREEDY)[1].mat)
    assert mats[1] > max(mats[0], mats[2]) and mats[1] > 1.5, mats


def test_one_dim_prompt_and_stats(setups):
    model, pool = setups[0]
    eng = SpeculativeEngine(model, pool, make_selector("hedgespec"), decoding("tree", 3, 2, 6))
    out, stats = eng.generate(PROMPTS[0][0].tolist(), 12, GREEDY)
    assert out.dim() == 1 and torch.equal(out, greedy_reference(model, PROMPTS[0], 12)[0])
    assert set(stats.timings) >= {"draft", "verify", "evaluate", "update"}
    assert sum(stats.histogram(3)) == stats.rounds


def test_eos_stops(setups):
    model, pool = setups[0]
    ref = greedy_reference(model, PROMPTS[0], 20)[0, 5:].tolist()
    eos = ref[6]
    eng = SpeculativeEngine(model, pool, make_selector("fixed", index=1), decoding("chain", 4), eos_token_id=eos)
    out, _ = eng.generate(PROMPTS[0], 20, GREEDY)
    new = out[0, 5:].tolist()
    assert new == ref[: ref.index(eos) + 1]
