"""A pool of N EAGLE-3 heads of one target, evaluated in one batched pass.

The heads' weights are stacked along a leading N dim (:func:`~hedgespec.engine.eagle3.stack_weights`) and
every pool forward is one set of batched matmuls (``torch.bmm``), never N forwards. The pool owns the
heads' KV caches ([N, kv_heads, rows, d]): row t holds (token x_{t+1}, target feature f_t) of the
committed sequence, which is what every head needs to draft from the current position.

After a verification round the engine calls :meth:`DrafterPool.evaluate` with the round's verified rows:
it extends all N caches and returns q_i at every emitted position (every drafter's counterfactual γ of the
HedgeSpec paper, without any extra target forward). A head that raises or produces non-finite logits is
dropped for the request with a warning; the rest of the pool, and the output, are unaffected.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from hedgespec.engine.eagle3 import Eagle3Drafter, stack_weights, stacked_forward
from hedgespec.engine.target import TargetModel


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
        self.w = stack_weights(drafters, dtype=dtype, device=self.device)
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
        self.reset()

    # -------------------------------------------------------------------------------- state
    def reset(self) -> None:
        self.k = torch.zeros(self.n, self.n_kv, 0, self.head_dim, dtype=self.dtype, device=self.device)
        self.v = torch.zeros_like(self.k)
        self.alive = [True] * self.n

    @property
    def length(self) -> int:
        return int(self.k.shape[2])

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
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward heads ``idx`` over T new rows after cached rows ``[:upto]`` (+ uncommitted ``extra`` rows).

        Returns draft logits [n, T, V_d] (invalid draft ids at −inf), hidden [n, T, H], new k, v.
        """
        sel = list(idx)
        all_heads = sel == list(range(self.n))
        w = self.w if all_heads else {k: t[sel] for k, t in self.w.items()}
        upto = self.length if upto is None else upto
        pk = self.k[:, :, :upto] if all_heads else self.k[sel, :, :upto]
        pv = self.v[:, :, :upto] if all_heads else self.v[sel, :, :upto]
        if extra_k is not None:
            pk, pv = torch.cat([pk, extra_k], dim=2), torch.cat([pv, extra_v], dim=2)
        if mask is not None:
            mask = mask.to(self.device)
        cos, sin = self.rope(positions)
        emb, hidden = emb.to(self.dtype), hidden.to(self.dtype)
        logits, out, k, v = stacked_forward(
            w, self.eps, self.n_heads, self.n_kv, emb, hidden, from_target, cos, sin, pk, pv, mask
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
    def prefill(self, tokens: torch.Tensor, feats: torch.Tensor, emb: torch.Tensor) -> None:
        """Fill all caches with the committed rows (tokens x_{t+1}, features f_t), t = 0..T-1."""
        self.reset()
        if tokens.shape[0]:
            self.evaluate(tokens, feats, emb)

    def evaluate(self, tokens: torch.Tensor, feats: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """Append T verified rows to every live head in one batched pass; return their logits [N, T, V_d].

        Rows are (x_{t+1}, f_t) at positions t = length..length+T-1; dead heads get NaN rows. If the batched
        pass fails, heads are re-run one by one and the failing ones are dropped (warning, request-scoped).
        """
        t0, t = self.length, int(tokens.shape[0])
        pos = torch.arange(t0, t0 + t)
        live = [i for i in range(self.n) if self.alive[i]]
        if not live:
            self.append(*(torch.zeros(self.n, self.n_kv, t, self.head_dim, dtype=self.dtype, device=self.device),) * 2)
            return torch.full((self.n, t, self.vd), float("nan"), device=self.device)
        try:  # one batched pass over the live heads
            lg, _, k, v = self.run(live, emb, self.features(feats, live), True, pos)
            ok = not self._nonfinite(lg)
        except Exception:  # noqa: BLE001 - isolate the failing head(s) below
            ok = False
        if ok and len(live) == self.n:
            self.append(k, v)
            return lg
        logits = torch.full((self.n, t, self.vd), float("nan"), device=self.device)
        new_k = torch.zeros(self.n, self.n_kv, t, self.head_dim, dtype=self.dtype, device=self.device)
        new_v = torch.zeros_like(new_k)
        if ok:
            logits[live], new_k[live], new_v[live] = lg, k, v
            self.append(new_k, new_v)
            return logits
        for i in live:
            try:
                lg, _, k, v = self.run([i], emb, self.features(feats, [i]), True, pos)
                if self._nonfinite(lg):
                    raise FloatingPointError("non-finite logits")
                logits[i], new_k[i], new_v[i] = lg[0], k[0], v[0]
            except Exception as e:  # noqa: BLE001
                self._drop([i], f"raised {type(e).__name__}: {e}")
        self.append(new_k, new_v)  # with every head dropped the engine decodes without drafts (still lossless)
        return logits

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
