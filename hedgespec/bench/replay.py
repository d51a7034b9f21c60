"""Fig 5a/5b from engine traces: replay every selector exactly over recorded full-counterfactual traces.

``python scripts/bench.py ... trace=<path>`` records, per request, one greedy pass in which every drafter drafts
from every position (``hedgespec.engine.trace`` with ``runs``); under greedy decoding that table determines any
selector's rounds exactly (:func:`hedgespec.sim.replay.replay_request`). :func:`replay_selectors` replays the
bench selectors over nested sub-pools of growing size N (the generalist and the first N − 1 other drafters, in
the live pool's order, so N = all is the live pool itself: same indices, hence the same tie-breaks and the same
random draws as the live run) and returns results
in the simulator's shape (``results[label][N] = {mat, avg_regret, oracle_mat, regret_curve}``), so the same
plots (:mod:`hedgespec.plots`) and RESULTS.md tables apply. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hedgespec.bench.metrics import mean_curve
from hedgespec.io import portable_paths
from hedgespec.selectors import make_selector
from hedgespec.selectors.hedgespec import RunningPrior
from hedgespec.sim.greedy import best_fixed_mat, replay_greedy
from hedgespec.sim.replay import load_trace
from hedgespec.sim.runner import regret_curve
from hedgespec.types import RequestContext

REPLAY_FORMAT = "hedgespec.bench.replay"
#: how :func:`sub_pool` orders a sub-pool (recorded in the output; older replays moved the generalist first)
SUB_POOL_ORDER = "live pool order"
#: label -> (make_selector name, kwargs); ``eagle`` is Fixed on the generalist, ``oracle`` gets best_drafter
REPLAY_SELECTORS: dict[str, tuple[str, dict[str, Any]]] = {
    "hedgespec": ("hedgespec", {}),
    "hedgespec_eal": ("hedgespec_eal", {}),
    # warm-started from the running mean of earlier requests' final weights (conf/selector/hedgespec_running.yaml);
    # one fresh RunningPrior per replay, fed in the trace's request order (the live stream's order)
    "hedgespec_running": ("hedgespec", {"prior": "running", "prior_alpha": 0.5}),
    "ucbspec": ("ucbspec", {}),
    "exp3spec": ("exp3spec", {}),
    "metasd": ("metasd", {}),
    "eagle": ("fixed", {}),
    "oracle": ("oracle", {}),
}


def sub_pool(names: Sequence[str], n: int, generalist: str = "general") -> list[int]:
    """Column indices of an N-drafter sub-pool, in the pool's order: the generalist and the first N − 1 others.

    Sub-pools are nested in N, and N = len(names) is the live pool in its own order (index i is drafter i).
    """
    order = [names.index(generalist)] if generalist in names else []
    order += [i for i, x in enumerate(names) if x != generalist]
    if not 1 <= n <= len(order):
        raise ValueError(f"sub-pool size {n} must be in [1, {len(order)}] for the traced pool {list(names)}")
    return sorted(order[:n])


def _generalist_index(names: Sequence[str], cols: Sequence[int], generalist: str = "general") -> int:
    """Index of the generalist within the sub-pool ``cols`` (the ``eagle`` baseline's Fixed index); 0 if none."""
    picked = [names[c] for c in cols]
    return picked.index(generalist) if generalist in picked else 0


def _load_exact(trace_path: str | Path) -> list[Any]:
    """The trace's requests; refuses traces without exact counterfactual runs or with mixed pools."""
    reqs = load_trace(trace_path)
    if not reqs:
        raise ValueError(f"{trace_path}: no requests in the trace")
    inexact = [r.header.get("request_id") for r in reqs if not r.exact]
    if inexact:
        raise ValueError(
            f"{trace_path}: requests {inexact[:3]} were traced without full_counterfactual "
            "(no exact runs); record traces with `python scripts/bench.py ... trace=<path>`"
        )
    names = list(reqs[0].header["drafters"])
    if any(list(r.header["drafters"]) != names for r in reqs):
        raise ValueError(f"{trace_path}: requests were traced with different pools")
    return reqs


def _replay_one(
    label: str, tables: list[Any], oracle: list[Any], k: int, seed: int, generalist: int
) -> tuple[int, float, list[Any]]:
    """One selector over every request of a sub-pool: (rounds, total regret, per-request regret curves)."""
    name, kw = REPLAY_SELECTORS[label]
    kw = dict(kw)
    if name in ("hedgespec", "hedgespec_eal", "ucbspec", "exp3spec", "metasd"):
        kw["seed"] = seed
    if name == "fixed":
        kw["index"] = generalist
    if kw.get("prior") == "running":
        kw["prior_source"] = RunningPrior()
    sel = make_selector(name, **kw)
    rounds, regret, curves = 0, 0.0, []
    for (r, g, runs), (best, _) in zip(tables, oracle):
        hindsight = best if sel.uses_hindsight else None  # only the oracle may know the best drafter
        ctx = RequestContext(request_id=r.header.get("request_id", 0), best_drafter=hindsight)
        res = replay_greedy(g, runs, sel, k, ctx)
        c = regret_curve(g, res.chosen_per_position)
        rounds += res.rounds
        regret += float(c[-1])
        curves.append(c)
    return rounds, regret, curves


def _replay_size(
    reqs: list[Any], pool: list[int], names: list[str], n: int, labels: list[str], seed: int, generalist: str
) -> dict[str, Any]:
    """``pool``: the trace columns replayed (all, or those left after ``exclude``), ``names`` their drafters."""
    k = reqs[0].k
    picked = sub_pool(names, int(n), generalist)
    cols = [pool[i] for i in picked]
    tables = [(r, r.gamma[:, cols], r.runs[:, cols]) for r in reqs if len(r.gamma)]
    oracle = [best_fixed_mat(runs, k) for _, _, runs in tables]
    total = sum(len(g) for _, g, _ in tables)
    oracle_rounds = sum(len(g) / mats[b] for (_, g, _), (b, mats) in zip(tables, oracle))
    out = {}
    for label in labels:
        rounds, regret, curves = _replay_one(
            label, tables, oracle, k, seed, _generalist_index(names, picked, generalist)
        )
        out[label] = {
            "mat": total / rounds,
            "avg_regret": regret / total,
            "oracle_mat": total / oracle_rounds,
            "regret_curve": [round(float(x), 4) for x in mean_curve(curves)],
        }
    return out


def replay_selectors(
    trace_path: str | Path,
    sizes: Sequence[int] | None = None,
    labels: Sequence[str] | None = None,
    seed: int = 0,
    exclude: Sequence[str] = (),
    generalist: str | None = None,
) -> dict[str, Any]:
    """Replay ``labels`` (default: all of :data:`REPLAY_SELECTORS`) over sub-pools of ``sizes``
    (default: 2, 4, …, N).

    ``exclude``: traced drafters left out of the replayed pool (the others keep the trace's order, as a live run
    with ``exclude_drafters`` has them), so one trace serves pools that differ in a drafter, on the same requests.
    ``generalist``: the drafter ``eagle`` runs and every sub-pool starts from (default: ``general`` when the pool
    has it, else the first drafter).
    """
    reqs = _load_exact(trace_path)
    traced = list(reqs[0].header["drafters"])
    unknown = [x for x in exclude if x not in traced]
    if unknown:
        raise ValueError(f"exclude names drafters the trace does not have: {unknown}; it has {traced}")
    pool = [i for i, x in enumerate(traced) if x not in exclude]
    if not pool:
        raise ValueError(f"exclude leaves no drafter of the traced pool {traced}")
    names = [traced[i] for i in pool]
    if generalist is not None and generalist not in names:
        raise ValueError(f"generalist {generalist!r} is not in the replayed pool {names}")
    generalist = generalist or "general"
    n_all = len(names)
    sizes = list(sizes) if sizes else sorted({min(n_all, 2**j) for j in range(1, n_all.bit_length() + 1)} | {n_all})
    labels = list(labels or REPLAY_SELECTORS)
    bad = [x for x in labels if x not in REPLAY_SELECTORS]
    if bad:
        raise ValueError(f"unknown replay selector(s) {bad}; expected some of {list(REPLAY_SELECTORS)}")
    results: dict[str, dict[str, Any]] = {x: {} for x in labels}
    for n in sizes:
        for label, row in _replay_size(reqs, pool, names, n, labels, seed, generalist).items():
            results[label][str(n)] = row
    meta_path = Path(str(trace_path) + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    return {
        "format": REPLAY_FORMAT,
        "version": 1,
        "trace": str(trace_path),
        "pool": meta.get("pool"),
        "trace_commands": [portable_paths(c) for c in meta.get("commands", [])],
        "n_requests": len(reqs),
        "k": reqs[0].k,
        "drafters": names,
        "excluded": [x for x in traced if x in exclude],
        "generalist": names[_generalist_index(names, range(n_all), generalist)],
        "sizes": [int(n) for n in sizes],
        "sub_pools": SUB_POOL_ORDER,
        "tokens": int(sum(len(r.gamma) for r in reqs)),
        "results": results,
    }


def replay_table(out: dict[str, Any]) -> str:
    ns = [str(n) for n in out["sizes"]]
    rows = ["| selector | " + " | ".join(f"N={n}: MAT / avg regret" for n in ns) + " |", "|---" * (len(ns) + 1) + "|"]
    for label, by in out["results"].items():
        rows.append(f"| {label} | " + " | ".join(f"{by[n]['mat']:.2f} / {by[n]['avg_regret']:.4f}" for n in ns) + " |")
    return "\n".join(rows) + "\n"


def mean_oracle(out: dict[str, Any]) -> dict[str, float]:
    first = next(iter(out["results"].values()))
    return {n: float(np.round(v["oracle_mat"], 4)) for n, v in first.items()}
