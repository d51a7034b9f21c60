"""Markdown tables and the numbers they pool: one run, a sweep collection, the reproduction goals, the MAT matrix.

* :func:`run_table` — one run's per-domain table (``results.md`` in the run dir).
* :func:`group_runs` / :func:`seed_mean` / :func:`collection_table` — many runs grouped by (pool, workload,
  backend, selector, settings), mean ± 95% t-interval over seeds, ratios to the oracle and the generalist
  (``eagle``) of the same settings; :func:`run_settings` names what else tells runs apart (a target dtype, the
  decoding shape, a selector option), so runs that differ in more than their seed are never pooled as seeds.
* :func:`goals` / :func:`goals_table` — the reproduction goals (HedgeSpec's MAT against the oracle, the
  generalist and the bandits; the selection overhead) as measured ratios.
* :func:`pooled_fixed_mats` / :func:`mat_matrix` — every fixed drafter's MAT pooled over a domain's requests
  (the paper's Table 1 analog), the one pooling rule all reports use.
* :func:`with_fixed_mats` — regret in accepted tokens for greedy runs recorded without the oracle probe, from an
  oracle run on the same requests.

Pure functions of result dicts (schema :data:`hedgespec.bench.metrics.RESULT_FORMAT`); no files, no plots.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hedgespec.bench.intervals import mean_ci
from hedgespec.bench.metrics import mat_regret_fields, regret_summary

#: (baseline selector, HedgeSpec MAT ≥ ratio × that selector's MAT) — the reproduction goals on MAT
MAT_GOALS = (("oracle", 0.97), ("eagle", 1.25), ("ucbspec", 1.2), ("exp3spec", 1.2))
#: the reproduction goal on the selection overhead (share of round time)
OVERHEAD_GOAL = 0.10

RunKey = tuple[str, str, str, str, str, str]

#: config sections (of a result's ``config``) whose values make two runs different rows, not seeds of one row
SETTING_SECTIONS = (
    "target",
    "decoding",
    "sampling",
    "workload",
    "backend",
    "max_new_tokens",
    "max_prompt_tokens",
    "chat_template",
    "stop_at_eos",
    "data.source",
)
#: leaves of those sections that name or reach a run rather than set it (the name is in the key already)
SETTING_IGNORED = frozenset(
    {"name", "label", "url", "timeout_s", "check_selector", "drafters", "cache_dir", "progress", "hf_id"}
)


def fmt(x: Any, nd: int = 2, pct: bool = False) -> str:
    """A table cell: ``–`` for a missing value, ``nd`` decimals, or a percentage with one decimal."""
    if x is None:
        return "–"
    if pct:
        return f"{100 * float(x):.1f}%"
    return f"{float(x):.{nd}f}"


def cmd_cell(r: Mapping[str, Any]) -> str:
    """The command that produced a result, and the file it lies in (``_path``)."""
    return f"`{r['command']}` → `{r['_path']}`"


# --------------------------------------------------------------------------------- one run
def _has_plain(aggs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether plain decoding was measured (results written before the plain baseline existed have none)."""
    return any(a.get("plain_tokens_per_s") is not None for a in aggs)


