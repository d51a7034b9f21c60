"""The feedback ledger: each position's loss exactly once, only when its window is verified, never censored."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hedgespec.acceptance import eal_loss
from hedgespec.feedback import FeedbackLedger


def _chunkings(total, max_chunk):
    """Every way to split `total` positions into rounds of 1..max_chunk tokens."""
    if total == 0:
        yield []
        return
    for c in range(1, min(max_chunk, total) + 1):
        for rest in _chunkings(total - c, max_chunk):
            yield [c, *rest]


@pytest.mark.parametrize("objective", ["etap", "eal"])
def test_every_position_emitted_once_after_its_window(objective):
    k, n, total = 3, 4, 9
    gamma = np.random.default_rng(0).random((total, n))
    for chunks in _chunkings(total, k + 1):  # rounds emit 1..K+1 tokens
        ledger = FeedbackLedger(n, k, objective)
        seen: dict[int, np.ndarray] = {}
        start = 0
        for r, c in enumerate(chunks):
            out = ledger.add_round(start, gamma[start : start + c], ticket=r)
            start += c
            for item in out:
                assert item.position not in seen  # exactly once
                need = 1 if objective == "etap" else k
                assert item.position + need <= start  # only after t+K−1 is verified: no censoring
                seen[item.position] = item.loss
        tail = ledger.finish()
        assert tail == []  # default tail policy drops incomplete windows
        expected = total if objective == "etap" else total - k + 1
        assert sorted(seen) == list(range(expected))
        for t, loss in seen.items():
            if objective == "eal":
                assert np.allclose(loss, eal_loss(gamma[t : t + k].T, k))
            else:
                assert np.allclose(loss, 1 - gamma[t])


def test_delay_is_at_most_2k():
    k = 3
    ledger = FeedbackLedger(2, k, "eal")
    gamma = np.ones((40, 2))
    decided_at = {}
    start = 0
    for r, c in enumerate(itertools.cycle([1, 4, 2, 3])):
        if start >= 40:
            break
        c = min(c, 40 - start)
        for u in range(start, start + c):
            decided_at[u] = start  # the decision for u was taken at the round start
        out = ledger.add_round(start, gamma[start : start + c], ticket=r)
        start += c
        for item in out:  # complete when verified through t+K−1, at most 2K positions after t
            assert start - item.position <= 2 * k
            assert start - decided_at[item.position] <= 3 * k


def test_tail_policy_etap_scores_incomplete_windows():
    ledger = FeedbackLedger(2, 3, "eal", tail_policy="etap")
    ledger.add_round(0, np.array([[1.0, 0.5], [1.0, 0.5]]), ticket=0)
    tail = ledger.finish()
    assert [c.position for c in tail] == [0, 1]
    assert np.allclose(tail[0].loss, [0.0, 0.5])


def test_tickets_follow_positions():
    ledger = FeedbackLedger(1, 2, "eal")
    first = ledger.add_round(0, np.ones((2, 1)), ticket=7)
    out = ledger.add_round(2, np.ones((1, 1)), ticket=8)
    assert [(c.position, c.ticket) for c in first + out] == [(0, 7), (1, 7)]
    assert ledger.pending_tickets() == {8}


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: FeedbackLedger(2, 0), "K must be"),
        (lambda: FeedbackLedger(0, 2), "n_drafters"),
        (lambda: FeedbackLedger(2, 2, "mat"), "objective"),
        (lambda: FeedbackLedger(2, 2, tail_policy="keep"), "tail_policy"),
        (lambda: FeedbackLedger(2, 2).add_round(0, np.ones((1, 3))), "gamma must have shape"),
        (lambda: FeedbackLedger(2, 2).add_round(3, np.ones((1, 2))), "starts at position 3"),
        (lambda: FeedbackLedger(2, 2).add_round(0, np.full((1, 2), np.nan)), "NaN"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
