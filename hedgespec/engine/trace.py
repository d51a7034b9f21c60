"""Versioned JSONL traces of engine requests (enough to replay any selector exactly under greedy decoding).

One file holds one or more requests; each request is a block of lines::

    {"type": "header", "format": "hedgespec.engine.trace", "version": 1, "request_id": .., "mode": "chain",
     "k": K, "topk": .., "num_draft_tokens": .., "n_drafters": N, "drafters": [...], "temperature": 0.0,
     "full_counterfactual": true, ...}
    {"type": "position", "u": u, "token": g_u, "gamma": [γ[u, i] for i], "runs": [runs[u, i] for i] | null}
    ...                                   (one line per generated position u = 0..T-1, round-emitted tokens)
    {"type": "round", "r": r, "start": s, "chosen": i, "accepted": a, "emitted": e, "weights": [...] | null,
     "timings": {"draft": .., "verify": .., "evaluate": .., "update": ..}}
    ...
    {"type": "summary", "rounds": R, "generated": T, "mat": T/R, "histogram": [...], "dropped": [names]}

``gamma[u, i]`` is drafter i's counterfactual γ at position u (selector-independent under greedy decoding:
the emitted trajectory is the target's argmax path whoever drafts). ``runs[u, i]`` is drafter i's realised
number of accepted drafts for a round whose first emitted token is u (recorded when
``full_counterfactual`` is on: every drafter drafts from every position); a replay caps it at
min(K, T − u − 1), the engine's own end-of-request rule. Position 0 is the first token emitted by a
verification round; the token the prefill produces is recorded in the header (``prefill_token``).

Header keys ``mode``, ``k``, ``topk``, ``num_draft_tokens`` are the engine's
:class:`~hedgespec.decoding.DecodingConfig` (``k`` = ``num_steps``); ``temperature``, ``top_p``, ``top_k``,
``seed`` its :class:`~hedgespec.decoding.SamplingParams`. The engine builds a trace one round at a time with
:class:`hedgespec.engine.records.RequestLog`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from hedgespec.io import write_text_atomic

TRACE_FORMAT = "hedgespec.engine.trace"
TRACE_VERSION = 1


@dataclass
class RequestTrace:
    """In-memory trace of one request (what one header…summary block holds)."""

    header: dict[str, Any]
    tokens: list[int] = field(default_factory=list)
    gamma: list[list[float]] = field(default_factory=list)
    runs: list[list[int]] | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [
            {"type": "header", "format": TRACE_FORMAT, "version": TRACE_VERSION, **self.header}
        ]
        for u, (tok, g) in enumerate(zip(self.tokens, self.gamma)):
            runs = None if self.runs is None else self.runs[u]
            out.append({"type": "position", "u": u, "token": tok, "gamma": g, "runs": runs})
        out.extend({"type": "round", **r} for r in self.rounds)
        out.append({"type": "summary", **self.summary})
        return out


def write_traces(path: str | os.PathLike[str], traces: list[RequestTrace], append: bool = False) -> None:
    """Write (or append) request traces as JSONL; a fresh file is written to a temp path, then renamed."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for t in traces for line in t.lines())
    if append and os.path.exists(path):
        with open(path, "a") as fh:
            fh.write(text)
        return
    write_text_atomic(text, path)


def read_traces(path: str | os.PathLike[str]) -> list[RequestTrace]:
    """Parse a trace file; raises ``ValueError`` on an unknown format or version."""
    traces: list[RequestTrace] = []
    cur: RequestTrace | None = None
    with open(path) as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            line = json.loads(raw)
            kind = line.pop("type", None)
            if kind == "header":
                if line.pop("format", None) != TRACE_FORMAT or line.pop("version", None) != TRACE_VERSION:
                    raise ValueError(f"{path}:{n}: not a {TRACE_FORMAT} v{TRACE_VERSION} trace header")
                cur = RequestTrace(header=line)
                traces.append(cur)
            elif cur is None:
                raise ValueError(f"{path}:{n}: {kind!r} line before any header")
            elif kind == "position":
                cur.tokens.append(int(line["token"]))
                cur.gamma.append([float(x) for x in line["gamma"]])
                if line.get("runs") is not None:
                    cur.runs = (cur.runs or []) + [[int(x) for x in line["runs"]]]
            elif kind == "round":
                cur.rounds.append(line)
            elif kind == "summary":
                cur.summary = line
            else:
                raise ValueError(f"{path}:{n}: unknown line type {kind!r}")
    return traces