def run_table(res: Mapping[str, Any]) -> str:
    """Markdown: one row per domain (and ALL): requests, MAT, tok/s (and plain tok/s, × plain when measured),
    forwards/token, regret, overhead, oracle."""
    items = list(res["per_domain"].items()) + [("**all**", res["aggregate"])]
    plain = _has_plain([a for _, a in items])
    extra = "plain tok/s | × plain | " if plain else ""
    head = (
        f"| domain | requests | MAT | tok/s | {extra}target fwd / token | MAT regret | accepted-token regret | "
        "ETAP regret / token | selection overhead | oracle MAT | MAT / oracle |"
    )
    rows = [
        f"**{res['selector']}** on `{res['workload']}` (pool `{res['pool']['name']}`, backend {res['backend']}, "
        f"seed {res['seed']}): `{res['command']}`",
        "",
        head,
        "|---" * (13 if plain else 11) + "|",
    ]
    for dom, a in items:
        cells = f"{fmt(a.get('plain_tokens_per_s'), 1)} | {fmt(a.get('speedup_vs_plain'), 2)} | " if plain else ""
        rows.append(
            f"| {dom} | {a['n_requests']} | {fmt(a['mat'])} | {fmt(a['tokens_per_s'], 1)} | {cells}"
            f"{fmt(a['target_forwards_per_token'], 3)} | {fmt(a.get('mat_regret'), 3)} | "
            f"{fmt(a.get('accepted_regret'), 1)} | {fmt(a['avg_regret'], 4)} | "
            f"{fmt(a['selection_overhead'], pct=True)} | {fmt(a['oracle_mat'])} | "
            f"{fmt(a['mat_vs_oracle'], 3)} |"
        )
    dropped = res["aggregate"].get("dropped")
    if dropped:
        rows += [
            "",
            "Dropped drafters (failed; requests affected): " + ", ".join(f"{k} {v}" for k, v in dropped.items()),
        ]
    if res.get("router"):
        r = res["router"]
        rows += [
            "",
            f"Router ({r.get('classifier')}, {r.get('n_train')} training prompts, "
            f"classes {r.get('classes')}): accuracy {fmt(r.get('accuracy'), 3)} on {r.get('n_scored')} "
            "scored requests.",
        ]
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------------------ collections
def _leaves(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k not in SETTING_IGNORED:
                _leaves(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value if isinstance(value, str) else json.dumps(value)


def _config_at(cfg: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = cfg.get(part) if isinstance(cfg, Mapping) else None
    return cfg


def _settings(res: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """A run's (global settings, selector options) as flat ``dotted.key -> value`` maps."""
    cfg = res.get("config") or {}
    glob: dict[str, str] = {}
    for section in SETTING_SECTIONS:
        _leaves(section, _config_at(cfg, section), glob)
    sel: dict[str, str] = {}
    _leaves("selector", cfg.get("selector") or {}, sel)
    return glob, sel


def _differing(maps: Sequence[Mapping[str, str]]) -> list[str]:
    keys = sorted({k for m in maps for k in m})
    return [k for k in keys if len({m.get(k, "–") for m in maps}) > 1]


def _show(value: str) -> str:
    """A setting's value in a label: long values (a prompt list) as a short digest."""
    if len(value) <= 40:
        return value
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:8]


def _labels(maps: Sequence[Mapping[str, str]]) -> list[str]:
    keys = _differing(maps)
    return [" ".join(f"{k}={_show(m.get(k, '–'))}" for k in keys) for m in maps]


def run_settings(results: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Per run, what tells it apart from the other runs of its (pool, workload, backend) besides its selector and
    seed, as (settings, selector options): ``key=value`` of every setting (target dtype, decoding, sampling, lengths,
    workload size, threads) not the same in all those runs, and of every option of its selector that differs among
    the runs of that selector there; ``""`` when nothing does. Runs with the same labels are seeds of one row."""
    pairs = [_settings(r) for r in results]
    out = [("", "")] * len(results)
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, r in enumerate(results):
        groups.setdefault((r["pool"]["name"], str(r["workload"]), str(r["backend"])), []).append(i)
    for idx in groups.values():
        glob = _labels([pairs[i][0] for i in idx])
        by_selector: dict[str, list[int]] = {}
        for j, i in enumerate(idx):
            by_selector.setdefault(str(results[i]["selector"]), []).append(j)
        for js in by_selector.values():
            for j, opt in zip(js, _labels([pairs[idx[j]][1] for j in js])):
                out[idx[j]] = (glob[j], opt)
    return out


def group_runs(results: Sequence[Mapping[str, Any]]) -> dict[RunKey, list[Mapping[str, Any]]]:
    """(pool, workload, backend, selector, settings, selector options) → runs (seeds); the last two as
    :func:`run_settings` labels them."""
    g: dict[RunKey, list[Mapping[str, Any]]] = {}
    for r, (settings, options) in zip(results, run_settings(results)):
        g.setdefault((r["pool"]["name"], r["workload"], r["backend"], r["selector"], settings, options), []).append(r)
    return g


def baseline_group(
    groups: Mapping[RunKey, Sequence[Mapping[str, Any]]], key: RunKey, selector: str
) -> Sequence[Mapping[str, Any]] | None:
    """The runs of ``selector`` on the same pool, workload, backend and settings as ``key``: the group with no
    selector options of its own, else the only one there is (``None`` when there is none or it is ambiguous)."""
    pool, wl, be, _, settings, _ = key
    same = {k[5]: v for k, v in groups.items() if k[:5] == (pool, wl, be, selector, settings)}
    if "" in same:
        return same[""]
    return next(iter(same.values())) if len(same) == 1 else None


def seed_mean(runs: Sequence[Mapping[str, Any]], key: str) -> tuple[float | None, float | None]:
    """Mean and the half-width of its 95% t-interval (``None`` for one seed) over runs of ``aggregate[key]``;
    ``(None, None)`` if no run has it."""
    vals = [float(r["aggregate"][key]) for r in runs if r["aggregate"].get(key) is not None]
    if not vals:
        return None, None
    return mean_ci(vals)


def _ratio_to(
    groups: Mapping[RunKey, Sequence[Mapping[str, Any]]], key: RunKey, selector: str, mat: float | None
) -> float | None:
    """``mat`` over the seed-mean MAT of ``selector``'s runs with the same settings as ``key``, if both exist."""
    base = baseline_group(groups, key, selector)
    ref = seed_mean(base, "mat")[0] if base else None
    return mat / ref if mat and ref else None


def collection_table(results: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per (pool, workload, backend, selector, settings), MAT mean ± 95% t-interval over seeds,
    plus ratios to baselines of the same settings (plain decoding measured in the same runs, when it was); a
    ``settings`` column appears when some runs differ in more than their seed (:func:`run_settings`)."""
    plain = _has_plain([r["aggregate"] for r in results])
    extra = "plain tok/s | × plain | " if plain else ""
    groups = group_runs(results)
    labelled = any(k[4] or k[5] for k in groups)  # a settings column only when runs differ in more than seeds
    rows = [
        f"| pool | workload | backend | selector | {'settings | ' if labelled else ''}seeds | MAT (± 95% CI) | tok/s | "
        f"{extra}target fwd / token | "
        "MAT regret | accepted-token regret | ETAP regret / token | selection overhead | MAT / oracle | × eagle |",
        "|---" * (14 + 2 * plain + labelled) + "|",
    ]
    for key, runs in sorted(groups.items()):
        pool, wl, be, sel, settings, options = key
        mat, sd = seed_mean(runs, "mat")
        tps, fpt, mreg, areg, reg, ovh, vo, ptps, xp = (
            seed_mean(runs, k)[0]
            for k in (
                "tokens_per_s",
                "target_forwards_per_token",
                "mat_regret",
                "accepted_regret",
                "avg_regret",
                "selection_overhead",
                "mat_vs_oracle",
                "plain_tokens_per_s",
                "speedup_vs_plain",
            )
        )
        if vo is None:
            vo = _ratio_to(groups, key, "oracle", mat)  # vs the oracle selector's run on the same workload
        xe = _ratio_to(groups, key, "eagle", mat)
        mat_s = fmt(mat) + (f" ± {sd:.2f}" if sd is not None else "")
        cells = f"{fmt(ptps, 1)} | {fmt(xp, 2)} | " if plain else ""
        label = f"{' '.join(x for x in (settings, options) if x) or '–'} | " if labelled else ""
        rows.append(
            f"| {pool} | {wl} | {be} | {sel} | {label}{len(runs)} | {mat_s} | {fmt(tps, 1)} | {cells}{fmt(fpt, 3)} | "
            f"{fmt(mreg, 3)} | {fmt(areg, 1)} | {fmt(reg, 4)} | {fmt(ovh, pct=True)} | {fmt(vo, 3)} | {fmt(xe, 3)} |"
        )
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------------------------- goals
def _goal(pool: str, backend: str, goal: str, ratio: float | None, met: bool | None) -> dict[str, Any]:
    return {"pool": pool, "backend": backend, "goal": goal, "ratio": ratio, "met": met}


def goals(results: Sequence[Mapping[str, Any]], workload: str = "mixed") -> list[dict[str, Any]]:
    """The reproduction goals as measured ratios (HedgeSpec MAT vs oracle/generalist/bandits; overhead) per
    pool/backend, from the ``hedgespec`` runs on ``workload``."""
    out = []
    groups = group_runs(results)
    for key, runs in sorted(groups.items()):
        pool, wl, be, sel = key[:4]
        if wl != workload or sel != "hedgespec":
            continue
        pool = " ".join(x for x in (pool, key[4], key[5]) if x)  # the settings, where runs differ in more than seeds
        mat = seed_mean(runs, "mat")[0]
        # the oracle of the very same requests when the run probed it (oracle_probe=true), else an oracle run
        same = [r["aggregate"].get("oracle_mat") for r in runs]
        same_oracle = float(np.mean(same)) if same and all(x for x in same) else None
        for name, thr in MAT_GOALS:
            g = baseline_group(groups, key, name)
            o = same_oracle if name == "oracle" and same_oracle else (seed_mean(g, "mat")[0] if g else None)
            ratio = mat / o if mat and o else None
            met = None if ratio is None else ratio >= thr
            out.append(_goal(pool, be, f"HedgeSpec MAT ≥ {thr} × {name}", ratio, met))
        ovh = seed_mean(runs, "selection_overhead")[0]
        out.append(
            _goal(
                pool,
                be,
                f"selection overhead ≤ {OVERHEAD_GOAL:.0%} of round time",
                ovh,
                None if ovh is None else ovh <= OVERHEAD_GOAL,
            )
        )
    return out


def met_word(met: bool | None, yes: str = "yes", no: str = "no", unknown: str = "–") -> str:
    """How a goal's ``met`` reads in a table or a list."""
    return unknown if met is None else (yes if met else no)


def goals_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown rows (header included) of :func:`goals`' output."""
    head = "| pool | backend | goal | measured | met |\n|---|---|---|---|---|\n"
    return head + "".join(
        f"| {x['pool']} | {x['backend']} | {x['goal']} | {fmt(x['ratio'], 3)} | {met_word(x['met'])} |\n" for x in rows
    )


# ---------------------------------------------------------------------------- MAT pooling
def pooled_fixed_mats(requests: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Each fixed drafter's MAT pooled over the requests that carry ``fixed_mats``: generated tokens / rounds,
    where a request's rounds are its generated tokens / that drafter's MAT on it."""
    reqs = [q for q in requests if q.get("fixed_mats")]
    fm = np.array([q["fixed_mats"] for q in reqs], dtype=float)
    gen = np.array([q["generated"] for q in reqs], dtype=float)
    return gen.sum() / (gen[:, None] / fm).sum(axis=0)


def probe_runs(results: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ``workload=domain oracle_probe=true`` runs: one domain each, requests carrying ``fixed_mats``."""
    return [
        r
        for r in results
        if str(r["workload"]).startswith("domain:") and any(q.get("fixed_mats") for q in r["requests"])
    ]


def mat_matrix(results: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{drafter: {domain: MAT}}`` from ``workload=domain oracle_probe=true`` runs (paper Table 1 analog);
    each cell is :func:`pooled_fixed_mats` of the drafter over the domain's requests."""
    runs = probe_runs(results)
    if not runs:
        raise ValueError("no `workload=domain oracle_probe=true` results among the inputs (they carry fixed_mats)")
    names = list(runs[0]["pool"]["drafters"])
    out: dict[str, dict[str, float]] = {n: {} for n in names}
    for r in sorted(runs, key=lambda r: str(r["workload"])):
        if list(r["pool"]["drafters"]) != names:
            raise ValueError(f"{r.get('_path')}: pool {r['pool']['drafters']} differs from {names}")
        domain = str(r["workload"]).split(":", 1)[1]
        for n, m in zip(names, pooled_fixed_mats(r["requests"])):
            out[n][domain] = float(m)
    return out


# ----------------------------------------------------------------------- regret in accepted tokens
def _greedy(res: Mapping[str, Any]) -> bool:
    return float(res.get("decoding", {}).get("temperature", 1.0)) == 0.0


def _donor_for(res: Mapping[str, Any], donors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """A run with every fixed drafter's MAT on exactly these greedy requests (same pool, workload, decoding,
    request ids and output lengths; greedy verification is lossless, so every selector emits the same tokens)."""
    ids = [(q["request_id"], int(q["generated"])) for q in res["requests"]]
    for d in donors:
        if (
            d["pool"] == res["pool"]
            and d["workload"] == res["workload"]
            and d["backend"] == res["backend"]
            and d["decoding"] == res["decoding"]
            and [(q["request_id"], int(q["generated"])) for q in d["requests"]] == ids
        ):
            return d
    return None


def _check_fixed_run(res: Mapping[str, Any], fixed: Sequence[Sequence[float]], donor: Mapping[str, Any]) -> None:
    """A fixed-drafter run must reproduce the donor's MAT of that drafter on every request (else not comparable)."""
    sel = res.get("config", {}).get("selector", {})
    if sel.get("name") != "fixed" or sel.get("drafter") not in res["pool"]["drafters"]:
        return
    i = list(res["pool"]["drafters"]).index(sel["drafter"])
    for q, fm in zip(res["requests"], fixed):
        if abs(float(q["mat"]) - float(fm[i])) > 1e-9:
            raise ValueError(
                f"{res.get('_path')}: request {q['request_id']} MAT {q['mat']} differs from drafter "
                f"{sel['drafter']}'s {fm[i]} in {donor.get('_path')}; the runs are not on the same requests"
            )


def _has_fixed(res: Mapping[str, Any]) -> bool:
    return bool(res["requests"]) and all(q.get("fixed_mats") for q in res["requests"])


def with_fixed_mats(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The results with ``mat_regret`` / ``accepted_regret`` (re)computed per request, per domain and in the
    aggregate: from the run's own ``fixed_mats``, or, for a greedy run without them, from an oracle /
    ``oracle_probe`` run on the same requests (:func:`_donor_for`; ``fixed_mats_from`` names it). Runs with
    neither are unchanged."""
    donors = [r for r in results if _greedy(r) and _has_fixed(r)]
    out = []
    for res in results:
        donor = res if _has_fixed(res) else (_donor_for(res, donors) if _greedy(res) else None)
        if donor is None:
            out.append(dict(res))
            continue
        fixed = [q["fixed_mats"] for q in donor["requests"]]
        _check_fixed_run(res, fixed, donor)
        reqs = [
            {**q, "fixed_mats": fm, **mat_regret_fields(q["mat"], q["rounds"], fm)}
            for q, fm in zip(res["requests"], fixed)
        ]
        doms: dict[str, list[dict[str, Any]]] = {}
        for q in reqs:
            doms.setdefault(str(q["domain"]), []).append(q)
        per_dom = {d: {**a, **regret_summary(doms.get(d, []))} for d, a in res["per_domain"].items()}
        new = {**res, "requests": reqs, "per_domain": per_dom, "fixed_mats_from": donor.get("_path")}
        new["aggregate"] = {**res["aggregate"], **regret_summary(reqs)}
        out.append(new)
    return out
