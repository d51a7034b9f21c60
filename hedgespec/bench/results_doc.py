"""``docs/RESULTS.md`` from the committed small result JSON under ``docs/results/`` (``scripts/report.py results``).

Every number is read from a committed file and shown next to the command that produced it, side by side with
the paper's. The words live in ``templates/RESULTS.md.tmpl`` (one ``document`` block with a ``$<section>`` line
per section below, and the blocks those sections use), the paper's numbers, each with its table or figure, in
``paper_numbers.yaml``; this module only decides which pieces apply and formats the tables:

* ``table1`` — every fixed drafter's pooled MAT per domain (paper Table 1 analog, ``table1_<d>.json``);
* ``seeds`` — the main table over seeds (``main256/``); ``fair`` — the same at equal training budget, the
  generalist on the experts' total data (``fair_generalist/``, :mod:`hedgespec.bench.results_fair`);
* ``main_table`` — the mixed workload per selector, the reproduction goals, where the ratios differ from the
  paper's, and the ``ood`` / ``shift`` workloads;
* ``sim`` — simulator scaling / regret (Fig 5a/5b analogs), learner cost, exact replays of engine traces;
* ``overhead`` — measured selection overhead and the engine micro-benchmark's profile estimate;
* ``label_efficient`` — label-efficient HedgeSpec: the simulator's ε sweep and the engine's ε runs
  (``label_efficient/``);
* ``lowrank`` — low-rank expert pools: MAT per rank and the evaluation's cost (``lowrank/``,
  :mod:`hedgespec.bench.results_lowrank`);
* ``table4`` — the offline router's accuracy under the prompt shift (Table 4 analog);
* ``pipeline`` — runs on other pools than the embedded one (pipeline checks).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

import yaml

from hedgespec.bench.collect import load_results_dir
from hedgespec.bench.results_fair import fair_section
from hedgespec.bench.results_lowrank import lowrank_section
from hedgespec.bench.tables import (
    MAT_GOALS,
    OVERHEAD_GOAL,
    cmd_cell,
    collection_table,
    fmt,
    goals,
    met_word,
    pooled_fixed_mats,
    probe_runs,
    with_fixed_mats,
)

TEMPLATE_PATH = Path(__file__).parent / "templates" / "RESULTS.md.tmpl"
PAPER_NUMBERS_PATH = Path(__file__).parent / "paper_numbers.yaml"
#: scripts/simulate.py's defaults: :func:`sim_command` spells out only the config values that differ
SIM_DEFAULTS = {"mode": "sampling", "k": 7, "n_requests": 42, "length": 256, "vocab": 48, "seed": 0}
#: (title, file under docs/results/) of the simulator's scaling experiments
SIM_SCALING = (
    ("Simulator, sampling (Fig 5b analog)", "sim_scaling.json"),
    ("Simulator, greedy", "sim_scaling_greedy.json"),
)
#: the simulator's label-efficient ε sweep (acceptance rule, file under docs/results/): one scripts/simulate.py
#: multirun over mode, each job's results.json with its command line
LE_SIM = (
    ("greedy", "label_efficient/sim/greedy/results.json"),
    ("sampling", "label_efficient/sim/sampling/results.json"),
)
#: the engine's label-efficient runs on the embedded pool (a ``scripts/report.py collect`` summary), then the same
#: on other pools where present (each its own table; a single-drafter ``eagle`` run in one gives the column's floor)
LE_ENGINE = "label_efficient/summary.json"
LE_ENGINE_MORE = ("label_efficient/lowrank_fast/summary.json",)
#: the main table over seeds: ``scripts/report.py seeds`` output (hedgespec/bench/seeds.py)
SEEDS = ("main256/seeds_mixed.json", "main256/seeds_shift.json", "main256/seeds_ood.json")
#: goals read from it: HedgeSpec MAT over the oracle / the generalist, HedgeSpec tok/s over plain decoding
SEED_GOALS = (("hedgespec/oracle", 0.97), ("hedgespec/eagle", 1.25))
SPEEDUP_GOAL = 1.5
#: the cheap-feedback goal for partial evaluation on the engine: selection overhead at most this share of the
#: round time, with MAT at most this relative drop below full-evaluation HedgeSpec
LE_GOAL = (0.05, 0.01)
#: selector configs (``epsilon`` of a run that does not override it)
SELECTOR_CONF = Path(__file__).resolve().parents[2] / "conf" / "selector"
#: fields of a scripts/bench_engine.py result that the profile estimate reads
ENGINE_PROFILE_KEYS = (
    "pool",
    "dims",
    "context",
    "k",
    "rows",
    "device",
    "dtype",
    "threads",
    "draft_vocab",
    "target_verify_s",
    "drafter_forward_s",
    "drafter_x_target_verify",
)


# ------------------------------------------------------------------------- template and data
def load_paper_numbers(path: str | Path = PAPER_NUMBERS_PATH) -> dict[str, Any]:
    """The paper's reference numbers (``paper_numbers.yaml``)."""
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def paper_values(paper: Mapping[str, Any]) -> dict[str, Any]:
    """Template values: ``<group>_<name>`` for every entry with a ``value``, and ``main_target``."""
    out: dict[str, Any] = {"main_target": paper["main"]["target"]}
    for group, entries in paper.items():
        for name, entry in entries.items() if isinstance(entries, dict) else ():
            if isinstance(entry, dict) and "value" in entry:
                out[f"{group}_{name}"] = entry["value"]
    return out


