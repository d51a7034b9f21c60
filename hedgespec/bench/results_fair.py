"""The equal-budget section of docs/RESULTS.md (``docs/results/fair_generalist/``): the main table over seeds with a
generalist trained on the experts' total budget, next to the same requests with the quick-budget generalist.

Both files are ``scripts/report.py seeds`` summaries (:mod:`hedgespec.bench.seeds`) of the *same* traces (a pool
traced with both generalists), replayed once without the quick generalist (``seeds_full.json``) and once without
the full-budget one (``seeds_quick.json``): the same requests, so the two rows differ only in the generalist.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hedgespec.bench.intervals import fmt_ci, mean_ci

DIR = "fair_generalist"
#: (row label block, file): the generalist at the experts' total budget first, the quick one second
FILES = (("fair_label_full", f"{DIR}/seeds_full.json"), ("fair_label_quick", f"{DIR}/seeds_quick.json"))
LABELS = ("hedgespec", "eagle", "oracle", "ucbspec")


def _ratio(d: Mapping[str, Any], base: str) -> tuple[float, float | None]:
    """HedgeSpec over ``base``, paired seed by seed: the summary's own ratio (mean, 95% half-width)."""
    r = d["ratios"][f"hedgespec/{base}"]
    return r["mean"], r["ci95"]


def summary_rows(runs: list[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """One row per generalist: each selector's MAT (mean ± 95% CI over seeds) and HedgeSpec's paired ratios."""
    head = "| generalist (`eagle`) | " + " | ".join(f"{x} MAT" for x in LABELS)
    rows = [head + " | hedgespec / eagle | hedgespec / oracle |", "|---" * (len(LABELS) + 3) + "|"]
    for label, d in runs:
        mats = " | ".join(fmt_ci(d["mat"][x]["mean"], d["mat"][x]["ci95"], 3) if x in d["mat"] else "–" for x in LABELS)
        ratios = " | ".join(fmt_ci(*_ratio(d, base), 3) for base in ("eagle", "oracle"))
        rows.append(f"| {label} `{d['generalist']}` | {mats} | {ratios} |")
    return rows


def fair_section(doc: Any) -> list[str]:
    """Summary of both generalists, then each summary's own tables (MAT per seed, live runs next to plain)."""
    from hedgespec.bench.seeds import seeds_markdown

    found = [(key, doc.json(f)) for key, f in FILES]
    if not found[0][1]:
        return [doc.say("fair_awaits", file=FILES[0][1]), ""]
    runs = [(doc.say(key), d) for key, d in found if d]
    full = found[0][1]
    out = [
        doc.say(
            "fair_intro",
            pool=full.get("pool") or "–",
            seeds=", ".join(str(s) for s in full["seeds"]),
            requests=", ".join(str(n) for n in full["requests_per_seed"]),
            tokens=", ".join(str(n) for n in full["tokens_per_seed"]),
        ),
        "",
        *summary_rows(runs),
        "",
    ]
    if len(runs) == 2:
        gain = [_ratio(d, "eagle") for _, d in found]
        pairs = zip(full["per_seed"], found[1][1]["per_seed"])
        eagle = mean_ci([f["mat"]["eagle"] / q["mat"]["eagle"] for f, q in pairs])
        out += [
            doc.say(
                "fair_reading",
                full=fmt_ci(*gain[0], 3),
                quick=fmt_ci(*gain[1], 3),
                eagle=fmt_ci(*eagle, 3),
            ),
            "",
        ]
    for (_, file), (label, d) in zip(FILES, runs):
        out += [f"**{label}** — `docs/results/{file}`", ""]
        out += [*([d["note"], ""] if d.get("note") else []), *seeds_markdown(d).rstrip("\n").split("\n"), ""]
        cmds = sorted({c for s in d["per_seed"] for c in s["trace_commands"]})
        out += ["Commands (traces, one per seed, shared by both rows; the live runs; this summary):", ""]
        out += [f"- `{c}`" for c in cmds] + [f"- `{r['command']}`" for r in d["live"]]
        out += [f"- `{d['command']}`", ""] if d.get("command") else [""]
    return out
