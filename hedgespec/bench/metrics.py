"""Benchmark metrics (the paper's MAT, throughput, regret and overhead), per request and aggregated, and the
result-JSON schema.

Per request (``request_metrics``):

* ``mat``: tokens emitted by verification rounds / rounds (accepted drafts + bonus).
* ``tokens_per_s``: generated tokens / wall time of the whole request (prefill included), batch 1.
* ``target_forwards_per_token``: (1 prefill + rounds) / (1 + generated): target calls per output token,
  1.0 for plain autoregressive decoding, ≈ 1/MAT for long requests.
* ``regret`` / ``avg_regret``: Σ_t f_t[i_t] − min_i Σ_t f_t[i] with the ETAP loss f = 1 − γ on the request's own
  trajectory (:func:`hedgespec.sim.runner.regret_curve`), total and per token; ``best_drafter`` is that i.
* ``selection_overhead``: (evaluate + update) / (draft + verify + evaluate + update) time, i.e. the share of
  round time spent on the counterfactual evaluation of the pool and the learner update; also as ratios to
  one target forward (``evaluate_x_verify``, ``update_x_verify``).
* ``oracle_drafter`` / ``oracle_mat`` / ``fixed_mats``: best fixed drafter in hindsight by MAT and every
  fixed drafter's MAT on the request (when the runner computed them).
* ``mat_regret`` / ``accepted_regret``: regret in the quantity the bandits optimise, accepted tokens
  (:func:`mat_regret_fields`): the best fixed drafter's MAT on the request minus the selector's MAT, and that gap
  times the request's rounds (the tokens the best fixed drafter would have accepted more over as many rounds).
  Measured when ``fixed_mats`` is known (``oracle_probe=true``, or borrowed from an oracle run on the same greedy
  requests by :func:`hedgespec.bench.tables.with_fixed_mats`); the ETAP ``regret`` is the second measure.
* ``dropped``: names of the drafters dropped for the request because they failed (raised, or gave non-finite
  values; :meth:`hedgespec.engine.pool.DrafterPool.drop`), engine backend; aggregated as ``dropped``
  {name: requests in which it was dropped} (``{}`` when none failed, ``None`` when no request recorded it).
* ``plain_generated`` / ``plain_wall_s`` / ``matches_plain``: plain decoding of the same request with the target
  alone, right after it (``plain_baseline``); aggregated as ``plain_tokens_per_s`` and ``speedup_vs_plain``
  (tokens/s over plain tokens/s, side by side in one run) and ``plain_match_rate`` (greedy outputs equal).

Aggregates pool tokens and rounds over requests (``mat`` = Σ generated / Σ rounds) and also report
per-request means (``mat_regret`` is the per-request mean, ``accepted_regret`` the total over requests).
Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hedgespec.sim.runner import regret_curve

RESULT_FORMAT = "hedgespec.bench.result"
RESULT_VERSION = 1

ROUND_KEYS = ("draft", "verify", "evaluate", "update")


def chosen_per_position(rounds: Sequence[Mapping[str, Any]], total: int) -> np.ndarray:
    """Drafter covering each generated position, from trace rounds (``start``, ``emitted``, ``chosen``)."""
    out = np.zeros(total, dtype=np.int64)
    for r in rounds:
        s, e = int(r["start"]), int(r["emitted"])
        out[s : s + e] = int(r["chosen"])
    return out


def regret_from_trace(gamma: Sequence[Sequence[float]], rounds: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, int]:
    """Cumulative ETAP regret curve [T] vs the best fixed drafter in hindsight, and that drafter."""
    g = np.asarray(gamma, dtype=np.float64)
    if g.size == 0:
        return np.zeros(0), 0
    curve = regret_curve(g, chosen_per_position(rounds, len(g)))
    best = int(np.argmin((1.0 - g).sum(axis=0)))
    return curve, best


def mat_regret_fields(mat: float, rounds: int, fixed_mats: Sequence[float] | None) -> dict[str, float | None]:
    """Regret in accepted tokens against the best fixed drafter in hindsight on one request.

    ``mat_regret`` = max_i MAT_i − MAT (MAT_i: drafter i alone on the same request), ``accepted_regret`` =
    ``rounds`` × that gap: the drafts the best fixed drafter would have had accepted more over the selector's
    rounds. Negative when the selector beat every fixed drafter (possible: it may switch within the request).
    ``None`` without ``fixed_mats`` or rounds.
    """
    if not fixed_mats or not rounds:
        return {"mat_regret": None, "accepted_regret": None}
    gap = max(float(m) for m in fixed_mats) - float(mat)
    return {"mat_regret": gap, "accepted_regret": gap * int(rounds)}


def overhead(timings: Mapping[str, float]) -> dict[str, float | None]:
    """Selection overhead and the pool/learner costs as ratios to the verification (target forward) time."""
    rt = sum(float(timings.get(k, 0.0)) for k in ROUND_KEYS)
    ev, up, ver = (float(timings.get(k, 0.0)) for k in ("evaluate", "update", "verify"))
    return {
        "selection_overhead": (ev + up) / rt if rt > 0 else None,
        "evaluate_x_verify": ev / ver if ver > 0 else None,
        "update_x_verify": up / ver if ver > 0 else None,
    }


def _r(x: float, nd: int = 4) -> float:
    return float(round(float(x), nd))


def request_metrics(
    *,
    request_id: str,
    domain: str,
    generated: int,
    rounds: int,
    wall_s: float,
    histogram: Sequence[int],
    timings: Mapping[str, float] | None = None,
    gamma: Sequence[Sequence[float]] | None = None,
    trace_rounds: Sequence[Mapping[str, Any]] | None = None,
    accepted: Sequence[int] | None = None,
    chosen: Sequence[int] | None = None,
    weights: Sequence[Sequence[float] | None] | None = None,
    mat: float | None = None,
    save_rounds: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """One request's record (JSON-able). ``gamma``/``trace_rounds`` enable regret; ``save_rounds`` keeps curves."""
    timings = dict(timings or {})
    rec: dict[str, Any] = {
        "request_id": request_id,
        "domain": domain,
        "generated": int(generated),
        "rounds": int(rounds),
        "mat": float(mat) if mat is not None else (generated / rounds if rounds else 0.0),
        "wall_s": float(wall_s),
        "tokens_per_s": generated / wall_s if wall_s > 0 else None,
        "target_forwards": int(rounds) + 1,
        "target_forwards_per_token": (rounds + 1) / (generated + 1),
        "histogram": [int(h) for h in histogram],
        "timings": {k: float(v) for k, v in timings.items()},
        **overhead(timings),
        "regret": None,
        "avg_regret": None,
        "best_drafter": None,
    }
    # γ of drafters the selector did not evaluate (label-efficient rounds) is NaN: regret is then not measured
    if gamma is not None and trace_rounds is not None and len(gamma) and not np.isnan(np.asarray(gamma, float)).any():
        curve, best = regret_from_trace(gamma, trace_rounds)
        rec.update(regret=float(curve[-1]), avg_regret=float(curve[-1]) / len(curve), best_drafter=best)
        if save_rounds:
            rec["regret_curve"] = [_r(x) for x in curve]
    if save_rounds:
        rec["chosen"] = [int(c) for c in (chosen or [])]
        rec["accepted"] = [int(a) for a in (accepted or [])]
        rec["weights"] = (
            None
            if not weights or all(w is None for w in weights)
            else [None if w is None else [_r(x) for x in w] for w in weights]
        )
    rec.update(extra)
    rec.update(mat_regret_fields(rec["mat"], rec["rounds"], rec.get("fixed_mats")))
    return rec


