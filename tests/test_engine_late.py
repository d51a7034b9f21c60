"""Late feedback in the reference engine: the γ of skipped rounds, from the lagging heads' catch-up pass.

Truths used: an engine that evaluates every round with the very same decisions (same drafters, same random
draws), whose γ is the full evaluation of each round; transformers greedy decoding; exact replay of a
full-counterfactual trace.
"""

from __future__ import annotations

import _lazy_fixtures
import numpy as np
import pytest
import torch
from _engine_helpers import GREEDY, LAZY_PROMPT, Recorder, decoding, sampling

from hedgespec.engine import SpeculativeEngine
from hedgespec.fixtures import greedy_reference
from hedgespec.selectors import make_selector
from hedgespec.sim.replay import load_trace, replay_request
from hedgespec.types import Decision, RequestContext

torch.set_num_threads(1)
model, heads = _lazy_fixtures.model, _lazy_fixtures.heads  # the module-scoped fixtures of this pool
PROMPT = LAZY_PROMPT


def _late(**kw):
    return make_selector("hedgespec", evaluation="adaptive", late=True, threshold=0.4, recheck=3, **kw)


class _Script:
    """Replays given drafter choices, evaluating every round (the full-information reference run)."""

    name, full_information = "script", True

    def __init__(self, drafters):
        self.drafters, self.feedback = list(drafters), []

    def begin_request(self, n, k, ctx=None):
        self.r = 0

    def select(self):
        d = Decision(self.drafters[self.r])
        self.r += 1
        return d

    def observe(self, fb):
        self.feedback.append(fb)

    def end_request(self):
        pass

    def state_dict(self):
        return {}


def _engine(model, heads, sel, mode):
    return SpeculativeEngine(model, heads, sel, decoding(mode, 3, 2, 6))


@pytest.mark.parametrize("mode", ["chain", "tree"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_late_gamma_is_the_full_evaluation_of_the_skipped_rounds(model, heads, mode, temperature):
    samp = GREEDY if temperature == 0.0 else sampling(temperature=temperature, seed=7)
    rec = Recorder(_late())
    out, stats = _engine(model, heads, rec, mode).generate(PROMPT, 40, samp)
    ref = _Script(stats.chosen)
    out_ref, _ = _engine(model, heads, ref, mode).generate(PROMPT, 40, samp)
    assert torch.equal(out, out_ref)  # same decisions, same draws: the same request
    full = {fb.start: fb.gamma for fb in ref.feedback}
    skipped = [fb.start for fb in rec.feedback if not fb.decision.evaluate]
    last_eval = max(i for i, fb in enumerate(rec.feedback) if fb.decision.evaluate)
    delivered = []
    for i, fb in enumerate(rec.feedback):
        if not fb.decision.evaluate:
            assert fb.gamma is None and fb.late == ()
            continue
        np.testing.assert_allclose(fb.gamma, full[fb.start], atol=1e-5)
        for lg in fb.late:
            assert lg.start < fb.start and lg.start not in delivered
            np.testing.assert_allclose(lg.gamma, full[lg.start], atol=1e-5)
            delivered.append(lg.start)
    assert delivered == [s for s in skipped if s < rec.feedback[last_eval].start]  # all of them, oldest first
    assert delivered, "the run skipped and later evaluated some rounds"


@pytest.mark.parametrize("mode", ["chain", "tree"])
def test_greedy_output_matches_transformers(model, heads, mode):
    for seed, prompt in enumerate([PROMPT, torch.tensor([[2]]), torch.tensor([[11, 12, 13, 40, 41, 42, 8]])]):
        eng = _engine(model, heads, _late(seed=seed), mode)
        out, stats = eng.generate(prompt, 30, GREEDY, ctx=RequestContext(request_id=seed))
        assert torch.equal(out, greedy_reference(model, prompt, 30)), (mode, seed)
        assert stats.selector_state["late"] is True and stats.selector_state["evaluated_rounds"] < stats.rounds


def test_late_feedback_adds_no_drafter_pass(model, heads, monkeypatch):
    """The late γ comes from passes the engine runs anyway: the same pool passes as without late feedback."""
    calls = {}
    for late in (False, True):
        sel = make_selector("hedgespec", evaluation="adaptive", late=late, threshold=0.4, recheck=3)
        eng = _engine(model, heads, sel, "chain")
        seen = []
        real = eng.pool.run
        monkeypatch.setattr(
            eng.pool, "run", lambda idx, *a, _s=seen, _r=real, **kw: _s.append(list(idx)) or _r(idx, *a, **kw)
        )
        eng.generate(PROMPT, 40, GREEDY)
        calls[late] = (seen, sel.state_dict()["evaluated_rounds"])
    # decisions differ (late feedback changes the weights), so compare the passes per evaluated round
    for late, (seen, evaluated) in calls.items():
        assert len([c for c in seen if len(c) > 1]) == evaluated + 1, late  # prefill + one per evaluated round


def test_replay_of_a_trace_equals_the_live_late_run(model, heads, tmp_path):
    path = tmp_path / "t.jsonl"
    prompts = [PROMPT[0], torch.tensor([30, 31, 2]), torch.tensor([4, 4, 60, 17])]
    tracer = SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding("chain", 3), full_counterfactual=True)
    live = []
    for r, prompt in enumerate(prompts):
        tracer.generate(prompt, 30, GREEDY, ctx=RequestContext(request_id=r), trace_path=str(path))
        _, st = _engine(model, heads, _late(), "chain").generate(prompt, 30, GREEDY, ctx=RequestContext(request_id=r))
        live.append(st)
    for r, req in enumerate(load_trace(path)):
        res = replay_request(req, _late())
        assert res.chosen == live[r].chosen and res.mat == pytest.approx(live[r].mat, abs=0), r
