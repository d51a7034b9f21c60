"""The main table over seeds: exact-replay MATs per seed with 95% intervals, and live tok/s side by side with plain
decoding.

Each seed is an independent draw of requests (``workload.draw=seeded``), recorded once as a full-counterfactual
greedy trace (``scripts/bench.py ... trace=<path>``). Every replay selector's MAT on that seed's requests is exact
(:func:`hedgespec.bench.replay.replay_selectors` on the live pool, N = all, with the seed the live run would give
its selector), so one trace per seed yields every selector's MAT; across seeds each MAT and each paired ratio
(HedgeSpec over another selector, seed by seed) gets a 95% t-interval (:mod:`hedgespec.bench.intervals`).

Throughput needs live runs (the trace's full-counterfactual pass is not a deployable cost): each live
``results.json`` contributes its tok/s, the plain-decoding tok/s of the same requests measured right after each
one, and the ratio, with a 95% interval over its requests; its MAT must equal the replay of its seed (checked and
reported, never silently mixed). Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hedgespec.bench.intervals import fmt_ci, mean_ci
from hedgespec.bench.replay import REPLAY_SELECTORS, replay_selectors
from hedgespec.io import portable_paths

SEEDS_FORMAT = "hedgespec.bench.seeds"
#: the paired ratios reported per seed: HedgeSpec over each of these
RATIO_BASES = ("oracle", "eagle", "ucbspec", "exp3spec", "metasd")


def _trace_option(trace: str | Path, key: str, default: str) -> str:
    """The ``key`` (seed, workload) of the runs that recorded a trace (``<trace>.meta.json``), one value per file:
    from the meta's ``runs`` records, or, for traces that predate them, from ``key=`` in the recorded commands."""
    meta = Path(str(trace) + ".meta.json")
    if not meta.is_file():
        raise ValueError(f"{trace}: no {meta.name} next to it (it is written by scripts/bench.py ... trace=<path>)")
    m = json.loads(meta.read_text())
    if m.get("runs"):
        vals = {str(r.get(key, default)) for r in m["runs"]}
    else:
        cmds = m.get("commands") or []
        vals = {w.split("=", 1)[1] for c in cmds for w in str(c).split() if w.startswith(f"{key}=")}
    if len(vals) > 1:
        raise ValueError(f"{trace}: recorded by runs with different {key}= values {sorted(vals)}; one per file")
    return vals.pop() if vals else default


def _trace_seed(trace: str | Path) -> int:
    """The bench seed a trace was recorded with."""
    return int(_trace_option(trace, "seed", "0"))


def replay_seed(trace: str | Path, exclude: Sequence[str] = (), generalist: str | None = None) -> dict[str, Any]:
    """Every replay selector's MAT (and the oracle's) on one seed's trace, live pool (N = all; ``exclude`` and
    ``generalist`` as :func:`~hedgespec.bench.replay.replay_selectors` has them)."""
    seed = _trace_seed(trace)
    out = replay_selectors(trace, sizes=None, seed=seed, exclude=exclude, generalist=generalist)
    n = str(max(out["sizes"]))
    res = out["results"]
    return {
        "seed": seed,
        "workload": _trace_option(trace, "workload", "mixed"),
        "trace": portable_paths(str(trace)),
        "trace_commands": out["trace_commands"],
        "n_requests": out["n_requests"],
        "tokens": out["tokens"],
        "drafters": out["drafters"],
        "excluded": out["excluded"],
        "generalist": out["generalist"],
        "pool": out.get("pool"),
        "mat": {label: res[label][n]["mat"] for label in res},
    }


def _live(path: str | Path) -> dict[str, Any]:
    res = json.loads(Path(path).read_text())
    agg, reqs = res["aggregate"], res["requests"]
    if agg.get("plain_tokens_per_s") is None:
        raise ValueError(f"{path}: no plain decoding side by side (rerun with plain_baseline=true)")
    xs = [
        (q["generated"] / q["wall_s"]) / (q["plain_generated"] / q["plain_wall_s"])
        for q in reqs
        if q.get("plain_wall_s") and q.get("wall_s")
    ]
    x_mean, x_half = mean_ci(xs)
    return {
        "selector": res["selector"],
        "seed": int(res["seed"]),
        "workload": res["workload"],
        "pool": res["pool"]["name"],
        "drafters": list(res["pool"].get("drafters") or []),
        # False: the run skipped the pool evaluation (its deployed cost); the selector config says
        "evaluates_pool": bool(((res.get("config") or {}).get("selector") or {}).get("evaluate", True)),
        "n_requests": agg["n_requests"],
        "generated": agg["generated"],
        "mat": agg["mat"],
        "tokens_per_s": agg["tokens_per_s"],
        "plain_tokens_per_s": agg["plain_tokens_per_s"],
        "speedup_vs_plain": agg["speedup_vs_plain"],
        "speedup_per_request": {"mean": x_mean, "ci95": x_half},
        "selection_overhead": agg.get("selection_overhead"),
        "plain_match_rate": agg.get("plain_match_rate"),
        "command": portable_paths(res.get("command") or ""),
    }


