"""Matplotlib figures (object API, Agg backend) saved as PNG next to the JSON results.

* Simulator-shaped results (``results[label][N] = {mat, avg_regret, oracle_mat, regret_curve}``, from
  scripts/simulate.py and ``scripts/report.py replay``): :func:`plot_regret_curves` (paper Fig 5a analog),
  :func:`plot_scaling` (Fig 5b analog).
* Bench results (schema :data:`hedgespec.bench.metrics.RESULT_FORMAT`): :func:`plot_mat_by_domain`,
  :func:`plot_bench_regret`, :func:`plot_weights`, :func:`plot_timeline` (one run's or a sweep's figures) and
  :func:`plot_mat_matrix` (the Table 1 analog's drafter × domain heatmap).

matplotlib is imported on the first figure, so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hedgespec.bench.metrics import mean_curve

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: dpi of the bench figures (run dirs, sweep collections); the simulator-shaped figures use the default of _save
BENCH_DPI = 110


def _figure(**kwargs: Any) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _save(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return path


# ---------------------------------------------------------------- simulator-shaped results
def plot_regret_curves(results: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Cumulative regret vs generated tokens, one line per selector (paper Fig 5a analog)."""
    fig = _figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for label, by_n in results.items():
        for n, m in by_n.items():
            curve = m.get("regret_curve")
            if curve:
                ax.plot(range(1, len(curve) + 1), curve, label=f"{label} (N={n})")
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("cumulative regret (ETAP loss, tokens)")
    ax.set_title(title or "Regret vs best fixed drafter in hindsight")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_scaling(results: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Average regret and MAT vs pool size N (paper Fig 5b analog)."""
    from matplotlib.ticker import NullFormatter

    fig = _figure(figsize=(10, 4.2))
    ax_r, ax_m = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    oracle = None
    for label, by_n in results.items():
        ns = sorted(by_n, key=int)
        xs = [int(n) for n in ns]
        if label != "oracle":
            ax_r.plot(xs, [max(by_n[n]["avg_regret"], 1e-5) for n in ns], marker="o", label=label)
        ax_m.plot(xs, [by_n[n]["mat"] for n in ns], marker="o", label=label)
        oracle = [by_n[n]["oracle_mat"] for n in ns], xs
    if oracle:
        ax_m.plot(oracle[1], oracle[0], "k--", label="oracle (best fixed)")
    for ax in (ax_r, ax_m):
        ax.set_xscale("log")
        if oracle:
            ax.set_xticks(oracle[1], [str(x) for x in oracle[1]])
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("number of drafters N")
        ax.grid(alpha=0.3)
    ax_r.set_yscale("log")
    ax_r.set_ylabel("average regret per token")
    ax_m.set_ylabel("MAT (tokens per verification)")
    ax_r.legend(fontsize=7)
    fig.suptitle(title or "Scaling with the pool size")
    return _save(fig, path)


# ---------------------------------------------------------------------------- bench results
def plot_mat_matrix(matrix: dict[str, dict[str, float]], path: str | Path, title: str = "") -> Path:
    """Heatmap of drafter × domain MAT (paper Table 1 analog); the diagonal is each expert on its own domain."""
    drafters = list(matrix)
    domains = list(next(iter(matrix.values())))
    data = [[matrix[d][c] for c in domains] for d in drafters]
    fig = _figure(figsize=(1.0 + 0.9 * len(domains), 1.0 + 0.55 * len(drafters)))
    ax = fig.add_subplot()
    im = ax.imshow(data, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(domains)), domains, rotation=30, ha="right")
    ax.set_yticks(range(len(drafters)), drafters)
    for i, row in enumerate(data):
        best = max(row)
        for j, v in enumerate(row):
            ax.text(
                j,
                i,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="black" if v > 0.6 * best else "white",
                fontweight="bold" if v == max(r[j] for r in data) else None,
            )
    fig.colorbar(im, ax=ax, label="MAT (tokens / verification)")
    ax.set_xlabel("evaluation domain")
    ax.set_ylabel("drafter")
    ax.set_title(title or "Drafter × domain MAT")
    return _save(fig, path)


def plot_mat_by_domain(results: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Grouped bars: MAT per domain (x) for each run/selector (bars)."""
    doms = sorted({d for r in results for d in r["per_domain"]})
    fig = _figure(figsize=(max(6.0, 1.1 * len(doms) + 2), 4.0))
    ax = fig.add_subplot()
    width = 0.8 / max(len(results), 1)
    for j, r in enumerate(results):
        ys = [r["per_domain"].get(d, {}).get("mat", np.nan) for d in doms]
        ax.bar(np.arange(len(doms)) + j * width - 0.4 + width / 2, ys, width, label=r["selector"])
    ax.set_xticks(range(len(doms)), doms, rotation=30, ha="right")
    ax.set_ylabel("MAT (tokens per verification)")
    ax.set_title(title or "MAT per domain × selector")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path, BENCH_DPI)


