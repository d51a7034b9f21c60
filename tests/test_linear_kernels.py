"""``target.linear_kernels``: oneDNN-packed linear weights on CPU compute what ``nn.Linear`` computes.

Truth: ``torch.nn.functional.linear`` on the same weights (up to float rounding), the target's own state dict and
fingerprint, and ``transformers.generate`` on an unwrapped (aten) copy of the target.
"""

from __future__ import annotations

import pytest
import torch
from _engine_helpers import GREEDY, decoding

from hedgespec.engine import SpeculativeEngine
from hedgespec.fixtures import random_drafter
from hedgespec.models import load_target
from hedgespec.models.fingerprint import state_dict_fingerprint, target_fingerprint
from hedgespec.models.linear_kernels import (
    PackedLinear,
    linear_kernels_of,
    onednn_available,
    packs_dtype,
    resolve_kernels,
    use_linear_kernels,
)
from hedgespec.models.spec import TargetSpec
from hedgespec.selectors import make_selector

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this PyTorch build has no oneDNN linear packing")


def _linears(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


@needs_onednn
def test_auto_packs_a_cpu_float32_target_default_aten_does_not_and_keeps_its_parameters():
    ref, _ = load_target("tiny", linear_kernels="aten")
    model, _ = load_target("tiny", linear_kernels="auto")
    assert linear_kernels_of(ref) == "aten" and linear_kernels_of(model) == "onednn"
    assert all(type(m) is PackedLinear for m in _linears(model)) and len(_linears(model)) == len(_linears(ref))
    assert model.state_dict().keys() == ref.state_dict().keys()
    assert target_fingerprint(model) == state_dict_fingerprint(ref.state_dict())
    assert linear_kernels_of(load_target("tiny")[0]) == "aten"  # the default
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied weights stay tied
    use_linear_kernels(model, "aten")
    assert all(type(m) is torch.nn.Linear for m in _linears(model))
    assert model.lm_head.weight is model.model.embed_tokens.weight


@needs_onednn
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rows", [1, 2, 5, 9, 130])
def test_packed_linear_equals_functional_linear(dtype, tol, rows):
    g = torch.Generator().manual_seed(rows)
    lin = torch.nn.Linear(96, 200, bias=True).to(dtype)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(200, 96, generator=g))
        lin.bias.copy_(torch.randn(200, generator=g))
    packed = PackedLinear.wrap(lin, rows=5)
    x = torch.randn(1, rows, 96, generator=g).to(dtype)
    with torch.no_grad():
        want = torch.nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
        got = packed(x)
    assert got.shape == (1, rows, 200) and got.dtype == dtype
    # which kernel ran: packed from min_rows on, where this CPU packs the dtype (an AVX2-only CPU has no oneDNN
    # bfloat16 path, so there the bfloat16 cases check the aten fallback against the same float64 truth)
    assert (packed._packed is not None) == (packs_dtype(dtype) and rows >= packed.min_rows)
    assert torch.allclose(got.double(), want, rtol=tol, atol=tol * float(want.abs().max()))


@needs_onednn
def test_a_weight_changed_after_packing_is_packed_again():
    lin = torch.nn.Linear(32, 48, bias=False)
    packed = PackedLinear.wrap(lin)
    x = torch.randn(5, 32)
    with torch.no_grad():
        before = packed(x)
        lin.weight.mul_(2.0)  # in place: the same Parameter, a new version
        after_inplace = packed(x)
        lin.weight.data = torch.randn(48, 32)  # replaced storage
        after_replaced = packed(x)
    assert torch.allclose(after_inplace, 2 * before, atol=1e-5)
    assert torch.allclose(after_replaced, x @ lin.weight.t(), atol=1e-5)


@needs_onednn
def test_gradients_flow_through_the_aten_path():
    lin = PackedLinear.wrap(torch.nn.Linear(16, 8))
    x = torch.randn(4, 16, requires_grad=True)
    lin(x).sum().backward()
    assert x.grad is not None and lin.weight.grad is not None
    assert torch.allclose(x.grad, lin.weight.sum(0).expand(4, -1).detach())


@needs_onednn
def test_engine_on_packed_kernels_equals_transformers_greedy_on_aten():
    packed, _ = load_target("tiny", linear_kernels="onednn")
    plain, _ = load_target("tiny")
    heads = [random_drafter(packed, seed=s) for s in range(3)]
    engine = SpeculativeEngine(packed, heads, make_selector("hedgespec"), decoding("chain", 4))
    prompt = torch.tensor([5, 17, 33, 2, 101, 64])
    out, stats = engine.generate(prompt, 40, GREEDY)
    want = plain.generate(prompt[None], max_new_tokens=40, min_new_tokens=40, do_sample=False, pad_token_id=0)[0]
    assert stats.rounds >= 1 and out.tolist() == want.tolist()


