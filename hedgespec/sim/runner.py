"""Run selectors on simulated requests, greedy (exact replay) or sampling (chain speculative sampling).

Every selector runs on the *same* requests: in greedy mode the trajectory is identical for all of them
(lossless decoding), in sampling mode each run uses the request's own random stream (common random
numbers). Metrics (as in the paper): MAT, and regret against the best fixed drafter in hindsight measured with
the ETAP loss f_t[i] = 1 − γ_t[i] on the run's own trajectory. A round whose decision skips the pool evaluation
(``Decision.evaluate`` False, label-efficient HedgeSpec) sends the selector no γ; regret is still measured on the
full γ table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hedgespec.acceptance import gamma_chain
from hedgespec.selectors.base import Selector
from hedgespec.selectors.fixed import Fixed
from hedgespec.sim.greedy import ReplayResult, best_fixed_mat, replay_greedy, run_lengths
from hedgespec.sim.markov import Request
from hedgespec.types import RequestContext, RoundFeedback

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


def run_sampling(
    req: Request, selector: Selector, k: int, ctx: RequestContext | None = None, record_gamma: bool = True
) -> RunMetrics:
    """Chain speculative sampling (Leviathan/Chen): accept d_j w.p. min(1, p/q), else resample the residual.

    ``record_gamma=False`` skips the all-drafter γ (only for selectors that never read it, e.g. the
    oracle's Fixed(i) runs); regret is then reported as 0.
    """
    rng = np.random.default_rng([req.seed, 11])
    total, n = req.length, req.world.n_drafters
    selector.begin_request(n, k, ctx)
    gamma = np.zeros((total, n))
    chosen_pos = np.zeros(total, dtype=np.int64)
    res = ReplayResult(0, 0, chosen_pos)
    s, prev = 0, req.first
    while s < total:
        d = selector.select()
        i = d.drafter
        emitted_tokens: list[int] = []
        ctx_tok, accepted = prev, 0
        for j in range(k):
            u = s + j
            q = req.q(i, u, ctx_tok)
            p = req.p(u, ctx_tok)
            tok = int(rng.choice(req.world.vocab, p=q))
            if rng.random() < min(1.0, p[tok] / q[tok]):
                emitted_tokens.append(tok)
                accepted += 1
                ctx_tok = tok
            else:
                emitted_tokens.append(int(rng.choice(req.world.vocab, p=_residual(p, q))))
                break
        else:
            emitted_tokens.append(int(rng.choice(req.world.vocab, p=req.p(s + k, ctx_tok))))  # bonus token
        emitted = min(len(emitted_tokens), total - s)
        accepted = min(accepted, emitted)
        before = prev
        # counterfactual γ of every drafter on the verified trajectory (Theorem 1 of the paper)
        for j in range(emitted if record_gamma else 0):
            u = s + j
            gamma[u] = gamma_chain(req.p(u, before), req.q_all(u, before))
            before = emitted_tokens[j]
        chosen_pos[s : s + emitted] = i
        seen = gamma[s : s + emitted] if d.evaluate else None  # a skipped evaluation: the chosen outcome only
        selector.observe(RoundFeedback(d, accepted, emitted, s, seen))
        res.evaluated += int(d.evaluate)
        res.rounds += 1
        res.accepted.append(accepted)
        res.chosen.append(i)
        prev = emitted_tokens[emitted - 1]
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
