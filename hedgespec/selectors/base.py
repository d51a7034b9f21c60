"""The one selector protocol every drafter-selection policy implements.

A selector is per-stream state with a per-request life cycle::

    sel.begin_request(n_drafters, k, ctx)      # resets per-request state (guarantees are per query)
    while decoding:
        d = sel.select()                       # Decision: drafter index + the weights that made it
        ...draft with d.drafter, verify, evaluate γ...
        sel.observe(RoundFeedback(decision=d, ...))
    sel.end_request()                          # flushes delayed feedback (tail policy)

Full-information selectors (``full_information = True``) read ``RoundFeedback.gamma``. Bandit selectors
derive from :class:`BanditSelector`, whose ``observe`` is final and hands the subclass only a
:class:`~hedgespec.types.BanditFeedback` (the chosen drafter's outcome): they cannot reach the γ matrix.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from hedgespec.types import BanditFeedback, Decision, RequestContext, RoundFeedback


@runtime_checkable
class Selector(Protocol):
    name: str
    full_information: bool

    def begin_request(self, n_drafters: int, k: int, ctx: RequestContext | None = None) -> None: ...

    def select(self) -> Decision: ...

    def observe(self, feedback: RoundFeedback) -> None: ...

    def end_request(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...


def check_evaluate(owner: str, evaluate: Any) -> bool:
    """The ``evaluate`` option of a selector that reads no γ (False: the runner may skip the pool evaluation)."""
    if not isinstance(evaluate, bool):
        raise ValueError(f"{owner}: evaluate must be true or false, got {evaluate!r}")
    return evaluate


def check_request_args(n_drafters: int, k: int) -> None:
    if not isinstance(n_drafters, int) or n_drafters < 1:
        raise ValueError(f"n_drafters must be a positive int (an empty pool cannot draft), got {n_drafters!r}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"K (speculation depth) must be an int >= 1, got {k!r}")


class BaseSelector(ABC):
    """Shared bookkeeping: pool size, depth, request context, round counter, and the ``evaluate`` option.

    ``evaluate`` is for selectors that read no other drafter's γ (fixed, oracle, router, bandits): ``False`` runs
    them at their deployed cost, since :meth:`decide` then lets the runner skip the pool evaluation; ``True``
    keeps every drafter's γ so a bench can report the run's ETAP regret. HedgeSpec decides per round itself.
    """

    name: str = "base"
    full_information: bool = False
    #: only a selector that declares it (the Oracle baseline) sees ``RequestContext.best_drafter``, the best fixed
    #: drafter in hindsight; every other selector gets the context without it, whatever the runner passes
    uses_hindsight: bool = False
    #: the runner should deliver the γ of rounds whose evaluation was skipped with the next evaluated round
    #: (``RoundFeedback.late``; HedgeSpec with ``late=True``)
    late_feedback: bool = False

    def __init__(self, evaluate: bool = True) -> None:
        self.n = 0
        self.k = 0
        self.ctx = RequestContext()
        self.rounds = 0
        self.evaluate = check_evaluate(type(self).__name__, evaluate)

    def decide(self, drafter: int, weights: tuple[float, ...] | None = None) -> Decision:
        """The round's decision, carrying this selector's ``evaluate`` option."""
        return Decision(drafter, weights, evaluate=self.evaluate)

    def begin_request(self, n_drafters: int, k: int, ctx: RequestContext | None = None) -> None:
        check_request_args(n_drafters, k)
        ctx = ctx or RequestContext()
        if not self.uses_hindsight and ctx.best_drafter is not None:
            ctx = replace(ctx, best_drafter=None)
        self.n, self.k, self.ctx, self.rounds = n_drafters, k, ctx, 0
        self._reset()

    @abstractmethod
    def _reset(self) -> None: ...

    @abstractmethod
    def select(self) -> Decision: ...

    def observe(self, feedback: RoundFeedback) -> None:
        self.rounds += 1
        self._observe(feedback)

    def _observe(self, feedback: RoundFeedback) -> None:  # pragma: no cover - default: ignore
        return None

    def end_request(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rounds": self.rounds}


class BanditSelector(BaseSelector):
    """Base for bandit-feedback baselines: subclasses implement ``_observe_bandit`` only."""

    #: a bandit reads only the chosen drafter's outcome, so ``evaluate=False`` is its deployed cost (the runner
    #: still extends the chosen head, so its γ reaches MetaSD)
    full_information = False

    def observe(self, feedback: RoundFeedback) -> None:  # final: strips γ before the policy sees it
        self.rounds += 1
        self._observe_bandit(feedback.bandit_view())

    def _observe(self, feedback: RoundFeedback) -> None:  # never called for bandits
        raise AssertionError("bandit selectors only receive BanditFeedback")

    @abstractmethod
    def _observe_bandit(self, feedback: BanditFeedback) -> None: ...
