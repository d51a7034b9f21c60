"""UCBSpec and MetaSD-UCB index formulas, checked number by number against an independent scalar computation
(BanditSpec, Hou et al. 2025: UCBSpec's confidence radius; MetaSD's UCB1 index) on a small hand-made stream."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hedgespec.selectors import make_selector
from hedgespec.types import RoundFeedback

N, K, T = 3, 4, 40


def _stream(t: int, i: int, rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """Accepted drafts of drafter i at round t (arm-dependent levels, no exact ties) and γ rows [emitted, N]."""
    accepted = [(t * 7 + 3) % 3, (t * 5 + 1) % 5, (t * 3) % 2 + 2][i]
    gamma = rng.uniform(0.05, 0.95, size=(accepted + 1, N))
    return accepted, gamma


def _ucbspec_index(count: list[int], total: list[float], t: int, delta: float) -> list[float]:
    out = []
    for n_i, s_i in zip(count, total):
        radius = (K / 2) * math.sqrt(
            (1 + n_i) / (n_i * n_i) * (1 + 2 * math.log(N * t * t * math.sqrt(1 + n_i) / delta))
        )
        out.append(s_i / n_i + radius)
    return out


def _metasd_index(count: list[int], total: list[float], t: int, beta: float) -> list[float]:
    return [s_i / n_i + beta * math.sqrt(2 * math.log(t) / n_i) for n_i, s_i in zip(count, total)]


@pytest.mark.parametrize(
    "name,kw",
    [("ucbspec", {"delta": 0.5}), ("ucbspec", {"delta": 0.1}), ("metasd", {"beta": 1.0}), ("metasd", {"beta": 0.3})],
)
def test_index_and_choice_match_the_formula(name, kw) -> None:
    sel = make_selector(name, seed=0, **kw)
    sel.begin_request(N, K)
    rng = np.random.default_rng(1)
    count, total = [0] * N, [0.0] * N
    checked = untied = 0
    for t in range(1, T + 1):
        d = sel.select()
        if t <= N:
            assert d.drafter == t - 1  # one pull each first
        else:
            if name == "ucbspec":
                idx = _ucbspec_index(count, total, t, kw["delta"])
            else:
                idx = _metasd_index(count, total, t, kw["beta"])
            np.testing.assert_allclose(sel._index(t), idx, rtol=1e-12)
            top = max(idx)
            winners = [i for i in range(N) if idx[i] >= top - 1e-12]
            assert d.drafter in winners, (t, idx)  # exact ties are broken at random among the maximisers
            checked += 1
            untied += len(winners) == 1
        acc, gamma = _stream(t, d.drafter, rng)
        count[d.drafter] += 1
        # reward: BanditSpec's Y = accepted + 1; MetaSD's mean of the chosen drafter's 1 − TV at emitted positions
        total[d.drafter] += acc + 1 if name == "ucbspec" else sum(gamma[:, d.drafter]) / len(gamma)
        sel.observe(RoundFeedback(decision=d, accepted=acc, emitted=acc + 1, start=0, gamma=gamma))
    assert checked == T - N and untied >= (T - N) // 2
    assert sel.state_dict()["pulls"] == count
    assert len(set(count)) > 1  # the index did discriminate between the drafters


def test_ucbspec_radius_by_hand() -> None:
    # n_i = 1, t = 4, N = 3, δ = 1/2, K = 4: (4/2)·sqrt(2 · (1 + 2 ln(3·16·√2 / 0.5)))
    sel = make_selector("ucbspec", seed=0)
    sel.begin_request(N, K)
    for t in range(1, N + 1):
        d = sel.select()
        sel.observe(RoundFeedback(decision=d, accepted=0, emitted=1, start=0, gamma=np.full((1, N), 0.5)))
    want = 1.0 + 2.0 * math.sqrt(2.0 * (1.0 + 2.0 * math.log(3 * 16 * math.sqrt(2.0) / 0.5)))
    assert sel._index(4) == pytest.approx([want] * N, rel=1e-12)
