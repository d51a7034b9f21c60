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
from hedgespec.sim import runner as sim_runner
from hedgespec.sim.runner import sample_round


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


def _first_two_tokens(req, i: int, k: int, draws: int, seed: int) -> np.ndarray:
    """Counts [V*V] of the first two tokens the simulator's real round (``sample_round``) emits after
    ``req.first`` with drafter ``i``, over ``draws`` fresh sets of the request's sampling coins."""
    v = req.world.vocab
    counts = np.zeros(v * v)
    rng = np.random.default_rng(seed)
    for _ in range(draws):
        req.coins = rng.random(req.coins.shape)
        out, _ = sample_round(req, i, 0, req.first, k)
        if len(out) < 2:
            out += sample_round(req, i, len(out), out[-1], k)[0]
        counts[out[0] * v + out[1]] += 1
    return counts


def _chi2_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    from scipy.stats import chisquare  # lazy: scipy is a dev-only dependency that only these tests need

    exp = probs * counts.sum()
    keep = exp >= min_expected  # cells expected below 5 are pooled into one
    obs, e = np.append(counts[keep], counts[~keep].sum()), np.append(exp[keep], exp[~keep].sum())
    return float(chisquare(obs, e * obs.sum() / e.sum()).pvalue)


def _target_joint(req) -> np.ndarray:
    p1 = req.p(0, req.first)
    return np.concatenate([p1[x] * req.p(1, x) for x in range(len(p1))])


@pytest.mark.parametrize("k", [1, 3])
def test_sampling_round_is_lossless_in_distribution(k):
    """Joint law of the first two emitted tokens of the simulator's chain speculative sampling = the target's
    p(x1)·p(x2 | x1), whatever the drafter (chi-square on the real ``sample_round``, worst drafter of 3)."""
    world = make_world(3, vocab=6, seed=3)
    req = make_requests(world, 1, 8, seed=3)[0]
    counts = _first_two_tokens(req, 2, k, 6000, seed=0)
    assert _chi2_pvalue(counts, _target_joint(req)) > 0.01


def test_a_rule_without_the_residual_is_not_lossless(monkeypatch):
    """The same real round with the residual (p − q)+ replaced by p on rejection: the chi-square test rejects
    it (p ≈ 0), so the test above can tell a lossless rule from a lossy one."""
    world = make_world(3, vocab=6, seed=3)
    req = make_requests(world, 1, 8, seed=3)[0]
    monkeypatch.setattr(sim_runner, "_residual", lambda p, q: p)
    counts = _first_two_tokens(req, 2, 3, 6000, seed=0)
    assert _chi2_pvalue(counts, _target_joint(req)) < 1e-6


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
