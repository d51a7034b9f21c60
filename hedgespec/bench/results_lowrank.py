"""The low-rank pools section of docs/RESULTS.md (``docs/results/lowrank/``).

Reads ``mat_matrix_<kind>.json`` (``scripts/report.py mat-matrix`` over ``workload=domain oracle_probe=true``
runs of one pool; ``<kind>`` is ``dense`` for the fine-tuned experts as trained, ``r<rank>`` or ``rfull`` for
the low-rank pools written from them by ``scripts/lowrank_pool.py``, ``b<reads>-<allocation>`` for a pool it
wrote for a reads budget) and ``bench_engine.json`` (``scripts/bench_engine.py --ranks ... --rank-files ...``: the pool
evaluation's time and the parameters it reads); a pool without a bench_engine row gets its reads from the
``pool_<kind>.json`` that ``scripts/lowrank_pool.py json=...`` wrote (no time). ``lowrank/`` is the first table;
``lowrank_budget/`` (another trained pool: its own dense row) the second. ``lowrank_round/summary.json`` (a
``scripts/report.py collect`` summary of engine runs on that pool and its low-rank variants, plain decoding side
by side) gives the third: what a low-rank pool saves in a whole decoding round.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: goal: experts keep this share of the full experts' in-domain MAT ...
KEEP_GOAL = 0.97
#: ... while one pool evaluation of N=8 drafters reads at most this many heads' weights
READ_GOAL = 1.3
GOAL_N = 8
DIR = "lowrank"
BUDGET_DIR = "lowrank_budget"
ROUND = "lowrank_round/summary.json"
#: the cheap-feedback goal for a whole round: selection overhead at most this share of the round time, with MAT at
#: most this relative drop below full-evaluation HedgeSpec on the dense pool (as for partial evaluation)
ROUND_GOAL = (0.05, 0.01)
_KIND = re.compile(r"mat_matrix_(dense|rfull|r\d+|b\d+(?:\.\d+)?-(?:frobenius|relative))\.json$")


def _rank_of(kind: str) -> tuple[int, float, str]:
    """Table order: dense, uniform ranks ascending, full rank, then the budget pools by budget."""
    if kind == "dense":
        return (0, 0.0, "")
    if kind.startswith("b"):
        reads, allocation = kind[1:].split("-", 1)
        return (2, float(reads), allocation)
    return (1, float("inf") if kind == "rfull" else float(kind[1:]), "")


def _label(kind: str) -> str:
    if kind.startswith("b"):
        reads, allocation = kind[1:].split("-", 1)
        return f"reads ≤ {reads}, {allocation} (ranks per matrix)"
    return "dense experts (as trained)" if kind == "dense" else ("full rank" if kind == "rfull" else f"r = {kind[1:]}")


def in_domain(matrix: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each domain's expert on its own domain (drafters named after their domain)."""
    return {d: float(row[d]) for d, row in matrix.items() if d in row}


def cross_domain(matrix: Mapping[str, Mapping[str, float]]) -> float | None:
    """Mean MAT of the experts on the other experts' domains."""
    vals = [float(m) for d, row in matrix.items() if d in row for e, m in row.items() if e != d]
    return sum(vals) / len(vals) if vals else None


def generalist(matrix: Mapping[str, Mapping[str, float]], name: str = "general") -> float | None:
    row = matrix.get(name) or {}
    return sum(row.values()) / len(row) if row else None


def read_at(
    bench: list[Mapping[str, Any]] | None, kind: str, n: int = GOAL_N, pool: Mapping[str, Any] | None = None
) -> tuple[float, float | None, float | None] | None:
    """(weights read × one head, evaluation ms, × the dense pool of the same N) at N=n from bench_engine.json;
    else the reads of ``pool`` (``scripts/lowrank_pool.py json=``, an N=n pool) with no time."""
    from_pool = None
    if pool is not None and int(pool.get("n_drafters", 0)) == n:
        from_pool = (float(pool["reads_x_one_head"]), None, None)
    if not bench:
        return from_pool
    res = bench[0]
    dense = (res.get("pool") or {}).get(str(n))
    if kind == "dense" or kind == "rfull":
        if dense is None:
            return None
        return float(dense.get("weights_read_x_one_head", n)), dense["evaluate_s"] * 1e3, 1.0
    label = kind if kind.startswith("b") else kind[1:]  # bench_engine.py labels: b<reads>-<allocation>, <rank>
    low = ((res.get("lowrank") or {}).get(label) or {}).get(str(n))
    if low is None:
        return from_pool
    return float(low["weights_read_x_one_head"]), low["evaluate_s"] * 1e3, float(low["x_dense_evaluate"])


