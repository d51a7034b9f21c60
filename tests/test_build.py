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
