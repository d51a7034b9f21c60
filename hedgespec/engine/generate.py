"""The speculative decoding loop: select → draft → verify → evaluate → feedback (SPEC §1, ARCHITECTURE data flow).

Bookkeeping (c = tokens committed in the target cache, x_c = the *root*: last emitted token, not yet run):

* target cache: x_0..x_{c-1}; features f_0..f_{c-1} known; ``feat`` = f_{c-1}.
* pool caches: rows 0..c-2, row t = (x_{t+1}, f_t). The *pending row* (x_c, f_{c-1}) starts every draft.
* a round verifies [x_c, drafts] in one target forward, accepts a drafts + 1 bonus token, commits x_c and
  the accepted drafts, then :meth:`DrafterPool.evaluate` appends the a+1 verified rows (pending row first)
  to **all** heads in one batched pass; row j's logits are q_i at emitted position j (the chosen head's row
  0 is exactly its first draft step, deeper rows use target features: SPEC §1 time-inhomogeneity caveat).

Positions given to selectors (``RoundFeedback.start``) count round-emitted tokens from 0; the first token
(produced by the prefill, before any round) is not a round's. MAT = emitted / rounds (SPEC §7).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.pool import DrafterPool
from hedgespec.engine.target import TargetModel
from hedgespec.engine.trace import RequestTrace, write_traces
from hedgespec.engine.tree import DraftTree, draft_chain, draft_chain_all, draft_tree
from hedgespec.engine.verify import (
    check_finite,
    target_probs,
    verify_chain_greedy,
    verify_chain_sample,
    verify_tree_greedy,
    verify_tree_sample,
)
from hedgespec.types import Decision, RequestContext, RequestStats, RoundFeedback

MODES = ("chain", "tree")


def _prompt(input_ids: Any) -> tuple[torch.Tensor, bool]:
    batched = False
    if isinstance(input_ids, torch.Tensor):
        ids = input_ids
        if ids.dim() == 2:
            if ids.shape[0] != 1:
                raise ValueError(f"input_ids: batch size must be 1, got shape {tuple(ids.shape)}")
            ids, batched = ids[0], True
        elif ids.dim() != 1:
            raise ValueError(f"input_ids must be 1-D or [1, T], got shape {tuple(ids.shape)}")
    else:
        ids = torch.as_tensor(list(input_ids), dtype=torch.long)
    if ids.numel() == 0:
        raise ValueError("input_ids is empty: the prompt needs at least one token (e.g. BOS)")
    return ids.long().cpu(), batched


class SpeculativeEngine:
    """Reference speculative decoder over a pool of EAGLE-3 heads with online drafter selection.

    Args:
        target: a loaded transformers causal LM (batch 1).
        drafters: the pool (:class:`Eagle3Drafter`), validated against the target.
        selector: any :class:`hedgespec.selectors.Selector`.
        mode: ``chain`` (K drafts) or ``tree`` (EAGLE dynamic tree: ``k`` levels, ``topk``, ``num_draft_tokens``).
        k: speculation depth K (max accepted drafts per round).
        topk, num_draft_tokens: tree settings (also the top-k of the tree γ, SPEC §1 Thm 2).
        eos_token_id: stop after emitting it (None: always generate ``max_new_tokens``).
        full_counterfactual: record every drafter's realised acceptance from every position in the trace.
    """

    def __init__(
        self,
        target: Any,
        drafters: Sequence[Eagle3Drafter],
        selector: Any,
        mode: str = "chain",
        k: int = 4,
        topk: int = 4,
        num_draft_tokens: int = 16,
        eos_token_id: int | None = None,
        full_counterfactual: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k (speculation depth) must be an int >= 1, got {k!r}")
        if mode == "tree" and not 1 <= topk <= num_draft_tokens:
            raise ValueError(f"tree mode needs 1 <= topk <= num_draft_tokens, got topk={topk}, num_draft_tokens={num_draft_tokens}")
        model = target.model if isinstance(target, TargetModel) else target
        self.pool = DrafterPool(drafters, model, dtype=dtype)
        self.target = TargetModel(model, self.pool.capture_ids)
        self.selector = selector
        self.mode, self.k, self.topk, self.num_draft_tokens = mode, k, topk, num_draft_tokens
        self.eos_token_id = eos_token_id
        self.full_counterfactual = full_counterfactual
        self.last_trace: RequestTrace | None = None

    @property
    def n_drafters(self) -> int:
        return self.pool.n

    # ------------------------------------------------------------------------------ helpers
    def _emb(self, ids: torch.Tensor) -> torch.Tensor:
        return self.target.embed(ids)

    def _pick(self, logits: torch.Tensor, temperature: float, top_k: int, top_p: float, gen: torch.Generator) -> int:
        if temperature <= 0:
            return int(torch.argmax(logits))
        return int(torch.multinomial(target_probs(logits, temperature, top_k, top_p), 1, generator=gen))

    def _gamma(self, draft_logits: torch.Tensor, tlogits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> np.ndarray:
        """γ[u, i] for the emitted rows (SPEC §1): chain 1−TV, tree target mass on top-k, greedy indicators."""
        n, e, _ = draft_logits.shape
        alive = torch.tensor(self.pool.alive)
        dl = torch.nan_to_num(draft_logits, nan=float("-inf")).clone()
        dl[~alive] = 0.0  # dead heads: any finite values, zeroed below
        kk = 1 if self.mode == "chain" else min(self.topk, self.pool.vd)
        top = self.pool.target_ids.gather(1, dl.topk(kk, dim=-1).indices.reshape(n, -1)).reshape(n, e, kk)
        if temperature <= 0:
            best = tlogits.argmax(-1)  # [e]
            g = (top == best[None, :, None]).any(-1).float()
        else:
            p = target_probs(tlogits, temperature, top_k, top_p)  # [e, V]
            if self.mode == "chain":
                q = self.pool.to_target((dl / temperature).softmax(-1), range(n))
                g = torch.minimum(p[None], q).sum(-1)
            else:
                g = p[None].expand(n, -1, -1).gather(2, top).sum(-1)
        g = g.clamp(0.0, 1.0)
        g[~alive] = 0.0
        return g.T.double().numpy()

    # --------------------------------------------------------------------------------- loop
    @torch.no_grad()
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
        ctx: RequestContext | None = None,
        trace_path: str | None = None,
    ) -> tuple[torch.Tensor, RequestStats]:
        """Generate up to ``max_new_tokens`` tokens; returns (prompt + new tokens, stats).

        The output has the input's shape convention ([T] or [1, T]), like ``transformers.generate``.
        Greedy (``temperature == 0``) output equals target argmax decoding; sampling output is distributed
        as plain sampling from the target with the same temperature/top-k/top-p.
        """
        prompt, batched = _prompt(input_ids)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        n_prompt, ctx_len = int(prompt.shape[0]), self.target.max_positions
        depth = self.k
        if n_prompt >= ctx_len:
            raise ValueError(f"input_ids has {n_prompt} tokens, longer than the target context ({ctx_len} positions)")
        if n_prompt + max_new_tokens + depth + 1 > ctx_len:
            raise ValueError(
                f"max_new_tokens={max_new_tokens}: prompt ({n_prompt}) + max_new_tokens + draft depth ({depth}) + 1 "
                f"exceeds the target context ({ctx_len}); lower max_new_tokens"
            )
        if int(prompt.max()) >= self.target.vocab_size or int(prompt.min()) < 0:
            raise ValueError(f"input_ids contains ids outside the target vocab [0, {self.target.vocab_size})")
        if self.full_counterfactual and temperature > 0:
            raise ValueError("full_counterfactual traces replay greedy decoding only; use temperature=0")
        gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
        sel, pool, tgt = self.selector, self.pool, self.target
        ctx = ctx or RequestContext()
        timings = {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "evaluate": 0.0, "update": 0.0}

        t0 = time.perf_counter()
        logits, feats = tgt.prefill(prompt)
        check_finite(logits[-1:], "target (prefill)")
        first = self._pick(logits[-1], temperature, top_k, top_p, gen)
        pool.prefill(prompt[1:], feats[:-1], self._emb(prompt[1:])[None])
        timings["prefill"] = time.perf_counter() - t0
        out: list[int] = [first]
        root, feat = first, feats[-1]
        sel.begin_request(pool.n, self.k, ctx)
        stats = RequestStats()
        trace = RequestTrace(
            header={
                "request_id": ctx.request_id, "mode": self.mode, "k": self.k, "topk": self.topk,
                "num_draft_tokens": self.num_draft_tokens, "temperature": temperature, "top_p": top_p, "top_k": top_k,
                "seed": seed, "n_drafters": pool.n, "drafters": pool.names, "selector": getattr(sel, "name", "?"),
                "prompt_len": n_prompt, "max_new_tokens": max_new_tokens, "prefill_token": first,
                "full_counterfactual": self.full_counterfactual,
            }
        )
        cf_drafts: list[torch.Tensor] = []  # per position: [N, K] counterfactual drafts (greedy) or accept counts
        remaining, s = max_new_tokens - 1, 0
        done = first == self.eos_token_id
        while remaining > 0 and not done:
            t_a = time.perf_counter()
            dec: Decision = sel.select()
            i = int(dec.drafter)
            if not 0 <= i < pool.n:
                raise ValueError(f"selector {getattr(sel, 'name', sel)!r} chose drafter {i}, pool has {pool.n}")
            draft = self._draft(i, root, feat, temperature, gen)
            t_b = time.perf_counter()
            a, bonus, rows, path_tokens, vlogits, vfeats = self._verify(root, draft, temperature, top_k, top_p, gen)
            tgt.commit(rows)
            t_c = time.perf_counter()
            # ---- emitted tokens (truncated at the budget and after EOS)
            emitted = path_tokens + [bonus]
            emitted = emitted[:remaining]
            if self.eos_token_id is not None and self.eos_token_id in emitted:
                emitted = emitted[: emitted.index(self.eos_token_id) + 1]
                done = True
            e = len(emitted)
            accepted = min(a, e - 1)
            # ---- evaluate: verified rows into all heads, one batched pass
            ev_tokens = torch.tensor([root] + path_tokens[: e - 1])
            ev_feats = torch.cat([feat[None], vfeats[rows[: e - 1]]], dim=0)
            base = pool.length
            dlog = pool.evaluate(ev_tokens, ev_feats, self._emb(ev_tokens)[None])
            gamma = self._gamma(dlog, vlogits[rows[:e]], temperature, top_k, top_p)
            if self.full_counterfactual:
                cf_drafts.extend(self._counterfactual(ev_tokens, ev_feats, base))
            t_d = time.perf_counter()
            fb = RoundFeedback(dec, accepted, e, s, gamma, {"draft": t_b - t_a, "verify": t_c - t_b, "evaluate": t_d - t_c})
            sel.observe(fb)
            t_e = time.perf_counter()
            rt = {"draft": t_b - t_a, "verify": t_c - t_b, "evaluate": t_d - t_c, "update": t_e - t_d}
            for key, val in rt.items():
                timings[key] += val
            stats.rounds += 1
            stats.accepted_per_round.append(accepted)
            stats.chosen.append(i)
            trace.rounds.append({"r": stats.rounds - 1, "start": s, "chosen": i, "accepted": accepted, "emitted": e,
                                 "weights": None if dec.weights is None else list(dec.weights), "timings": rt})
            trace.tokens.extend(emitted)
            trace.gamma.extend(gamma.tolist())
            out.extend(emitted)
            s += e
            remaining -= e
            # ---- next round's root and pending feature (only meaningful if we continue)
            root, feat = bonus, vfeats[rows[a]]
        sel.end_request()
        stats.generated = s
        stats.timings = timings
        stats.selector_state = sel.state_dict()
        if self.full_counterfactual:
            trace.runs = self._runs(cf_drafts, trace.tokens)
        trace.summary = {"rounds": stats.rounds, "generated": s, "mat": stats.mat, "histogram": stats.histogram(pool.n),
                         "dropped": [pool.names[j] for j in range(pool.n) if not pool.alive[j]]}
        self.last_trace = trace
        if trace_path is not None:
            write_traces(trace_path, [trace], append=True)
        result = torch.cat([prompt, torch.tensor(out, dtype=torch.long)])
        return (result[None] if batched else result), stats

    # ----------------------------------------------------------------------- round helpers
    def _draft(self, i: int, root: int, feat: torch.Tensor, temperature: float, gen: torch.Generator) -> Any:
        """Chain drafts (tokens, laws) or a DraftTree from head ``i``; None when the head is (or just got) dropped."""
        if not self.pool.alive[i]:
            return None
        try:
            if self.mode == "chain":
                return draft_chain(self.pool, i, root, feat, self._emb, self.k, temperature, gen)
            return draft_tree(self.pool, i, root, feat, self._emb, self.k, self.topk, self.num_draft_tokens)
        except Exception as err:  # noqa: BLE001 - a failing head is dropped; the round verifies no drafts
            self.pool.drop(i, f"raised {type(err).__name__}: {err} while drafting")
            return None

    def _verify(self, root: int, draft: Any, temperature: float, top_k: int, top_p: float, gen: torch.Generator):
        """One target forward over [root, drafts]; returns (accepted, bonus, kept rows, accepted tokens, logits, features)."""
        tree = draft if isinstance(draft, DraftTree) else None
        drafts, q = ([], None) if draft is None or tree is not None else draft
        if tree is None:
            vlogits, vfeats = self.target.forward(torch.tensor([root] + drafts))
        else:
            vlogits, vfeats = self.target.forward(torch.tensor(tree.tokens), torch.tensor(tree.depth), tree.ancestor_mask())
        check_finite(vlogits, "target (verification)")
        p = None if temperature <= 0 else target_probs(vlogits, temperature, top_k, top_p)
        if tree is None:
            if p is None:
                a, bonus = verify_chain_greedy(drafts, vlogits.argmax(-1).tolist())
            else:
                a, bonus = verify_chain_sample(drafts, q, p, gen)
            rows, path_tokens = list(range(a + 1)), drafts[:a]
        else:
            children = tree.children()
            if p is None:
                path, bonus = verify_tree_greedy(children, tree.tokens, vlogits.argmax(-1).tolist())
            else:
                path, bonus = verify_tree_sample(children, tree.tokens, p, gen)
            a, rows, path_tokens = len(path), [0] + path, [tree.tokens[r] for r in path]
        return a, bonus, rows, path_tokens, vlogits, vfeats

    # ------------------------------------------------------------------------- counterfactual
    def _counterfactual(self, tokens: torch.Tensor, feats: torch.Tensor, base: int) -> list[Any]:
        """For each row j of this round: every live head drafts from a round start at committed rows base+j."""
        live = [j for j in range(self.pool.n) if self.pool.alive[j]]
        res: list[Any] = []
        for j in range(int(tokens.shape[0])):
            root, feat = int(tokens[j]), feats[j]
            if self.mode == "chain":
                d = torch.full((self.pool.n, self.k), -1, dtype=torch.long)
                d[live] = draft_chain_all(self.pool, live, root, feat, self._emb, self.k, base + j)
                res.append(d)
            else:
                res.append([None if not self.pool.alive[h] else
                            draft_tree(self.pool, h, root, feat, self._emb, self.k, self.topk, self.num_draft_tokens, upto=base + j)
                            for h in range(self.pool.n)])
        return res

    def _runs(self, cf: list[Any], tokens: list[int]) -> list[list[int]]:
        """runs[u][i]: accepted drafts of head i for a round starting at u, against the greedy trajectory."""
        total = len(tokens)
        runs: list[list[int]] = []
        for u, item in enumerate(cf):
            row = []
            for h in range(self.pool.n):
                m = 0
                if self.mode == "chain":
                    d = item[h].tolist()
                    while m < len(d) and u + m < total and d[m] == tokens[u + m]:
                        m += 1
                elif item[h] is not None:
                    tree = item[h]
                    ch, node = tree.children(), 0
                    while u + m < total:
                        nxt = next((c for c in ch[node] if tree.tokens[c] == tokens[u + m]), None)
                        if nxt is None:
                            break
                        node, m = nxt, m + 1
                row.append(m)
            runs.append(row)
        return runs