def _mean(xs: Iterable[Any]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def plain_summary(records: Sequence[Mapping[str, Any]], tokens_per_s: float | None) -> dict[str, Any]:
    """Plain decoding measured on the same requests in the same run: its tokens/s, the ratio ``× plain`` of the
    run's tokens/s to it, and (greedy) the share of requests whose output equals plain decoding's."""
    plain = [r for r in records if r.get("plain_wall_s") is not None]
    if not plain:
        return {"plain_tokens_per_s": None, "speedup_vs_plain": None, "plain_match_rate": None}
    wall = sum(float(r["plain_wall_s"]) for r in plain)
    ptps = sum(int(r["plain_generated"]) for r in plain) / wall if wall > 0 else None
    matched = [bool(r["matches_plain"]) for r in plain if r.get("matches_plain") is not None]
    return {
        "plain_tokens_per_s": ptps,
        "speedup_vs_plain": tokens_per_s / ptps if tokens_per_s and ptps else None,
        "plain_match_rate": sum(matched) / len(matched) if matched else None,
    }


def regret_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``mat_regret`` (mean over the requests that have it), ``accepted_regret`` (their total) and how many."""
    with_mat = [r for r in records if r.get("mat_regret") is not None]
    return {
        "mat_regret": _mean(r["mat_regret"] for r in with_mat),
        "accepted_regret": float(sum(float(r["accepted_regret"]) for r in with_mat)) if with_mat else None,
        "n_mat_regret": len(with_mat),
    }


def dropped_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    """{drafter: number of requests in which it was dropped}; ``None`` when no record has ``dropped``."""
    seen = [r["dropped"] for r in records if r.get("dropped") is not None]
    if not seen:
        return None
    out: dict[str, int] = {}
    for names in seen:
        for name in names:
            out[str(name)] = out.get(str(name), 0) + 1
    return dict(sorted(out.items()))


def evaluated_share(records: Sequence[Mapping[str, Any]]) -> float | None:
    """Share of the rounds whose pool evaluation ran (``evaluated_rounds`` of the engine's records); ``None``
    when the records do not say (the server backend, results from before the field)."""
    seen = [r for r in records if r.get("evaluated_rounds") is not None]
    rounds = sum(int(r["rounds"]) for r in seen)
    return sum(int(r["evaluated_rounds"]) for r in seen) / rounds if seen and rounds else None


def aggregate(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate request records: pooled MAT / tokens/s / overhead, per-request means, regret, oracle ratios."""
    if not records:
        raise ValueError("aggregate: no request records (empty workload?)")
    gen = sum(int(r["generated"]) for r in records)
    rounds = sum(int(r["rounds"]) for r in records)
    wall = sum(float(r["wall_s"]) for r in records)
    tsum: dict[str, float] = {}
    for r in records:
        for k, v in (r.get("timings") or {}).items():
            tsum[k] = tsum.get(k, 0.0) + float(v)
    regrets = [r.get("regret") for r in records]
    with_regret = [r for r in records if r.get("regret") is not None]
    oracle = [r for r in records if r.get("oracle_mat") is not None]
    out: dict[str, Any] = {
        "n_requests": len(records),
        "generated": gen,
        "rounds": rounds,
        "mat": gen / rounds if rounds else 0.0,
        "mat_mean": _mean(r["mat"] for r in records),
        "wall_s": wall,
        "tokens_per_s": gen / wall if wall > 0 else None,
        "target_forwards_per_token": (rounds + len(records)) / (gen + len(records)),
        "regret_mean": _mean(regrets),
        "avg_regret": (sum(float(r["regret"]) for r in with_regret) / sum(int(r["generated"]) for r in with_regret))
        if with_regret and sum(int(r["generated"]) for r in with_regret)
        else None,
        **regret_summary(records),
        "dropped": dropped_summary(records),
        "evaluated_share": evaluated_share(records),
        "timings": tsum,
        **overhead(tsum),
        "update_ms_per_round": 1e3 * tsum.get("update", 0.0) / rounds if rounds and "update" in tsum else None,
        "oracle_mat": None,
        "mat_vs_oracle": None,
    }
    out.update(plain_summary(records, out["tokens_per_s"]))
    if oracle:
        og = sum(int(r["generated"]) for r in oracle)
        orounds = sum(int(r["generated"]) / float(r["oracle_mat"]) for r in oracle)
        own = sum(int(r["rounds"]) for r in oracle)
        out["oracle_mat"] = og / orounds if orounds else None
        out["mat_vs_oracle"] = (og / own) / out["oracle_mat"] if own and out["oracle_mat"] else None
    return out


def mean_curve(curves: Sequence[Sequence[float]]) -> np.ndarray:
    """Mean over requests of cumulative-regret curves of different lengths (at t: requests with ≥ t tokens)."""
    curves = [np.asarray(c, dtype=float) for c in curves if c is not None and len(c)]
    if not curves:
        return np.zeros(0)
    t = max(len(c) for c in curves)
    m = np.full((len(curves), t), np.nan)
    for j, c in enumerate(curves):
        m[j, : len(c)] = c
    return np.nanmean(m, axis=0)


def per_domain(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    doms: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        doms.setdefault(str(r["domain"]), []).append(r)
    return {d: aggregate(rs) for d, rs in sorted(doms.items())}


# ----------------------------------------------------------------------------------------- schema
_TOP = {
    "format": str,
    "version": int,
    "command": str,
    "selector": str,
    "selector_name": str,
    "workload": str,
    "backend": str,
    "seed": int,
    "pool": dict,
    "decoding": dict,
    "aggregate": dict,
    "per_domain": dict,
    "requests": list,
    "config": dict,
    "env": dict,
    "timing": dict,
}
_AGG = (
    "n_requests",
    "generated",
    "rounds",
    "mat",
    "tokens_per_s",
    "target_forwards_per_token",
    "avg_regret",
    "selection_overhead",
    "oracle_mat",
    "mat_vs_oracle",
)
_REQ = (
    "request_id",
    "domain",
    "generated",
    "rounds",
    "mat",
    "wall_s",
    "tokens_per_s",
    "target_forwards_per_token",
    "regret",
    "avg_regret",
    "best_drafter",
    "histogram",
    "selection_overhead",
)


def _max_k(decoding: Mapping[str, Any]) -> float:
    """Draft steps per round (``num_steps``, or the older ``k``): a round emits at most K+1 tokens."""
    return float(decoding.get("num_steps", decoding.get("k", 1e9)))


def validate_result(res: Mapping[str, Any]) -> None:
    """Check a bench result against the v1 schema; ``ValueError`` names the first bad field."""
    if res.get("format") != RESULT_FORMAT or res.get("version") != RESULT_VERSION:
        raise ValueError(
            f"not a {RESULT_FORMAT} v{RESULT_VERSION} result (format={res.get('format')!r}, "
            f"version={res.get('version')!r})"
        )
    for key, typ in _TOP.items():
        if key not in res:
            raise ValueError(f"bench result lacks field {key!r}")
        if not isinstance(res[key], typ):
            raise ValueError(f"bench result field {key!r} must be {typ.__name__}, got {type(res[key]).__name__}")
    for key in ("name", "drafters", "domains"):
        if key not in res["pool"]:
            raise ValueError(f"bench result field pool.{key} is missing")
    for key in _AGG:
        if key not in res["aggregate"]:
            raise ValueError(f"bench result field aggregate.{key} is missing")
    if res["aggregate"]["n_requests"] != len(res["requests"]):
        raise ValueError("bench result: aggregate.n_requests does not match len(requests)")
    n = len(res["pool"]["drafters"])
    for j, r in enumerate(res["requests"]):
        for key in _REQ:
            if key not in r:
                raise ValueError(f"bench result requests[{j}] lacks field {key!r}")
        if res.get("selector_name") == "none":  # plain decoding: one token per target forward, no drafter
            if r["histogram"] or r["mat"] != 1.0:
                raise ValueError(f"bench result requests[{j}]: plain decoding has no drafter histogram and MAT 1")
            continue
        if len(r["histogram"]) != n or sum(r["histogram"]) != r["rounds"]:
            raise ValueError(f"bench result requests[{j}].histogram must have {n} counts summing to rounds")
        if r["rounds"] and not 1.0 <= r["mat"] <= _max_k(res["decoding"]) + 1.0 + 1e-9:
            raise ValueError(f"bench result requests[{j}].mat={r['mat']} outside [1, K+1]")