@needs_onednn
def test_packed_min_rows_moves_the_row_count_from_which_the_packed_copy_runs():
    g = torch.Generator().manual_seed(3)
    lin = torch.nn.Linear(64, 80, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(80, 64, generator=g))
    x = torch.randn(1, 64, generator=g)
    default, every = PackedLinear.wrap(lin), PackedLinear.wrap(lin, min_rows=1)
    with torch.no_grad():
        want = torch.nn.functional.linear(x.double(), lin.weight.double())
        got_default, got_every = default(x), every(x)
    assert default.min_rows == 4 and default._packed is None  # float32: one row stays on aten
    assert every.min_rows == 1 and every._packed is not None  # one row runs packed
    for got in (got_default, got_every):
        assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


@needs_onednn
def test_a_target_packed_for_every_pass_decodes_as_transformers_greedy_on_aten():
    """``target.packed_min_rows=1``: every linear layer packs from one row on; the engine's rounds and the packed
    model's own one-row ``generate`` both give the aten target's greedy tokens."""
    packed, _ = load_target("tiny", linear_kernels="onednn", packed_min_rows=1)
    plain, _ = load_target("tiny")
    assert {m.min_rows for m in packed.modules() if isinstance(m, PackedLinear)} == {1}
    heads = [random_drafter(packed, seed=s) for s in range(2)]
    engine = SpeculativeEngine(packed, heads, make_selector("hedgespec"), decoding("chain", 4))
    prompt = torch.tensor([5, 17, 33, 2, 101, 64])
    out, stats = engine.generate(prompt, 32, GREEDY)
    kw = {"max_new_tokens": 32, "min_new_tokens": 32, "do_sample": False, "pad_token_id": 0}
    want = plain.generate(prompt[None], **kw)[0]
    assert stats.rounds >= 1 and out.tolist() == want.tolist()
    assert packed.generate(prompt[None], **kw)[0].tolist() == want.tolist()


def test_aten_and_cuda_or_float16_targets_resolve_to_aten():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).to(torch.float16)
    assert resolve_kernels(model, "auto") == "aten"
    assert resolve_kernels(model, "aten") == "aten"
    use_linear_kernels(model, "auto")
    assert type(model[0]) is torch.nn.Linear


def test_bad_linear_kernels_are_named():
    with pytest.raises(ValueError, match=r"target linear_kernels='mkl' is unknown; expected one of \('auto'"):
        TargetSpec(name="tiny", kind="tiny", linear_kernels="mkl")
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match=r"target packed_min_rows=.* must be an int >= 1"):
            TargetSpec(name="tiny", kind="tiny", linear_kernels="onednn", packed_min_rows=bad)
    with pytest.raises(ValueError, match=r"target packed_min_rows=0 must be an int >= 1"):
        use_linear_kernels(torch.nn.Sequential(torch.nn.Linear(2, 2)), "aten", min_rows=0)
    with pytest.raises(ValueError, match=r"linear_kernels='fast' is unknown"):
        resolve_kernels(torch.nn.Linear(2, 2), "fast")
    half = torch.nn.Linear(2, 2).to(torch.float16)
    with pytest.raises(
        ValueError,
        match=r"linear_kernels=onednn packs CPU weights in float32 or bfloat16; this "
        r"target is float16 on cpu: use linear_kernels=auto or aten",
    ):
        use_linear_kernels(half, "onednn")
    assert type(half) is torch.nn.Linear  # nothing was changed


@needs_onednn
def test_a_cpu_without_bfloat16_packing_keeps_bfloat16_targets_on_aten(monkeypatch):
    """On a CPU where oneDNN has no bfloat16 path (AVX2 only), ``auto`` leaves a bfloat16 target on aten, an
    explicit ``onednn`` is refused naming the CPU, and an already wrapped bfloat16 layer computes on aten instead
    of raising inside the packing call."""
    import hedgespec.models.linear_kernels as lk

    monkeypatch.setattr(lk, "packs_dtype", lambda dtype: dtype == torch.float32)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4)).to(torch.bfloat16)
    assert resolve_kernels(model, "auto") == "aten"
    assert resolve_kernels(model.float(), "auto") == "onednn"
    with pytest.raises(ValueError, match="this CPU cannot pack bfloat16 weights with oneDNN"):
        resolve_kernels(model.to(torch.bfloat16), "onednn")
    lin = torch.nn.Linear(8, 4).to(torch.bfloat16)
    packed = PackedLinear.wrap(lin)
    x = torch.randn(6, 8).to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(packed(x), torch.nn.functional.linear(x, lin.weight, lin.bias))
    assert packed._packed is None  # never packed
