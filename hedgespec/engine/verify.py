"""Sampling warps and lossless verification rules (greedy and speculative sampling, chain and tree).

Every rule takes the target's *processed* distributions p (temperature → top-k → top-p, exactly what plain
sampling draws from, :func:`target_probs`) and returns the accepted drafts plus one bonus/correction token.

Chain sampling (Leviathan et al. 2023, Chen et al. 2023). Drafts d_j ~ q_j. Accept d_j with probability
min(1, p_j(d_j)/q_j(d_j)); at the first rejection emit a token from the residual norm(max(p_j − q_j, 0));
if all K are accepted emit a token from p_{K+1}. Each step outputs x with probability
q(x)·min(1, p/q) + (1 − Σ min(p, q))·max(p − q, 0)/Σ max(p − q, 0) = min(p, q) + max(p − q, 0) = p(x).

Tree sampling ("target-only" sequential rejection over siblings; the rule SGLang's tree kernel applies with
draft_probs = 0). At a node with current target distribution r (initially p at that node) the children
c_1, c_2, … (fixed candidates, highest draft score first) are tried in order: accept c_j with probability
r(c_j); on rejection set r ← r with c_j removed, renormalised; if every child is rejected emit a token
from the final r. Losslessness, by induction over the children: trying c with proposal δ_c outputs c with
probability r(c), and otherwise continues with r restricted to x ≠ c and renormalised, so the output law
is r(c)·δ_c + (1 − r(c))·r(·|x ≠ c) = r. An accepted child's subtree repeats the rule with p at that
child. The node's total acceptance probability is Σ_j p(c_j), i.e. the tree γ of Theorem 2 of the HedgeSpec
paper ("Not-a-Bandit", target mass of the drafter's top-k children).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hedgespec.decoding import SamplingParams


def target_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Plain-sampling distribution: softmax(logits / T) restricted to the top-k, then to the top-p nucleus.

    Same order and tie rules as transformers' Temperature → TopK → TopP warpers: top-k keeps every token
    whose logit ≥ the k-th largest; top-p keeps the smallest set of highest-probability tokens whose mass
    reaches ``top_p`` (at least one token).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
    x = logits.float() / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        srt, order = torch.sort(x, dim=-1, descending=False)
        cum = srt.softmax(-1).cumsum(-1)
        remove = cum <= (1 - top_p)
        remove[..., -1] = False
        x = x.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return x.softmax(-1)


def sampling_probs(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """:func:`target_probs` with a request's settings (``sampling.temperature`` must be > 0)."""
    return target_probs(logits, sampling.temperature, sampling.top_k, sampling.top_p)


def check_finite(logits: torch.Tensor, what: str) -> None:
    """Raise if ``logits`` hold a NaN or an infinity. One min/max pass (NaN propagates into both): on a CPU it
    costs about a tenth of ``torch.isfinite(...).all()`` on a verify's [K+1, V] logits."""
    if not logits.numel():
        return
    lo, hi = torch.aminmax(logits)
    if not (bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))):
        raise ValueError(f"{what} produced non-finite (NaN/inf) logits; check the model weights and dtype")


# ---------------------------------------------------------------------------------------- chain
def verify_chain_greedy(draft: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Accept the longest prefix with d_j == argmax p_j; bonus = argmax p at the first mismatch."""
    a = 0
    while a < len(draft) and int(draft[a]) == int(target_argmax[a]):
        a += 1
    return a, int(target_argmax[a])


def verify_chain_sample(
    draft: Sequence[int], q: torch.Tensor, p: torch.Tensor, gen: torch.Generator
) -> tuple[int, int]:
    """Leviathan/Chen rejection: q [K, V] draft laws the drafts came from, p [K+1, V] target laws."""
    for j, d in enumerate(draft):
        d = int(d)
        if float(torch.rand((), generator=gen)) * float(q[j, d]) < float(p[j, d]):  # u < p/q
            continue
        resid = (p[j] - q[j]).clamp_min(0)
        s = float(resid.sum())
        resid = resid / s if s > 0 else p[j]
        return j, int(torch.multinomial(resid, 1, generator=gen))
    return len(draft), int(torch.multinomial(p[len(draft)], 1, generator=gen))


# ----------------------------------------------------------------------------------------- tree
def verify_tree_greedy(
    children: Sequence[Sequence[int]], tokens: Sequence[int], target_argmax: Sequence[int]
) -> tuple[list[int], int]:
    """Walk from the root (row 0): move to the child whose token is argmax p at the current row.

    ``children[r]`` lists rows (1-based node rows; row 0 = root) under row r; ``tokens[r]`` the row's token.
    Returns the accepted rows (excluding the root) and the bonus token.
    """
    path: list[int] = []
    row = 0
    while True:
        want = int(target_argmax[row])
        nxt = next((c for c in children[row] if int(tokens[c]) == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        row = nxt


def verify_tree_sample(
    children: Sequence[Sequence[int]], tokens: Sequence[int], p: torch.Tensor, gen: torch.Generator
) -> tuple[list[int], int]:
    """Sequential target-only rejection over siblings (module docstring); p [rows, V]."""
    path: list[int] = []
    row = 0
    while True:
        r = p[row].clone()
        nxt = None
        for c in children[row]:
            tok = int(tokens[c])
            mass = float(r.sum())
            if mass <= 0:
                break
            if float(torch.rand((), generator=gen)) * mass < float(r[tok]):
                nxt = c
                break
            r[tok] = 0.0
        if nxt is None:
            s = float(r.sum())
            return path, int(torch.multinomial(r / s if s > 0 else p[row], 1, generator=gen))
        path.append(nxt)
        row = nxt
