"""Run selectors on simulated requests, greedy (exact replay) or sampling (chain speculative sampling).

Every selector runs on the *same* requests: in greedy mode the trajectory is identical for all of them
(lossless decoding); in sampling mode every run spends the request's per-position coins (``Request.coins``:
draft, accept and resample uniforms of generated position u), whatever its selector or pool size (common random
numbers). Each position is emitted once per run, so each of its coins is used at most once and the run is
exact chain speculative sampling. Metrics (as in the paper): MAT, and regret against the best fixed drafter in
hindsight measured with the ETAP loss f_t[i] = 1 − γ_t[i] on the run's own trajectory. A round whose decision
skips the pool evaluation (``Decision.evaluate`` False, label-efficient HedgeSpec) sends the selector no γ (a
selector with ``late_feedback`` gets it with the next evaluated round); regret is still measured on the full γ
table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hedgespec.acceptance import gamma_chain
from hedgespec.selectors.base import Selector
from hedgespec.selectors.fixed import Fixed
from hedgespec.sim.greedy import ReplayResult, RoundReporter, best_fixed_mat, replay_greedy, run_lengths
from hedgespec.sim.markov import Request
from hedgespec.types import RequestContext

MODES = ("greedy", "sampling")


@dataclass
class RunMetrics:
    mat: float
    regret: float  # Σ_t f_t[i_t] − min_i Σ_t f_t[i]
    tokens: int
    cumulative_regret: np.ndarray  # [T] regret curve vs generated tokens
    chosen: list[int]
    eval_rate: float = 1.0  # share of rounds whose pool evaluation the selector asked for


def greedy_table(req: Request) -> tuple[np.ndarray, np.ndarray]:
    """Trajectory-level tables (γ [T, N], runs [T, N]) for greedy chain decoding of ``req``."""
    total = req.length
    gamma = np.zeros((total, req.world.n_drafters))
    prev = req.first
    for u in range(total):
        tok = int(np.argmax(req.p(u, prev)))
        gamma[u] = np.argmax(req.q_all(u, prev), axis=-1) == tok  # greedy chain γ = 1{argmax q_i = argmax p}
        prev = tok
    return gamma, run_lengths(gamma > 0.5)


def regret_curve(gamma: np.ndarray, chosen_per_position: np.ndarray) -> np.ndarray:
    """Cumulative ETAP regret vs t against the best fixed drafter in hindsight for the whole request."""
    loss = 1.0 - gamma
    best = int(np.argmin(loss.sum(axis=0)))
    inst = loss[np.arange(len(loss)), chosen_per_position] - loss[:, best]
    return np.cumsum(inst)


def _metrics(gamma: np.ndarray, res: ReplayResult) -> RunMetrics:
    curve = regret_curve(gamma, res.chosen_per_position)
    return RunMetrics(res.mat, float(curve[-1]), res.generated, curve, res.chosen, res.eval_rate)


def run_greedy(  # type: ignore[no-untyped-def]
    req: Request, selector: Selector, k: int, table=None, ctx=None
) -> RunMetrics:
    gamma, runs = table if table is not None else greedy_table(req)
    return _metrics(gamma, replay_greedy(gamma, runs, selector, k, ctx))


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    r = np.maximum(p - q, 0.0)
    s = r.sum()
    return r / s if s > 0 else p


def _inverse_cdf(probs: np.ndarray, coin: float) -> int:
    """The token a uniform ``coin`` in [0, 1) picks from ``probs`` (inverse-CDF sampling)."""
    cdf = np.cumsum(probs)
    tok = int(np.searchsorted(cdf, coin * cdf[-1], side="right"))
    return min(tok, int(np.flatnonzero(probs)[-1]))  # rounding at coin -> 1 never picks a zero-mass token


def sample_round(req: Request, i: int, s: int, prev: int, k: int) -> tuple[list[int], int]:
    """One round of chain speculative sampling (Leviathan et al. 2023; Chen et al. 2023) by drafter ``i``.

    Drafts from generated position ``s`` after token ``prev``: d_j ~ q_i with position u's draft coin, accepted
    w.p. min(1, p/q) with its accept coin, else replaced by a draw from the residual (p − q)+ with its resample
    coin; after K accepted drafts the bonus token at s+K is drawn from p with that position's resample coin.
    Returns (emitted tokens, accepted count).
    """
    tokens: list[int] = []
    ctx_tok = prev
    for j in range(k):
        u = s + j
        q, p = req.q(i, u, ctx_tok), req.p(u, ctx_tok)
        c_draft, c_accept, c_resample = req.coins[u]
        tok = _inverse_cdf(q, c_draft)
        if c_accept >= min(1.0, p[tok] / q[tok]):
            tokens.append(_inverse_cdf(_residual(p, q), c_resample))
            return tokens, j
        tokens.append(tok)
        ctx_tok = tok
    tokens.append(_inverse_cdf(req.p(s + k, ctx_tok), req.coins[s + k, 2]))  # bonus token
    return tokens, k


def _record_gamma(req: Request, gamma: np.ndarray, s: int, prev: int, tokens: list[int]) -> None:
    """Counterfactual γ of every drafter on the verified tokens (Theorem 1 of the paper), rows s.. of gamma."""
    before = prev
    for j, tok in enumerate(tokens):
        gamma[s + j] = gamma_chain(req.p(s + j, before), req.q_all(s + j, before))
        before = tok


def run_sampling(
    req: Request, selector: Selector, k: int, ctx: RequestContext | None = None, record_gamma: bool = True
) -> RunMetrics:
    """Chain speculative sampling over ``req`` with ``selector`` choosing each round's drafter.

    ``record_gamma=False`` skips the all-drafter γ (only for selectors that never read it, e.g. the
    oracle's Fixed(i) runs); regret is then reported as 0.
    """
    total, n = req.length, req.world.n_drafters
    if not isinstance(k, int) or k < 1 or total + k > req.horizon:
        raise ValueError(f"k must be an int in [1, {req.horizon - total}] (the request's context horizon), got {k!r}")
    selector.begin_request(n, k, ctx)
    gamma = np.zeros((total, n))
    res = ReplayResult(0, 0, np.zeros(total, dtype=np.int64))
    report = RoundReporter(selector)
    s, prev = 0, req.first
    while s < total:
        d = selector.select()
        tokens, accepted = sample_round(req, d.drafter, s, prev, k)
        emitted = min(len(tokens), total - s)
        accepted = min(accepted, emitted)
        if record_gamma:
            _record_gamma(req, gamma, s, prev, tokens[:emitted])
        res.chosen_per_position[s : s + emitted] = d.drafter
        selector.observe(report.feedback(d, accepted, emitted, s, gamma[s : s + emitted]))
        res.evaluated += int(d.evaluate)
        res.rounds += 1
        res.accepted.append(accepted)
        res.chosen.append(d.drafter)
        prev = tokens[emitted - 1]
        s += emitted
    selector.end_request()
    res.generated = total
    return _metrics(gamma, res)


def oracle_index(req: Request, k: int, mode: str, table=None) -> tuple[int, float]:  # type: ignore[no-untyped-def]
    """Best fixed drafter in hindsight for ``req`` and its MAT (greedy: exact; sampling: one run each)."""
    if mode == "greedy":
        _, runs = table if table is not None else greedy_table(req)
        best, mats = best_fixed_mat(runs, k)
        return best, float(mats[best])
    mats = [run_sampling(req, Fixed(i), k, record_gamma=False).mat for i in range(req.world.n_drafters)]
    best = int(np.argmax(mats))
    return best, float(mats[best])