def lowrank_section(doc: Any) -> list[str]:
    """Tables: in-domain MAT per rank next to the dense experts, cross-domain and generalist MAT, evaluation cost
    (``lowrank/``; then ``lowrank_budget/`` when it has a dense matrix); the goal over both."""
    first = _table(doc, DIR)
    if first is None:
        return [doc.say("lowrank_missing"), ""]
    out = [doc.say("lowrank_intro", n=GOAL_N), "", *first[0]]
    second = _table(doc, BUDGET_DIR)
    if second is not None:
        out += ["", doc.say("lowrank_budget_intro", n=GOAL_N), "", *second[0]]
    best = min((t[1] for t in (first, second) if t is not None and t[1] is not None), default=None)
    out += ["", doc.say("lowrank_goal", keep=f"{KEEP_GOAL:.0%}", reads=READ_GOAL, n=GOAL_N, met=_goal_words(best))]
    return out + [""] + round_table(doc)


def _pool_kinds(doc: Any) -> dict[str, str]:
    """Pool name -> kind of the low-rank pools ``lowrank_budget/pool_<kind>.json`` describes."""
    folder = doc.results_dir / BUDGET_DIR
    kinds = {}
    for p in sorted(folder.glob("pool_*.json")) if folder.is_dir() else []:
        rec = doc.json(f"{BUDGET_DIR}/{p.name}") or {}
        if "pool" in rec:
            kinds[str(rec["pool"])] = p.stem[len("pool_") :]
    return kinds


def round_table(doc: Any) -> list[str]:
    """Engine runs on the dense pool and its low-rank variants: MAT, tok/s next to plain decoding, the selection
    overhead and the evaluation's ms per round; the cheap-feedback goal against dense full-evaluation HedgeSpec."""
    from hedgespec.bench.results_doc import engine_policy  # the evaluation cell of a run, from its command
    from hedgespec.bench.tables import fmt, met_word

    data = doc.json(ROUND) if (doc.results_dir / ROUND).is_file() else None
    if not data or not data.get("runs"):
        return []
    kinds = _pool_kinds(doc)

    def label(r: Mapping[str, Any]) -> str:
        kind = kinds.get(str(r.get("pool")))
        return _label(kind) if kind else "dense experts (as trained)"

    def policy(r: Mapping[str, Any]) -> str:  # a run that never evaluates the pool extends its own head only
        return engine_policy(r["command"])[0] if r["aggregate"].get("evaluated_share") else "own head"

    runs = sorted(data["runs"], key=lambda r: (r.get("pool") in kinds, r["selector"]))
    ref = next((r for r in runs if r["selector"] == "hedgespec" and r.get("pool") not in kinds), None)
    ref_mat = ref["aggregate"]["mat"] if ref else None
    r0 = runs[0]
    out = [
        doc.say("lowrank_round_intro", file=ROUND, workload=r0["workload"], n_requests=r0["aggregate"]["n_requests"]),
        "",
        "| pool | selector | evaluation | evaluated rounds | MAT | MAT vs dense HedgeSpec | tok/s | plain tok/s "
        "| × plain | selection overhead | evaluate ms / round | command |",
        "|---" * 12 + "|",
    ]
    for r in runs:
        a = r["aggregate"]
        rel = a["mat"] / ref_mat - 1.0 if ref_mat else None
        ev_ms = a["timings"]["evaluate"] / a["rounds"] * 1e3 if a.get("rounds") else None
        out.append(
            f"| {label(r)} | {r['selector']} | {policy(r)} | {fmt(a.get('evaluated_share'), 3)} "
            f"| {fmt(a['mat'], 3)} | {fmt(rel, pct=True)} | {fmt(a['tokens_per_s'], 1)} "
            f"| {fmt(a.get('plain_tokens_per_s'), 1)} | {fmt(a.get('speedup_vs_plain'))} "
            f"| {fmt(a['selection_overhead'], pct=True)} | {fmt(ev_ms, 2)} | `{r['command']}` |"
        )
    out.append("")
    full = [r for r in runs if r["selector"].startswith("hedgespec")]
    if ref_mat and full:
        over_max, mat_goal = ROUND_GOAL
        ok = [
            r
            for r in full
            if r["aggregate"]["selection_overhead"] <= over_max and 1.0 - r["aggregate"]["mat"] / ref_mat <= mat_goal
        ]
        best = min(full, key=lambda r: r["aggregate"]["selection_overhead"])
        out += [
            doc.say(
                "lowrank_round_goal",
                over_max=f"{over_max:.0%}",
                mat_goal=f"{mat_goal:.0%}",
                best=f"{label(best)}, {best['selector']}",
                best_over=fmt(best["aggregate"]["selection_overhead"], pct=True),
                best_drop=fmt(1.0 - best["aggregate"]["mat"] / ref_mat, pct=True),
                met=met_word(bool(ok), "met", "missed"),
            ),
            "",
        ]
    return out


