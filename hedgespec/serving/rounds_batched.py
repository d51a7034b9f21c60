"""γ for a whole batch of the HEDGESPEC worker's round at once (torch-free), the input of
:class:`hedgespec.selectors.batched.BatchedHedgeSpec`.

Row for row the γ of :func:`hedgespec.serving.rounds.greedy_gamma` (greedy verification, chain drafting):
request b emitted e_0..e_m; drafter i proposed e_0 after the previous round (``first_pred[b, i]``) and e_u
(u ≥ 1) from its draft-extend row u−1 of this round (``row_preds[i, b, u−1]``), so
γ[b, u, i] = 1{proposal = e_u}. The worker has these as arrays already: every drafter's argmax rows [B, ndt]
and the committed tokens [B, ndt], so the whole batch is one comparison. Under tree drafting each proposal is
the drafter's top-k ids (a trailing axis of size k) and γ is 1{e_u among them}.
"""

from __future__ import annotations

import numpy as np


def greedy_gamma_batch(first_pred: object, row_preds: object, committed: object) -> np.ndarray:
    """γ [B, ndt, N] from each drafter's proposals; only the first ``emitted[b]`` rows of request b are its
    emitted positions (the rest compare tokens past the end and are ignored by ``BatchFeedback``).

    Args:
        first_pred: [B, N] (or [B, N, k] under tree drafting), drafter i's proposal for request b's e_0.
        row_preds: [N, B, ≥ ndt−1] (or [N, B, ≥ ndt−1, k]), drafter i's proposal after each draft-extend
            input row of request b.
        committed: [B, ndt], the tokens the verification committed (e_0..e_m first).
    """
    fp, rp, cm = np.asarray(first_pred), np.asarray(row_preds), np.asarray(committed)
    if fp.ndim == 3 or rp.ndim == 4:
        return _topk_gamma_batch(fp, rp, cm)
    if cm.ndim != 2 or cm.shape[1] < 1:
        raise ValueError(f"committed must have shape [B, ndt >= 1], got {cm.shape}")
    b, ndt = cm.shape
    if fp.ndim != 2 or fp.shape[0] != b:
        raise ValueError(f"first_pred must have shape [{b}, N], got {fp.shape}")
    n = fp.shape[1]
    if rp.ndim != 3 or rp.shape[:2] != (n, b) or rp.shape[2] < ndt - 1:
        raise ValueError(f"row_preds must have shape [{n}, {b}, >= {ndt - 1}], got {rp.shape}")
    gamma = np.empty((b, ndt, n))
    gamma[:, 0, :] = fp == cm[:, :1]
    gamma[:, 1:, :] = rp[:, :, : ndt - 1].transpose(1, 2, 0) == cm[:, 1:, None]
    return gamma


def _topk_gamma_batch(fp: np.ndarray, rp: np.ndarray, cm: np.ndarray) -> np.ndarray:
    """:func:`greedy_gamma_batch` for top-k proposals (tree drafting): γ[b, u, i] = 1{e_u ∈ proposal}."""
    if cm.ndim != 2 or cm.shape[1] < 1:
        raise ValueError(f"committed must have shape [B, ndt >= 1], got {cm.shape}")
    b, ndt = cm.shape
    if fp.ndim != 3 or fp.shape[0] != b:
        raise ValueError(f"first_pred must have shape [{b}, N, k], got {fp.shape}")
    n, k = fp.shape[1], fp.shape[2]
    if rp.ndim != 4 or rp.shape[:2] != (n, b) or rp.shape[2] < ndt - 1 or rp.shape[3] != k:
        raise ValueError(f"row_preds must have shape [{n}, {b}, >= {ndt - 1}, {k}], got {rp.shape}")
    gamma = np.empty((b, ndt, n))
    gamma[:, 0, :] = (fp == cm[:, :1, None]).any(-1)
    gamma[:, 1:, :] = (rp[:, :, : ndt - 1].transpose(1, 2, 0, 3) == cm[:, 1:, None, None]).any(-1)
    return gamma
