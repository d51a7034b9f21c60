"""Simulator: same requests for every selector, exact greedy replay, HedgeSpec beats the bandits."""

from __future__ import annotations

import numpy as np
import pytest

from hedgespec.selectors import Fixed, make_selector
from hedgespec.sim import (
    SimConfig,
    best_fixed_mat,
    greedy_table,
    make_pool,
    make_requests,
    make_world,
    run_greedy,
    run_pool,
    run_sampling,
)
from hedgespec.sim.runner import _residual


def test_pool_composition_is_realistic():
    names = [d.name for d in make_pool(56)]
    assert names[:8] == ["general", "python", "math", "biology", "chemistry", "medqa", "cnndm", "sql"]
    assert sum(n.startswith("sql") for n in names) >= 7  # the expert plus weaker variants
    assert [d.name for d in make_pool(2)] == ["general", "python"]


def test_experts_win_at_home_and_lose_away():
    world = make_world(8, seed=1)
    reqs = make_requests(world, 14, 128, seed=1)
    mats = np.zeros((8, 7))
    counts = np.zeros(7)
    for req in reqs:
        _, runs = greedy_table(req)
        _, m = best_fixed_mat(runs, 5)
        mats[:, req.domain] += m
        counts[req.domain] += 1
    mats /= counts
    for d in range(7):  # drafter 0 is the generalist, drafter d + 1 the expert of domain d
        assert mats[d + 1, d] > mats[0, d]  # expert beats the generalist in its domain
        assert mats[d + 1, d] > np.mean(np.delete(mats[d + 1], d))  # and does worse away


def test_greedy_replay_matches_fixed_drafter_bruteforce():
    world = make_world(4, seed=2)
    req = make_requests(world, 1, 100, seed=2)[0]
    gamma, runs = greedy_table(req)
    _, mats = best_fixed_mat(runs, 4)
    for i in range(4):
        assert run_greedy(req, Fixed(i), 4, (gamma, runs)).mat == pytest.approx(mats[i])


def test_sampling_mode_is_lossless_in_distribution():
    """First emitted token of chain speculative sampling ~ target p, whatever the drafter (chi-square)."""
    from scipy.stats import chisquare  # lazy: scipy is a dev-only dependency that only this test needs

    world = make_world(3, vocab=6, seed=3)
    req = make_requests(world, 1, 2, seed=3)[0]
    p = req.p(0, req.first)
    counts = np.zeros(6)
    draws = 4000
    rng = np.random.default_rng(0)
    for _ in range(draws):  # one round of the runner's accept rule with the worst drafter
        q = req.q(2, 0, req.first)
        tok = int(rng.choice(6, p=q))
        if rng.random() >= min(1.0, p[tok] / q[tok]):
            tok = int(rng.choice(6, p=_residual(p, q)))
        counts[tok] += 1
    assert chisquare(counts, draws * p).pvalue > 0.01


def test_sampling_runs_every_selector_on_the_same_request():
    world = make_world(5, seed=4)
    req = make_requests(world, 1, 64, seed=4)[0]
    a = run_sampling(req, Fixed(1), 5)
    b = run_sampling(req, Fixed(1), 5)
    assert a.mat == b.mat and a.chosen == b.chosen  # common random numbers per request
    m = run_sampling(req, make_selector("hedgespec"), 5)
    assert m.tokens == 64


@pytest.mark.parametrize("mode", ["greedy", "sampling"])
def test_hedgespec_regret_below_bandits_on_28_drafters(mode):
    cfg = SimConfig(
        mode=mode,
        k=7,
        n_requests=7,
        length=192,
        selectors=[{"name": "hedgespec"}, {"name": "ucbspec"}, {"name": "exp3spec"}],
    )
    res = run_pool(cfg, 28)
    h = res["hedgespec"]["avg_regret"]
    assert h < res["ucbspec"]["avg_regret"] and h < res["exp3spec"]["avg_regret"]
    assert res["hedgespec"]["mat"] > max(res["ucbspec"]["mat"], res["exp3spec"]["mat"])


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (SimConfig(experiment="fig9"), "experiment"),
        (SimConfig(mode="beam"), "mode"),
        (SimConfig(k=0), "k must be"),
        (SimConfig(pool_sizes=[]), "empty pool"),
        (SimConfig(pool_sizes=[0]), "pool sizes"),
        (SimConfig(selectors=[]), "selectors"),
    ],
)
def test_bad_configs(cfg, match):
    with pytest.raises(ValueError, match=match):
        cfg.validate()


def test_fixed_selector_must_name_a_pool_drafter():
    cfg = SimConfig(n_requests=1, length=8, selectors=[{"name": "fixed", "drafter": "law"}])
    with pytest.raises(ValueError, match="'law'"):
        run_pool(cfg, 3)
