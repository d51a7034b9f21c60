"""The HEDGESPEC worker's per-request state registry: freed at finish and at abort, not after an hour.

``hedgespec.serving.states.RequestStates`` is what ``HedgeSpecWorker`` keeps its selectors in; the requests here
mimic SGLang's ``Req`` (``rid``, ``finished()`` true once ``finished_reason`` is set, for an abort too).
"""

from __future__ import annotations

import pytest

from hedgespec.selectors import make_selector
from hedgespec.serving.states import RequestStates
from hedgespec.types import RequestContext


class Req:
    def __init__(self, rid: str) -> None:
        self.rid, self.finished_reason = rid, None

    def finished(self) -> bool:
        return self.finished_reason is not None


def _registry(freed: list[str], stale_after_s: float = 3600.0) -> RequestStates:
    return RequestStates(lambda st: freed.append(st), stale_after_s)


def test_finish_hook_prefill_finish_and_abort_all_free_the_state():
    freed: list[str] = []
    states = _registry(freed)
    reqs = {rid: Req(rid) for rid in ("decoded", "one-token", "aborted", "running")}
    for r in reqs.values():
        assert states.get(r, lambda r=r: r.rid, now=0.0) == r.rid
    assert states.get(reqs["running"], lambda: "other", now=1.0) == "running"  # created once, then looked up

    assert states.free("decoded") and not states.free("decoded")  # SGLang's note_request_finished
    reqs["one-token"].finished_reason = "length"  # finished in prefill: SGLang never calls the hook
    reqs["aborted"].finished_reason = "abort"  # client abort / disconnect sets a finish reason too
    assert sorted(states.sweep(now=2.0)) == ["aborted", "one-token"]
    assert freed == ["decoded", "one-token", "aborted"] and len(states) == 1 and "running" in states
    assert states.sweep(now=3.0) == []  # nothing freed twice


def test_stale_backstop_and_memory_stays_flat_over_many_requests():
    freed: list[str] = []
    states = _registry(freed, stale_after_s=10.0)
    lost = Req("lost")
    states.get(lost, lambda: "lost", now=0.0)
    for i in range(2000):
        r = Req(f"r{i}")
        states.get(r, lambda r=r: r.rid, now=1.0 + i * 1e-3)
        r.finished_reason = "stop"
        if i % 2:
            states.free(r.rid)
        else:
            states.sweep(now=1.0 + i * 1e-3)
        assert len(states) <= 2
    assert states.sweep(now=5.0) == [] and "lost" in states  # not finished, seen 5 s ago: kept
    assert states.sweep(now=10.5) == ["lost"] and len(states) == 0
    assert len(freed) == 2001 and len(set(freed)) == 2001


def test_selectors_are_ended_exactly_once():
    ended: list[str] = []
    states = RequestStates(lambda sel: (sel.end_request(), ended.append(sel.ctx_id)))

    def selector(rid: str):
        sel = make_selector("hedgespec")
        sel.begin_request(3, 3, RequestContext(request_id=rid))
        sel.ctx_id = rid
        return sel

    a, b = Req("a"), Req("b")
    states.get(a, lambda: selector("a"))
    states.get(b, lambda: selector("b")).select()
    a.finished_reason = "abort"
    states.sweep()
    states.free("b")
    states.free("a")
    assert ended == ["a", "b"] and len(states) == 0


def test_bad_stale_timeout_is_refused():
    with pytest.raises(ValueError, match="stale_after_s must be > 0"):
        RequestStates(lambda st: None, 0)
