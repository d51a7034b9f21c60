"""The engine's typed API and round records: DecodingConfig / SamplingParams in, typed records between stages,
one trace/stats entry per round (hedgespec/engine/records.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _engine_helpers import GREEDY, decoding, sampling

from hedgespec.engine import SpeculativeEngine
from hedgespec.engine.records import Evaluated, RequestLog, RoundClock, SamplingState, Verified
from hedgespec.fixtures import random_drafter, tiny_llama
from hedgespec.selectors import make_selector
from hedgespec.types import Decision

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(seed=7, layers=2, max_positions=64)


def _engine(model, dec, **kw):
    return SpeculativeEngine(
        model, [random_drafter(model, seed=0), random_drafter(model, seed=1)], make_selector("hedgespec"), dec, **kw
    )


def test_typed_settings_are_required(model):
    heads = [random_drafter(model)]
    with pytest.raises(TypeError, match="decoding must be a hedgespec.decoding.DecodingConfig"):
        SpeculativeEngine(model, heads, make_selector("fixed"), {"mode": "chain", "num_steps": 3})
    with pytest.raises(TypeError):  # the old spelling is gone: one spelling per knob
        SpeculativeEngine(model, heads, make_selector("fixed"), mode="chain", k=3)
    eng = SpeculativeEngine(model, heads, make_selector("fixed"), decoding("chain", 3))
    with pytest.raises(TypeError, match="sampling must be a hedgespec.decoding.SamplingParams"):
        eng.generate(torch.tensor([1, 2]), 4, {"temperature": 0.0})
    with pytest.raises(ValueError, match="top_p"):
        sampling(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        sampling(temperature=-1.0)


def test_engine_reads_its_decoding_config(model):
    dec = decoding("tree", 3, 2, 5)
    eng = _engine(model, dec)
    assert eng.decoding is dec and eng.k == 3 and eng.mode == "tree" and eng.n_drafters == 2
    _, stats = eng.generate(torch.tensor([3, 4, 5]), 9, sampling(temperature=0.8, seed=4))
    h = eng.last_trace.header
    assert (h["mode"], h["k"], h["topk"], h["num_draft_tokens"]) == ("tree", 3, 2, 5)
    assert (h["temperature"], h["top_p"], h["top_k"], h["seed"]) == (0.8, 1.0, 0, 4)
    assert stats.generated == 8 and len(eng.last_trace.rounds) == stats.rounds
    assert [r["r"] for r in eng.last_trace.rounds] == list(range(stats.rounds))
    assert list(stats.timings) == ["prefill", "draft", "verify", "evaluate", "update"]


def test_full_counterfactual_is_greedy_only(model):
    eng = _engine(model, decoding("chain", 2), full_counterfactual=True)
    with pytest.raises(ValueError, match="full_counterfactual.*greedy"):
        eng.generate(torch.tensor([1, 2]), 4, sampling(temperature=0.5))
    eng.generate(torch.tensor([1, 2]), 6, GREEDY)
    assert len(eng.last_trace.runs) == len(eng.last_trace.tokens) == 5


def test_sampling_state_is_one_seeded_stream():
    params = sampling(temperature=1.0, seed=3)
    a, b = SamplingState.start(params), SamplingState.start(params)
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    assert [a.pick(logits) for _ in range(20)] == [b.pick(logits) for _ in range(20)]
    none = SamplingState.start(sampling(temperature=1.0))
    assert none.gen.initial_seed() == 0 and SamplingState.start(GREEDY).pick(logits) == int(logits.argmax())


def test_verified_next_root_is_the_last_kept_row():
    feats = torch.arange(12.0).reshape(4, 3)
    ver = Verified(accepted=2, bonus=9, rows=[0, 1, 3], path=[5, 6], logits=torch.zeros(4, 8), feats=feats)
    root, feat = ver.next_root()
    assert root == 9 and torch.equal(feat, feats[3])


def test_request_log_records_a_round_with_one_call():
    log = RequestLog({"prefill_token": 1}, max_new_tokens=6, prefill_s=0.5)
    ev = Evaluated(tokens=[4, 5, 6], accepted=2, gamma=np.full((3, 2), 0.25), done=False, counterfactual=[])
    laps = {"draft": 1.0, "verify": 2.0, "evaluate": 3.0, "update": 4.0}
    log.add_round(Decision(1, (0.4, 0.6)), ev, laps)
    assert (log.generated, log.remaining) == (3, 2)
    assert log.trace.rounds == [
        {"r": 0, "start": 0, "chosen": 1, "accepted": 2, "emitted": 3, "weights": [0.4, 0.6], "timings": laps}
    ]
    stats = log.finish({"w": 1}, n_drafters=2, dropped=[], runs=None)
    assert stats.accepted_per_round == [2] and stats.chosen == [1] and stats.generated == 3
    assert stats.timings == {"prefill": 0.5, **laps}
    assert log.trace.summary == {"rounds": 1, "generated": 3, "mat": 3.0, "histogram": [0, 1], "dropped": []}


def test_round_clock_laps_are_consecutive():
    clock = RoundClock()
    first = clock.lap("draft")
    both = clock.lap("verify")
    assert list(first) == ["draft"] and list(both) == ["draft", "verify"] and both["draft"] == first["draft"]
    clock.restart()
    assert clock.laps == {}
