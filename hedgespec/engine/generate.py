"""Speculative decoding: a prefill, then rounds of select → draft → verify → evaluate → observe → advance.

The stages hand each other the typed records of :mod:`hedgespec.engine.records` (``Draft``, ``Verified``,
``Evaluated``; the request's ``SamplingState``); a :class:`~hedgespec.engine.records.RoundClock` times them
and a :class:`~hedgespec.engine.records.RequestLog` records each round with one call.

Bookkeeping (c = tokens committed in the target cache, x_c = the *root*: last emitted token, not yet run):

* target cache: x_0..x_{c-1}; features f_0..f_{c-1} known; ``feat`` = f_{c-1}.
* pool caches: rows 0..c-2, row t = (x_{t+1}, f_t). The *pending row* (x_c, f_{c-1}) starts every draft.
* a round verifies [x_c, drafts] in one target forward, accepts a drafts + 1 bonus token, commits x_c and
  the accepted drafts, then :meth:`DrafterPool.evaluate` appends the a+1 verified rows (pending row first)
  to **all** heads in one batched pass; row j's logits are q_i at emitted position j. The chosen head's row
  0 is exactly its first draft step; deeper rows condition on target features, not on the head's own
  outputs, so they are the per-position counterfactual γ of the HedgeSpec paper, not a replay of the
  head's multi-step draft.
* a selector may skip a round's pool evaluation (``Decision.evaluate`` False: label-efficient HedgeSpec): then
  only the chosen head is extended over the verified rows (:meth:`DrafterPool.extend`) and the selector gets
  ``gamma=None``; the other heads catch up lazily, in the next evaluation's pass or before they next draft
  (:meth:`DrafterPool.catch_up`). The trace records the chosen head's γ and NaN for the heads not evaluated.
  Full-counterfactual runs evaluate every round (every head drafts from every position).
* a selector with ``late_feedback`` gets the skipped rounds' γ with the next evaluated round
  (``RoundFeedback.late``): the catch-up pass computes the lagging heads' logits on the rows they missed, and
  :class:`~hedgespec.engine.late.LateRounds` turns them into the γ a full evaluation would have given.

Positions given to selectors (``RoundFeedback.start``) count round-emitted tokens from 0; the first token
(produced by the prefill, before any round) is not a round's. MAT = emitted / rounds (the paper's mean
accepted tokens per round, bonus token included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hedgespec.decoding import DecodingConfig, SamplingParams
from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.late import LateRounds
from hedgespec.engine.pool import DrafterPool
from hedgespec.engine.records import Draft, Evaluated, RequestLog, RoundClock, SamplingState, Verified
from hedgespec.engine.target import TargetModel
from hedgespec.engine.trace import RequestTrace, write_traces
from hedgespec.engine.tree import draft_chain, draft_chain_all, draft_tree
from hedgespec.engine.verify import (
    check_finite,
    sampling_probs,
    verify_chain_greedy,
    verify_chain_sample,
    verify_tree_greedy,
    verify_tree_sample,
)
from hedgespec.types import Decision, RequestContext, RequestStats, RoundFeedback


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


def _accept_chain(
    draft: Draft, logits: torch.Tensor, feats: torch.Tensor, p: torch.Tensor | None, gen: torch.Generator
) -> Verified:
    """Chain verdict: greedy prefix match (``p`` None) or Leviathan/Chen rejection against the laws ``draft.q``."""
    if p is None:
        a, bonus = verify_chain_greedy(draft.tokens, logits.argmax(-1).tolist())
    else:
        a, bonus = verify_chain_sample(draft.tokens, draft.q, p, gen)
    return Verified(a, bonus, list(range(a + 1)), draft.tokens[:a], logits, feats)


def _accept_tree(
    draft: Draft, logits: torch.Tensor, feats: torch.Tensor, p: torch.Tensor | None, gen: torch.Generator
) -> Verified:
    """Tree verdict: greedy walk (``p`` None) or sequential target-only rejection over siblings."""
    tree = draft.tree
    if p is None:
        path, bonus = verify_tree_greedy(tree.children(), tree.tokens, logits.argmax(-1).tolist())
    else:
        path, bonus = verify_tree_sample(tree.children(), tree.tokens, p, gen)
    return Verified(len(path), bonus, [0] + path, [tree.tokens[r] for r in path], logits, feats)


class SpeculativeEngine:
    """Reference speculative decoder over a pool of EAGLE-3 heads with online drafter selection.

    Args:
        target: a loaded transformers causal LM (batch 1).
        drafters: the pool (:class:`Eagle3Drafter`), validated against the target.
        selector: any :class:`hedgespec.selectors.Selector`.
        decoding: the round's shape (:class:`~hedgespec.decoding.DecodingConfig`, ``conf/decoding/*.yaml``):
            ``chain`` (``num_steps`` = K drafts) or ``tree`` (EAGLE dynamic tree: ``num_steps`` levels,
            ``topk`` children per node, also the top-k of the tree γ, ``num_draft_tokens`` nodes).
        eos_token_id: stop after emitting it (None: always generate ``max_new_tokens``).
        full_counterfactual: record every drafter's realised acceptance from every position in the trace.
    """

    def __init__(
        self,
        target: Any,
        drafters: Sequence[Eagle3Drafter],
        selector: Any,
        decoding: DecodingConfig,
        eos_token_id: int | None = None,
        full_counterfactual: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not isinstance(decoding, DecodingConfig):
            raise TypeError(
                "decoding must be a hedgespec.decoding.DecodingConfig (e.g. DecodingConfig.from_dict of "
                f"conf/decoding/chain.yaml), got {type(decoding).__name__}"
            )
        model = target.model if isinstance(target, TargetModel) else target
        self.pool = DrafterPool(drafters, model, dtype=dtype)
        self.target = TargetModel(model, self.pool.capture_ids)
        self.selector = selector
        self.decoding = decoding
        self.eos_token_id = eos_token_id
        self.full_counterfactual = full_counterfactual
        self.last_trace: RequestTrace | None = None
        self._late: LateRounds | None = None  # the current request's held rounds (selectors with late feedback)

    @property
    def k(self) -> int:
        """The speculation depth K (``decoding.num_steps``)."""
        return self.decoding.num_steps

    @property
    def mode(self) -> str:
        return self.decoding.mode

    @property
    def n_drafters(self) -> int:
        return self.pool.n

    # --------------------------------------------------------------------------------- loop
    @torch.no_grad()
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        sampling: SamplingParams,
        ctx: RequestContext | None = None,
        trace_path: str | None = None,
    ) -> tuple[torch.Tensor, RequestStats]:
        """Generate up to ``max_new_tokens`` tokens; returns (prompt + new tokens, stats).

        The output has the input's shape convention ([T] or [1, T]), like ``transformers.generate``.
        Greedy (``sampling.temperature == 0``) output equals target argmax decoding; sampling output is
        distributed as plain sampling from the target with the same temperature/top-k/top-p.
        """
        prompt, batched = _prompt(input_ids)
        self._check_request(prompt, max_new_tokens, sampling)
        ctx, samp, clock = ctx or RequestContext(), SamplingState.start(sampling), RoundClock()
        late = None
        if getattr(self.selector, "late_feedback", False):
            late = LateRounds(self.pool.n, lambda dl, tl, idx: self._gamma(dl, tl, sampling, idx))
        first, feat = self._prefill(prompt, samp)
        prefill_s = clock.lap("prefill")["prefill"]
        self.selector.begin_request(self.pool.n, self.k, ctx)
        log = RequestLog(self._header(ctx, sampling, len(prompt), max_new_tokens, first), max_new_tokens, prefill_s)
        root, done = first, first == self.eos_token_id
        self._late = late
        self.pool.observer = None if late is None else late.see  # after the prefill: rows of rounds only
        try:
            self._rounds(log, clock, root, feat, done, samp, sampling)
        finally:
            self.pool.observer, self._late = None, None
        self.selector.end_request()
        runs = self._runs(log.counterfactual, log.trace.tokens) if self.full_counterfactual else None
        stats = log.finish(self.selector.state_dict(), self.pool.n, self.pool.dropped, runs)
        self.last_trace = log.trace
        if trace_path is not None:
            write_traces(trace_path, [log.trace], append=True)
        result = torch.cat([prompt, torch.tensor([first] + log.trace.tokens, dtype=torch.long)])
        return (result[None] if batched else result), stats

    def _rounds(
        self,
        log: RequestLog,
        clock: RoundClock,
        root: int,
        feat: torch.Tensor,
        done: bool,
        samp: SamplingState,
        sampling: SamplingParams,
    ) -> None:
        """Rounds of select → draft → verify → evaluate → observe until the budget or EOS."""
        while log.remaining > 0 and not done:
            clock.restart()
            decision = self._select()
            draft = self._draft(int(decision.drafter), root, feat, samp)
            clock.lap("draft")
            ver = self._verify(root, draft, samp)
            clock.lap("verify")
            ev = self._evaluate(root, feat, ver, sampling, log.remaining, decision, log.generated)
            own = ev.own(int(decision.drafter))
            timings = clock.lap("evaluate")
            self.selector.observe(
                RoundFeedback(decision, ev.accepted, ev.emitted, log.generated, ev.feedback, timings, own, ev.late)
            )
            log.add_round(decision, ev, clock.lap("update"))
            (root, feat), done = ver.next_root(), ev.done

    # ------------------------------------------------------------------------ request setup
    def _check_request(self, prompt: torch.Tensor, max_new_tokens: int, sampling: SamplingParams) -> None:
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if not isinstance(sampling, SamplingParams):
            raise TypeError(
                "sampling must be a hedgespec.decoding.SamplingParams (e.g. SamplingParams.from_dict of "
                f"conf/sampling/greedy.yaml plus a seed), got {type(sampling).__name__}"
            )
        n_prompt, ctx_len = int(prompt.shape[0]), self.target.max_positions
        if n_prompt >= ctx_len:
            raise ValueError(f"input_ids has {n_prompt} tokens, longer than the target context ({ctx_len} positions)")
        if n_prompt + max_new_tokens + self.k + 1 > ctx_len:
            raise ValueError(
                f"max_new_tokens={max_new_tokens}: prompt ({n_prompt}) + max_new_tokens + draft depth ({self.k}) + 1 "
                f"exceeds the target context ({ctx_len}); lower max_new_tokens"
            )
        if int(prompt.max()) >= self.target.vocab_size or int(prompt.min()) < 0:
            raise ValueError(f"input_ids contains ids outside the target vocab [0, {self.target.vocab_size})")
        if self.full_counterfactual and not sampling.greedy:
            raise ValueError("full_counterfactual traces replay greedy decoding only; use sampling.temperature=0")

    def _prefill(self, prompt: torch.Tensor, samp: SamplingState) -> tuple[int, torch.Tensor]:
        """Target prefill and the first token; every head's cache gets the prompt's rows.

        Returns the first token (the first root) and its pending feature f_{c-1}.
        """
        logits, feats = self.target.prefill(prompt, last_logits=True)
        check_finite(logits[-1:], "target (prefill)")
        first = samp.pick(logits[-1])
        emb = self._emb(torch.cat([prompt[1:], torch.tensor([first])]))
        self.pool.prefill(prompt[1:], feats[:-1], emb[None, :-1], (first, feats[-1], emb[-1]))  # + the first root row
        return first, feats[-1]

    def _header(
        self, ctx: RequestContext, sampling: SamplingParams, prompt_len: int, max_new_tokens: int, first: int
    ) -> dict[str, Any]:
        """The trace header (keys as in trace format v1, :mod:`hedgespec.engine.trace`)."""
        d = self.decoding
        return {
            "request_id": ctx.request_id,
            "mode": d.mode,
            "k": d.num_steps,
            "topk": d.topk,
            "num_draft_tokens": d.num_draft_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "seed": sampling.seed,
            "n_drafters": self.pool.n,
            "drafters": self.pool.names,
            "selector": getattr(self.selector, "name", "?"),
            "prompt_len": prompt_len,
            "max_new_tokens": max_new_tokens,
            "prefill_token": first,
            "full_counterfactual": self.full_counterfactual,
        }

    # ------------------------------------------------------------------------- round stages
    def _emb(self, ids: torch.Tensor) -> torch.Tensor:
        return self.target.embed(ids)

    def _select(self) -> Decision:
        dec: Decision = self.selector.select()
        i = int(dec.drafter)
        if not 0 <= i < self.pool.n:
            raise ValueError(
                f"selector {getattr(self.selector, 'name', self.selector)!r} chose drafter {i}, pool has {self.pool.n}"
            )
        return dec

    def _draft(self, i: int, root: int, feat: torch.Tensor, samp: SamplingState) -> Draft:
        """Chain drafts (tokens, laws q) or a DraftTree from head ``i``; none when the head is (or just got) dropped."""
        self.pool.catch_up([i])  # a head not evaluated for a while first processes the rows it missed
        if not self.pool.alive[i]:
            return Draft.dropped(i)
        try:
            if self.mode == "chain":
                tokens, q = draft_chain(self.pool, i, root, feat, self._emb, self.k, samp)
                return Draft(i, tokens, q, None)
            return Draft(i, [], None, draft_tree(self.pool, i, root, feat, self._emb, self.decoding))
        except Exception as err:  # noqa: BLE001 - a failing head is dropped; the round verifies no drafts
            self.pool.drop(i, f"raised {type(err).__name__}: {err} while drafting")
            return Draft.dropped(i)

    def _verify(self, root: int, draft: Draft, samp: SamplingState) -> Verified:
        """One target forward over [root, drafts], the lossless acceptance rule, and commit of the kept rows."""
        tree = draft.tree
        if tree is None:
            logits, feats = self.target.forward(torch.tensor([root] + draft.tokens))
        else:
            depth, mask = torch.tensor(tree.depth), tree.ancestor_mask()
            logits, feats = self.target.forward(torch.tensor(tree.tokens), depth, mask)
        check_finite(logits, "target (verification)")
        p = None if samp.greedy else samp.probs(logits)  # None: greedy
        ver = (_accept_chain if tree is None else _accept_tree)(draft, logits, feats, p, samp.gen)
        self.target.commit(ver.rows)
        return ver

    def _evaluate(
        self,
        root: int,
        feat: torch.Tensor,
        ver: Verified,
        sampling: SamplingParams,
        remaining: int,
        decision: Decision,
        start: int,
    ) -> Evaluated:
        """Cut the round at the budget / EOS, append the emitted rows to every head (one batched pass), read γ.

        When the selector skips the evaluation (``decision.evaluate`` False, never in full-counterfactual runs)
        only the chosen head is extended; γ holds its column and NaN elsewhere, and the selector gets none now
        (with late feedback: with the next evaluated round, whose pass completes the held rounds' γ).
        """
        tokens, done = self._emitted(ver, remaining)
        e = len(tokens)
        ev_tokens = torch.tensor([root] + ver.path[: e - 1])
        ev_feats = torch.cat([feat[None], ver.feats[ver.rows[: e - 1]]], dim=0)
        base = self.pool.length
        tlogits = ver.logits[ver.rows[:e]]
        emb, nxt = self._rows_and_next(ev_tokens, ver, done or e >= remaining)
        if self.full_counterfactual or getattr(decision, "evaluate", True):
            dlog = self.pool.evaluate(ev_tokens, ev_feats, emb, nxt)
            gamma = self._gamma(dlog, tlogits, sampling)
            cf = self._counterfactual(ev_tokens, ev_feats, base) if self.full_counterfactual else []
            late = self._late.take(self.pool.alive) if self._late is not None else ()
            return Evaluated(tokens, min(ver.accepted, e - 1), gamma, done, cf, late=late)
        i = int(decision.drafter)
        own = self.pool.extend([i], ev_tokens, ev_feats, emb, nxt)
        gamma = np.full((e, self.pool.n), np.nan)
        if self.pool.alive[i]:
            gamma[:, i] = self._gamma(own, tlogits, sampling, [i])[:, 0]
        if self._late is not None:  # the chosen head's column is known; the others fill in their catch-up pass
            self._late.add(start, base, tlogits, gamma)
        return Evaluated(tokens, min(ver.accepted, e - 1), gamma, done, [], evaluated=False)

    def _rows_and_next(
        self, ev_tokens: torch.Tensor, ver: Verified, last: bool
    ) -> tuple[torch.Tensor, tuple[int, torch.Tensor, torch.Tensor] | None]:
        """The evaluated rows' embeddings [1, e, H] and, unless this is the request's ``last`` round, the next
        round's pending row (bonus token, its feature, its embedding), which the pool pass runs as the chosen
        head's first draft step."""
        if last:
            return self._emb(ev_tokens)[None], None
        nxt, feat = ver.next_root()
        emb = self._emb(torch.cat([ev_tokens, torch.tensor([nxt])]))
        return emb[None, :-1], (nxt, feat, emb[-1])

    def _emitted(self, ver: Verified, remaining: int) -> tuple[list[int], bool]:
        """The round's tokens (accepted drafts + bonus) cut at the budget and after EOS; whether EOS came."""
        emitted = (ver.path + [ver.bonus])[:remaining]
        if self.eos_token_id is not None and self.eos_token_id in emitted:
            return emitted[: emitted.index(self.eos_token_id) + 1], True
        return emitted, False

    def _gamma(
        self,
        draft_logits: torch.Tensor,
        tlogits: torch.Tensor,
        sampling: SamplingParams,
        idx: Sequence[int] | None = None,
    ) -> np.ndarray:
        """γ[u, j] for the emitted rows and heads ``idx`` (default: the pool): chain 1 − TV (Theorem 1 of the
        HedgeSpec paper), tree target mass on the top-k (Theorem 2), greedy indicators."""
        n, e, _ = draft_logits.shape
        heads = list(range(self.pool.n)) if idx is None else list(idx)
        alive = torch.tensor([self.pool.alive[j] for j in heads])
        dl = torch.nan_to_num(draft_logits, nan=float("-inf")).clone()
        dl[~alive] = 0.0  # dead heads: any finite values, zeroed below
        kk = 1 if self.mode == "chain" else min(self.decoding.topk, self.pool.vd)
        ids = self.pool.target_ids if idx is None else self.pool.target_ids[heads]
        top = ids.gather(1, dl.topk(kk, dim=-1).indices.reshape(n, -1)).reshape(n, e, kk)
        if sampling.greedy:
            best = tlogits.argmax(-1)  # [e]
            g = (top == best[None, :, None]).any(-1).float()
        else:
            p = sampling_probs(tlogits, sampling)  # [e, V]
            if self.mode == "chain":
                q = self.pool.to_target((dl / sampling.temperature).softmax(-1), heads)
                g = torch.minimum(p[None], q).sum(-1)
            else:
                g = p[None].expand(n, -1, -1).gather(2, top).sum(-1)
        g = g.clamp(0.0, 1.0)
        g[~alive] = 0.0
        return g.T.double().numpy()

    # ------------------------------------------------------------------------- counterfactual
    def _counterfactual(self, tokens: torch.Tensor, feats: torch.Tensor, base: int) -> list[Any]:
        """For each row j of this round: every live head drafts from a round start at committed rows base+j."""
        pool = self.pool
        live = [j for j in range(pool.n) if pool.alive[j]]
        res: list[Any] = []
        for j in range(int(tokens.shape[0])):
            root, feat = int(tokens[j]), feats[j]
            if self.mode == "chain":
                d = torch.full((pool.n, self.k), -1, dtype=torch.long)
                d[live] = draft_chain_all(pool, live, root, feat, self._emb, self.k, base + j)
                res.append(d)
            else:
                res.append(
                    [
                        draft_tree(pool, h, root, feat, self._emb, self.decoding, upto=base + j)
                        if pool.alive[h]
                        else None
                        for h in range(pool.n)
                    ]
                )
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
