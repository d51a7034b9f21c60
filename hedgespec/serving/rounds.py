"""The HEDGESPEC worker's γ for one request, the definition (torch-free, sglang-free): the worker computes it for
the whole batch at once (:func:`hedgespec.serving.rounds_batched.greedy_gamma_batch`), and the tests check the
batched form against this one row for row.

γ for one request and one verification round (the paper's counterfactual γ under greedy verification and
chain drafting): the round emitted tokens e_0..e_m (m accepted drafts + the bonus token). Drafter i's proposal
for e_0 is its top-1 token after the previous round (``first_pred[i]``); its proposal for e_u (u ≥ 1) is the
top-1 token of its draft-extend row u−1 of this round (input e_{u−1}). Under greedy verification a drafter's
chain is accepted at u exactly when its proposal equals e_u, so γ[u, i] = 1{proposal_i(u) = e_u}, the top-1 case
of ``hedgespec.acceptance.gamma_greedy`` evaluated on the realised target argmax. For u ≥ 1 the proposal comes
from the draft-extend pass over the verified prefix with the *target's* features (see docs/architecture.md), so
for the chosen drafter it can differ from the chain it actually drafted (which used its own recurrent
features).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def greedy_gamma(
    first_pred: Sequence[int], row_preds: Sequence[Sequence[int]], emitted_tokens: Sequence[int]
) -> np.ndarray:
    """γ [len(emitted_tokens), N] from each drafter's proposals (see module docstring).

    Args:
        first_pred: per drafter, its proposal (target token id) for e_0.
        row_preds: per drafter, its proposals for the token after each draft-extend input row (≥ m rows).
        emitted_tokens: e_0..e_m, the tokens this round emitted.
    """
    emitted = len(emitted_tokens)
    n = len(first_pred)
    if emitted < 1:
        raise ValueError("a verification round emits at least one token")
    if len(row_preds) != n:
        raise ValueError(f"row_preds has {len(row_preds)} drafters, first_pred has {n}")
    gamma = np.zeros((emitted, n), dtype=np.float64)
    for i in range(n):
        gamma[0, i] = float(int(first_pred[i]) == int(emitted_tokens[0]))
        for u in range(1, emitted):
            gamma[u, i] = float(int(row_preds[i][u - 1]) == int(emitted_tokens[u]))
    return gamma
