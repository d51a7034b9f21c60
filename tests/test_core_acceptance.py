"""γ and the acceptance-length estimator against brute-force enumeration (independent truth)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hedgespec.acceptance import (
    eal_loss,
    etap_loss,
    expected_accept_length,
    gamma_chain,
    gamma_greedy,
    gamma_tree,
)


def _dirichlet(rng, v, n=None, alpha=0.7):
    return rng.dirichlet(np.full(v, alpha), size=n)


def _chain_accept_prob_bruteforce(p, q):
    """P(accept) of one speculative-sampling step, enumerating every drafted token x: Σ_x q(x) min(1, p(x)/q(x))."""
    return sum(q[x] * min(1.0, p[x] / q[x]) for x in range(len(p)) if q[x] > 0)


def test_gamma_chain_equals_enumerated_acceptance_probability():
    rng = np.random.default_rng(0)
    for _ in range(50):
        p, q = _dirichlet(rng, 6), _dirichlet(rng, 6)
        assert gamma_chain(p, q) == pytest.approx(_chain_accept_prob_bruteforce(p, q), abs=1e-12)
        tv = 0.5 * np.abs(p - q).sum()
        assert gamma_chain(p, q) == pytest.approx(1 - tv, abs=1e-12)


def test_gamma_tree_is_target_mass_of_drafter_topk_by_enumeration():
    rng = np.random.default_rng(1)
    for _ in range(30):
        p, q = _dirichlet(rng, 7), _dirichlet(rng, 7)
        for k in (1, 2, 3, 7):
            # brute force: the k-subset of tokens with the largest total q is the drafter's children set
            best = max(itertools.combinations(range(7), k), key=lambda c: sum(q[list(c)]))
            assert gamma_tree(p, q, k) == pytest.approx(p[list(best)].sum(), abs=1e-12)
    # batched rows agree with row-by-row
    P, Q = _dirichlet(rng, 9, 5), _dirichlet(rng, 9, 5)
    assert np.allclose(gamma_tree(P, Q, 3), [gamma_tree(P[i], Q[i], 3) for i in range(5)])


def test_gamma_greedy_indicator():
    p = np.array([0.1, 0.6, 0.3])
    assert gamma_greedy(p, np.array([0.2, 0.5, 0.3])) == 1.0
    assert gamma_greedy(p, np.array([0.5, 0.2, 0.3])) == 0.0
    assert gamma_greedy(p, np.array([0.5, 0.2, 0.3]), topk=2) == 0.0
    assert gamma_greedy(p, np.array([0.5, 0.3, 0.2]), topk=2) == 1.0


def test_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    p = torch.softmax(torch.randn(4, 10), -1)
    q = torch.softmax(torch.randn(4, 10), -1)
    assert np.allclose(gamma_chain(p, q), gamma_chain(p.numpy(), q.numpy()), atol=1e-6)


def test_estimator_forms_agree_and_bounds():
    rng = np.random.default_rng(2)
    g = rng.random((200, 5))
    tail, pmf = expected_accept_length(g), expected_accept_length(g, form="pmf")
    assert np.allclose(tail, pmf)
    assert np.all(tail >= 1) and np.all(tail <= 6)
    assert expected_accept_length(np.ones(5)) == 6.0 and expected_accept_length(np.zeros(5)) == 1.0


def test_estimator_equals_realised_length_under_greedy():
    rng = np.random.default_rng(3)
    for _ in range(100):
        hits = rng.random(4) < 0.7  # greedy γ ∈ {0, 1}
        realised = 1 + next((j for j, h in enumerate(hits) if not h), 4)  # accepted prefix + bonus
        assert expected_accept_length(hits.astype(float)) == realised


def _exact_mean_accept_length(p_of, q_of, vocab, k):
    """Exact E[tokens per round] of chain speculative sampling by enumerating every drafted path.

    p_of(prefix), q_of(prefix) give the target/drafter next-token distributions after a drafted prefix.
    """

    def rec(prefix, depth):
        if depth == k:
            return 1.0  # all K accepted, bonus token
        p, q = p_of(prefix), q_of(prefix)
        total = 0.0
        for x in range(vocab):
            if q[x] == 0:
                continue
            acc = min(1.0, p[x] / q[x])
            total += q[x] * (acc * (1.0 + rec(prefix + (x,), depth + 1)) + (1 - acc) * 1.0)
        return total

    return rec((), 0)


def test_estimator_exactly_unbiased_when_gamma_is_path_independent():
    rng = np.random.default_rng(4)
    p, q = _dirichlet(rng, 4), _dirichlet(rng, 4)
    k = 3
    exact = _exact_mean_accept_length(lambda _: p, lambda _: q, 4, k)
    g = gamma_chain(p, q)
    assert expected_accept_length(np.full(k, g)) == pytest.approx(exact, abs=1e-12)


def test_estimator_bias_is_measured_in_a_path_dependent_case():
    """Path-dependent p, q: the estimator evaluated on γ of the *target's* trajectory is biased.

    We measure E_traj[AL(γ along a target-sampled path)] against the exact mean accepted length and
    record the gap (reported in the README theory notes); the test asserts the gap is real and small."""
    rng = np.random.default_rng(5)
    v, k = 3, 3
    P = {(): _dirichlet(rng, v)}
    Q = {(): _dirichlet(rng, v)}
    for depth in range(1, k + 1):
        for pre in itertools.product(range(v), repeat=depth):
            P[pre], Q[pre] = _dirichlet(rng, v), _dirichlet(rng, v)
    exact = _exact_mean_accept_length(lambda pre: P[pre], lambda pre: Q[pre], v, k)
    # Expected estimator over the verified (target-distributed) trajectory x_1..x_K
    est = 0.0
    for path in itertools.product(range(v), repeat=k):
        prob, gam = 1.0, []
        for j in range(k):
            pre = path[:j]
            prob *= P[pre][path[j]]
            gam.append(gamma_chain(P[pre], Q[pre]))
        est += prob * expected_accept_length(np.array(gam))
    bias = est - exact
    assert abs(bias) > 1e-4  # path dependence makes it biased ...
    assert abs(bias) / exact < 0.25  # ... but only mildly
    print(f"path-dependent estimator bias: {bias:+.4f} tokens on exact {exact:.4f} ({bias / exact:+.2%})")


def test_losses():
    assert etap_loss(0.25) == 0.75
    g = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    assert np.allclose(eal_loss(g, 3), [0.0, 0.75])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: gamma_chain(np.ones(3) / 3, np.ones(4) / 4), "p and q"),
        (lambda: gamma_chain(np.array([0.5, 0.6]), np.array([0.5, 0.5])), "p rows must sum to 1"),
        (lambda: gamma_chain(np.array([0.5, 0.5]), np.array([np.nan, 0.5])), "q contains NaN"),
        (lambda: gamma_chain(np.array([1.5, -0.5]), np.array([0.5, 0.5])), "p has negative"),
        (lambda: gamma_tree(np.ones(3) / 3, np.ones(3) / 3, 0), "topk"),
        (lambda: gamma_tree(np.ones(3) / 3, np.ones(3) / 3, 4), "topk"),
        (lambda: expected_accept_length(np.array([])), "gammas"),
        (lambda: expected_accept_length(np.array([1.2])), "gammas must lie in"),
        (lambda: eal_loss(np.ones(3), 0), "K must be"),
        (lambda: eal_loss(np.ones(3), 2), "K=2"),
        (lambda: etap_loss(np.nan), "gamma contains NaN"),
        (lambda: gamma_chain("abc", np.ones(2) / 2), "p must be an array"),
    ],
)
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
