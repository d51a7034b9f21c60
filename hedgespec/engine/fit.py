"""Fit an EAGLE-3 head to a target by distillation on CPU (tests, demos, tiny pools).

Not SpecForge: a depth-1 soft cross-entropy between the head's draft distribution at row t (token x_{t+1},
target feature f_t) and the target's distribution of x_{t+2}, on sequences the caller provides (e.g. the
target's own greedy continuations of domain prompts). Enough to make a head that *agrees* with a tiny
target, so acceptance lengths are non-trivial; real drafters come from :mod:`hedgespec.training`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hedgespec.engine.eagle3 import MATRICES, WEIGHT_KEYS, Eagle3Drafter, stack_weights, stacked_forward
from hedgespec.engine.pool import DrafterPool
from hedgespec.engine.target import TargetModel


def fit_drafter(
    drafter: Eagle3Drafter,
    target_model,
    sequences: Sequence[torch.Tensor],
    steps: int = 200,
    lr: float = 1e-2,
    seed: int = 0,
    hard: bool = True,
) -> Eagle3Drafter:
    """Return a copy of ``drafter`` trained for ``steps`` Adam steps on ``sequences`` (1-D token tensors)."""
    pool = DrafterPool([drafter], target_model)
    tgt = TargetModel(target_model, pool.capture_ids)
    data = []
    for seq in sequences:
        logits, feats = tgt.prefill(seq.long())
        # row t: token x_{t+1}, feature f_t -> target law of x_{t+2} (= softmax(logits[t+1]))
        data.append((seq[1:-1], pool.features(feats[:-2], [0]).detach(), logits[1:-1].softmax(-1).detach()))
    w = {k: v.detach().clone().requires_grad_(True) for k, v in stack_weights([drafter]).items()}
    opt = torch.optim.Adam(list(w.values()), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    tids = drafter.target_ids
    for _ in range(steps):
        toks, hid, teacher = data[int(torch.randint(len(data), (1,), generator=gen))]
        t = toks.shape[0]
        cos, sin = pool.rope(torch.arange(t))
        emb = tgt.embed(toks)[None].detach()
        logits, _, _, _ = stacked_forward(
            w, pool.eps, pool.n_heads, pool.n_kv, emb, hid, True, cos, sin, None, None, None
        )
        tq = teacher[:, tids]
        if hard:  # target argmax restricted to the draft vocab
            tq = torch.nn.functional.one_hot(tq.argmax(-1), tq.shape[-1]).float()
        tq = tq / tq.sum(-1, keepdim=True).clamp_min(1e-9)
        loss = -(tq * logits[0].log_softmax(-1)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    weights = {k: (v.detach()[0].t() if k in MATRICES else v.detach()[0]).contiguous() for k, v in w.items()}
    assert set(weights) == set(WEIGHT_KEYS.values())
    return Eagle3Drafter(drafter.config, weights, drafter.d2t.clone(), drafter.t2d.clone(), name=drafter.name + "-fit")
