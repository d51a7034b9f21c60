"""Per-request state of the HEDGESPEC worker, freed when SGLang is done with the request (no torch, no sglang).

SGLang 0.5.23 tells a speculative worker that a request finished (``note_request_finished``) only from the
decode-result path; a request that finishes in its prefill (one new token, a stop token first, an abort or a
client disconnect during prefill) never reaches it. :class:`RequestStates` therefore also keeps each state's
``Req`` object and, at every forward, frees the states of requests whose ``finished()`` is true (finished or
aborted: SGLang sets a finish reason for both). ``stale_after_s`` remains as a backstop for a request that
vanished without a finish reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class _Entry:
    state: Any
    req: Any
    last_seen: float


class RequestStates:
    """``rid -> state`` with ``on_free(state)`` called exactly once per freed state."""

    def __init__(self, on_free: Callable[[Any], None], stale_after_s: float = 3600.0) -> None:
        if not stale_after_s > 0:
            raise ValueError(f"stale_after_s must be > 0, got {stale_after_s!r}")
        self._on_free, self._stale_after_s = on_free, float(stale_after_s)
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, rid: object) -> bool:
        return rid in self._entries

    def get(self, req: Any, create: Callable[[], Any], now: float | None = None) -> Any:
        """The state of ``req`` (keyed by ``req.rid``), created on first sight."""
        now = time.monotonic() if now is None else now
        entry = self._entries.get(req.rid)
        if entry is None:
            entry = self._entries[req.rid] = _Entry(create(), req, now)
        entry.req, entry.last_seen = req, now
        return entry.state

    def free(self, rid: str) -> bool:
        """Free one request's state (SGLang's finish hook); False when it had none."""
        entry = self._entries.pop(rid, None)
        if entry is None:
            return False
        self._on_free(entry.state)
        return True

    def sweep(self, now: float | None = None) -> list[str]:
        """Free every state whose request has finished (or aborted), or was not seen for ``stale_after_s``."""
        now = time.monotonic() if now is None else now
        cutoff = now - self._stale_after_s
        gone = [rid for rid, e in self._entries.items() if _finished(e.req) or e.last_seen < cutoff]
        for rid in gone:
            self.free(rid)
        return gone


def _finished(req: Any) -> bool:
    finished = getattr(req, "finished", None)
    return bool(finished()) if callable(finished) else False
