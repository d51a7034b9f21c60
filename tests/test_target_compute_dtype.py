"""``target.compute_dtype``: the target cast after loading keeps the identity of the weights it loaded.

Truth: the fingerprint of the same target loaded in float32 (what a pool manifest records), recomputed here
from its state dict.
"""

from __future__ import annotations

import pytest
import torch
from _engine_helpers import GREEDY, decoding

from hedgespec.engine import SpeculativeEngine
from hedgespec.fixtures import random_drafter
from hedgespec.models import load_target
from hedgespec.models.fingerprint import state_dict_fingerprint, target_fingerprint
from hedgespec.models.spec import TargetSpec
from hedgespec.selectors import make_selector


def test_cast_target_keeps_the_loaded_fingerprint_and_computes_in_the_cast_dtype():
    ref, _ = load_target("tiny")
    model, _ = load_target("tiny", compute_dtype="bfloat16")
    assert model.dtype == torch.bfloat16 and ref.dtype == torch.float32
    assert target_fingerprint(model) == state_dict_fingerprint(ref.state_dict())
    assert state_dict_fingerprint(model.state_dict()) != target_fingerprint(model)  # the cast tensors differ
    same, _ = load_target("tiny", compute_dtype="float32")
    assert same.dtype == torch.float32 and target_fingerprint(same) == target_fingerprint(ref)


def test_engine_runs_on_a_cast_target():
    model, _ = load_target("tiny", compute_dtype="bfloat16")
    heads = [random_drafter(model, seed=s) for s in range(2)]
    engine = SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding("chain", 3))
    out, stats = engine.generate(torch.tensor([5, 17, 33]), 12, GREEDY)
    assert out.shape[0] == 3 + 12 and stats.rounds >= 1


def test_unknown_compute_dtype_is_named():
    with pytest.raises(ValueError, match=r"target compute_dtype='int8' is unknown"):
        TargetSpec(name="tiny", kind="tiny", compute_dtype="int8")


@pytest.mark.parametrize("native", [True, False])
def test_auto_compute_dtype_is_bfloat16_only_where_native(monkeypatch, native):
    """``auto`` resolves when the spec is made: bfloat16 for float32 weights on a CPU with native bfloat16 or on a
    GPU, else the weights' own dtype; the loaded target then computes in what the spec says."""
    import hedgespec.models.linear_kernels as lk

    monkeypatch.setattr(lk, "native_bfloat16", lambda: native)
    cpu = TargetSpec(name="tiny", kind="tiny", compute_dtype="auto")
    assert cpu.compute_dtype == ("bfloat16" if native else None)
    assert TargetSpec(name="x", kind="hf", hf_id="x", device="cuda:1", compute_dtype="auto").compute_dtype == "bfloat16"
    for dtype in ("bfloat16", "float16", "auto"):  # weights already in a half dtype (or the checkpoint's): no cast
        assert TargetSpec(name="x", kind="hf", hf_id="x", dtype=dtype, compute_dtype="auto").compute_dtype is None
    model, _ = load_target({"name": "tiny", "kind": "tiny", "compute_dtype": "auto"})
    assert model.dtype == (torch.bfloat16 if native else torch.float32)


@pytest.mark.parametrize("native", [True, False])
def test_auto_compute_dtype_names_the_answers_file_as_the_loaded_target_computes(monkeypatch, tmp_path, native):
    """Answers regenerated for a target node with ``compute_dtype: auto`` go to the cast dtype's file where the
    cast happens, else to the weights' own file."""
    import hedgespec.models.linear_kernels as lk
    from data_recipes import prepare
    from data_recipes.regenerate import regenerate

    monkeypatch.setattr(lk, "native_bfloat16", lambda: native)
    sql = prepare("sql", n_train=2, n_eval=1, data_dir=tmp_path, log=None)["sql"]
    node = {"name": "tiny", "kind": "tiny", "compute_dtype": "auto"}
    out = regenerate(sql, target=node, generator=lambda m: "SELECT 1;", max_examples=1, progress=False)
    assert out.name == ("train.tiny.bfloat16.jsonl" if native else "train.tiny.jsonl")
