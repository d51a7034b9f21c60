"""Typed records handed between the stages of one speculative round, and the request's ledger.

A round of :meth:`hedgespec.engine.generate.SpeculativeEngine.generate` is select → draft → verify →
evaluate → observe → advance; the stages pass each other these records (as SGLang's
``speculative/eagle_info.py`` passes ``EagleVerifyInput`` / ``EagleVerifyOutput``):

* :class:`SamplingState` — a request's :class:`~hedgespec.decoding.SamplingParams` and its one
  ``torch.Generator``; every random draw of the request (first token, chain drafts, verification) reads
  this stream, in that order.
* :class:`RootRow` — the next round's first draft step of the heads a pool pass ran, computed in that pass
  (the pending row appended to the rows it commits), so the chosen head drafts K tokens in K − 1 forwards.
* :class:`Draft` — what the chosen head proposed: chain tokens with their draft laws q, or a
  :class:`DraftTree`; neither when the head is (or just got) dropped.
* :class:`Verified` — the target's verdict on a draft: accepted count, bonus token, kept rows, logits.
* :class:`Evaluated` — what the round emits and every drafter's γ at the emitted positions (NaN for the heads
  a round without pool evaluation did not run: label-efficient HedgeSpec).

:class:`RoundClock` times the stages; :class:`RequestLog` turns rounds into the request's
:class:`~hedgespec.types.RequestStats` and :class:`~hedgespec.engine.trace.RequestTrace`, one call per round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hedgespec.decoding import SamplingParams
from hedgespec.engine.trace import RequestTrace
from hedgespec.engine.verify import sampling_probs
from hedgespec.types import Decision, LateGamma, RequestStats

STAGES = ("draft", "verify", "evaluate", "update")  # a round's timed stages, in order (``update`` = observe)


@dataclass
class SamplingState:
    """Per-request sampling: the settings and the random stream every sampling step draws from."""

    params: SamplingParams
    gen: torch.Generator

    @classmethod
    def start(cls, params: SamplingParams) -> SamplingState:
        """A fresh stream seeded with ``params.seed`` (None: seed 0, a fixed stream)."""
        return cls(params, torch.Generator().manual_seed(0 if params.seed is None else int(params.seed)))

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The processed target law(s) plain sampling draws from (temperature → top-k → top-p)."""
        return sampling_probs(logits, self.params)

    def pick(self, logits: torch.Tensor) -> int:
        """One token from ``logits`` [V]: argmax when greedy, else a draw from :meth:`probs`."""
        if self.greedy:
            return int(torch.argmax(logits))
        return int(torch.multinomial(self.probs(logits), 1, generator=self.gen))


@dataclass
class DraftTree:
    """Draft nodes in verification-row order (row 0 = root, rows 1..M = nodes)."""

    tokens: list[int]  # [M+1] target ids; tokens[0] = root token
    parents: list[int]  # [M+1] parent row; parents[0] = -1
    depth: list[int]  # [M+1] depth; depth[0] = 0

    @property
    def size(self) -> int:
        return len(self.tokens) - 1

    def children(self) -> list[list[int]]:
        ch: list[list[int]] = [[] for _ in self.tokens]
        for r in range(1, len(self.tokens)):
            ch[self.parents[r]].append(r)
        return ch

    def ancestor_mask(self) -> torch.Tensor:
        """[M+1, M+1] bool: row r may attend row c iff c is r or an ancestor of r."""
        m = len(self.tokens)
        mask = torch.eye(m, dtype=torch.bool)
        for r in range(1, m):
            mask[r] |= mask[self.parents[r]]
        return mask


