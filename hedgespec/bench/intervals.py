"""95% confidence intervals for benchmark means: Student's t over seeds (or requests), torch- and scipy-free.

``mean_ci(xs)`` is the mean of ``xs`` and the half-width t_{0.975, n−1} · s / √n of its two-sided 95% interval
(``s`` the sample standard deviation, ddof 1); one value has no interval (half-width ``None``). The t quantiles
are tabulated for n − 1 ≤ 30 and taken from the normal approximation's Cornish–Fisher expansion beyond.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: t_{0.975, df} for df = 1..30 (two-sided 95%)
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_Z975 = 1.959964


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` ≥ 1 degrees of freedom."""
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"degrees of freedom must be an int >= 1, got {df!r}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975  # Cornish-Fisher: error < 1e-4 for df > 30
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(xs: Sequence[float]) -> tuple[float, float | None]:
    """(mean, half-width of the two-sided 95% t-interval); the half-width is None for fewer than two values."""
    vals = [float(x) for x in xs]
    if not vals:
        raise ValueError("mean_ci needs at least one value")
    if any(not math.isfinite(x) for x in vals):
        raise ValueError(f"mean_ci got a non-finite value in {vals}")
    n = len(vals)
    mean = sum(vals) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((x - mean) ** 2 for x in vals) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n)


def fmt_ci(mean: float | None, half: float | None, nd: int = 2) -> str:
    """``1.43 ± 0.05`` (``–`` when there is no mean, the bare mean when there is no interval)."""
    if mean is None:
        return "–"
    return f"{mean:.{nd}f}" + ("" if half is None else f" ± {half:.{nd}f}")