def load_blocks(path: str | Path = TEMPLATE_PATH) -> dict[str, str]:
    """The template's ``[[name]]`` blocks (text up to the next marker, trailing blank lines dropped)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in Path(path).read_text(encoding="utf-8").split("\n"):
        if line.startswith("[[") and line.endswith("]]") and line[2:-2].isidentifier():
            current = blocks.setdefault(line[2:-2], [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).rstrip("\n") for name, lines in blocks.items()}


def fill(text: str, sections: Mapping[str, Sequence[str]], values: Mapping[str, Any]) -> list[str]:
    """``text``'s lines with values substituted; a line holding only ``$<section>`` becomes that section's lines."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.startswith("$") and line[1:] in sections:
            out += sections[line[1:]]
        else:
            out.append(Template(line).substitute(values))
    return out


def _load_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass
class ResultsDoc:
    """What the sections read: the committed results, the embedded pool's name, the paper and the words."""

    results_dir: Path
    pool: str
    bench: list[dict[str, Any]]
    paper: dict[str, Any]
    blocks: dict[str, str]
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, results_dir: str | Path, pool: str) -> ResultsDoc:
        paper = load_paper_numbers()
        doc = cls(Path(results_dir), pool, with_fixed_mats(load_results_dir(results_dir)), paper, load_blocks())
        doc.values = paper_values(paper) | {"pool": pool, "overhead_goal": f"{OVERHEAD_GOAL:.0%}"}
        return doc

    @property
    def emb(self) -> list[dict[str, Any]]:
        """Bench results on the embedded pool."""
        return [r for r in self.bench if r["pool"]["name"] == self.pool]

    @property
    def other(self) -> list[dict[str, Any]]:
        """Bench results on other pools (pipeline checks)."""
        return [r for r in self.bench if r["pool"]["name"] != self.pool]

    def say(self, block: str, **values: Any) -> str:
        """The template block ``block`` filled with the paper's numbers, the pool and ``values``."""
        return Template(self.blocks[block]).substitute(self.values, **values)

    def json(self, name: str) -> Any:
        """``docs/results/<name>`` parsed, or ``None`` when it is not there."""
        return _load_json(self.results_dir / name)

    def paper_main(self, selector: str) -> tuple[float, float] | None:
        """The paper's (MAT, tok/s) of ``selector`` in the main table, if it has a row there."""
        e = self.paper["main"]["selectors"].get(selector)
        return (e["mat"], e["tokens_per_s"]) if e else None


def results_markdown(results_dir: str | Path, embedded_pool: str = "smollm2") -> str:
    """Generate ``docs/RESULTS.md`` text from the JSON under ``results_dir`` (see module doc)."""
    doc = ResultsDoc.load(results_dir, embedded_pool)
    sections = {
        "table1": table1_section(doc),
        "seeds": seeds_section(doc),
        "fair": fair_section(doc),
        "main_table": main_section(doc),
        "sim": sim_section(doc),
        "overhead": overhead_section(doc),
        "label_efficient": label_efficient_section(doc),
        "lowrank": lowrank_section(doc),
        "table4": table4_section(doc),
        "pipeline": pipeline_section(doc),
    }
    return "\n".join(fill(doc.blocks["document"], sections, doc.values))


# ---------------------------------------------------------------------------------- Table 1
def table1_section(doc: ResultsDoc) -> list[str]:
    """Pooled MAT of every fixed drafter per probed domain, or the command that produces it."""
    t1 = probe_runs(doc.emb)
    if not t1:
        return [doc.say("table1_awaits")]
    names = t1[0]["pool"]["drafters"]
    rows = ["| workload | " + " | ".join(names) + " | command |", "|---" * (len(names) + 2) + "|"]
    for r in sorted(t1, key=lambda r: r["workload"]):
        mats = " | ".join(f"{m:.2f}" for m in pooled_fixed_mats(r["requests"]))
        rows.append(f"| {r['workload']} | {mats} | {cmd_cell(r)} |")
    return rows


# ------------------------------------------------------------------------------ main table over seeds
def seeds_section(doc: ResultsDoc) -> list[str]:
    """Per workload: MAT of every selector over seeds (exact replay, 95% intervals) and the live runs next to plain
    decoding."""
    found = [(f, doc.json(f)) for f in SEEDS]
    if not any(d for _, d in found):
        return [doc.say("seeds_awaits", file=SEEDS[0]), ""]
    out = [doc.say("seeds_intro", pool=next(d for _, d in found if d).get("pool") or "–"), ""]
    for f, d in found:
        out += _seed_workload(doc, f, d) if d else [doc.say("seeds_workload_missing", file=f), ""]
    return out + [doc.say("seeds_reading"), ""]


