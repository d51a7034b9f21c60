"""Counterfactual acceptance probabilities γ, the acceptance-length estimator and HedgeSpec's losses.

Layer L0: numpy only. Torch tensors are accepted (converted with ``.detach().cpu().numpy()`` by duck
typing, so torch is never imported here). All functions work along the last axis (the vocabulary for
distributions, the K draft steps for γ windows) and broadcast over leading axes.

References: HedgeSpec ("Not-a-Bandit", Liu et al., ICLR 2026): Theorem 1 (chain γ = 1 − TV), Theorem 2
(tree γ = target mass of the drafter's top-k children), Theorem 3 (acceptance-length estimator), and the
ETAP / EAL losses built on them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_PROB_ATOL = 1e-3  # float32 softmax rows over a 150k vocabulary sum to 1 within ~1e-5; be lenient


def as_numpy(x: Any, name: str) -> np.ndarray:
    """Convert numpy/torch/list input to a float64 ndarray (torch by duck typing, never imported)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if hasattr(x, "float"):
            x = x.float()
        x = x.numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of numbers, got {type(x).__name__}") from err
    return arr


def check_distribution(x: Any, name: str) -> np.ndarray:
    """Validate probability vectors along the last axis: finite, non-negative, summing to 1."""
    arr = as_numpy(x, name)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) axis, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(arr < -1e-12):
        raise ValueError(f"{name} has negative probabilities (min {arr.min():.3g})")
    sums = arr.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=_PROB_ATOL):
        worst = float(np.max(np.abs(sums - 1.0)))
        raise ValueError(f"{name} rows must sum to 1 along the last axis (worst deviation {worst:.3g})")
    return np.clip(arr, 0.0, None)


def _check_pair(p: Any, q: Any) -> tuple[np.ndarray, np.ndarray]:
    pa, qa = check_distribution(p, "p"), check_distribution(q, "q")
    try:
        np.broadcast_shapes(pa.shape, qa.shape)
    except ValueError as err:
        raise ValueError(f"p and q shapes do not broadcast: p {pa.shape}, q {qa.shape}") from err
    if pa.shape[-1] != qa.shape[-1]:
        raise ValueError(f"p and q must share the vocabulary axis: p {pa.shape}, q {qa.shape}")
    return pa, qa


def _check_topk(topk: int, vocab: int) -> int:
    if not isinstance(topk, (int, np.integer)) or isinstance(topk, bool) or topk < 1:
        raise ValueError(f"topk must be an int >= 1, got {topk!r}")
    if topk > vocab:
        raise ValueError(f"topk={topk} exceeds the vocabulary size {vocab}")
    return int(topk)


def topk_indices(q: np.ndarray, topk: int) -> np.ndarray:
    """Indices of the ``topk`` largest entries along the last axis; ties go to the lower token id."""
    order = np.argsort(-q, axis=-1, kind="stable")
    return order[..., :topk]


def gamma_chain(p: Any, q: Any) -> np.ndarray:
    """Single-draft chain acceptance probability, Thm 1: γ = Σ_x min(p(x), q(x)) = 1 − TV(p, q)."""
    pa, qa = _check_pair(p, q)
    return np.clip(np.minimum(pa, qa).sum(axis=-1), 0.0, 1.0)


def gamma_tree(p: Any, q: Any, topk: int) -> np.ndarray:
    """EAGLE draft-tree acceptance, Thm 2: target mass on the drafter's top-k children, Σ_{c∈C(q)} p(c)."""
    pa, qa = _check_pair(p, q)
    k = _check_topk(topk, pa.shape[-1])
    pa, qa = np.broadcast_arrays(pa, qa)
    idx = topk_indices(qa, k)
    return np.clip(np.take_along_axis(pa, idx, axis=-1).sum(axis=-1), 0.0, 1.0)


def gamma_greedy(p: Any, q: Any, topk: int = 1) -> np.ndarray:
    """Greedy verification: γ = 1{argmax p ∈ top-k(q)} (topk=1: the greedy chain rule argmax q = argmax p)."""
    pa, qa = _check_pair(p, q)
    k = _check_topk(topk, pa.shape[-1])
    pa, qa = np.broadcast_arrays(pa, qa)
    target = np.argmax(pa, axis=-1)[..., None]
    return np.any(topk_indices(qa, k) == target, axis=-1).astype(np.float64)


def check_gammas(gammas: Any, name: str = "gammas") -> np.ndarray:
    g = as_numpy(gammas, name)
    if g.ndim == 0 or g.shape[-1] < 1:
        raise ValueError(f"{name} must have a last axis of K >= 1 acceptance probabilities, got shape {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(g < -1e-9) or np.any(g > 1 + 1e-9):
        raise ValueError(f"{name} must lie in [0, 1] (got range [{g.min():.3g}, {g.max():.3g}])")
    return np.clip(g, 0.0, 1.0)


def expected_accept_length(gammas: Any, form: str = "tail") -> np.ndarray:
    """Thm 3 acceptance-length estimator for a window of K γ's (last axis), value in [1, K+1].

    ``tail`` (used in code):  AL = 1 + γ_1 + γ_1γ_2 + … + γ_1⋯γ_K.
    ``pmf`` (the definition): AL = Σ_{k=1}^{K+1} k (1 − γ_k) Π_{j<k} γ_j with γ_{K+1} ≡ 0.
    """
    g = check_gammas(gammas)
    if form == "tail":
        return 1.0 + np.cumprod(g, axis=-1).sum(axis=-1)
    if form == "pmf":
        k = g.shape[-1]
        ext = np.concatenate([g, np.zeros(g.shape[:-1] + (1,))], axis=-1)  # γ_{K+1} = 0
        survive = np.concatenate([np.ones(g.shape[:-1] + (1,)), np.cumprod(g, axis=-1)], axis=-1)
        steps = np.arange(1, k + 2, dtype=np.float64)
        return (steps * (1.0 - ext) * survive).sum(axis=-1)
    raise ValueError(f"form must be 'tail' or 'pmf', got {form!r}")


def etap_loss(gamma: Any) -> np.ndarray:
    """ETAP loss of the paper (expected token acceptance probability): f_t[i] = 1 − γ_t[i] ∈ [0, 1]."""
    g = as_numpy(gamma, "gamma")
    if not np.all(np.isfinite(g)):
        raise ValueError("gamma contains NaN or inf")
    if np.any(g < -1e-9) or np.any(g > 1 + 1e-9):
        raise ValueError(f"gamma must lie in [0, 1] (got range [{g.min():.3g}, {g.max():.3g}])")
    return 1.0 - np.clip(g, 0.0, 1.0)


def eal_loss(gammas: Any, K: int) -> np.ndarray:
    """EAL loss of the paper (expected acceptance length): f_t[i] = 1 − AL_t[i]/(K+1) ∈ [0, K/(K+1)].

    Built from γ at t..t+K−1 (last axis) with the Theorem 3 estimator.
    """
    if not isinstance(K, (int, np.integer)) or isinstance(K, bool) or K < 1:
        raise ValueError(f"K must be an int >= 1, got {K!r}")
    g = check_gammas(gammas)
    if g.shape[-1] != K:
        raise ValueError(f"gammas must have K={K} entries on the last axis, got {g.shape[-1]}")
    return 1.0 - expected_accept_length(g) / (K + 1)