def _table(doc: Any, folder: str) -> tuple[list[str], tuple[float, str] | None] | None:
    """One folder's table and the cheapest pool that meets the goal in it (None without a dense matrix)."""
    if not (doc.results_dir / folder).is_dir():
        return None
    files = sorted(p for p in (doc.results_dir / folder).glob("mat_matrix_*.json") if _KIND.search(p.name))
    mats = {_KIND.search(p.name).group(1): doc.json(f"{folder}/{p.name}") for p in files}  # type: ignore[union-attr]
    if "dense" not in mats:
        return None
    bench = (
        doc.json(f"{folder}/bench_engine.json") if (doc.results_dir / folder / "bench_engine.json").is_file() else None
    )
    ref = in_domain(mats["dense"])
    domains = list(ref)
    out = [
        "| pool | " + " | ".join(domains) + " | in-domain mean | × dense experts | cross-domain | generalist "
        f"| N={GOAL_N} evaluation reads (× one head) | N={GOAL_N} evaluation ms (× dense) |",
        "|---" * (len(domains) + 7) + "|",
    ]
    best: tuple[float, str] | None = None
    ref_mean = sum(ref.values()) / len(ref)
    for kind in sorted(mats, key=_rank_of):
        m = mats[kind]
        ind = in_domain(m)
        mean = sum(ind.values()) / len(ind)
        keep = min(ind[d] / ref[d] for d in domains if d in ind)
        pool_file = doc.results_dir / folder / f"pool_{kind}.json"
        cost = read_at(bench, kind, pool=doc.json(f"{folder}/{pool_file.name}") if pool_file.is_file() else None)
        cells = [f"{ind.get(d, float('nan')):.3f}" for d in domains]
        cross, gen = cross_domain(m), generalist(m)
        out.append(
            f"| {_label(kind)} | "
            + " | ".join(cells)
            + f" | {mean:.3f} | {mean / ref_mean:.3f} (worst domain {keep:.3f}) | "
            + ("–" if cross is None else f"{cross:.3f}")
            + " | "
            + ("–" if gen is None else f"{gen:.3f}")
            + " | "
            + ("–" if cost is None else f"{cost[0]:.2f}")
            + " | "
            + ("–" if cost is None or cost[1] is None else f"{cost[1]:.1f} ({cost[2]:.2f})")
            + " |"
        )
        if kind not in ("dense", "rfull") and cost is not None and mean / ref_mean >= KEEP_GOAL:
            if cost[0] <= READ_GOAL and (best is None or cost[0] < best[0]):
                best = (cost[0], kind)
    return out, best


def _goal_words(best: tuple[float, str] | None) -> str:
    if best is None:
        return "missed: no measured rank meets both"
    return f"met at {_label(best[1])} ({best[0]:.2f} × one head)"