def _seed_workload(doc: ResultsDoc, file: str, d: Mapping[str, Any]) -> list[str]:
    from hedgespec.bench.seeds import seeds_markdown  # torch-free

    live = d["live"]
    out = [
        doc.say(
            "seeds_title",
            file=file,
            workload=d.get("workload", "mixed"),
            seeds=", ".join(str(s) for s in d["seeds"]),
            requests=", ".join(str(n) for n in d["requests_per_seed"]),
            tokens=", ".join(str(n) for n in d["tokens_per_seed"]),
        ),
        "",
        *([d["note"], ""] if d.get("note") else []),
        *seeds_markdown(d).rstrip("\n").split("\n"),
        "",
    ]
    trace_cmds = sorted({c for s in d["per_seed"] for c in s["trace_commands"]})
    out += ["Commands (traces, one per seed; then the live runs; then this summary):", ""]
    out += [f"- `{c}`" for c in trace_cmds] + [f"- `{r['command']}`" for r in live]
    out += [f"- `{d['command']}`", ""] if d.get("command") else [""]
    if d.get("workload", "mixed") == "mixed":
        out += [doc.say("seeds_goals_intro"), ""] + [f"- {g}" for g in _seed_goals(d)] + [""]
    return out


def _seed_goals(d: Mapping[str, Any]) -> list[str]:
    """The main-table goals read from a seeds summary: MAT ratios (mean ± 95% CI) and HedgeSpec × plain."""
    hs = next((r for r in d["live"] if r["selector"] == "hedgespec"), None)
    goals = [
        f"HedgeSpec MAT ≥ {thr} × {key.split('/')[1]}: measured {fmt(d['ratios'][key]['mean'], 3)} "
        f"± {fmt(d['ratios'][key]['ci95'], 3)} ({met_word(d['ratios'][key]['mean'] >= thr, 'met', 'missed')})"
        for key, thr in SEED_GOALS
        if key in d["ratios"]
    ]
    if hs is not None:
        x = hs["speedup_vs_plain"]
        goals.append(
            f"HedgeSpec tok/s ≥ {SPEEDUP_GOAL} × plain decoding: measured {fmt(x, 3)} "
            f"({met_word(x >= SPEEDUP_GOAL, 'met', 'missed')})"
        )
    return goals


# ------------------------------------------------------------------------------- main table
def main_section(doc: ResultsDoc) -> list[str]:
    """Rows of the main table (mixed workload), the goals and commentary, then the other workloads."""
    main = [r for r in doc.emb if r["workload"] == "mixed"]
    lines = [_main_row(doc, r) for r in sorted(main, key=lambda r: r["selector"])]
    if main:
        lines += _goal_lines(doc, main) + main_commentary(doc, main)
    other_wl = [r for r in doc.emb if r["workload"] in ("ood", "shift")]
    if other_wl:
        lines += _other_workloads(doc, other_wl)
    else:
        for s, e in doc.paper["main"]["selectors"].items():
            lines.append(doc.say("main_awaits_row", selector=s, paper=f"{e['mat']} / {e['tokens_per_s']}"))
        targets = "; ".join(
            f"{t}: " + ", ".join(f"{s} {e['mat']} / {e['tokens_per_s']}" for s, e in by.items())
            for t, by in doc.paper["other_targets"].items()
        )
        lines += ["", doc.say("other_paper_targets", targets=targets)]
    return lines


def _main_row(doc: ResultsDoc, r: Mapping[str, Any]) -> str:
    p = doc.paper_main(r["selector"])
    a = r["aggregate"]
    return (
        f"| {r['selector']} | {f'{p[0]} / {p[1]}' if p else '–'} | {fmt(a['mat'])} | {fmt(a['tokens_per_s'], 1)} | "
        f"{fmt(a['target_forwards_per_token'], 3)} | {_mat_regret_cell(a)} | {fmt(a['avg_regret'], 4)} | "
        f"{fmt(a['selection_overhead'], pct=True)} | {cmd_cell(r)} |"
    )


def _mat_regret_cell(a: Mapping[str, Any]) -> str:
    """MAT regret (per-request mean) / accepted-token regret (total), or ``–`` when no run gave fixed MATs."""
    if a.get("mat_regret") is None:
        return "–"
    return f"{fmt(a['mat_regret'], 3)} / {fmt(a['accepted_regret'], 1)}"


def _goal_lines(doc: ResultsDoc, main: Sequence[Mapping[str, Any]]) -> list[str]:
    g = goals(main)
    if not g:
        return []
    return ["", doc.say("goals_intro"), ""] + [
        f"- {x['goal']}: measured {fmt(x['ratio'], 3)} ({met_word(x['met'], 'met', 'missed', 'n/a')})" for x in g
    ]


