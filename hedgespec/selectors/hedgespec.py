"""HedgeSpec: full-information drafter selection with a no-regret learner under delayed feedback.

Per request (the paper's regret guarantees are per query): a base learner (NormalHedge by default) over the N
drafters, wrapped in a delayed-feedback reduction (FIFO queue by default, or BOLD); each round the
drafter is the argmax (or a sample) of the current weights; after verification the γ matrix of the
emitted positions goes into the :class:`~hedgespec.feedback.FeedbackLedger`, which releases ETAP/EAL loss
vectors as their windows complete (never on a censored window).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hedgespec.feedback import OBJECTIVES, TAIL_POLICIES, FeedbackLedger
from hedgespec.learners import LEARNERS, Bold, Queued, make_learner
from hedgespec.selectors._rng import argmax_random_ties, request_rng
from hedgespec.selectors.base import BaseSelector
from hedgespec.types import Decision, RoundFeedback

DELAYS = ("queue", "bold")
CHOICES = ("argmax", "sample")


class HedgeSpec(BaseSelector):
    name = "hedgespec"
    full_information = True

    def __init__(
        self,
        objective: str = "etap",
        learner: str = "normal_hedge",
        delay: str = "queue",
        choice: str = "argmax",
        tail_policy: str = "drop",
        seed: int = 0,
    ) -> None:
        super().__init__()
        for val, allowed, what in (
            (objective, OBJECTIVES, "objective"),
            (learner, tuple(LEARNERS), "learner"),
            (delay, DELAYS, "delay"),
            (choice, CHOICES, "choice"),
            (tail_policy, TAIL_POLICIES, "tail_policy"),
        ):
            if val not in allowed:
                raise ValueError(f"HedgeSpec {what} must be one of {list(allowed)}, got {val!r}")
        self.objective, self.learner_name, self.delay, self.choice = objective, learner, delay, choice
        self.tail_policy, self.seed = tail_policy, seed
        self.name = "hedgespec" if objective == "etap" else "hedgespec_eal"

    def _reset(self) -> None:
        self.rng = request_rng(self.seed, self.ctx.request_id)
        self.ledger = FeedbackLedger(self.n, self.k, self.objective, self.tail_policy)
        if self.delay == "queue":
            self.reduction: Queued | Bold = Queued(make_learner(self.learner_name, self.n))
        else:
            # A round's losses complete at most K positions (≤ K rounds) after it, so K+1 outstanding
            # predictions suffice; 2K+1 (a loss completes at most 2K positions after its decision) is the
            # safe bound.
            self.reduction = Bold(lambda: make_learner(self.learner_name, self.n), 2 * self.k + 1)
        self._weights_of: dict[int, np.ndarray] = {}
        self._remaining: dict[int, int] = {}

    def select(self) -> Decision:
        ticket, w = self.reduction.predict()
        w = np.array(w, copy=True)
        self._weights_of[ticket] = w
        i = argmax_random_ties(w, self.rng) if self.choice == "argmax" else int(self.rng.choice(self.n, p=w))
        return Decision(i, tuple(float(x) for x in w), ticket)

    def _observe(self, fb: RoundFeedback) -> None:
        if fb.gamma is None:
            raise ValueError("HedgeSpec needs full-information feedback: RoundFeedback.gamma is None")
        ticket = fb.decision.ticket
        self._remaining[ticket] = self._remaining.get(ticket, 0) + int(np.asarray(fb.gamma).shape[0])
        self._apply(self.ledger.add_round(fb.start, fb.gamma, ticket))

    def _apply(self, completed) -> None:  # type: ignore[no-untyped-def]
        for c in completed:
            self.reduction.feedback(c.ticket, c.loss, self._weights_of[c.ticket])
            self._remaining[c.ticket] -= 1
            if self._remaining[c.ticket] == 0:
                self.reduction.release(c.ticket)
                del self._remaining[c.ticket], self._weights_of[c.ticket]

    def end_request(self) -> None:
        self._apply(self.ledger.finish())
        for t in list(self._remaining):  # dropped tail windows: nothing more will come for these
            self.reduction.release(t)
        self._remaining.clear()

    def weights(self) -> np.ndarray:
        return np.array(self.reduction.weights(), copy=True)

    def state_dict(self) -> dict[str, Any]:
        d = super().state_dict()
        d.update(objective=self.objective, learner=self.learner_name, delay=self.delay, choice=self.choice)
        if self.n:
            d["weights"] = [float(x) for x in self.weights()]
        return d
