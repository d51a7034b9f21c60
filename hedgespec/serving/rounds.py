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

Tree drafting (``--speculative-eagle-topk k > 1``): a proposal is drafter i's top-k tokens at that position (the
children it would put under the node), and SGLang's greedy tree walk accepts position u exactly when the target's
token e_u is among them, so γ[u, i] = 1{e_u ∈ top-k_i(u)}: ``hedgespec.acceptance.gamma_greedy`` with top-k, the
greedy case of Theorem 2's tree γ (the target mass on the drafter's top-k children). As in the reference engine's
tree mode this is the counterfactual value for a tree that keeps the top-k children of every accepted node; a
drafted tree may keep fewer of them (SGLang keeps the ``num_draft_tokens`` best-scored nodes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _proposes(proposal: int | Sequence[int], token: int) -> bool:
    """Whether a proposal (one token id, or a drafter's top-k token ids under tree drafting) holds ``token``."""
    ids = [proposal] if isinstance(proposal, (int, np.integer)) else list(proposal)
    return int(token) in {int(x) for x in ids}


def greedy_gamma(
    first_pred: Sequence[int | Sequence[int]],
    row_preds: Sequence[Sequence[int | Sequence[int]]],
    emitted_tokens: Sequence[int],
) -> np.ndarray:
    """γ [len(emitted_tokens), N] from each drafter's proposals (see module docstring).

    Args:
        first_pred: per drafter, its proposal (target token id, or its top-k ids for a tree) for e_0.
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
        gamma[0, i] = float(_proposes(first_pred[i], emitted_tokens[0]))
        for u in range(1, emitted):
            gamma[u, i] = float(_proposes(row_preds[i][u - 1], emitted_tokens[u]))
    return gamma
