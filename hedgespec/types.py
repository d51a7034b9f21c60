"""Frozen value types shared by selectors, the simulator, the reference engine and the SGLang worker.

Torch-free on purpose (layer L0): the SGLang worker and the engine convert their tensors to numpy before
building a :class:`RoundFeedback`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Decision:
    """What a selector chose for one verification round.

    Attributes:
        drafter: index of the drafter that drafts this round.
        weights: the distribution over drafters that made the decision (None for deterministic rules
            with no distribution, e.g. ``Fixed``).
        ticket: opaque handle the selector uses to route this round's delayed feedback (BOLD).
        evaluate: whether the selector wants every drafter's γ for this round (full-information feedback).
            False (label-efficient HedgeSpec): the runner may skip the pool evaluation and send
            ``RoundFeedback.gamma=None``; the selector then learns nothing from the round but its outcome.
    """

    drafter: int
    weights: tuple[float, ...] | None = None
    ticket: int = 0
    evaluate: bool = True


@dataclass(frozen=True)
class BanditFeedback:
    """The only feedback a bandit selector may read: the chosen drafter's own outcome.

    Attributes:
        chosen: the drafter that drafted.
        accepted: accepted draft tokens this round (0..K).
        emitted: tokens emitted this round (accepted + 1, fewer only when the request ends mid-round).
        chosen_gamma: the chosen drafter's own γ at the emitted positions (MetaSD's 1 − TV reward);
            never the other drafters' values.
    """

    chosen: int
    accepted: int
    emitted: int
    chosen_gamma: tuple[float, ...] = ()

    @property
    def reward(self) -> float:
        """BanditSpec reward Y = accepted drafts + 1 ∈ [1, K+1]."""
        return float(self.accepted + 1)


@dataclass(frozen=True)
class LateGamma:
    """γ of an earlier round whose pool evaluation was skipped, delivered once every drafter has caught up.

    Attributes:
        start: the earlier round's first emitted position (its ``RoundFeedback.start``).
        gamma: γ[u, i] for that round's emitted positions and every drafter, shape [emitted, N]; the values a
            full evaluation of that round would have given (the lagging drafters' catch-up pass computes them).
    """

    start: int
    gamma: np.ndarray


@dataclass(frozen=True)
class RoundFeedback:
    """Full-information feedback after one verification round.

    Attributes:
        decision: the decision that produced this round.
        accepted: accepted draft tokens (0..K).
        emitted: tokens emitted (accepted + 1, fewer when the request ended inside the round).
        start: absolute generated-token position of the first emitted token (0-based).
        gamma: γ[u, i] for the ``emitted`` positions u of this round and every drafter i, shape
            [emitted, N]; None when the backend only observed the chosen drafter (e.g. a round whose
            ``decision.evaluate`` was False).
        timings: optional wall times in seconds, e.g. ``{"draft": .., "verify": .., "evaluate": ..}``.
        own_gamma: the chosen drafter's γ at the emitted positions, shape [emitted], when ``gamma`` is None (the
            pool was not evaluated but the chosen head was extended over the round's rows); what
            :meth:`bandit_view` hands MetaSD-UCB on such rounds.
        late: the γ of earlier skipped rounds, oldest first, for a selector that asks for them
            (``late_feedback = True``); a runner delivers them with the next evaluated round.
    """

    decision: Decision
    accepted: int
    emitted: int
    start: int
    gamma: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)
    own_gamma: np.ndarray | None = None
    late: tuple[LateGamma, ...] = ()

    @property
    def chosen(self) -> int:
        return self.decision.drafter

    def bandit_view(self) -> BanditFeedback:
        """Strip everything but the chosen drafter's outcome (what bandit selectors are allowed to see)."""
        own: tuple[float, ...] = ()
        if self.gamma is not None:
            own = tuple(float(x) for x in np.asarray(self.gamma)[:, self.chosen])
        elif self.own_gamma is not None:
            own = tuple(float(x) for x in np.asarray(self.own_gamma))
        return BanditFeedback(self.chosen, int(self.accepted), int(self.emitted), own)


@dataclass(frozen=True)
class RequestContext:
    """Per-request side information a selector may use at ``begin_request``.

    Attributes:
        request_id: stable id (used to seed per-request RNG streams reproducibly).
        prompt: the prompt text (the Router baseline classifies it).
        domain: the workload's label for the request (for reports only; no selector reads it).
        best_drafter: the best fixed drafter in hindsight, known only to offline runners (Oracle).
    """

    request_id: int | str = 0
    prompt: str | None = None
    domain: str | None = None
    best_drafter: int | None = None


@dataclass
class RequestStats:
    """Per-request statistics returned by the engine and the simulator."""

    rounds: int = 0
    generated: int = 0
    accepted_per_round: list[int] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    selector_state: dict[str, Any] = field(default_factory=dict)

    @property
    def mat(self) -> float:
        """Mean accepted tokens per verification round, bonus token included (the paper's MAT)."""
        return self.generated / self.rounds if self.rounds else 0.0

    def histogram(self, n_drafters: int) -> list[int]:
        h = [0] * n_drafters
        for c in self.chosen:
            h[c] += 1
        return h
