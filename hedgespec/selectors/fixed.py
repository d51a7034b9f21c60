"""Non-learning baselines: a fixed drafter (e.g. the EAGLE-3 generalist) and the per-request oracle."""

from __future__ import annotations

from typing import Any

from hedgespec.selectors.base import BaseSelector
from hedgespec.types import Decision


class Fixed(BaseSelector):
    """Always drafter ``index`` (the Fixed(i) baseline, incl. the generalist EAGLE-3 drafter).

    ``evaluate=False`` runs it as deployed: it learns nothing, so the runner extends only its own head and skips
    the pool evaluation (stock EAGLE-3's cost per round); the default ``True`` keeps every drafter's γ so a bench
    can report the run's ETAP regret.
    """

    name = "fixed"

    def __init__(self, index: int = 0, evaluate: bool = True) -> None:
        super().__init__(evaluate)
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"Fixed: index must be an int >= 0, got {index!r}")
        self.index = index

    def _reset(self) -> None:
        if self.index >= self.n:
            raise ValueError(f"Fixed: drafter index {self.index} is out of range for a pool of {self.n} drafters")

    def select(self) -> Decision:
        return self.decide(self.index)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "index": self.index, "evaluate": self.evaluate}


class Oracle(BaseSelector):
    """Best fixed drafter in hindsight per request (the paper's Oracle baseline).

    The runner must supply it: offline runners compute it from a full trace (or from every Fixed(i) run)
    and pass ``RequestContext.best_drafter``. ``evaluate=False``: as Fixed, only its own head is extended.
    """

    name = "oracle"
    uses_hindsight = True

    def __init__(self, evaluate: bool = True) -> None:
        super().__init__(evaluate)

    def _reset(self) -> None:
        best = self.ctx.best_drafter
        if best is None:
            raise ValueError(
                "Oracle needs RequestContext.best_drafter (the best fixed drafter in hindsight); "
                "only offline runners with a full trace can provide it"
            )
        if not 0 <= best < self.n:
            raise ValueError(f"Oracle: best_drafter={best} is out of range for a pool of {self.n} drafters")
        self.index = int(best)

    def select(self) -> Decision:
        return self.decide(self.index)
