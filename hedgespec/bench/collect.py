"""Finding and collecting bench results: a wandb sweep's or a Hydra multirun's ``results.json`` files → one
table (``table.md``), ``summary.json`` and the same figure set across selectors (``scripts/report.py collect``).
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hedgespec.bench.metrics import RESULT_FORMAT, validate_result
from hedgespec.bench.tables import collection_table, goals, goals_table, with_fixed_mats
from hedgespec.io import portable_paths, write_json_atomic, write_text_atomic
from hedgespec.plots import plot_bench_regret, plot_mat_by_domain

#: per-run fields copied into ``summary.json`` (besides the pool name and the file's path)
SUMMARY_KEYS = ("selector", "workload", "backend", "seed", "command", "aggregate", "per_domain", "router")


def find_result_files(paths: Iterable[str | Path]) -> list[Path]:
    """JSON files under each path (a file, a directory searched recursively, or a glob); :func:`load_results`
    keeps those that are bench results (``results.json`` of runs, or renamed copies such as docs/results/*.json)."""
    out: list[Path] = []
    for p in paths:
        hits = [Path(x) for x in glob.glob(str(p))] or [Path(p)]
        for h in hits:
            if h.is_dir():
                out += sorted(x for x in h.rglob("*.json") if "wandb" not in x.parts)
            elif h.is_file():
                out.append(h)
    return sorted(set(out))


def _bench_result(path: Path) -> dict[str, Any] | None:
    """The validated bench result in ``path``, or ``None`` when the JSON is something else."""
    d = json.loads(path.read_text())
    if isinstance(d, dict) and d.get("format") == RESULT_FORMAT:
        validate_result(d)
        return d
    return None


def load_results(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read and validate bench results (non-bench JSON files are skipped); ``ValueError`` if none found."""
    res = []
    for f in find_result_files(paths):
        d = _bench_result(Path(f))
        if d is not None:
            d.setdefault("_path", str(f))
            res.append(d)
    if not res:
        raise ValueError(f"no bench results ({RESULT_FORMAT}) found under {[str(p) for p in paths]}")
    return res


def load_results_dir(results_dir: str | Path, shown_as: str = "docs/results") -> list[dict[str, Any]]:
    """The bench results directly in ``results_dir`` (not recursive, sorted by name), each with ``_path`` set
    to ``<shown_as>/<file name>`` (how docs/RESULTS.md names the committed files); possibly none."""
    bench = []
    for f in sorted(Path(results_dir).glob("*.json")):
        d = _bench_result(f)
        if d is not None:
            d["_path"] = f"{shown_as}/{f.name}"
            bench.append(d)
    return bench


def _figure_groups(results: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """``<pool>_<workload>_<backend>`` → one run per selector (the lowest seed), sorted by selector."""
    by_wl: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        by_wl.setdefault(f"{r['pool']['name']}_{r['workload'].replace(':', '-')}_{r['backend']}", []).append(r)
    out = {}
    for key, runs in sorted(by_wl.items()):
        first: dict[str, Mapping[str, Any]] = {}
        for r in runs:
            if r["selector"] not in first or r["seed"] < first[r["selector"]]["seed"]:
                first[r["selector"]] = r
        out[key] = [first[s] for s in sorted(first)]
    return out


def write_collection(results: Sequence[Mapping[str, Any]], out_dir: str | Path) -> dict[str, str]:
    """One table (``table.md``), ``summary.json`` and per-workload figures for a sweep/multirun."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = with_fixed_mats(results)
    text = "# Bench collection\n\n" + collection_table(results)
    g = goals(results)
    if g:
        text += "\n## Reproduction goals, measured ratios\n\n" + goals_table(g)
    files = {"table.md": str(write_text_atomic(text, out_dir / "table.md"))}
    summary = [{k: r[k] for k in SUMMARY_KEYS} | {"pool": r["pool"]["name"], "path": r.get("_path")} for r in results]
    summary_doc = portable_paths({"runs": summary, "goals": g})  # committed summaries name no machine paths
    files["summary.json"] = str(write_json_atomic(summary_doc, out_dir / "summary.json"))
    for key, rs in _figure_groups(results).items():
        mat_png, regret_png = f"mat_by_domain_{key}.png", f"regret_{key}.png"
        files[mat_png] = str(plot_mat_by_domain(rs, out_dir / mat_png, f"MAT per domain ({key})"))
        files[regret_png] = str(plot_bench_regret(rs, out_dir / regret_png, f"Regret ({key})"))
    return files