def main_commentary(doc: ResultsDoc, main: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where the main-table ratios differ from the paper's, say by how much and what bounds them (measured)."""
    mats = {r["selector"]: r["aggregate"]["mat"] for r in main}
    h, e = mats.get("hedgespec"), mats.get("eagle")
    if not (h and e):
        return []
    paper_h = doc.paper_main("hedgespec")[0]
    out = ["", doc.say("ratio_vs_generalist", here=f"{h / e:.3f}", paper=f"{paper_h / doc.paper_main('eagle')[0]:.3f}")]
    o = mats.get("oracle")
    if o:
        out[-1] += " " + doc.say("oracle_reach", oracle_x=f"{o / e:.3f}", reach=f"{h / o:.3f}")
        goal = dict(MAT_GOALS)["eagle"]
        if h / e < goal and o / e < 1.3:  # even the oracle is barely above the generalist on this pool
            out += ["", doc.say("verdict_generalist_out_of_reach", goal=goal, oracle_x=f"{o / e:.2f}")]
    for b in ("ucbspec", "exp3spec"):
        if mats.get(b):
            out.append(
                doc.say(
                    "ratio_vs_bandit",
                    bandit=b,
                    here=f"{h / mats[b]:.3f}",
                    paper=f"{paper_h / doc.paper_main(b)[0]:.3f}",
                )
            )
    return out


def _other_workloads(doc: ResultsDoc, runs: Sequence[Mapping[str, Any]]) -> list[str]:
    head = [
        "",
        doc.say("other_workloads_heading"),
        "",
        "| workload | selector | MAT | tok/s | MAT regret / accepted-token regret | ETAP regret / token | "
        "selection overhead | command |",
        "|---" * 8 + "|",
    ]
    return head + [
        f"| {r['workload']} | {r['selector']} | {fmt(r['aggregate']['mat'])} | "
        f"{fmt(r['aggregate']['tokens_per_s'], 1)} | {_mat_regret_cell(r['aggregate'])} | "
        f"{fmt(r['aggregate']['avg_regret'], 4)} | "
        f"{fmt(r['aggregate']['selection_overhead'], pct=True)} | {cmd_cell(r)} |"
        for r in sorted(runs, key=lambda r: (r["workload"], r["selector"]))
    ]


# ------------------------------------------------------------------------- Fig 5a / 5b, cost
def sim_command(d: Mapping[str, Any]) -> str:
    """The scripts/simulate.py command that reproduces a committed simulator result (from its stored config)."""
    c = d.get("config", {})
    args = [f"experiment={d.get('experiment', c.get('experiment'))}"]
    args += [f"{k}={c[k]}" for k, v in SIM_DEFAULTS.items() if k in c and c[k] != v]
    return "python scripts/simulate.py " + " ".join(args)


def sim_section(doc: ResultsDoc) -> list[str]:
    """Simulator scaling and regret tables, the learner cost, and exact replays of engine traces."""
    out: list[str] = []
    for title, fname in SIM_SCALING:
        out += _sim_scaling(doc, title, fname)
    return out + _sim_regret(doc) + _learner_cost(doc) + _engine_replays(doc)


def _mat_regret_cells(by: Mapping[str, Mapping[str, Any]], ns: Sequence[str]) -> list[str]:
    return [f"{by[n]['mat']:.2f} / {by[n]['avg_regret']:.4f}" if n in by else "" for n in ns]


def _sim_scaling(doc: ResultsDoc, title: str, fname: str) -> list[str]:
    d = doc.json(fname)
    if d is None:
        return [doc.say("sim_missing", title=title, file=fname), ""]
    res, c = d["results"], d["config"]
    ns = sorted({n for by in res.values() for n in by}, key=int)
    out = [
        doc.say(
            "sim_scaling_title",
            title=title,
            command=sim_command(d),
            file=fname,
            k=c["k"],
            n_requests=c["n_requests"],
            length=c["length"],
        ),
        "",
        "| selector | " + " | ".join(f"N={n}: MAT / avg regret" for n in ns) + " | regret growth N=7→max |",
        "|---" * (len(ns) + 2) + "|",
    ]
    for label, by in res.items():
        gr = d.get("growth", {}).get(label)
        growth = fmt(gr["growth"]) + "×" if gr else "–"
        out.append(f"| {label} | " + " | ".join(_mat_regret_cells(by, ns)) + f" | {growth} |")
    return out + [""]


def _sim_regret(doc: ResultsDoc) -> list[str]:
    reg = doc.json("sim_regret.json")
    if reg is None:
        return [doc.say("sim_regret_missing"), ""]
    n = next(iter(next(iter(reg["results"].values()))))
    out = [
        doc.say("sim_regret_title", length=reg["config"]["length"], command=sim_command(reg), n=n),
        "",
        "| selector | final cumulative regret (mean over requests) | avg regret / token | MAT |",
        "|---|---|---|---|",
    ]
    for label, by in reg["results"].items():
        m = by[n]
        curve = m.get("regret_curve") or []
        out.append(f"| {label} | {fmt(curve[-1] if curve else None)} | {fmt(m['avg_regret'], 4)} | {fmt(m['mat'])} |")
    return out + [""]


def _learner_cost(doc: ResultsDoc) -> list[str]:
    learners = doc.json("bench_learners.json")
    if learners is None:
        return []
    ns = next(iter(learners["results"].values()))
    out = [
        doc.say("learner_cost_title", unit=learners.get("unit"), steps=learners.get("steps")),
        "",
        "| learner | " + " | ".join(f"N={n}" for n in ns) + " |",
        "|---" * (1 + len(ns)) + "|",
    ]
    for name, by in learners["results"].items():
        out.append(f"| {name} | " + " | ".join(f"{v:.1f} µs" for v in by.values()) + " |")
    return out + [""]


def _engine_replays(doc: ResultsDoc) -> list[str]:
    out: list[str] = []
    have_embedded = False
    for f in sorted(doc.results_dir.glob("engine_replay*.json")):
        d = _load_json(f)
        if not isinstance(d, dict) or d.get("format") != "hedgespec.bench.replay":
            continue
        have_embedded |= d.get("pool") == doc.pool
        out += _engine_replay(doc, d, f.name)
    if not have_embedded:
        out += [doc.say("replay_awaits"), ""]
    return out


def _engine_replay(doc: ResultsDoc, d: Mapping[str, Any], fname: str) -> list[str]:
    pool = d.get("pool")
    tag = "" if pool == doc.pool else " " + doc.say("replay_other_pool", trace_pool=pool)
    commands = d.get("trace_commands")
    traced_by = doc.say("replay_traced_by", commands=", ".join(f"`{c}`" for c in commands)) if commands else ""
    ns = [str(n) for n in d["sizes"]]
    out = [
        doc.say(
            "replay_title",
            tag=tag,
            command=d["command"],
            file=fname,
            n_requests=d["n_requests"],
            tokens=d["tokens"],
            k=d["k"],
            drafters=d["drafters"],
            sub_pools=doc.say("replay_live_order" if d.get("sub_pools") == "live pool order" else "replay_old_order"),
            traced_by=traced_by,
        ),
        "",
        "| selector | " + " | ".join(f"N={n}: MAT / avg regret" for n in ns) + " |",
        "|---" * (len(ns) + 1) + "|",
    ]
    for label, by in d["results"].items():
        out.append(f"| {label} | " + " | ".join(f"{by[n]['mat']:.2f} / {by[n]['avg_regret']:.4f}" for n in ns) + " |")
    return out + [""]


# --------------------------------------------------------------------------------- overhead
def overhead_section(doc: ResultsDoc) -> list[str]:
    """Measured selection overhead of the embedded engine runs, then each engine micro-benchmark's estimate."""
    measured = [r for r in doc.emb if r["backend"] == "engine" and r["aggregate"].get("selection_overhead") is not None]
    if not measured:
        return [doc.say("overhead_awaits")] + _engine_profiles(doc)
    out = [
        "| selector | workload | selection overhead | evaluate / verify | update ms / round | command |",
        "|---" * 6 + "|",
    ]
    out += [
        f"| {r['selector']} | {r['workload']} | {fmt(r['aggregate']['selection_overhead'], pct=True)} | "
        f"{fmt(r['aggregate'].get('evaluate_x_verify'), 3)} | "
        f"{fmt(r['aggregate'].get('update_ms_per_round'), 3)} | {cmd_cell(r)} |"
        for r in sorted(measured, key=lambda r: (r["workload"], r["selector"]))
    ]
    return out + _engine_profiles(doc)


def _engine_profiles(doc: ResultsDoc) -> list[str]:
    out: list[str] = []
    for f in sorted(doc.results_dir.glob("bench_engine*.json")):
        data = _load_json(f)
        for res in data if isinstance(data, list) else [data]:
            if not isinstance(res, dict) or any(x not in res for x in ENGINE_PROFILE_KEYS):
                out += ["", doc.say("engine_profile_skipped", file=f.name)]
            else:
                out += _engine_profile(doc, res, f.name)
    return out


def _engine_profile(doc: ResultsDoc, res: Mapping[str, Any], fname: str) -> list[str]:
    ns = " ".join(str(n) for n in res["pool"])
    command = (
        f"python scripts/bench_engine.py --dims {res['dims']} --ns {ns} --context {res['context']} "
        f"--k {res['k']} --rows {res['rows']} --device {res['device']} --dtype {res['dtype']} "
        f"--threads {res['threads']} --draft-vocab {res['draft_vocab']} --json docs/results/{fname}"
    )
    draft = (res["k"] - 1) * res["drafter_forward_s"]  # the first draft step rides along the pool pass
    out = [
        "",
        doc.say(
            "engine_profile_title",
            command=command,
            draft_steps=res["k"] - 1,
            **{k: res[k] for k in ("dims", "draft_vocab", "device", "dtype", "threads", "k", "rows")},
        ),
        "",
        doc.say(
            "engine_profile_times",
            verify_ms=f"{1e3 * res['target_verify_s']:.1f}",
            draft_ms=f"{1e3 * res['drafter_forward_s']:.2f}",
            draft_x_verify=f"{res['drafter_x_target_verify']:.3f}",
        ),
        "",
        "| N | pool evaluate | × target verify | estimated selection overhead = evaluate / ((K−1)·draft + verify "
        "+ evaluate) |",
        "|---|---|---|---|",
    ]
    for n, p in res["pool"].items():
        est = p["evaluate_s"] / (draft + res["target_verify_s"] + p["evaluate_s"])
        out.append(f"| {n} | {1e3 * p['evaluate_s']:.1f} ms | {p['x_target_verify']:.3f} | {100 * est:.1f}% |")
    pool = {str(k): v for k, v in res["pool"].items()}
    if "1" in pool and len(pool) > 1:
        big = max(pool, key=int)
        share = pool["1"]["evaluate_s"] / pool[big]["evaluate_s"]
        out += ["", doc.say("engine_profile_share", big=big, share=f"{100 * share:.0f}")]
    return out


# ------------------------------------------------------------------------- label-efficient (ε)
def label_efficient_section(doc: ResultsDoc) -> list[str]:
    """Label-efficient HedgeSpec: what ε means and its bound, the simulator's ε sweep, the engine's ε runs."""
    return doc.say("le_intro").split("\n") + [""] + _le_sim(doc) + _le_engine(doc)


def has_evaluation_rule(selector: str) -> bool:
    """A HedgeSpec variant (the selectors with an evaluation rule: ε, adaptive, late); one drafter or a bandit has
    none."""
    return selector.startswith("hedgespec")


def _sim_policy(spec: Mapping[str, Any]) -> tuple[str, float | None]:
    """(evaluation cell, ε; ``None`` for the adaptive rule and for non-HedgeSpec rows) of a simulator selector."""
    if not has_evaluation_rule(str(spec.get("name", ""))):
        return "–", None
    if spec.get("evaluation") == "adaptive":
        return ("adaptive, late γ" if spec.get("late") else "adaptive"), None
    eps = float(spec.get("epsilon", 1.0))
    return f"ε={eps:g}", eps


def regret_exponent(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares s in ratio = ε^−s through the origin of (ln 1/ε, ln ratio), over (ε, regret ratio) pairs
    with ε < 1 (s = 1/2: the bound's √(1/ε) leading term; s = 1: its ln² N / ε term); ``None`` without any."""
    pts = [(math.log(1.0 / e), math.log(r)) for e, r in pairs if 0.0 < e < 1.0 and r > 0.0]
    den = sum(x * x for x, _ in pts)
    return float(sum(x * y for x, y in pts) / den) if den > 0 else None


def _le_sim_rows(mode: str, d: Mapping[str, Any]) -> tuple[list[str], list[tuple[float, float]]]:
    """Table rows of one simulator ε sweep, and its (ε, regret / full-evaluation regret) pairs."""
    n = next(iter(next(iter(d["results"].values()))))
    specs = {str(s.get("label", s["name"])): s for s in d["config"]["selectors"]}
    pol = {label: _sim_policy(specs.get(label, {"name": label})) for label in d["results"]}
    full = next((d["results"][lb][n] for lb, (cell, _) in pol.items() if cell == "ε=1"), None)
    rows, pairs = [], []
    for label, by in d["results"].items():
        m, (cell, eps) = by[n], pol[label]
        ratio = m["avg_regret"] / full["avg_regret"] if full and full["avg_regret"] > 0 and cell != "–" else None
        if eps is not None and ratio is not None:
            pairs.append((eps, ratio))
        curve = m.get("regret_curve") or [None]
        rows.append(
            f"| {mode} | {label} | {cell} | {fmt(m['eval_rate'] if cell != '–' else None, 3)} | {fmt(m['mat'])} | "
            f"{fmt(m['mat'] / m['oracle_mat'], 3)} | {fmt(m['avg_regret'], 4)} | {fmt(ratio)} | {fmt(curve[-1])} |"
        )
    return rows, pairs


def _le_sim(doc: ResultsDoc) -> list[str]:
    found = [(mode, f, doc.json(f)) for mode, f in LE_SIM]
    runs = [(mode, f, d) for mode, f, d in found if d is not None]
    if not runs:
        return [doc.say("le_sim_missing", files=", ".join(f"`docs/results/{f}`" for _, f, _ in found)), ""]
    c = runs[0][2]["config"]
    n = int(next(iter(next(iter(runs[0][2]["results"].values())))))
    commands = list(dict.fromkeys(d.get("command") or sim_command(d) for _, _, d in runs))
    choices = {str(s.get("choice", "argmax")) for s in c["selectors"] if has_evaluation_rule(str(s["name"]))}
    out = [
        doc.say(
            "le_sim_title",
            commands=", ".join(f"`{x}`" for x in commands),
            files=", ".join(f"`docs/results/{f}`" for _, f, _ in runs),
            n=n,
            k=c["k"],
            n_requests=c["n_requests"],
            length=c["length"],
            choice=" / ".join(sorted(choices)) or "argmax",
            seed=c["seed"],
        ),
        "",
        "| acceptance | selector | evaluation | evaluated rounds | MAT | MAT / oracle | ETAP regret / token | "
        "regret × ε=1 | final cumulative regret |",
        "|---" * 9 + "|",
    ]
    growth, fits = [], {}
    for mode, _, d in runs:
        rows, pairs = _le_sim_rows(mode, d)
        out += rows
        s = regret_exponent(pairs)
        if s is not None:
            pairs = sorted(pairs, reverse=True)
            eps, ratios = (" / ".join(f"{x:{f}}" for x in xs) for xs, f in zip(zip(*pairs), ("g", ".2f")))
            growth.append(doc.say("le_sim_growth", mode=mode, eps=eps, ratios=ratios, s=f"{s:.2f}"))
            fits[mode] = s
    if not fits:
        return out + [""]
    cross = math.log(n) ** 3 / int(c["length"])
    exponents = ", ".join(f"{m} {s:.2f}" for m, s in fits.items())
    out += [
        "",
        *growth,
        "",
        doc.say("le_sim_reading", n=n, length=c["length"], cross=f"{cross:.2f}", exponents=exponents),
    ]
    if min(fits.values()) >= 0.75:
        out[-1] += " " + doc.say("le_sim_inverse")
    return out + [""]


def _command_overrides(command: str) -> dict[str, str]:
    """``key=value`` arguments of a recorded command line (flags and ``~key`` deletions left out)."""
    return dict(a.split("=", 1) for a in shlex.split(command) if "=" in a and not a.startswith(("-", "~")))


def engine_policy(command: str) -> tuple[str, float | None]:
    """(evaluation cell, ε; ``None`` for the adaptive rule) of a scripts/bench.py run from its command line: its
    ``selector.evaluation`` / ``selector.late`` / ``selector.epsilon`` overrides, else the selector config's."""
    over = _command_overrides(command)
    if not has_evaluation_rule(over.get("selector", "hedgespec")):
        return "–", None
    path = SELECTOR_CONF / f"{over.get('selector', 'hedgespec')}.yaml"
    conf = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else None
    own = conf or {}
    evaluation = over.get("selector.evaluation", own.get("evaluation"))
    late = str(over.get("selector.late", own.get("late", False))).lower() == "true"
    if evaluation == "adaptive":
        return ("adaptive, late γ" if late else "adaptive"), None
    if "selector.epsilon" in over:
        eps = float(over["selector.epsilon"])
    elif conf is None:
        return "–", None
    else:
        eps = float(own.get("epsilon", 1.0))
    return f"ε={eps:g}", eps


def _le_engine(doc: ResultsDoc) -> list[str]:
    """The embedded pool's ε runs (a line saying how to make them when missing), then each further summary found."""
    data = doc.json(LE_ENGINE)
    out = [doc.say("le_engine_missing", file=LE_ENGINE), ""] if data is None else _le_engine_table(doc, LE_ENGINE, data)
    for name in LE_ENGINE_MORE:
        more = doc.json(name)
        if more is not None:
            out += _le_engine_table(doc, name, more)
    return out


def _le_engine_table(doc: ResultsDoc, name: str, data: Mapping[str, Any]) -> list[str]:
    """One summary's runs as a table, with the reading, the goal and (given an ``eagle`` run) the column's floor."""
    runs = sorted(data["runs"], key=lambda r: (-(engine_policy(r["command"])[1] or 0.0), r["selector"]))
    full = next((r["aggregate"] for r in runs if engine_policy(r["command"])[0] == "ε=1"), None)
    r0 = runs[0]
    out = [
        doc.say(
            "le_engine_title",
            file=name,
            pool=r0["pool"],
            workload=r0["workload"],
            n=len(runs),
            n_requests=r0["aggregate"]["n_requests"],
        ),
        "",
        "| selector | evaluation | evaluated rounds | MAT | MAT vs ε=1 | tok/s | plain tok/s | × plain | "
        "selection overhead | evaluate / verify | command |",
        "|---" * 11 + "|",
    ]
    for r in runs:
        a, cell = r["aggregate"], engine_policy(r["command"])[0]
        rel = a["mat"] / full["mat"] - 1.0 if full else None
        out.append(
            f"| {r['selector']} | {cell} | {fmt(a.get('evaluated_share') if cell != '–' else None, 3)} | "
            f"{fmt(a['mat'], 3)} | "
            f"{fmt(rel, pct=True)} | {fmt(a['tokens_per_s'], 1)} | "
            f"{fmt(a.get('plain_tokens_per_s'), 1)} | {fmt(a.get('speedup_vs_plain'))} | "
            f"{fmt(a['selection_overhead'], pct=True)} | {fmt(a.get('evaluate_x_verify'), 3)} | `{r['command']}` |"
        )
    return out + [""] + _le_engine_commentary(doc, runs, full)


def _le_engine_commentary(doc: ResultsDoc, runs: Sequence[Mapping[str, Any]], full: Any) -> list[str]:
    """Overhead and MAT of the partial-evaluation runs against full evaluation, and the cheap-feedback goal."""
    part = [r["aggregate"] for r in runs if engine_policy(r["command"])[0] not in ("ε=1", "–")]
    if not (full and part):
        return []
    over_max, mat_goal = LE_GOAL
    drops = [1.0 - a["mat"] / full["mat"] for a in part]
    met = [a for a, dr in zip(part, drops) if a["selection_overhead"] <= over_max and dr <= mat_goal]
    best = min(part, key=lambda a: a["selection_overhead"])
    plain = [a["plain_tokens_per_s"] for a in [full, *part] if a.get("plain_tokens_per_s") is not None]
    speedup = [a["speedup_vs_plain"] for a in part if a.get("speedup_vs_plain") is not None]
    text = doc.say(
        "le_engine_reading",
        full_over=fmt(full["selection_overhead"], pct=True),
        lo=fmt(min(a["selection_overhead"] for a in part), pct=True),
        hi=fmt(max(a["selection_overhead"] for a in part), pct=True),
        worst_drop=fmt(max(drops), pct=True),
        plain_lo=fmt(min(plain), 1) if plain else "–",
        plain_hi=fmt(max(plain), 1) if plain else "–",
        full_x=fmt(full.get("speedup_vs_plain")),
        x_lo=fmt(min(speedup)) if speedup else "–",
        x_hi=fmt(max(speedup)) if speedup else "–",
    )
    goal = doc.say(
        "le_engine_goal",
        over_max=f"{over_max:.0%}",
        mat_goal=f"{mat_goal:.0%}",
        best_over=fmt(best["selection_overhead"], pct=True),
        best_drop=fmt(1.0 - best["mat"] / full["mat"], pct=True),
        met=met_word(bool(met), "met", "missed"),
    )
    one = next((r["aggregate"] for r in runs if r["selector"] == "eagle"), None)
    if one is None:
        return [text, "", goal, ""]
    floor = doc.say(
        "le_engine_floor",
        eagle_over=fmt(one["selection_overhead"], pct=True),
        full_over=fmt(full["selection_overhead"], pct=True),
    )
    if one["selection_overhead"] > over_max:
        floor += " " + doc.say("le_engine_floor_goal", over_max=f"{over_max:.0%}")
    return [text, "", goal, "", floor, ""]


# ---------------------------------------------------------------------------------- Table 4
def _router_elsewhere(doc: ResultsDoc) -> dict[str, dict[str, Any]]:
    """Router runs on other pools for the mixed / shift workloads (the classifier carries over)."""
    return {r["workload"]: r for r in doc.other if r.get("router") and r["workload"] in ("mixed", "shift")}


def table4_section(doc: ResultsDoc) -> list[str]:
    """The router's accuracy and MAT on the embedded pool, its accuracy elsewhere, and the verdict on the shift."""
    rt = [r for r in doc.emb if r["selector"] == "router"]
    if rt:
        out = ["| workload | router accuracy | scored requests | router MAT | command |", "|---|---|---|---|---|"]
        out += [
            f"| {r['workload']} | {fmt(r['router'].get('accuracy'), 3)} | {r['router'].get('n_scored')} | "
            f"{fmt(r['aggregate']['mat'])} | {cmd_cell(r)} |"
            for r in sorted(rt, key=lambda r: r["workload"])
        ]
    else:
        out = [doc.say("table4_awaits")]
    clf = _router_elsewhere(doc)
    if clf:
        out += [
            "",
            doc.say("router_elsewhere_intro"),
            "",
            "| workload | router accuracy | scored requests | classes | command |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| {w} | {fmt(r['router'].get('accuracy'), 3)} | {r['router'].get('n_scored')} | "
            f"{len(r['router'].get('classes') or [])} | {cmd_cell(r)} |"
            for w, r in sorted(clf.items())
        ]
    rewording = doc.json(ROUTER_SHIFT)
    if rewording:
        out += ["", *_router_rewording(doc, rewording)]
    return out


#: the classifier's accuracy under every prompt variant (scripts/router_shift.py)
ROUTER_SHIFT = "router_shift/router_accuracy.json"


def _router_rewording(doc: ResultsDoc, rewording: dict[str, Any]) -> list[str]:
    """The router's accuracy on the original prompts and under each variant, then the verdict on the paper."""
    rows = rewording["rows"]
    out = [
        doc.say("router_rewording_intro", n=rows["original"]["n"], command=rewording["command"], file=ROUTER_SHIFT),
        "",
        "| prompts | accuracy | misrouted | worst domain |",
        "|---|---|---|---|",
    ]
    for name, r in rows.items():
        domain, acc = min(r["per_domain"].items(), key=lambda kv: kv[1])
        worst = f"{domain} {acc:.2f}" if acc < 1 else "–"
        out.append(f"| {name} | {fmt(r['accuracy'], 3)} | {fmt(1 - r['accuracy'], 3)} | {worst} |")
    wrappers = [r["accuracy"] for n, r in rows.items() if n not in ("original",) and not n.startswith("paraphrase")]
    phrasings = [r["accuracy"] for n, r in rows.items() if n.startswith("paraphrase[")]
    if "paraphrase" in rows and wrappers and phrasings:
        out += [
            "",
            doc.say(
                "verdict_router_shift",
                wrappers=fmt(min(wrappers), 3),
                paraphrase=fmt(rows["paraphrase"]["accuracy"], 3),
                worst_phrasing=fmt(min(phrasings), 3),
            ),
        ]
    return out


# -------------------------------------------------------------------------- pipeline checks
def pipeline_section(doc: ResultsDoc) -> list[str]:
    """Runs on other pools: the collection table, their router accuracy and the commands."""
    other = doc.other
    if not other:
        return []
    clf = _router_elsewhere(doc)
    out = doc.say("pipeline_intro").split("\n") + ["", collection_table(other), ""]
    ro = [r for r in other if r.get("router") and r["workload"] not in clf]
    if ro:
        out += [
            doc.say("pipeline_router_intro"),
            "",
            "| pool | workload | classes | training prompts | accuracy | scored requests | command |",
            "|---" * 7 + "|",
        ]
        out += [
            f"| {r['pool']['name']} | {r['workload']} | {len(r['router'].get('classes') or [])} | "
            f"{r['router'].get('n_train')} | {fmt(r['router'].get('accuracy'), 3)} | "
            f"{r['router'].get('n_scored')} | {cmd_cell(r)} |"
            for r in ro
        ]
        out.append("")
    commands = [f"- {cmd_cell(r)}" for r in other if r not in clf.values()]
    return out + [doc.say("pipeline_commands"), ""] + commands + [""]