def plot_bench_regret(results: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Mean cumulative ETAP regret (over each run's requests) vs generated tokens, one line per run/selector."""
    fig = _figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for r in results:
        c = mean_curve([q.get("regret_curve") or [] for q in r["requests"]])
        if len(c):
            ax.plot(np.arange(1, len(c) + 1), c, label=r["selector"])
    ax.set_xlabel("generated tokens")
    ax.set_ylabel("mean cumulative regret (ETAP loss)")
    ax.set_title(title or "Regret vs the per-request best fixed drafter")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no γ-based regret (backend=server)", ha="center", transform=ax.transAxes)
    return _save(fig, path, BENCH_DPI)


def plot_weights(res: Mapping[str, Any], path: Path) -> Path:
    """The selector's weights per round over the first request that has them."""
    fig = _figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    req = next((q for q in res["requests"] if q.get("weights") and any(w is not None for w in q["weights"])), None)
    names = res["pool"]["drafters"]
    if req is None:
        ax.text(0.5, 0.5, f"{res['selector']}: no weights (deterministic rule)", ha="center", transform=ax.transAxes)
    else:
        w = np.array([x if x is not None else [np.nan] * len(names) for x in req["weights"]], dtype=float)
        for i in range(w.shape[1]):
            ax.plot(np.arange(len(w)), w[:, i], label=names[i] if i < len(names) else f"d{i}")
        ax.set_xlabel("round")
        ax.set_ylabel("weight")
        ax.legend(fontsize=7)
        ax.set_title(f"{res['selector']}: weights over request {req['request_id']} ({req['domain']})")
    ax.grid(alpha=0.3)
    return _save(fig, path, BENCH_DPI)


def plot_timeline(res: Mapping[str, Any], path: Path, max_requests: int = 12) -> Path:
    """Chosen drafter per round over the first ``max_requests`` requests of the stream (colour = domain)."""
    fig = _figure(figsize=(9, 3.6))
    ax = fig.add_subplot()
    names = res["pool"]["drafters"]
    x0 = 0
    doms = sorted({q["domain"] for q in res["requests"]})
    cmap = {d: f"C{j % 10}" for j, d in enumerate(doms)}
    for q in res["requests"][:max_requests]:
        ch = q.get("chosen") or []
        ax.scatter(np.arange(x0, x0 + len(ch)), ch, s=6, color=cmap[q["domain"]])
        x0 += len(ch)
        ax.axvline(x0 - 0.5, color="k", lw=0.4, alpha=0.4)
    for d in doms:
        ax.scatter([], [], color=cmap[d], label=d)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel(f"round (first {min(max_requests, len(res['requests']))} requests; lines separate requests)")
    ax.set_title(f"{res['selector']}: chosen drafter per round (colour = request domain)")
    ax.legend(fontsize=6, ncol=4)
    return _save(fig, path, BENCH_DPI)
