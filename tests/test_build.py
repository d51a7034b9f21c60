"""hedgespec.build: one builder from a composed config to (target, pool, selector, engine)."""

from __future__ import annotations

import pytest
import torch
from _bench_helpers import compose_bench, inject

from hedgespec.build import build
from hedgespec.selectors import make_selector


def _built(*overrides: str):
    return build(compose_bench(list(overrides)), **inject())


def test_selector_resolution_by_name_domain_and_seed_offset():
    assert _built("selector=eagle").selector_factory().index == 0  # the generalist
    fixed = _built("selector=fixed", "fixed=sql")
    assert fixed.selector_info == {"index": 2} and fixed.selector_factory().index == 2
    assert _built("selector=fixed", "fixed=medqa").selector_factory().index == 3  # by domain (clinical)
    assert _built("selector=exp3spec", "seed=5").selector_factory().seed == 5 + 0
    with pytest.raises(ValueError, match="the pool has no drafter for it"):
        _built("selector=fixed", "fixed=chemistry")
    # the generalist is the pool's setting, for eagle as for the router's fallback; a name not in the pool is named
    assert _built("selector=eagle", "pool.generalist=sql").selector_factory().index == 2
    for sel in ("eagle", "router"):
        with pytest.raises(ValueError, match=r"pool.generalist.*='nope': the pool has no drafter for it"):
            _built(f"selector={sel}", "pool.generalist=nope")


def test_decoding_and_sampling_come_from_the_groups():
    b = _built("decoding=tree", "decoding.num_steps=3", "sampling.temperature=0.5", "seed=4")
    assert (b.decoding.mode, b.decoding.k, b.decoding.topk, b.decoding.num_draft_tokens) == ("tree", 3, 4, 16)
    assert (b.sampling.temperature, b.sampling.seed) == (0.5, 4)
    eng = b.engine()
    assert eng.decoding == b.decoding and eng.n_drafters == b.n


def test_oracle_is_the_best_fixed_drafter_by_enumeration():
    """Independent truth: run every Fixed(i) engine and take the best MAT (greedy, so runs are exact)."""
    b = _built("max_new_tokens=16")
    ids = torch.tensor(b.tokenizer("def add(a, b):")["input_ids"], dtype=torch.long)
    best, mats = b.oracle(ids, 16, b.sampling)
    want = [b.engine(make_selector("fixed", index=i)).generate(ids, 16, b.sampling)[1].mat for i in range(b.n)]
    assert mats == pytest.approx(want) and mats[best] == max(want)


def test_excluded_drafters_leave_the_pool_and_bad_names_are_named():
    full = _built()
    b = _built("exclude_drafters=[sql]", "selector=fixed", "fixed=clinical")
    keep = [j for j, n in enumerate(full.pool.names) if n != "sql"]
    assert b.pool.names == [full.pool.names[j] for j in keep] and b.n == full.n - 1
    assert b.pool.domains == [full.pool.domains[j] for j in keep]
    assert b.selector_factory().index == b.pool.names.index("clinical")  # indices are the smaller pool's
    with pytest.raises(ValueError, match=r"exclude_drafters=\['nosuch'\]: the pool has no drafter \['nosuch'\]"):
        _built("exclude_drafters=[nosuch]")
    with pytest.raises(ValueError, match="leaves none of the pool's drafters"):
        _built(f"exclude_drafters=[{','.join(full.pool.names)}]")


def test_pool_compute_dtype(monkeypatch):
    """null/float32 -> float32; bfloat16; auto follows the CPU's native bfloat16 (CUDA: bfloat16); bad values named."""
    import hedgespec.models.linear_kernels as lk
    from hedgespec.build import pool_compute_dtype

    assert pool_compute_dtype({}) == pool_compute_dtype({"compute_dtype": "float32"}) == torch.float32
    assert pool_compute_dtype({"compute_dtype": "bfloat16"}) == torch.bfloat16
    for native, want in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(lk, "native_bfloat16", lambda native=native: native)
        assert pool_compute_dtype({"compute_dtype": "auto"}) == want
    assert pool_compute_dtype({"compute_dtype": "auto"}, "cuda") == torch.bfloat16
    with pytest.raises(ValueError, match=r"pool.compute_dtype='fp8': expected null, float32, bfloat16 or auto"):
        _built("pool.compute_dtype=fp8")


def test_bfloat16_drafters_propose_but_the_target_decides():
    """A bfloat16 pool computes in bfloat16 and its greedy output is still transformers' greedy output."""
    b = _built("selector=hedgespec", "pool.compute_dtype=bfloat16", "max_new_tokens=24")
    eng = b.engine()
    assert b.drafter_dtype == torch.bfloat16 and eng.pool.w["lm_head"].dtype == torch.bfloat16
    ids = torch.tensor(b.tokenizer("def add(a, b):")["input_ids"], dtype=torch.long)
    out, stats = eng.generate(ids, 24, b.sampling)
    with torch.no_grad():
        ref = b.model.generate(ids[None], max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)[0]
    assert out.tolist() == ref.tolist() and stats.mat > 1.0
