"""Simulator common random numbers across pool sizes: nested pools on identical requests.

The truth tested here is structural and exact: the n-drafter world must be the first n drafters of the
56-drafter world, its requests must be the same arrays, and so a fixed drafter's run (greedy: its γ column;
sampling: its whole run on the request's per-position coins) cannot depend on N. The per-request oracle (best
fixed drafter in hindsight) is a max over a growing set of identical runs, hence non-decreasing in N exactly,
in both modes.
"""

from __future__ import annotations

import numpy as np
import pytest

from hedgespec.selectors import Fixed
from hedgespec.sim import SimConfig, greedy_table, make_pool, make_requests, make_world, run_experiment, run_sampling
from hedgespec.sim.runner import _inverse_cdf, oracle_index, sample_round

SIZES = (2, 4, 7, 14, 28, 56)


def _requests(n, n_requests=4, length=64, seed=3):
    return make_requests(make_world(n, seed=seed), n_requests, length, seed=seed)


def test_pools_are_prefixes_of_the_largest_pool():
    big = make_pool(56)
    for n in SIZES:
        assert make_pool(n) == big[:n]
        assert "general" in [d.name for d in make_pool(n)]  # the eagle_generalist baseline is in every pool


@pytest.mark.parametrize("n", [2, 7, 28])
def test_shared_drafters_have_identical_parameters(n):
    small, big = make_world(n, seed=5), make_world(56, seed=5)
    np.testing.assert_array_equal(small.base, big.base)
    np.testing.assert_array_equal(small.domain, big.domain)
    np.testing.assert_array_equal(small.errors, big.errors[:n])
    assert small.drafters == big.drafters[:n]
    for d in range(small.n_domains):
        np.testing.assert_array_equal(small.target_logits(d), big.target_logits(d))
        np.testing.assert_array_equal(small.drafter_logits(d), big.drafter_logits(d)[:n])


@pytest.mark.parametrize("n", [2, 7, 28])
def test_requests_are_identical_across_pool_sizes(n):
    for a, b in zip(_requests(n), _requests(56), strict=True):
        assert (a.domain, a.length, a.seed, a.first, a.horizon) == (b.domain, b.length, b.seed, b.first, b.horizon)
        np.testing.assert_array_equal(a.z, b.z)
        np.testing.assert_array_equal(a.coins, b.coins)  # the sampling coins of every position
        np.testing.assert_array_equal(a.zeta, b.zeta[:, :n])
        for u, prev in [(0, a.first), (5, 3), (40, 17)]:
            np.testing.assert_array_equal(a.p(u, prev), b.p(u, prev))
            np.testing.assert_array_equal(a.q_all(u, prev), b.q_all(u, prev)[:n])


def test_greedy_tables_are_nested_and_the_oracle_never_falls():
    big = _requests(56)
    prev_mats = None
    for n in SIZES:
        mats = []
        for a, b in zip(_requests(n), big, strict=True):
            gamma, runs = greedy_table(a)
            gamma_big, runs_big = greedy_table(b)
            np.testing.assert_array_equal(gamma, gamma_big[:, :n])  # same trajectory, same columns
            np.testing.assert_array_equal(runs, runs_big[:, :n])
            mats.append(oracle_index(a, 7, "greedy", (gamma, runs))[1])
        if prev_mats is not None:
            assert all(m >= pm for m, pm in zip(mats, prev_mats, strict=True))  # per request, exactly
        prev_mats = mats


def test_sampling_fixed_runs_do_not_depend_on_pool_size():
    """Fixed(i) on the same request spends the same coins against the same drafter: the same run for every N."""
    k = 5
    small, big = _requests(7, n_requests=3), _requests(28, n_requests=3)
    for a, b in zip(small, big, strict=True):
        for i in range(7):
            ra, rb = run_sampling(a, Fixed(i), k), run_sampling(b, Fixed(i), k)
            assert ra.mat == rb.mat and ra.chosen == rb.chosen
        best_a, mat_a = oracle_index(a, k, "sampling")
        best_b, mat_b = oracle_index(b, k, "sampling")
        assert mat_b >= mat_a  # the larger pool holds the smaller pool's best drafter, with the same run
        if best_b < 7:
            assert (best_a, mat_a) == (best_b, mat_b)


@pytest.mark.parametrize("mode", ["greedy", "sampling"])
def test_experiment_oracle_mat_is_non_decreasing_in_n(mode):
    cfg = SimConfig(mode=mode, k=7, pool_sizes=[2, 7, 14], n_requests=3, length=64, selectors=[{"name": "oracle"}])
    res = run_experiment(cfg)["results"]["oracle"]
    mats = [res[str(n)]["oracle_mat"] for n in cfg.pool_sizes]
    assert mats == sorted(mats), mats
    assert [res[str(n)]["mat"] for n in cfg.pool_sizes] == mats  # the Oracle selector replays the oracle's run


def test_coins_drive_acceptance():
    """With every accept coin 0 each draft is accepted: K drafts + the bonus per round, whatever the drafter."""
    req, k = _requests(4, n_requests=1)[0], 5
    req.coins[:, 1] = 0.0
    for i in range(4):
        m = run_sampling(req, Fixed(i), k)
        assert m.mat == pytest.approx(req.length / np.ceil(req.length / (k + 1)))


def test_sample_round_is_lossless_in_distribution():
    """First emitted token of the runner's round ~ target p for any drafter, over fresh coins (chi-square)."""
    from scipy.stats import chisquare  # lazy: scipy is a dev-only dependency that only the sim tests need

    req = make_requests(make_world(3, vocab=6, seed=3), 1, 2, seed=3)[0]
    p = req.p(0, req.first)
    rng = np.random.default_rng(0)
    draws = 4000
    for i, k in [(1, 1), (2, 3)]:
        counts = np.zeros(6)
        for _ in range(draws):
            req.coins = rng.random(req.coins.shape)
            tokens, accepted = sample_round(req, i, 0, req.first, k)
            assert len(tokens) == accepted + 1 and 0 <= accepted <= k
            counts[tokens[0]] += 1
        assert chisquare(counts, draws * p).pvalue > 0.01


def test_inverse_cdf_never_picks_a_zero_mass_token():
    probs = np.array([0.0, 0.5, 0.5, 0.0])
    assert _inverse_cdf(probs, 0.0) == 1
    assert _inverse_cdf(probs, 0.4999) == 1
    assert _inverse_cdf(probs, 0.5) == 2
    assert _inverse_cdf(probs, np.nextafter(1.0, 0.0)) == 2


def test_k_beyond_the_request_horizon_is_rejected():
    req = _requests(2, n_requests=1)[0]
    with pytest.raises(ValueError, match="k must be"):
        run_sampling(req, Fixed(0), req.horizon - req.length + 1)
