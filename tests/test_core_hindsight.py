"""Only the oracle sees the best fixed drafter in hindsight (`RequestContext.best_drafter`)."""

from __future__ import annotations

import numpy as np
import pytest

from hedgespec.selectors import SELECTORS, make_selector
from hedgespec.types import RequestContext, RoundFeedback

LEARNERS = sorted(n for n in SELECTORS if n not in ("oracle", "router"))


def _decisions(name: str, best: int | None, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    sel = make_selector(name)
    sel.begin_request(5, 3, RequestContext(request_id=7, best_drafter=best))
    assert sel.ctx.best_drafter is None
    out, s = [], 0
    for _ in range(40):
        dec = sel.select()
        out.append(int(dec.drafter))
        gamma = rng.uniform(size=(4, 5))
        accepted = int(rng.integers(0, 4))
        sel.observe(RoundFeedback(dec, accepted, accepted + 1, s, gamma[: accepted + 1]))
        s += accepted + 1
    sel.end_request()
    return out


@pytest.mark.parametrize("name", LEARNERS)
def test_learning_selectors_never_see_the_oracle_answer(name):
    assert _decisions(name, best=None) == _decisions(name, best=4)


def test_the_oracle_does():
    sel = make_selector("oracle")
    sel.begin_request(5, 3, RequestContext(best_drafter=4))
    assert sel.ctx.best_drafter == 4 and sel.select().drafter == 4
