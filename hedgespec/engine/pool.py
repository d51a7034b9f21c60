"""A pool of N EAGLE-3 heads of one target, evaluated in one batched pass.

The heads' weights are stacked along a leading N dim (:func:`~hedgespec.engine.eagle3.stack_weights`) and
every pool forward is one set of batched matmuls (``torch.bmm``), never N forwards; a pool of one base drafter's
low-rank variants (:mod:`hedgespec.engine.lowrank`) stacks the base once plus thin per-head factors instead. The
pool owns the heads' KV caches ([N, kv_heads, rows, d]): row t holds (token x_{t+1}, target feature f_t) of the
committed sequence, which is what every head needs to draft from the current position.

After a verification round the engine calls :meth:`DrafterPool.evaluate` with the round's verified rows:
it extends all N caches and returns q_i at every emitted position (every drafter's counterfactual γ of the
HedgeSpec paper, without any extra target forward). A head that raises or produces non-finite logits is
dropped for the request with a warning; the rest of the pool, and the output, are unaffected.

Lazy catch-up (label-efficient HedgeSpec): on a round whose pool evaluation the selector skips, the engine calls
:meth:`DrafterPool.extend` for the chosen head only (it drafts next round from these rows). The other heads fall
behind: ``filled[i]`` counts the rows head i has processed, and the pool keeps the verified rows' embeddings and
target features from the oldest missed row on. A lagging head catches up in one batched pass over the rows it
missed when it is next evaluated (:meth:`evaluate` folds the catch-up into its pass) or chosen
(:meth:`catch_up` before drafting). A head's rows depend only on the committed prefix, so a caught-up head holds
the keys/values of a head extended every round (up to floating-point rounding).

The next round's first draft step rides along: given the pending row (the next root token and its target feature),
:meth:`evaluate`, :meth:`extend` and :meth:`prefill` run it as one more row of their pass without committing it,
and :meth:`root_row` hands the chosen head that row's logits, output and keys/values (a :class:`RootRow`), so a
chain of K drafts costs K − 1 head forwards after the pass, as SGLang's draft-extend yields the first draft token.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from hedgespec.engine.eagle3 import Eagle3Drafter, stacked_forward
from hedgespec.engine.lowrank import stack_pool_weights
from hedgespec.engine.records import RootRow
from hedgespec.engine.target import TargetModel

#: the pending row handed to a pass: (root token, its target feature [F], its embedding [H])
PendingRow = tuple[int, torch.Tensor, torch.Tensor]


def _union(ids_list: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    out: list[int] = []
    for ids in ids_list:
        for i in ids:
            if i not in out:
                out.append(i)
    return tuple(out)


class DrafterPool:
    """N drafters of one target with stacked weights, KV caches and per-request liveness."""

    def __init__(
        self, drafters: Sequence[Eagle3Drafter], target: TargetModel | Any, dtype: torch.dtype = torch.float32
    ) -> None:
        if len(drafters) == 0:
            raise ValueError("drafters: the pool needs at least one Eagle3Drafter")
        for i, d in enumerate(drafters):
            if not isinstance(d, Eagle3Drafter):
                raise ValueError(f"drafters[{i}] must be an Eagle3Drafter, got {type(d).__name__}")
            d.validate(target)
        c0 = drafters[0].config
        for d in drafters[1:]:
            for field in ("num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps"):
                if getattr(d.config, field) != getattr(c0, field):
                    raise ValueError(
                        f"drafter {d.name!r}: {field}={getattr(d.config, field)} differs from drafter "
                        f"{drafters[0].name!r} ({getattr(c0, field)}); a pool stacks heads of one shape"
                    )
        tcfg = target.config
        self.drafters = list(drafters)
        self.names = [d.name for d in drafters]
        self.n = len(drafters)
        self.vocab_size = int(tcfg.vocab_size)
        layers = int(tcfg.num_hidden_layers)
        self.aux_ids = [d.aux_layer_ids(layers) for d in drafters]
        #: target layers to capture (union over the pool; SGLang captures one set, the engine can slice)
        self.capture_ids = _union(self.aux_ids)
        h = int(tcfg.hidden_size)
        cols = []
        for ids in self.aux_ids:
            slots = [self.capture_ids.index(i) for i in ids]
            cols.append(torch.cat([torch.arange(s * h, (s + 1) * h) for s in slots]))
        self._same_features = all(torch.equal(c, cols[0]) for c in cols)
        self.feature_cols = torch.stack(cols)  # [N, n_aux·H] columns of the captured features per head
        self.dtype = dtype
        params = getattr(target, "parameters", None)
        self.device = next(params()).device if callable(params) else torch.device("cpu")
        # low-rank when every head is one base's variant; such a pool also keeps its heads dense for one head's
        # draft steps (the base plus rank-r factors cost more than one dense head there; the factored form pays
        # off only when many heads share the base)
        self.w, self._w_single = stack_pool_weights(drafters, dtype=dtype, device=self.device)
        self.eps = c0.rms_norm_eps
        self.n_heads, self.n_kv, self.head_dim = c0.num_attention_heads, c0.num_key_value_heads, c0.head_dim
        vd = self.w["lm_head"].shape[-1]
        self.vd = vd
        ids = torch.zeros(self.n, vd, dtype=torch.long)
        valid = torch.zeros(self.n, vd, dtype=torch.bool)
        for i, d in enumerate(drafters):
            ids[i, : d.config.draft_vocab_size] = d.target_ids
            valid[i, : d.config.draft_vocab_size] = True
        self.target_ids, self.valid = ids.to(self.device), valid.to(self.device)  # draft id -> target id per head
        self.feature_cols = self.feature_cols.to(self.device)
        self._padded = not bool(valid.all())
        self._rope = LlamaRotaryEmbedding(c0.rope_config()).to(self.device)
        self._rope_cap = 0
        #: called as observer(heads, row, logits [len(heads), T, V_d]) after every pass that appends rows to the
        #: caches (evaluate, extend, catch-up): late feedback reads the catch-up passes' logits (engine/late.py)
        self.observer: Callable[[list[int], int, torch.Tensor], None] | None = None
        self.reset()

    # -------------------------------------------------------------------------------- state
    def reset(self) -> None:
        self.k = torch.zeros(self.n, self.n_kv, 0, self.head_dim, dtype=self.dtype, device=self.device)
        self.v = torch.zeros_like(self.k)
        self.alive = [True] * self.n
        #: rows of head i's cache that hold its own keys/values (rows filled[i]..length-1 are placeholders)
        self.filled = [0] * self.n
        # the committed rows some live head has not processed yet: embeddings [L, H] and captured target
        # features [L, F] of rows log_base..length-1 (None while every live head is current)
        self._log_emb: torch.Tensor | None = None
        self._log_feat: torch.Tensor | None = None
        self._root: RootRow | None = None  # the pending row run by the last pass (see root_row)

    @property
    def length(self) -> int:
        """Committed rows (the pending row sits at this position); a lagging head holds fewer (:attr:`filled`)."""
        return int(self.k.shape[2])

    @property
    def behind(self) -> list[int]:
        """Live heads whose cache misses committed rows (they catch up when next evaluated or chosen)."""
        return [j for j in range(self.n) if self.alive[j] and self.filled[j] < self.length]

    @property
    def dropped(self) -> list[str]:
        """Names of the heads dropped for this request, in pool order."""
        return [self.names[j] for j in range(self.n) if not self.alive[j]]

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [T, d] for ``positions`` from a table grown on demand (transformers computes the table)."""
        pos = positions.to(self.device).long()
        need = int(pos.max()) + 1 if pos.numel() else 0
        if need > self._rope_cap:
            cap = max(need, 2 * self._rope_cap, 256)
            x = torch.zeros(1, dtype=torch.float32, device=self.device)
            cos, sin = self._rope(x, torch.arange(cap, device=self.device)[None])
            self._cos, self._sin, self._rope_cap = cos[0].to(self.dtype), sin[0].to(self.dtype), cap
        return self._cos[pos], self._sin[pos]

    def features(self, feats: torch.Tensor, idx: Sequence[int]) -> torch.Tensor:
        """Per-head target features [len(idx), T, n_aux·H] from captured features [T, F]."""
        if self._same_features:
            return feats[:, self.feature_cols[0]].to(self.dtype)[None].expand(len(idx), -1, -1)
        return torch.stack([feats[:, self.feature_cols[i]] for i in idx]).to(self.dtype)

    # ------------------------------------------------------------------------------ forward
    def run(
        self,
        idx: Sequence[int],
        emb: torch.Tensor,
        hidden: torch.Tensor,
        from_target: bool,
        positions: torch.Tensor,
        extra_k: torch.Tensor | None = None,
        extra_v: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        upto: int | None = None,
        logits_rows: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward heads ``idx`` over T new rows after cached rows ``[:upto]`` (+ uncommitted ``extra`` rows).

        Returns draft logits [n, T, V_d] (invalid draft ids at −inf; the last ``logits_rows`` rows only when
        given), hidden [n, T, H], new k, v.
        """
        sel = list(idx)
        all_heads = sel == list(range(self.n))
        if all_heads:
            w = self.w
        elif len(sel) == 1:  # a view, not a copy of the head's weights (same values and strides)
            w = {k: t[sel[0] : sel[0] + 1] for k, t in self._w_single.items()}
        else:
            w = {k: t[sel] for k, t in self.w.items()}
        upto = self.length if upto is None else upto
        if any(self.filled[j] < upto for j in sel):
            lag = {self.names[j]: self.filled[j] for j in sel if self.filled[j] < upto}
            raise RuntimeError(f"drafter rows {lag} < {upto} needed: catch_up() the lagging heads first")
        pk = self.k[:, :, :upto] if all_heads else self.k[sel, :, :upto]
        pv = self.v[:, :, :upto] if all_heads else self.v[sel, :, :upto]
        if extra_k is not None:
            pk, pv = torch.cat([pk, extra_k], dim=2), torch.cat([pv, extra_v], dim=2)
        if mask is not None:
            mask = mask.to(self.device)
        cos, sin = self.rope(positions)
        emb, hidden = emb.to(self.dtype), hidden.to(self.dtype)
        logits, out, k, v = stacked_forward(
            w, self.eps, self.n_heads, self.n_kv, emb, hidden, from_target, cos, sin, pk, pv, mask, logits_rows
        )
        logits = logits.float()
        if self._padded:
            valid = self.valid if all_heads else self.valid[sel]
            logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        return logits, out, k, v

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)

    def to_target(self, probs_draft: torch.Tensor, idx: Sequence[int]) -> torch.Tensor:
        """Scatter draft-vocab probabilities [n, T, V_d] into the target vocab [n, T, V]."""
        n, t, _ = probs_draft.shape
        out = probs_draft.new_zeros(n, t, self.vocab_size)
        ids = self.target_ids[list(idx)][:, None, :].expand(n, t, -1)
        return out.scatter_add_(2, ids, probs_draft)

    # ----------------------------------------------------------------------------- evaluate
    def prefill(
        self, tokens: torch.Tensor, feats: torch.Tensor, emb: torch.Tensor, root: PendingRow | None = None
    ) -> None:
        """Fill all caches with the committed rows (tokens x_{t+1}, features f_t), t = 0..T-1; with ``root``
        (the first root token, its feature [F] and embedding [H]) the pass also runs the first draft step
        (:meth:`root_row`)."""
        self.reset()
        t = int(tokens.shape[0])
        if emb.dim() != 3 or emb.shape[0] != 1 or emb.shape[1] != t:
            raise ValueError(f"emb must be the rows' token embeddings [1, {t}, H], got shape {tuple(emb.shape)}")
        if t:  # every row's keys and values; the output heads run on the last row only (its non-finite check)
            self._advance([i for i in range(self.n) if self.alive[i]], emb[0], feats, need=1, root=root)

    def evaluate(
        self, tokens: torch.Tensor, feats: torch.Tensor, emb: torch.Tensor, root: PendingRow | None = None
    ) -> torch.Tensor:
        """Append T verified rows to every live head in one batched pass; return their logits [N, T, V_d].

        Rows are (x_{t+1}, f_t) at positions t = length..length+T-1; dead heads get NaN rows. Heads that fell
        behind (:meth:`extend`) catch up in the same pass: every live head runs from the oldest missed row m over
        rows m..length+T-1 (a current head recomputes its rows m..length-1, equal to its cached ones). If the
        batched pass fails, heads are re-run one by one, each from its own missed rows, and the failing ones are
        dropped (warning, request-scoped). ``root``: the next pending row, run uncommitted (:meth:`root_row`).
        """
        return self.extend(range(self.n), tokens, feats, emb, root)

    def extend(
        self,
        idx: Sequence[int],
        tokens: torch.Tensor,
        feats: torch.Tensor,
        emb: torch.Tensor,
        root: PendingRow | None = None,
    ) -> torch.Tensor:
        """Append T verified rows to the heads ``idx`` only, in one batched pass; their logits [len(idx), T, V_d].

        The cache grows by T rows for every head. The other heads get placeholder rows and fall behind: the rows
        they miss (embeddings [T, H] and captured target features [T, F]) are kept until they catch up, in the
        next :meth:`evaluate`, :meth:`extend` or :meth:`catch_up` that includes them (one batched pass over the
        missed span). Heads of ``idx`` that are dead, or get dropped on the way, have NaN rows. ``root``: the
        next pending row (token, feature [F], embedding [H]), run after the new rows and not committed: the
        first draft step of these heads next round (:meth:`root_row`).
        """
        sel = list(idx)
        t = int(tokens.shape[0])
        if emb.dim() != 3 or emb.shape[0] != 1 or emb.shape[1] != t:
            raise ValueError(f"emb must be the rows' token embeddings [1, {t}, H], got shape {tuple(emb.shape)}")
        live = [i for i in sel if self.alive[i]]
        lg = self._advance(live, emb[0], feats, root=root)
        if len(live) == len(sel):
            return lg
        out = torch.full((len(sel), t, self.vd), float("nan"), device=self.device)
        if live:
            out[[sel.index(i) for i in live]] = lg
        return out

    def root_row(self, i: int, token: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Head ``i``'s first draft step from root ``token`` at the pending position, if the last pass ran it
        (as :meth:`run` returns it: logits [1, 1, V_d], out [1, 1, H], k and v [1, kv_heads, 1, d]); else None."""
        r = self._root
        if r is None or r.position != self.length or r.token != token or i not in r.heads:
            return None
        if not self.alive[i] or self._filled(i) != self.length:
            return None
        return r.step(i)

    def catch_up(self, idx: Sequence[int] | None = None) -> None:
        """Bring the lagging live heads of ``idx`` (default: all) to :attr:`length`: one batched pass over the
        rows they missed (from the oldest one; the cached rows of heads ahead of it are recomputed)."""
        lag = [i for i in (range(self.n) if idx is None else idx) if self.alive[i] and self._filled(i) < self.length]
        if lag:
            self._advance(lag, None, None)

    def _filled(self, i: int) -> int:
        return min(self.filled[i], self.length)  # a caller may have swapped in a shorter cache (engine/bench.py)

    def _advance(
        self,
        idx: list[int],
        emb: torch.Tensor | None,
        feats: torch.Tensor | None,
        need: int | None = None,
        root: PendingRow | None = None,
    ) -> torch.Tensor:
        """Live heads ``idx`` over their missed rows, then the new rows (emb [T, H], feats [T, F]; None: none),
        then the uncommitted pending row ``root`` (kept as :attr:`_root` for :meth:`root_row`).

        Returns the new rows' logits [len(idx), T, V_d] (the last ``need`` rows only when given), NaN for a head
        dropped on the way. The output heads run on the returned rows only (at least one row, which the
        non-finite check reads) and the pending row, unless an observer reads the caught-up rows' logits too.
        """
        self._root = None
        t0, t = self.length, 0 if emb is None else int(emb.shape[0])
        if not idx:
            self._grow_to(t0 + t)
            self._keep_log(emb, feats)
            return torch.empty(0, t, self.vd, device=self.device)
        m = min(self._filled(i) for i in idx)
        span_emb, span_feat = self._span(m, t0, emb, feats)
        extra = int(root is not None)
        if root is not None:
            span_emb = torch.cat([span_emb, root[2].to(span_emb.dtype)[None]])
            span_feat = torch.cat([span_feat, root[1].to(span_feat.dtype)[None]])
        pos = torch.arange(m, t0 + t + extra)
        keep = t if need is None else min(need, t)  # the rows whose logits are returned
        rows = None if self.observer is not None else max(1, keep) + extra
        try:  # one batched pass over the heads' missed rows, the new rows and the pending row
            feat = self.features(span_feat, idx)
            lg, hid, k, v = self.run(idx, span_emb[None], feat, True, pos, upto=m, logits_rows=rows)
            ok = not self._nonfinite(lg)
        except Exception:  # noqa: BLE001 - isolate the failing head(s) below
            ok = False
        if ok and root is not None:
            self._root = RootRow(t0 + t, int(root[0]), tuple(idx), lg[:, -1:], hid[:, -1:], k[:, :, -1:], v[:, :, -1:])
            lg, k, v = lg[:, :-1], k[:, :, :-1], v[:, :, :-1]
        if ok:
            self._store(idx, m, k, v)
            if self.observer is not None:
                self.observer(idx, m, lg)
            out = lg[:, lg.shape[1] - keep :]
        else:  # the pending row is dropped too: the chosen head drafts it itself
            out = self._advance_each(idx, span_emb[: len(span_emb) - extra], span_feat[: len(span_feat) - extra], m, t)
        self._keep_log(emb, feats)
        return out

    def _advance_each(
        self, idx: list[int], span_emb: torch.Tensor, span_feat: torch.Tensor, m: int, t: int
    ) -> torch.Tensor:
        """The failed batched pass head by head, each from its own missed rows; heads that fail are dropped."""
        end = m + int(span_emb.shape[0])
        self._grow_to(end)
        out = torch.full((len(idx), t, self.vd), float("nan"), device=self.device)
        for j, i in enumerate(idx):
            a = self._filled(i)
            try:
                e, f = span_emb[None, a - m :], self.features(span_feat[a - m :], [i])
                lg, _, k, v = self.run([i], e, f, True, torch.arange(a, end), upto=a)
                if self._nonfinite(lg):
                    raise FloatingPointError("non-finite logits")
                self._store([i], a, k, v)
                if self.observer is not None:
                    self.observer([i], a, lg)
                out[j] = lg[0, lg.shape[1] - t :]
            except Exception as err:  # noqa: BLE001
                self._drop([i], f"raised {type(err).__name__}: {err}")
        return out  # with every head dropped the engine decodes without drafts (still lossless)

    def _store(self, idx: list[int], m: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Heads ``idx``'s keys/values for rows m..m+T-1 (the cache grows to m+T; other heads keep theirs)."""
        end, all_heads = m + int(k.shape[2]), idx == list(range(self.n))
        if all_heads and m == self.length:
            self.append(k, v)
        else:
            self._grow_to(end)
            rows = slice(m, end)
            if all_heads:
                self.k[:, :, rows], self.v[:, :, rows] = k, v
            else:
                self.k[idx, :, rows], self.v[idx, :, rows] = k, v
        for i in idx:
            self.filled[i] = end

    def _grow_to(self, end: int) -> None:
        if end > self.length:  # placeholder rows: a head's rows past filled[head] are never attended
            z = torch.zeros(self.n, self.n_kv, end - self.length, self.head_dim, dtype=self.dtype, device=self.device)
            self.append(z, z)

    def _span(
        self, m: int, t0: int, emb: torch.Tensor | None, feats: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings and features of rows m..t0-1 (from the kept rows) followed by the new rows."""
        if m == t0:
            return emb, feats  # type: ignore[return-value]
        kept = 0 if self._log_emb is None else int(self._log_emb.shape[0])  # the kept rows end at t0
        if t0 - kept > m:
            raise RuntimeError(f"drafter pool: rows {m}..{t0 - 1} are not kept (only the last {kept} rows are)")
        a = kept - (t0 - m)
        pe, pf = self._log_emb[a:], self._log_feat[a:]  # type: ignore[index]
        if emb is None or feats is None:
            return pe, pf
        return torch.cat([pe, emb.to(pe.dtype)]), torch.cat([pf, feats.to(pf.dtype)])

    def _keep_log(self, emb: torch.Tensor | None, feats: torch.Tensor | None) -> None:
        """Keep the rows some live head still misses (the new rows included); drop the rest."""
        oldest = min((self._filled(j) for j in range(self.n) if self.alive[j]), default=self.length)
        keep = self.length - oldest
        if keep <= 0:
            self._log_emb = self._log_feat = None
            return
        le, lf = self._log_emb, self._log_feat
        if emb is not None and feats is not None and emb.shape[0]:
            le = emb if le is None else torch.cat([le, emb.to(le.dtype)])
            lf = feats if lf is None else torch.cat([lf, feats.to(lf.dtype)])
        if le is None or lf is None or int(le.shape[0]) < keep:
            raise RuntimeError(
                f"drafter pool: a head misses {keep} rows but only {0 if le is None else le.shape[0]} are kept"
            )
        self._log_emb, self._log_feat = le[-keep:], lf[-keep:]

    @staticmethod
    def _nonfinite(lg: torch.Tensor) -> list[int]:
        """Heads whose logits contain NaN or +inf (−inf marks padded draft ids and is fine)."""
        top = lg.amax(dim=(1, 2))  # NaN if any NaN, +inf if any +inf, -inf if the head has no finite logit
        if bool(torch.isfinite(top).all()):
            return []
        return [j for j in range(lg.shape[0]) if not bool(torch.isfinite(top[j]))]

    def _drop(self, idx: Sequence[int], why: str) -> None:
        for i in idx:
            self.drop(i, f"{why} during evaluation")

    def drop(self, i: int, why: str) -> None:
        """Mark head ``i`` dead for the rest of the request (its γ reads 0, it drafts nothing)."""
        if self.alive[i]:
            self.alive[i] = False
            warnings.warn(
                f"drafter {self.names[i]!r} {why}; dropped from the pool for this request", RuntimeWarning, stacklevel=3
            )
