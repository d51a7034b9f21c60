"""γ of sampled requests under SGLang's target-only chain verification (torch only; no sglang import).

When a batch is not all greedy (and the platform has sampling-verify kernels: SGLang verifies greedily on CPU),
SGLang 0.5.23 verifies an EAGLE chain "target-only": it turns the verify step's target logits into a law p over
the vocabulary, per row, exactly as its sampler does (temperature softmax, then top-k renormalisation when a
request asks for it, then top-p), and walks the chain depth by depth with one uniform coin c ∈ [0, 1) per depth:
the draft token x at that depth is accepted when p(x) > 0 and (c < p(x) / t_acc or p(x) ≥ t_single), with
``t_single = --speculative-accept-threshold-single`` and ``t_acc = --speculative-accept-threshold-acc`` (both 1
by default, t_acc floored at 1e-9). A rejected position emits a token from the residual law, so with the default
thresholds the output follows p exactly (Theorem 1's rule for a point-mass draft: min(1, p(x)/q(x)) with q = δ_x).

So a drafter i that proposes x at an emitted position u is accepted there with probability

    γ[u, i] = a(p_u(x)),  a(p) = 0 if p = 0;  1 if p ≥ t_single;  min(1, p / t_acc) otherwise,

which is p_u(x) at the defaults: the exact counterfactual γ of the round, for every drafter, from the one target
verification (rows u ≤ m of the verify step are conditioned on the realised prefix e_<u, because the accepted
drafts are e_0..e_{m−1}). The greedy γ of :mod:`hedgespec.serving.rounds_batched` is the same rule for a law
that puts all its mass on the target's argmax (greedy requests in a sampled batch have temperature 1 and top-k
1 in SGLang, so this module gives them the indicator too).

Tree drafting (``topk = k > 1``): SGLang's target-only tree walk keeps one coin per depth and tries the accepted
node's children in order, accepting child c_j when p(c_j) > 0 and (c < (p(c_1) + … + p(c_j)) / t_acc or
p(c_j) ≥ t_single). Some child is accepted exactly when c < S / t_acc or a child with p > 0 has p ≥ t_single
(S = Σ_c p(c)), so a drafter whose top-k at u is C is accepted there with probability

    γ[u, i] = 1 if some c ∈ C has 0 < p_u(c) and p_u(c) ≥ t_single;  min(1, S / t_acc) otherwise,

Theorem 2's target mass on the top-k children at the default thresholds (and a(p) above for k = 1). The law
rows of a tree are its accepted nodes' rows (:func:`tree_rows`).

The SGLang worker passes SGLang's own softmax and renormalisation kernels (:class:`Kernels`), so p is the law
its verification used; the tests pass torch implementations and check against an independent numpy one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

THRESHOLD_ACC_FLOOR = 1e-9  # SGLang clamps t_acc to at least this before dividing


@dataclass(frozen=True)
class Kernels:
    """The target law's kernels: ``softmax(logits, temperatures=[R, 1])``, ``top_k_renorm(probs, top_ks [R])``
    and ``top_p_renorm(probs, top_ps [R])`` (SGLang's ``sampling_softmax``, ``top_k_renorm_prob``,
    ``top_p_renorm_prob`` in the worker). A renorm may be None where the platform has none; asking for it then
    raises."""

    softmax: Callable[..., torch.Tensor]
    top_k_renorm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    top_p_renorm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None


@dataclass(frozen=True)
class SamplingRows:
    """Per-request sampling settings of a verify batch (SGLang's ``SamplingBatchInfo`` fields).

    Attributes:
        temperatures: [B, 1] (or [B]) per-request temperature (1 for greedy requests in SGLang).
        top_ks: [B] per-request top-k; read only when ``need_top_k``.
        top_ps: [B] per-request top-p; read only when ``need_top_p``.
        need_top_k, need_top_p: whether the batch's sampler renormalises by top-k / top-p.
    """

    temperatures: torch.Tensor
    top_ks: torch.Tensor | None = None
    top_ps: torch.Tensor | None = None
    need_top_k: bool = False
    need_top_p: bool = False


def check_thresholds(threshold_single: float, threshold_acc: float) -> tuple[float, float]:
    """SGLang's own range check (both in [0, 1]); returns them as floats, t_acc floored as SGLang floors it."""
    ts, ta = float(threshold_single), float(threshold_acc)
    for name, v in (("speculative_accept_threshold_single", ts), ("speculative_accept_threshold_acc", ta)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {v!r}")
    return ts, max(ta, THRESHOLD_ACC_FLOOR)


def acceptance_prob(p: torch.Tensor, threshold_single: float = 1.0, threshold_acc: float = 1.0) -> torch.Tensor:
    """a(p): the probability that SGLang's target-only chain rule accepts a draft token whose target
    probability is p (see the module docstring), elementwise."""
    ts, ta = check_thresholds(threshold_single, threshold_acc)
    a = torch.clamp(p / ta, max=1.0)
    a = torch.where(p >= ts, torch.ones_like(a), a)
    return torch.where(p > 0, a, torch.zeros_like(a))


def target_law(logits: torch.Tensor, rows: SamplingRows, ndt: int, kernels: Kernels) -> torch.Tensor:
    """The target law p of every verify row, [B, ndt, V], in SGLang's order: softmax at each request's
    temperature, then top-k and top-p renormalisation where the batch needs them.

    Args:
        logits: the verify step's target logits [B·ndt, V] after SGLang's penalties and grammar mask (it applies
            them in place before sampling), request b's rows b·ndt .. b·ndt + ndt − 1.
        rows: the batch's sampling settings, one entry per request.
        ndt: verify rows per request (``speculative_num_draft_tokens``).
    """
    if logits.ndim != 2 or ndt < 1 or logits.shape[0] % ndt:
        raise ValueError(f"logits must be [B*ndt, V] with ndt={ndt} rows per request, got {tuple(logits.shape)}")
    b = logits.shape[0] // ndt
    temps = rows.temperatures.reshape(-1, 1)
    if temps.shape[0] != b:
        raise ValueError(f"temperatures has {temps.shape[0]} rows for a batch of {b} requests")
    probs = kernels.softmax(logits, temperatures=torch.repeat_interleave(temps, ndt, dim=0))
    for need, per_req, fn, what in (
        (rows.need_top_k, rows.top_ks, kernels.top_k_renorm, "top-k"),
        (rows.need_top_p, rows.top_ps, kernels.top_p_renorm, "top-p"),
    ):
        if not need:
            continue
        if fn is None or per_req is None:
            raise ValueError(f"the batch needs {what} renormalisation but no {what} kernel or values were given")
        probs = fn(probs, torch.repeat_interleave(per_req.reshape(-1), ndt, dim=0))
    return probs.reshape(b, ndt, -1)


def tree_rows(logits: torch.Tensor, accept_index: torch.Tensor) -> torch.Tensor:
    """The verify logits of a tree's accepted nodes, request by request: [B·S, V] from [B·ndt, V] and SGLang's
    ``accept_index`` [B, S] (global node rows, −1 past the accepted path; those rows repeat row 0 and are
    never read: they lie past the request's emitted tokens). Row u of request b is then the law of e_u, as the
    verify rows of a chain are."""
    return logits[accept_index.reshape(-1).long().clamp(min=0).to(logits.device)]


def proposals(first_pred: np.ndarray, row_preds: torch.Tensor, ndt: int) -> torch.Tensor:
    """Each drafter's proposal at each verify row, [B, ndt, N] (int64; [B, ndt, N, k] for top-k proposals under
    tree drafting): row 0 its first token(s) after the previous round (``first_pred`` [B, N] or [B, N, k]), row
    u ≥ 1 its draft-extend prediction after input row u−1 (``row_preds`` [N, B, ≥ ndt−1] or [N, B, ≥ ndt−1, k]);
    negative ids (a dropped drafter's rows) become 0 (the caller zeroes those γ)."""
    fp = torch.as_tensor(np.asarray(first_pred), dtype=torch.long)
    rp = torch.as_tensor(row_preds, dtype=torch.long)
    tail = tuple(fp.shape[2:])
    b, n = fp.shape[:2]
    if rp.ndim != 3 + len(tail) or rp.shape[:2] != (n, b) or rp.shape[2] < ndt - 1 or tuple(rp.shape[3:]) != tail:
        want = f"[{n}, {b}, >= {ndt - 1}{''.join(f', {t}' for t in tail)}]"
        raise ValueError(f"row_preds must have shape {want}, got {tuple(rp.shape)}")
    rows = rp[:, :, : ndt - 1].permute(1, 2, 0, *range(3, rp.ndim))
    out = torch.cat([fp[:, None], rows], dim=1)
    return out.clamp_(min=0)


def sampled_gamma(
    law: torch.Tensor, props: torch.Tensor, threshold_single: float = 1.0, threshold_acc: float = 1.0
) -> np.ndarray:
    """γ [B, ndt, N] (float64, on the host): a(p_u(proposal of drafter i at row u)) for every request and row,
    or, for top-k proposals [B, ndt, N, k], the tree rule of the module docstring; one gather on ``law``'s device
    and one copy back."""
    if law.ndim != 3 or props.ndim not in (3, 4) or props.shape[:2] != law.shape[:2]:
        raise ValueError(
            f"law [B, ndt, V] and proposals [B, ndt, N(, k)] disagree: {tuple(law.shape)}, {tuple(props.shape)}"
        )
    if props.numel() and int(props.max()) >= law.shape[2]:
        raise ValueError(f"a proposal id {int(props.max())} is outside the target vocabulary ({law.shape[2]})")
    if props.ndim == 3:
        p = law.gather(2, props.to(law.device, non_blocking=True))
        gamma = acceptance_prob(p.float(), threshold_single, threshold_acc)
    else:
        b, ndt, n, k = props.shape
        flat = props.reshape(b, ndt, n * k).to(law.device, non_blocking=True)
        gamma = tree_acceptance_prob(law.gather(2, flat).reshape(b, ndt, n, k).float(), threshold_single, threshold_acc)
    return gamma.to("cpu").double().numpy()


def tree_acceptance_prob(p: torch.Tensor, threshold_single: float = 1.0, threshold_acc: float = 1.0) -> torch.Tensor:
    """The probability that SGLang's target-only tree walk accepts one of the children whose target
    probabilities are ``p``'s last axis (see the module docstring); reduces that axis."""
    ts, ta = check_thresholds(threshold_single, threshold_acc)
    single = ((p > 0) & (p >= ts)).any(dim=-1)
    return torch.where(single, torch.ones_like(p[..., 0]), torch.clamp(p.sum(dim=-1) / ta, max=1.0))