def seed_summary(
    traces: Sequence[str | Path],
    live: Sequence[str | Path] = (),
    exclude: Sequence[str] = (),
    generalist: str | None = None,
) -> dict[str, Any]:
    """Replay every trace (one per seed), intervals over seeds, and the live runs joined to their seed's replay.

    ``exclude``/``generalist``: the replayed pool is the traced one without those drafters, with that generalist
    (:func:`~hedgespec.bench.replay.replay_selectors`); a live run must have served that same pool."""
    if not traces:
        raise ValueError("seed_summary needs at least one trace (one per seed)")
    per_seed = [replay_seed(t, exclude, generalist) for t in traces]
    seeds = [s["seed"] for s in per_seed]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"two traces have the same seed ({seeds}): each seed is one independent draw")
    drafters = per_seed[0]["drafters"]
    if any(s["drafters"] != drafters for s in per_seed):
        raise ValueError("the traces were recorded with different pools")
    workloads = sorted({s["workload"] for s in per_seed})
    if len(workloads) > 1:
        raise ValueError(f"the traces were recorded on different workloads {workloads}; summarise one at a time")
    labels = list(per_seed[0]["mat"])
    mats = {x: dict(zip(("mean", "ci95"), mean_ci([s["mat"][x] for s in per_seed]))) for x in labels}
    ratios = {}
    for base in RATIO_BASES:
        if base in labels:
            vals = [s["mat"]["hedgespec"] / s["mat"][base] for s in per_seed]
            ratios[f"hedgespec/{base}"] = dict(zip(("mean", "ci95"), mean_ci(vals)))
    by_seed = {s["seed"]: s for s in per_seed}
    runs = []
    for path in live:
        run = _live(path)
        if run["workload"] != workloads[0]:
            raise ValueError(f"{path}: a live run on workload {run['workload']!r}, the traces are {workloads[0]!r}")
        if run["drafters"] and sorted(run["drafters"]) != sorted(drafters):
            raise ValueError(
                f"{path}: a live run of the pool {run['drafters']}, the replayed pool is {drafters} "
                "(set exclude to the drafters the live run left out)"
            )
        rep = by_seed.get(run["seed"], {}).get("mat", {}).get(run["selector"])
        run["replay_mat"] = rep
        run["replay_matches"] = None if rep is None else abs(rep - run["mat"]) < 1e-9
        runs.append(run)
    return {
        "format": SEEDS_FORMAT,
        "version": 1,
        "seeds": seeds,
        "workload": workloads[0],
        "pool": per_seed[0]["pool"],
        "drafters": drafters,
        "excluded": per_seed[0]["excluded"],
        "generalist": per_seed[0]["generalist"],
        "requests_per_seed": [s["n_requests"] for s in per_seed],
        "tokens_per_seed": [s["tokens"] for s in per_seed],
        "per_seed": per_seed,
        "mat": mats,
        "ratios": ratios,
        "live": runs,
    }


def seeds_markdown(d: Mapping[str, Any]) -> str:
    """Two tables: MAT over seeds (mean ± 95% CI, per seed) and the live runs' tok/s next to plain decoding."""
    seeds = d["seeds"]
    head = "| selector | MAT (mean ± 95% CI) | " + " | ".join(f"seed {s}" for s in seeds) + " |"
    rows = [head, "|---" * (2 + len(seeds)) + "|"]
    for label, m in d["mat"].items():
        cells = " | ".join(f"{s['mat'][label]:.3f}" for s in d["per_seed"])
        rows.append(f"| {label} | {fmt_ci(m['mean'], m['ci95'], 3)} | {cells} |")
    rows += ["", "| ratio | mean ± 95% CI over seeds |", "|---|---|"]
    rows += [f"| {k} | {fmt_ci(v['mean'], v['ci95'], 3)} |" for k, v in d["ratios"].items()]
    if d["live"]:
        rows += [
            "",
            "| selector | seed | requests | pool evaluated | MAT | replay MAT | tok/s | plain tok/s | × plain | "
            "× plain per request (± 95% CI) | selection overhead |",
            "|---" * 11 + "|",
        ]
        for r in d["live"]:
            rep = "–" if r["replay_mat"] is None else f"{r['replay_mat']:.3f}"
            ovh = "–" if r["selection_overhead"] is None else f"{r['selection_overhead']:.1%}"
            sp = r["speedup_per_request"]
            rows.append(
                f"| {r['selector']} | {r['seed']} | {r['n_requests']} | {'yes' if r['evaluates_pool'] else 'no'} | "
                f"{r['mat']:.3f} | {rep} | "
                f"{r['tokens_per_s']:.2f} | {r['plain_tokens_per_s']:.2f} | {r['speedup_vs_plain']:.3f} | "
                f"{fmt_ci(sp['mean'], sp['ci95'], 3)} | {ovh} |"
            )
        plain = [r["plain_tokens_per_s"] for r in d["live"]]
        span = f"{min(plain):.2f}" + ("" if max(plain) == min(plain) else f"–{max(plain):.2f}")
        rows.append(
            f"| plain decoding (target alone, next to each run above) | – | – | – | 1.000 | – | {span} | {span} | "
            "1.000 | 1.000 | – |"
        )
    return "\n".join(rows) + "\n"


__all__ = ["REPLAY_SELECTORS", "SEEDS_FORMAT", "replay_seed", "seed_summary", "seeds_markdown"]
