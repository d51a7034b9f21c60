"""Replay environment over recorded engine traces (``hedgespec.engine.trace`` JSONL, greedy decoding).

Under greedy decoding the emitted trajectory is the target's argmax path whatever drafts, so a trace's
per-position table — γ[u, i] and drafter i's realised accepted drafts ``runs[u, i]`` from a round start at
u — determines any selector's rounds exactly (:func:`hedgespec.sim.greedy.replay_greedy`, which applies the
engine's own end-of-request rule ``accepted = min(runs, K, T − u − 1)``). ``runs`` is exact only for traces
recorded with ``full_counterfactual=true``; otherwise it is reconstructed from the depth-1 greedy γ
(run lengths of γ = 1), which is optimistic for deep draft levels (the paper's "time-inhomogeneity", appendix B.4) and
reported as ``exact=False``.

Torch-free on purpose (layer L2 over L0/L1): it reads JSON, never the engine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from hedgespec.selectors.base import Selector
from hedgespec.sim.greedy import ReplayResult, replay_greedy, run_lengths
from hedgespec.types import RequestContext

TRACE_FORMAT = "hedgespec.engine.trace"
TRACE_VERSION = 1


@dataclass
class TracedRequest:
    """One request of a trace: its header, γ [T, N], runs [T, N] and the live run's summary."""

    header: dict[str, Any]
    gamma: np.ndarray
    runs: np.ndarray
    exact: bool
    live_rounds: list[dict[str, Any]]
    summary: dict[str, Any]

    @property
    def k(self) -> int:
        return int(self.header["k"])

    @property
    def live_mat(self) -> float:
        return float(self.summary.get("mat", 0.0))

    def context(self, best_drafter: int | None = None) -> RequestContext:
        return RequestContext(request_id=self.header.get("request_id", 0), best_drafter=best_drafter)


def load_trace(path: str | os.PathLike[str]) -> list[TracedRequest]:
    """Read every request of a JSONL trace; ``ValueError`` for another format/version or sampled traces."""
    out: list[TracedRequest] = []
    blocks: list[dict[str, Any]] = []
    with open(path) as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            line = json.loads(raw)
            kind = line.get("type")
            if kind == "header":
                if line.get("format") != TRACE_FORMAT or line.get("version") != TRACE_VERSION:
                    raise ValueError(f"{path}:{n}: not a {TRACE_FORMAT} v{TRACE_VERSION} trace")
                blocks.append({"header": line, "gamma": [], "runs": [], "rounds": [], "summary": {}})
            elif not blocks:
                raise ValueError(f"{path}:{n}: {kind!r} line before any header")
            elif kind == "position":
                blocks[-1]["gamma"].append(line["gamma"])
                blocks[-1]["runs"].append(line.get("runs"))
            elif kind == "round":
                blocks[-1]["rounds"].append(line)
            elif kind == "summary":
                blocks[-1]["summary"] = line
    for b in blocks:
        h = b["header"]
        if float(h.get("temperature", 0.0)) > 0:
            raise ValueError(
                f"{path}: request {h.get('request_id')!r} was sampled (temperature > 0); replay needs greedy traces"
            )
        gamma = np.asarray(b["gamma"], dtype=np.float64).reshape(-1, int(h["n_drafters"]))
        exact = bool(b["runs"]) and all(r is not None for r in b["runs"])
        runs = np.asarray(b["runs"], dtype=np.int64) if exact else run_lengths(gamma >= 1.0)
        out.append(TracedRequest(h, gamma, runs.reshape(gamma.shape), exact, b["rounds"], b["summary"]))
    return out


def replay_request(req: TracedRequest, selector: Selector, ctx: RequestContext | None = None) -> ReplayResult:
    """Run ``selector`` over one traced request (same request id as live unless ``ctx`` is given)."""
    return replay_greedy(req.gamma, req.runs, selector, req.k, ctx or req.context())


def replay_trace(path: str | os.PathLike[str], selector: Selector) -> list[ReplayResult]:
    """Replay ``selector`` over every request of the trace at ``path``."""
    return [replay_request(r, selector) for r in load_trace(path)]
