"""Matplotlib figures (object API, Agg backend) saved as PNG next to the JSON results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def plot_regret_curves(results: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Cumulative regret vs generated tokens, one line per selector (paper Fig 5a analog)."""
    fig = Figure(figsize=(6.4, 4.2))
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
    fig = Figure(figsize=(10, 4.2))
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


def plot_mat_matrix(matrix: dict[str, dict[str, float]], path: str | Path, title: str = "") -> Path:
    """Heatmap of drafter × domain MAT (paper Table 1 analog); the diagonal is each expert on its own domain."""
    drafters = list(matrix)
    domains = list(next(iter(matrix.values())))
    data = [[matrix[d][c] for c in domains] for d in drafters]
    fig = Figure(figsize=(1.0 + 0.9 * len(domains), 1.0 + 0.55 * len(drafters)))
    ax = fig.add_subplot()
    im = ax.imshow(data, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(domains)), domains, rotation=30, ha="right")
    ax.set_yticks(range(len(drafters)), drafters)
    for i, row in enumerate(data):
        best = max(row)
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if v > 0.6 * best else "white", fontweight="bold" if v == max(r[j] for r in data) else None)
    fig.colorbar(im, ax=ax, label="MAT (tokens / verification)")
    ax.set_xlabel("evaluation domain")
    ax.set_ylabel("drafter")
    ax.set_title(title or "Drafter × domain MAT")
    return _save(fig, path)
