"""Exact replay of greedy speculative decoding from an acceptance table.

Under greedy decoding the emitted trajectory does not depend on which drafter drafts (lossless), so one
table per request determines every selector's run exactly:

* ``gamma[u, i]``: drafter i's counterfactual γ at generated position u (what HedgeSpec observes);
* ``runs[u, i]``: drafter i's realised number of accepted drafts if a round starts at u (capped at K
  by the replay). For a Markov simulator ``runs`` is the run length of γ = 1; for EAGLE engines it comes
  from the recorded trace (drafting depth > 1 from the drafter's own features differs from the
  depth-1 γ: the "time-inhomogeneity" caveat of the paper, appendix B.4).

Used by the simulator's greedy mode and by :mod:`hedgespec.sim.replay` for engine traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hedgespec.selectors.base import Selector
from hedgespec.types import Decision, LateGamma, RequestContext, RoundFeedback


@dataclass
class ReplayResult:
    """One selector's run over one request."""

    rounds: int
    generated: int
    chosen_per_position: np.ndarray  # [T] drafter covering each generated position
    accepted: list[int] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    weights: list[tuple[float, ...] | None] = field(default_factory=list)
    evaluated: int = 0  # rounds whose decision asked for the pool evaluation (γ sent to the selector)

    @property
    def mat(self) -> float:
        return self.generated / self.rounds if self.rounds else 0.0

    @property
    def eval_rate(self) -> float:
        """Share of rounds with a pool evaluation (1 for selectors that always want full information)."""
        return self.evaluated / self.rounds if self.rounds else 0.0


def run_lengths(hit: np.ndarray) -> np.ndarray:
    """runs[u, i] = number of consecutive positions u, u+1, … with hit[·, i] true (per column)."""
    hit = np.asarray(hit, dtype=bool)
    out = np.zeros(hit.shape, dtype=np.int64)
    acc = np.zeros(hit.shape[1], dtype=np.int64)
    for u in range(hit.shape[0] - 1, -1, -1):
        acc = np.where(hit[u], acc + 1, 0)
        out[u] = acc
    return out


class RoundReporter:
    """What a runner that knows every drafter's γ sends the selector after each round, as the engine does.

    An evaluated round gets its γ rows; a skipped one only the chosen drafter's (``own_gamma``). For a selector
    with ``late_feedback`` the skipped rounds' rows are held and go out with the next evaluated round
    (``RoundFeedback.late``), which is when the engine's lagging heads catch up.
    """

    def __init__(self, selector: Selector) -> None:
        self.late = bool(getattr(selector, "late_feedback", False))
        self._held: list[LateGamma] = []

    def feedback(self, d: Decision, accepted: int, emitted: int, start: int, rows: np.ndarray) -> RoundFeedback:
        """The feedback of a round that emitted ``rows`` (γ [emitted, N]) from position ``start``."""
        if d.evaluate:
            late, self._held = tuple(self._held), []
            return RoundFeedback(d, accepted, emitted, start, rows, late=late)
        if self.late:
            self._held.append(LateGamma(start, np.array(rows, copy=True)))
        return RoundFeedback(d, accepted, emitted, start, None, own_gamma=rows[:, d.drafter])


def replay_greedy(
    gamma: np.ndarray, runs: np.ndarray, selector: Selector, k: int, ctx: RequestContext | None = None
) -> ReplayResult:
    """Run ``selector`` over a request of T = len(gamma) generated tokens; returns its rounds exactly."""
    gamma = np.asarray(gamma, dtype=np.float64)
    runs = np.asarray(runs)
    if gamma.ndim != 2 or gamma.shape != runs.shape:
        raise ValueError(f"gamma and runs must both be [T, N]; got {gamma.shape} and {runs.shape}")
    total, n = gamma.shape
    selector.begin_request(n, k, ctx)
    res = ReplayResult(0, 0, np.zeros(total, dtype=np.int64))
    report = RoundReporter(selector)
    s = 0
    while s < total:
        d = selector.select()
        accepted = int(min(runs[s, d.drafter], k, total - s - 1))
        emitted = accepted + 1
        res.chosen_per_position[s : s + emitted] = d.drafter
        selector.observe(report.feedback(d, accepted, emitted, s, gamma[s : s + emitted]))
        res.evaluated += int(d.evaluate)
        res.rounds += 1
        res.accepted.append(accepted)
        res.chosen.append(d.drafter)
        res.weights.append(d.weights)
        s += emitted
    selector.end_request()
    res.generated = total
    return res


def best_fixed_mat(runs: np.ndarray, k: int) -> tuple[int, np.ndarray]:
    """MAT of every fixed drafter on the request and the best one (the per-request oracle)."""
    runs = np.asarray(runs)
    total, n = runs.shape
    mats = np.zeros(n)
    for i in range(n):
        s, rounds = 0, 0
        while s < total:
            s += int(min(runs[s, i], k, total - s - 1)) + 1
            rounds += 1
        mats[i] = total / rounds
    return int(np.argmax(mats)), mats
