"""The faulty drafter checkpoints of :mod:`hedgespec.serving.tiny` are faulty for an independent implementation too.

The reference PyTorch engine (not SGLang, not the server's finiteness check) loads the same ``nan`` and ``inf``
directories, drops both with its own warning, and still emits the target's greedy output. The ``raise``
checkpoint is refused by the engine at load (its ``d2t`` sends draft ids outside the target vocabulary, which
:meth:`hedgespec.engine.eagle3.Eagle3Drafter.validate` checks), whereas SGLang loads it and fails when it drafts
(tests/test_serving_faults.py).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from _engine_helpers import GREEDY, decoding
from transformers import AutoModelForCausalLM

from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.generate import SpeculativeEngine
from hedgespec.selectors import make_selector
from hedgespec.serving.tiny import FAULT_MODES, make_drafter, make_target
from hedgespec.types import RequestContext

PROMPT = [72, 101, 108, 108, 111]


def test_engine_drops_the_nan_and_inf_checkpoints_and_refuses_the_raising_one(tmp_path):
    make_target(tmp_path / "t", seed=0)
    make_drafter(tmp_path / "d0", tmp_path / "t", seed=0)
    for mode in FAULT_MODES:
        make_drafter(tmp_path / f"d_{mode}", tmp_path / "t", seed=1, mode=mode)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "t", dtype=torch.float32).eval()
    with pytest.raises(ValueError, match="d2t vocab mapping sends draft ids outside the target vocab"):
        Eagle3Drafter.load(tmp_path / "d_raise", model)

    drafters = [Eagle3Drafter.load(tmp_path / d, model) for d in ("d0", "d_nan", "d_inf")]
    engine = SpeculativeEngine(model, drafters, make_selector("hedgespec"), decoding("chain", 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, _ = engine.generate(torch.tensor(PROMPT), 20, GREEDY, ctx=RequestContext(request_id="faults"))
    dropped = [str(w.message) for w in caught if "dropped from the pool" in str(w.message)]
    assert len(dropped) == 2 and "'d_nan'" in dropped[0] and "'d_inf'" in dropped[1], dropped
    assert engine.pool.dropped == ["d_nan", "d_inf"]
    with torch.no_grad():
        ref = model.generate(
            torch.tensor([PROMPT]), max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    assert out[len(PROMPT) :].tolist() == ref[0, len(PROMPT) :].tolist()