@dataclass(frozen=True)
class RootRow:
    """Heads ``heads``' forward over the pending row (root ``token``, its target feature) at ``position``, run as
    the last row of the pool pass that committed the rows before it (as SGLang's draft-extend after a
    verification yields the first draft token). Nothing of it is committed: it is the first draft step of
    whichever of these heads drafts next, valid while the pool still has ``position`` committed rows."""

    position: int
    token: int
    heads: tuple[int, ...]
    logits: torch.Tensor  # [len(heads), 1, V_d] (padded draft ids at −inf, as DrafterPool.run returns them)
    out: torch.Tensor  # [len(heads), 1, H] pre-norm outputs (the next draft step's hidden input)
    k: torch.Tensor  # [len(heads), kv_heads, 1, d]
    v: torch.Tensor

    def step(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Head ``i``'s (logits, out, k, v), shaped as ``DrafterPool.run([i], ...)`` returns them."""
        j = self.heads.index(i)
        return self.logits[j : j + 1], self.out[j : j + 1], self.k[j : j + 1], self.v[j : j + 1]


@dataclass(frozen=True)
class Draft:
    """Head ``drafter``'s proposal: chain ``tokens`` with laws ``q`` [K, V], or a ``tree``; neither when dropped."""

    drafter: int
    tokens: list[int]
    q: torch.Tensor | None
    tree: DraftTree | None

    @classmethod
    def dropped(cls, drafter: int) -> Draft:
        """No drafts: the round verifies the root alone (plain decoding, still lossless)."""
        return cls(drafter, [], None, None)


@dataclass(frozen=True)
class Verified:
    """The verification forward over [root, drafts] and its verdict."""

    accepted: int  # a: drafts accepted
    bonus: int  # the bonus / correction token drawn from the target
    rows: list[int]  # kept verification rows: 0 (the root), then the accepted nodes' rows (a + 1 in all)
    path: list[int]  # the a accepted draft tokens
    logits: torch.Tensor  # [rows, V] target logits of every verified row
    feats: torch.Tensor  # [rows, F] captured target features of every verified row

    def next_root(self) -> tuple[int, torch.Tensor]:
        """The next round's root (the bonus token) and its pending feature (that of the last kept row)."""
        return self.bonus, self.feats[self.rows[self.accepted]]


@dataclass(frozen=True)
class Evaluated:
    """What a round emits (accepted drafts + bonus, cut at the budget and after EOS) and the pool's γ there."""

    tokens: list[int]
    accepted: int  # drafts among ``tokens``: min(a, emitted − 1)
    gamma: np.ndarray  # [emitted, N] every drafter's γ at the emitted positions (NaN where not evaluated)
    done: bool  # EOS was emitted
    counterfactual: list[Any]  # per emitted position: every head's draft from there (full_counterfactual only)
    evaluated: bool = True  # the pool was evaluated (False: only the chosen head ran over the rows)
    late: tuple[LateGamma, ...] = ()  # γ of earlier skipped rounds, complete after this round's pass (late feedback)

    @property
    def emitted(self) -> int:
        return len(self.tokens)

    @property
    def feedback(self) -> np.ndarray | None:
        """The γ matrix the selector gets: all of it after a pool evaluation, else None (chosen outcome only)."""
        return self.gamma if self.evaluated else None

    def own(self, chosen: int) -> np.ndarray | None:
        """The chosen head's γ column on a round without pool evaluation (None after one: it is in ``feedback``)."""
        return None if self.evaluated else self.gamma[:, chosen]


class RoundClock:
    """Wall-clock seconds of consecutive stages: :meth:`lap` closes the stage running since the last lap."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> dict[str, float]:
        """Record stage ``name``; returns a copy of the laps since :meth:`restart`."""
        now = time.perf_counter()
        self.laps[name] = now - self._t
        self._t = now
        return dict(self.laps)


class RequestLog:
    """A request's stats and trace, built one round at a time (:meth:`add_round`), closed by :meth:`finish`."""

    def __init__(self, header: dict[str, Any], max_new_tokens: int, prefill_s: float) -> None:
        self.trace = RequestTrace(header=header)
        self.stats = RequestStats()
        self.timings = {"prefill": prefill_s, **{k: 0.0 for k in STAGES}}
        self.budget = max_new_tokens - 1  # the prefill emitted the first token
        self.counterfactual: list[Any] = []

    @property
    def generated(self) -> int:
        """Round-emitted tokens so far (the next round's start position)."""
        return len(self.trace.tokens)

    @property
    def remaining(self) -> int:
        return self.budget - self.generated

    def add_round(self, decision: Decision, ev: Evaluated, laps: dict[str, float]) -> None:
        st, tr, chosen = self.stats, self.trace, int(decision.drafter)
        for key, val in laps.items():
            self.timings[key] += val
        weights = None if decision.weights is None else list(decision.weights)
        tr.rounds.append(
            {
                "r": st.rounds,
                "start": self.generated,
                "chosen": chosen,
                "accepted": ev.accepted,
                "emitted": ev.emitted,
                "weights": weights,
                "timings": laps,
                **({} if ev.evaluated else {"evaluated": False}),
            }
        )
        st.rounds += 1
        st.accepted_per_round.append(ev.accepted)
        st.chosen.append(chosen)
        tr.tokens.extend(ev.tokens)
        tr.gamma.extend(ev.gamma.tolist())
        self.counterfactual.extend(ev.counterfactual)

    def finish(
        self, selector_state: dict[str, Any], n_drafters: int, dropped: list[str], runs: list[list[int]] | None
    ) -> RequestStats:
        """Close the request: final stats, the trace's counterfactual ``runs`` (or None) and its summary."""
        st = self.stats
        st.generated, st.timings, st.selector_state = self.generated, self.timings, selector_state
        self.trace.runs = runs
        self.trace.summary = {
            "rounds": st.rounds,
            "generated": st.generated,
            "mat": st.mat,
            "histogram": st.histogram(n_drafters),
            "dropped": dropped,
        }
        return st
