"""Replay of recorded greedy traces reproduces each selector's live run exactly (MAT and choices)."""

from __future__ import annotations

import pytest
import torch
from _engine_helpers import GREEDY, decoding

from hedgespec.engine import SpeculativeEngine
from hedgespec.engine.trace import read_traces
from hedgespec.fixtures import agreeing_drafter, random_drafter, tiny_llama
from hedgespec.selectors import make_selector
from hedgespec.sim.greedy import best_fixed_mat
from hedgespec.sim.replay import load_trace, replay_request
from hedgespec.types import RequestContext

torch.set_num_threads(1)
PROMPTS = [torch.tensor([1, 5, 7, 9, 3]), torch.tensor([30, 31, 2]), torch.tensor([4, 4, 60, 17])]


@pytest.fixture(scope="module")
def world():
    model = tiny_llama(seed=5, layers=3)
    pool = [
        random_drafter(model, seed=1),
        agreeing_drafter(model, PROMPTS[:2], seed=2, steps=400),
        agreeing_drafter(model, PROMPTS[2:], seed=3, steps=400),
    ]
    return model, pool


@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_replay_equals_live(world, tmp_path, mode):
    model, pool = world
    names = ["hedgespec", "hedgespec_eal", "ucbspec", "exp3spec", "metasd", "fixed"]
    path = tmp_path / f"{mode}.jsonl"
    live = {}
    for name in names:
        eng = SpeculativeEngine(model, pool, make_selector(name), decoding(mode, 3, 2, 6), full_counterfactual=True)
        for r, prompt in enumerate(PROMPTS):
            trace = str(path) if name == "hedgespec" else None
            _, stats = eng.generate(prompt, 25, GREEDY, ctx=RequestContext(request_id=r), trace_path=trace)
            live[name, r] = stats
    reqs = load_trace(path)
    assert len(reqs) == len(PROMPTS) and all(q.exact for q in reqs)
    assert read_traces(path)[0].header["full_counterfactual"] is True
    for name in names:
        for r, req in enumerate(reqs):
            res = replay_request(req, make_selector(name))
            assert res.chosen == live[name, r].chosen, (name, r)
            assert res.accepted == live[name, r].accepted_per_round, (name, r)
            assert res.mat == pytest.approx(live[name, r].mat, abs=0), (name, r)
    # the oracle from the trace (best fixed drafter in hindsight) replays to the best Fixed MAT, and live agrees
    for r, req in enumerate(reqs):
        best, mats = best_fixed_mat(req.runs, req.k)
        eng = SpeculativeEngine(model, pool, make_selector("oracle"), decoding(mode, 3, 2, 6))
        _, stats = eng.generate(PROMPTS[r], 25, GREEDY, ctx=RequestContext(request_id=r, best_drafter=best))
        assert stats.mat == pytest.approx(mats[best])


def test_trace_without_counterfactual_is_flagged(world, tmp_path):
    model, pool = world
    eng = SpeculativeEngine(model, pool, make_selector("hedgespec"), decoding("chain", 3))
    path = tmp_path / "t.jsonl"
    _, stats = eng.generate(PROMPTS[0], 15, GREEDY, trace_path=str(path))
    (req,) = load_trace(path)
    assert not req.exact and req.gamma.shape == (stats.generated, 3)
    assert req.live_mat == pytest.approx(stats.mat)
