"""A pool of N EAGLE-3 heads as **one** SGLang draft model (architecture ``HedgeSpecPoolForCausalLMEagle3``).

The HEDGESPEC worker's fused mode (``fused=true`` in the serve config) registers this class with SGLang's model
registry and points ``--speculative-draft-model-path`` at the pool directory the launcher writes
(:mod:`hedgespec.serving.pool_dir`: drafter 0's config with this architecture, the drafter checkpoints, whose
weights :meth:`HedgeSpecPoolForCausalLMEagle3.load_weights` reads itself, and the KV layout).

Each head is SGLang's own ``LlamaForCausalLMEagle3`` (its fc, decoder layer, norm, lm_head and d2t map, loaded by
its own ``load_weights``). The heads share one token embedding (the target's, set by SGLang through
:meth:`set_embed`). The draft vocabularies of the heads may differ (each domain's d2t map): the pool's vocabulary
is their union (sorted target ids, :attr:`hot_token_id`), and each head's logits are scattered into its columns,
so SGLang's own top-k and id mapping work unchanged.

Two KV layouts (:mod:`hedgespec.serving.pool_dir`):

* ``heads`` (``fused_layout=heads``, where the heads allow it): one draft layer holding every head's KV heads
  side by side, and **one** attention call (:attr:`attn`) for all heads; q/k/v of the heads a forward runs are
  placed in their slices, the rest are zero. The whole forward is the stacked pass (:meth:`_pass`): each matmul
  one batched product over the heads, norms by each head's own SGLang modules, one rotary embedding, one
  attention. Needs plain unquantized single-GPU heads; anything else is refused at load, naming the fix.
* ``layers`` (the default): head i on KV layer i with its own attention call; heads outside the stacked pass (a
  norm before the fc, biases) run their own SGLang forward.

One forward runs:

* draft-extend (prefill or decode extend; ``forward_mode`` not decode): **every live head** over the same rows
  (same target features, same tokens). For a low-rank pool (every head but one is that base head plus rank-r
  deltas, written by ``scripts/lowrank_pool.py``: ``lowrank.safetensors`` next to the dense weights) a matmul
  reads the base's matrix once for all heads plus each head's two thin factors
  (:class:`hedgespec.engine.lowrank.LowRankStack`, the reference engine's batched pass), so one evaluation reads
  about one head's weights instead of N. The returned logits and hidden states are those of the first live head
  (SGLang needs one valid tensor); every head's results are kept in :attr:`pool_output` (:class:`PoolOutput`) for
  the worker: its argmax (target ids) at the rows SGLang keeps (every row of a decode extend), its
  pool-vocabulary top-1 and hidden state there, and whether all of it is finite; under tree drafting
  (:attr:`topk` k > 1, set by the worker) its top-k ids and their draft probabilities instead of the argmax.
* a draft decode step: only the heads that some request chose (``spec_info.hedgespec_active``, a tuple of drafter
  indices) run; one head runs with its dense weights (in the layers layout, its own SGLang forward); several run
  as one stacked pass, with the low-rank stack for a low-rank pool (the base read once, as in an evaluation, so
  a batch whose requests chose several heads does not pay several heads' weights per step); each row's logits
  and hidden state come from its request's head
  (``spec_info.hedgespec_slots``: per request, the position of its head in ``hedgespec_active``; a tree's draft
  step has k rows per request, request-major), and in the ``heads``
  layout each row's q/k/v fill only its own head's slice. A row's recurrent state is its own head's.

No module-level sglang import besides what the class needs: this module is imported only by the plugin when the
server runs the fused mode.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, PretrainedConfig

from hedgespec.engine.lowrank import FACTORS_FILE, LowRankStack
from hedgespec.serving.pool_dir import ARCH, MODEL_TYPE, POOL_KEY

logger = logging.getLogger(__name__)


@dataclass
class PoolOutput:
    """Every evaluated head's results of one draft-extend forward (device tensors; A heads, S rows SGLang's logits
    processor keeps: every row in a decode extend, each request's last row in a prefill extend)."""

    drafters: tuple[int, ...]  # pool indices of the A heads, in order
    top1: torch.Tensor  # [A, S] argmax of each head at the kept rows, target token ids ([A, S, k]: top-k, a tree)
    kept_top1: torch.Tensor  # [A, S] the same in pool-vocabulary ids (SGLang's draft input ids) ([A, S, k])
    kept_hidden: torch.Tensor  # [A, S, H] recurrent hidden state at the kept rows
    finite: torch.Tensor  # [A] bool: the head's logits have a finite maximum in every row, its hidden states finite
    kept_p: torch.Tensor | None = None  # [A, S, k] the top-k's draft probabilities (a tree's scores); None: chain


class PoolConfig(PretrainedConfig):
    """The config of a pool in the heads layout (:data:`~hedgespec.serving.pool_dir.MODEL_TYPE`): its fields are
    drafter 0's, with the stacked attention shape; only SGLang's sizing reads it, each head gets its own config."""

    model_type = MODEL_TYPE


def head_config(config: Any, pool: dict[str, Any], n: int) -> Any:
    """One head's config: the pool's own (layers layout) or, in the heads layout, rebuilt as the drafters' config
    type with one head's attention shape (the pool's stacked heads over its ``n`` drafters)."""
    cfg = copy.deepcopy(config)
    if pool.get("layout") == "heads":
        fields = {k: v for k, v in config.to_dict().items() if k not in (POOL_KEY, "model_type")}
        fields["num_attention_heads"] = int(config.num_attention_heads) // n
        fields["num_key_value_heads"] = int(config.num_key_value_heads) // n
        cfg = AutoConfig.for_model(str(pool.get("head_model_type", "llama")), **fields)
    cfg.num_hidden_layers = 1
    cfg.architectures = ["LlamaForCausalLMEagle3"]
    return cfg


def union_vocab(maps: Sequence[torch.Tensor | None], draft_vocab: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The pool vocabulary (sorted union of the heads' target ids; a head without a d2t map uses ids
    ``0..draft_vocab-1``) and, per head, the pool columns of its draft ids."""
    full = [torch.arange(draft_vocab) if m is None else m.to("cpu").long() for m in maps]
    union = torch.unique(torch.cat(full))  # sorted
    cols = [torch.searchsorted(union, m) for m in full]
    return union, cols


class HedgeSpecPoolForCausalLMEagle3(nn.Module):
    """N EAGLE-3 heads in one draft model (module docstring)."""

    def __init__(self, config: Any, quant_config: Any = None, prefix: str = "") -> None:
        from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

        super().__init__()
        pool = getattr(config, POOL_KEY, None)
        if not isinstance(pool, dict) or not pool.get("drafters"):
            raise ValueError(f"{ARCH}: config.json needs {POOL_KEY}.drafters (written by the HEDGESPEC launcher)")
        if getattr(config, "tie_word_embeddings", False) or getattr(config, "draft_vocab_size", None) is None:
            raise ValueError(f"{ARCH}: every head needs its own lm_head and draft_vocab_size (EAGLE-3 heads do)")
        self.config = config
        self.drafters = [str(p) for p in pool["drafters"]]
        self.names = [str(x) for x in pool.get("names") or []]
        n = len(self.drafters)
        stacked = pool.get("layout") == "heads"
        layers = 1 if stacked else n
        if int(config.num_hidden_layers) != layers:
            raise ValueError(
                f"{ARCH}: num_hidden_layers ({config.num_hidden_layers}) must be {layers} for {n} drafters in the "
                f"{'heads' if stacked else 'layers'} layout; rewrite the pool directory with the launcher"
            )
        heads = []
        for i in range(n):
            cfg = head_config(config, pool, n)
            if i:  # the heads share head 0's token embedding (replaced by the target's): no N copies of it
                cfg.vocab_size = 1
            head = LlamaForCausalLMEagle3(cfg, quant_config, prefix=f"{prefix}heads.{i}.")
            head.model.layers[0].self_attn.attn.layer_id = 0 if stacked else i  # layers layout: head i on KV layer i
            if i:
                head.model.embed_tokens = heads[0].model.embed_tokens
            heads.append(head)
        self.heads = nn.ModuleList(heads)
        self.attn: nn.Module | None = None  # heads layout: the one attention over every head's slice of layer 0
        if stacked:
            from sglang.srt.layers.radix_attention import RadixAttention

            own = heads[0].model.layers[0].self_attn
            self.attn = RadixAttention(
                n * own.num_heads, own.head_dim, own.scaling, num_kv_heads=n * own.num_kv_heads, layer_id=0,
                prefix=f"{prefix}attn",
            )  # fmt: skip
            logger.info(
                "HEDGESPEC fused pool: heads layout, one attention call over %d heads (%d query / %d KV heads each)",
                n, own.num_heads, own.num_kv_heads,
            )  # fmt: skip
        else:
            logger.info(
                "HEDGESPEC fused pool: layers layout, one KV layer and attention call per head (%s)",
                pool.get("layout_reason") or "pool directory written before the heads layout",
            )
        self.live: list[int] = list(range(n))  # set by the worker when it drops a head
        self.topk = 1  # the evaluation keeps each head's top-k (set by the worker: --speculative-eagle-topk)
        self.pool_output: PoolOutput | None = None
        self.load_lm_head_from_target = False
        self._vocab: tuple[torch.Tensor, torch.Tensor] | None = None
        self._batchable: bool | None = None
        self._stacked: dict[str, torch.Tensor | LowRankStack] | None = None
        self.lowrank_base: str | None = None  # the base head's name when the evaluation runs low-rank

    # ------------------------------------------------------------------ what SGLang's EAGLE worker calls
    @property
    def lm_head(self) -> Any:
        return self.heads[0].lm_head

    @property
    def hot_token_id(self) -> torch.Tensor:
        return self._pool_vocab()[0]

    def get_hot_token_id(self) -> torch.Tensor:
        return self.hot_token_id

    def get_embed(self) -> torch.Tensor:
        return self.heads[0].model.embed_tokens.weight

    def set_embed(self, embed: torch.Tensor) -> None:
        self.heads[0].set_embed(embed)  # one module shared by every head

    def get_attention_sliding_window_size(self) -> int | None:
        return self.heads[0].get_attention_sliding_window_size()

    def _pool_vocab(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._vocab is None:
            device = self.heads[0].lm_head.weight.device
            union, cols = union_vocab([h.hot_token_id for h in self.heads], int(self.config.draft_vocab_size))
            self._vocab = union.to(device), torch.stack(cols).to(device)  # [N, draft vocab]: head i's columns
        return self._vocab

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Each head loads its own drafter's checkpoint (``weights`` is the pool directory's marker file)."""
        from safetensors import safe_open

        for _ in weights:
            pass
        for i, (head, path) in enumerate(zip(self.heads, self.drafters)):
            files = sorted(Path(path).glob("*.safetensors"))
            if not files:
                raise FileNotFoundError(f"{ARCH}: drafter {i} ({path}) has no *.safetensors weights")

            def tensors(files: list[Path] = files) -> Iterable[tuple[str, torch.Tensor]]:
                for f in files:
                    with safe_open(str(f), framework="pt") as st:
                        for name in st.keys():
                            if name.startswith("embed_tokens.") and i:
                                continue  # the shared embedding is the target's
                            yield name, st.get_tensor(name)

            head.load_weights(tensors())
        self._vocab = None
        self._stacked = None
        if self.attn is not None and not self._plain():
            raise ValueError(
                f"{ARCH}: the heads layout (one attention over every head) needs unquantized heads without biases or "
                "feature norms on one GPU (no tensor parallelism); serve this pool with fused=false"
            )
        if self._plain():
            self._stack()  # at load: a low-rank pool's factors are read and checked before the server is up

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: Any,
        input_embeds: torch.Tensor | None = None,
        get_embedding: bool = False,
        pp_proxy_tensors: Any = None,
    ) -> Any:
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        embeds = self.heads[0].model.embed_tokens(input_ids) if input_embeds is None else input_embeds
        evaluate = not forward_batch.forward_mode.is_decode()
        spec = forward_batch.spec_info
        active = tuple(self.live) if evaluate else tuple(getattr(spec, "hedgespec_active", None) or ())
        if not active:
            raise RuntimeError(
                f"{ARCH}: a draft step needs the requests' heads (spec_info.hedgespec_active, set by the HEDGESPEC "
                "fused worker)"
                if not evaluate
                else f"{ARCH}: no live head to run"
            )
        union, cols = self._pool_vocab()
        if evaluate and (self.attn is not None or self._batched(forward_batch)):
            logits, hidden = self._pass(active, positions, forward_batch, embeds, None)
            self.pool_output = self._output(active, logits, hidden, union, cols, self.topk)
            first = self._scatter(logits[0], cols[active[0]], union.numel())
            return LogitsProcessorOutput(next_token_logits=first, hidden_states=hidden[0])
        if self.attn is not None or (len(active) > 1 and self._plain()):
            # a draft step of several chosen heads (any of them in the heads layout) as one stacked pass, each row
            # taking its own head's results: one product per matmul kind instead of one SGLang forward per head
            slots = _row_slots(spec.hedgespec_slots, positions) if len(active) > 1 else None
            slots = torch.zeros_like(positions, dtype=torch.long) if slots is None else slots
            logits, hidden = self._pass(active, positions, forward_batch, embeds, slots)
            rows = torch.arange(slots.numel(), device=slots.device)
            own = cols[torch.as_tensor(active, device=slots.device)[slots]]  # [rows, draft vocab]: its head's columns
            return LogitsProcessorOutput(
                next_token_logits=self._scatter(logits[slots, rows], own, union.numel()),
                hidden_states=hidden[slots, rows],
            )
        outs = [self._head(i, input_ids, positions, forward_batch, embeds) for i in active]
        if evaluate:  # SGLang builds its (unused) next draft input from the first head's; the worker reads them all
            logits = torch.stack([lo.next_token_logits for lo in outs])
            hidden = torch.stack([lo.hidden_states for lo in outs])
            self.pool_output = self._output(active, logits, hidden, union, cols, self.topk)
            first = self._scatter(outs[0].next_token_logits, cols[active[0]], union.numel())
            return LogitsProcessorOutput(next_token_logits=first, hidden_states=outs[0].hidden_states)
        logits = [self._scatter(lo.next_token_logits, cols[i], union.numel()) for i, lo in zip(active, outs)]
        if len(active) == 1:
            return LogitsProcessorOutput(next_token_logits=logits[0], hidden_states=outs[0].hidden_states)
        slot = _row_slots(spec.hedgespec_slots, positions)  # [rows]: the position in `active` of each row's head
        rows = torch.arange(slot.numel(), device=slot.device)
        return LogitsProcessorOutput(
            next_token_logits=torch.stack(logits)[slot, rows],
            hidden_states=torch.stack([lo.hidden_states for lo in outs])[slot, rows],
        )

    # ------------------------------------------------------------------ the heads' weights
    def _batched(self, forward_batch: Any) -> bool:
        """Whether an evaluation can run with stacked weights: plain unquantized single-GPU heads (no biases, no
        feature norms, no TP), target features as input. Otherwise every head runs its own SGLang forward."""
        hidden = forward_batch.spec_info.hidden_states
        return self._plain() and hidden is not None and hidden.shape[-1] != int(self.config.hidden_size)

    def _plain(self) -> bool:
        if self._batchable is None:
            self._batchable = all(_plain_head(h) for h in self.heads)
        return self._batchable

    def _stack(self) -> dict[str, torch.Tensor | LowRankStack]:
        """Every head's matmul weights per kind: for a low-rank pool the base's matrix and each head's factors
        (:meth:`_low_rank`), else one [N, out, in] tensor, the heads' own parameters re-pointed at their slices
        (no second copy)."""
        if self._stacked is None:
            self._stacked = self._low_rank() or self._dense()
        return self._stacked

    def _matrices(self) -> dict[str, list[torch.Tensor]]:
        """Per kind of matmul, every head's SGLang weight parameter [out, in] (qkv and gate_up merged)."""
        return {
            "fc": [h.model.fc.weight for h in self.heads],
            "qkv": [h.model.layers[0].self_attn.qkv_proj.weight for h in self.heads],
            "o": [h.model.layers[0].self_attn.o_proj.weight for h in self.heads],
            "gate_up": [h.model.layers[0].mlp.gate_up_proj.weight for h in self.heads],
            "down": [h.model.layers[0].mlp.down_proj.weight for h in self.heads],
            "lm_head": [h.lm_head.weight for h in self.heads],
        }

    def _dense(self) -> dict[str, torch.Tensor | LowRankStack]:
        vocab = int(self.config.draft_vocab_size)
        stacks: dict[str, torch.Tensor | LowRankStack] = {}
        for kind, ws in self._matrices().items():
            stacked = torch.stack([w.data for w in ws])
            for i, w in enumerate(ws):
                w.data = stacked[i]
            stacks[kind] = stacked if kind != "lm_head" else stacked[:, :vocab]
        return stacks

    def _low_rank(self) -> dict[str, torch.Tensor | LowRankStack] | None:
        """The low-rank form of the pool when it has one: one head is the base and every other head's directory
        holds ``lowrank.safetensors`` with rank-r factors of its deltas from that base (by name). Each kind's
        :class:`LowRankStack` has the base head's own parameter as its base (a view) and per head the factors
        (zero for the base head; q/k/v and gate/up factors merged block-diagonally, as SGLang merges the weights).
        Refuses, naming the drafter, a head whose dense weights are not base + its factors."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        files = [Path(p) / FACTORS_FILE for p in self.drafters]
        bases = set()
        for f in files:
            if f.is_file():
                with safe_open(str(f), framework="pt") as fh:
                    bases.add((fh.metadata() or {}).get("base"))
        if not bases:
            return None
        base_name = next(iter(bases))
        b = self.names.index(base_name) if base_name in self.names and len(self.names) == len(files) else -1
        if len(bases) > 1 or b < 0 or files[b].is_file() or any(not f.is_file() for i, f in enumerate(files) if i != b):
            logger.info(
                "HEDGESPEC fused pool: dense evaluation; a low-rank one needs every drafter but one base to hold "
                "factors of that base, which is served too (bases named: %s; drafters %s)",
                sorted(str(x) for x in bases),
                self.names,
            )
            return None
        factors = [None if i == b else load_file(str(f)) for i, f in enumerate(files)]
        vocab = int(self.config.draft_vocab_size)
        stacks: dict[str, torch.Tensor | LowRankStack] = {}
        for kind, ws in self._matrices().items():
            dense = [w[:vocab] if kind == "lm_head" else w for w in ws]
            base = dense[b]
            parts = [
                None if f is None else _merged_factors(f, _FACTOR_KEYS[kind], self.names[i])
                for i, f in enumerate(factors)
            ]
            width = max(a.shape[1] for a, _ in (p for p in parts if p is not None))
            a = base.new_zeros((len(ws), base.shape[1], width))
            bb = base.new_zeros((len(ws), width, base.shape[0]))
            for i, p in enumerate(parts):
                if p is None:
                    continue
                pa, pb = (t.to(device=base.device, dtype=base.dtype) for t in p)
                _check_delta(dense[i], base, pa, pb, self.names[i], base_name, kind)
                a[i, :, : pa.shape[1]], bb[i, : pb.shape[0]] = pa, pb
            stacks[kind] = LowRankStack(base.t(), a, bb)
        self.lowrank_base = base_name
        reads = sum(s.base.numel() + s.a.numel() + s.b.numel() for s in stacks.values())  # type: ignore[union-attr]
        one = sum(s.base.numel() for s in stacks.values())  # type: ignore[union-attr]
        logger.info(
            "HEDGESPEC fused pool: low-rank evaluation over base %r: one evaluation reads %.2fx one head's matrices",
            base_name,
            reads / one,
        )
        return stacks

    # ------------------------------------------------------------------ the stacked pass
    def _pass(self, active, positions, forward_batch, embeds, slots) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward of heads ``active`` over every row: each matmul one batched product over the heads (the fc
        one product over the shared target features), norms by each head's own SGLang modules, attention by
        :meth:`_attend`. An evaluation (``slots`` None) multiplies by the pool's stacks (a low-rank pool's base
        once); a draft step (``slots``: per row, the position of its head in ``active``) by the heads' dense
        weights. Returns the logits [A, S, draft vocab] (float) and recurrent hidden states [A, S, H] at the rows
        SGLang's logits processor keeps (every row in a draft step). A draft step of several heads of a low-rank
        pool multiplies by the low-rank stack too (:meth:`_matmul`), so its cost does not grow with the number
        of distinct heads the batch chose the way N dense heads' would."""
        heads = [self.heads[i] for i in active]
        n, size = len(heads), int(self.config.hidden_size)

        def mm(kind: str, x: torch.Tensor) -> torch.Tensor:
            return self._matmul(kind, active, x, dense=slots is not None)

        feats = forward_batch.spec_info.hidden_states.to(embeds.dtype)
        shared = feats.unsqueeze(0).expand(n, -1, -1)  # every head's input, stride 0
        x = shared if feats.shape[-1] == size else mm("fc", shared)
        residual = [x[a].contiguous() for a in range(n)]
        inp = torch.stack(
            [
                torch.cat([h.model.layers[0].input_layernorm(embeds), h.model.layers[0].hidden_norm(r)], dim=-1)
                for h, r in zip(heads, residual)
            ]
        )
        out = mm("o", self._attend(active, mm("qkv", inp), positions, forward_batch, slots))
        normed = []
        for a, h in enumerate(heads):
            y, residual[a] = h.model.layers[0].post_attention_layernorm(out[a].contiguous(), residual[a])
            normed.append(y)
        up = mm("gate_up", torch.stack(normed))
        rows = up.shape[1]
        down = mm("down", heads[0].model.layers[0].mlp.act_fn(up.reshape(n * rows, -1)).view(n, rows, -1))
        keep = None if slots is not None else _kept_rows(forward_batch)
        final, hidden = [], []
        for a, h in enumerate(heads):
            to_logits, to_aux = h.model.norm(down[a].contiguous(), residual[a])
            final.append(to_logits if keep is None else to_logits[keep])
            hidden.append(to_aux if keep is None else to_aux[keep])
        return mm("lm_head", torch.stack(final)).float(), torch.stack(hidden)

    def _matmul(self, kind: str, active: tuple[int, ...], x: torch.Tensor, dense: bool) -> torch.Tensor:
        """x [A, R, in] through the ``kind`` matrix of each head in ``active``: [A, R, out]. All heads of a dense
        pool: one batched product over the stack. ``dense`` (a draft step) with one head, or some heads of a dense
        pool: each head's own parameter, nothing copied. Otherwise the stack's rows of ``active``: a low-rank
        stack reads its base once for every head (a draft step of several heads too) plus each head's factors."""
        stack = self._stack()[kind]
        everyone = len(active) == len(self.heads)
        several_low_rank = isinstance(stack, LowRankStack) and len(active) > 1
        if dense and not (everyone and isinstance(stack, torch.Tensor)) and not several_low_rank:
            vocab = int(self.config.draft_vocab_size)
            mats = [m[:vocab] if kind == "lm_head" else m for m in self._matrices()[kind]]
            return torch.stack([torch.nn.functional.linear(x[a], mats[i]) for a, i in enumerate(active)])
        if not everyone:
            idx = torch.as_tensor(active, device=x.device)
            stack = stack[idx] if isinstance(stack, LowRankStack) else stack.index_select(0, idx)
        if isinstance(stack, torch.Tensor) and x.shape[0] > 1 and x.stride(0) == 0:  # shared rows: one product
            a, out = stack.shape[0], stack.shape[1]
            y = torch.nn.functional.linear(x[0], stack.reshape(a * out, -1))
            return y.view(x.shape[1], a, out).transpose(0, 1)
        return _bmm(stack, x)

    def _attend(self, active, qkv: torch.Tensor, positions, forward_batch, slots) -> torch.Tensor:
        """Attention of heads ``active`` from their q/k/v [A, R, q+2kv]: [A, R, q].

        Layers layout: each head's own rotary embedding and attention on its KV layer. Heads layout: one rotary
        embedding over every head's q/k and one attention call over the stacked layer, each head in its own
        slice, zeros in the slices of heads that do not run. In a draft step a row fills only its own head's
        slice (its KV slot's other slices are zero: those draft positions are read only by that row's head, and
        the next draft-extend rewrites them); the other heads' outputs at that row are discarded by the caller."""
        first = self.heads[active[0]].model.layers[0].self_attn
        qs, kvs = first.q_size, first.kv_size
        if self.attn is None:
            outs = []
            for a, i in enumerate(active):
                mod = self.heads[i].model.layers[0].self_attn
                q, k, v = qkv[a].split([qs, kvs, kvs], dim=-1)
                q, k = mod.rotary_emb(positions, q, k)
                outs.append(mod.attn(q, k, v, forward_batch))
            return torch.stack(outs)
        n, rows = len(self.heads), qkv.shape[1]
        q, k, v = (t.transpose(0, 1).reshape(rows, -1) for t in qkv.split([qs, kvs, kvs], dim=-1))  # [R, A*size]
        q, k = first.rotary_emb(positions, q, k)  # the heads share one rotary embedding (pool_dir.SHARED_KEYS)
        idx = torch.as_tensor(active, device=qkv.device)
        parts = [t.reshape(rows, len(active), -1) for t in (q, k, v)]
        if slots is not None or len(active) != n:
            placed = []
            for t in parts:
                full = t.new_zeros((rows, n, t.shape[-1]))
                if slots is None:
                    full[:, idx] = t
                else:
                    at = torch.arange(rows, device=t.device)
                    full[at, idx[slots]] = t[at, slots]
                placed.append(full)
            parts = placed
        o = self.attn(*(t.reshape(rows, -1) for t in parts), forward_batch).view(rows, n, qs)
        return o[:, idx].transpose(0, 1)

    def _head(self, i: int, input_ids, positions, forward_batch, embeds) -> Any:
        head = self.heads[i]
        hidden, aux = head.model(input_ids, positions, forward_batch, input_embeds=embeds)
        return head.logits_processor(input_ids, hidden, head.lm_head, forward_batch, aux)

    @staticmethod
    def _scatter(logits: torch.Tensor, cols: torch.Tensor, width: int) -> torch.Tensor:
        """Logits [R, draft vocab] in the pool's columns (``cols``: the head's [draft vocab], or each row's head's
        [R, draft vocab]), −inf elsewhere. Each row's own argmax (first maximum in its head's draft order) is
        raised by one ulp, so exact ties break as the head alone breaks them (the pool's column order is by
        target id, which a head's d2t need not follow)."""
        cols = cols.expand(logits.shape[0], -1) if cols.dim() == 1 else cols
        out = logits.new_full((logits.shape[0], width), float("-inf")).scatter_(1, cols, logits)
        rows = torch.arange(logits.shape[0], device=logits.device)
        top = cols[rows, torch.argmax(logits, dim=-1)]
        out[rows, top] = torch.nextafter(out[rows, top], out.new_tensor(float("inf")))
        return out

    @staticmethod
    def _output(active, logits: torch.Tensor, hidden: torch.Tensor, union, cols, topk: int = 1) -> PoolOutput:
        """The heads' evaluation results from their logits [A, S, draft vocab] and hidden states [A, S, H]: each
        head's argmax, or for a tree (``topk`` > 1) its top-k and their probabilities (softmax over its own
        draft vocabulary, as SGLang's draft-extend scores the next draft input), at every kept row."""
        finite = torch.isfinite(logits.amax(dim=-1)).all(dim=-1) & torch.isfinite(hidden).flatten(1).all(dim=-1)
        own = cols[torch.as_tensor(active, device=logits.device)]  # [A, draft vocab]: each head's pool columns
        if topk == 1:
            arg = torch.argmax(logits, dim=-1)  # [A, S], draft ids
            kept = torch.gather(own, 1, arg)
            return PoolOutput(tuple(active), union[kept], kept, hidden, finite)
        top, arg = torch.topk(logits, topk, dim=-1)  # [A, S, k]; softmax is monotone, so the same ids
        probs = (top - torch.logsumexp(logits, dim=-1, keepdim=True)).exp()  # no [A, S, vocab] softmax materialized
        kept = torch.gather(own, 1, arg.flatten(1)).view_as(arg)
        return PoolOutput(tuple(active), union[kept], kept, hidden, finite, probs)


#: per kind of SGLang matmul, the checkpoint weights merged into it, in SGLang's order (lowrank.safetensors keys)
_FACTOR_KEYS = {
    "fc": ("fc.weight",),
    "qkv": ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight"),
    "o": ("midlayer.self_attn.o_proj.weight",),
    "gate_up": ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight"),
    "down": ("midlayer.mlp.down_proj.weight",),
    "lm_head": ("lm_head.weight",),
}


def _bmm(w: torch.Tensor | LowRankStack, x: torch.Tensor) -> torch.Tensor:
    """x [N, R, in] through each head's matrix: [N, R, out]."""
    return w.bmm(x) if isinstance(w, LowRankStack) else torch.bmm(x, w.transpose(1, 2))


def _merged_factors(
    state: dict[str, torch.Tensor], keys: Sequence[str], name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The factors (A [in, r], B [r, out], transposed layout) of a merged SGLang matmul from those of its parts:
    A side by side, B block-diagonal, so A @ B is the parts' deltas side by side."""
    missing = [k for k in keys for part in ("a", "b") if f"{k}.{part}" not in state]
    if missing:
        raise ValueError(
            f"{ARCH}: drafter {name!r}: {FACTORS_FILE} lacks {missing}; rewrite it with scripts/lowrank_pool.py"
        )
    a = torch.cat([state[f"{k}.a"] for k in keys], dim=1)
    return a, torch.block_diag(*[state[f"{k}.b"] for k in keys])


def _check_delta(
    dense: torch.Tensor, base: torch.Tensor, a: torch.Tensor, b: torch.Tensor, name: str, base_name: str, kind: str
) -> None:
    """Refuse factors that do not make the head's dense weights from the base's (an edited or swapped file)."""
    if tuple(a.shape[:1]) + tuple(b.shape[1:]) != tuple(base.t().shape) or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"{ARCH}: drafter {name!r}: factors of {kind} have shapes {tuple(a.shape)} x {tuple(b.shape)}, which do "
            f"not make base {base_name!r}'s {tuple(base.t().shape)} (transposed) delta"
        )
    want = base.float() + (a.float() @ b.float()).t()
    if not torch.allclose(dense.float(), want, rtol=1e-2, atol=1e-2 * float(want.abs().max()) + 1e-6):
        raise ValueError(
            f"{ARCH}: drafter {name!r}: its {kind} weights are not base {base_name!r} + the factors in its "
            f"{FACTORS_FILE}; rewrite the pool with scripts/lowrank_pool.py"
        )


def _plain_head(head: Any) -> bool:
    """An unquantized, single-GPU EAGLE-3 head without biases or feature norms (what the batched evaluation
    computes); anything else runs through its own SGLang forward."""
    model, layer = head.model, head.model.layers[0]
    linears = [layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj]
    plain = all(
        getattr(m, "bias", None) is None
        and type(getattr(m, "quant_method", None)).__name__ == "UnquantizedLinearMethod"
        and int(getattr(m, "tp_size", 1)) == 1
        for m in linears
    )
    lm_head = head.lm_head
    return (
        plain
        and model.fc.bias is None
        and model.input_norm is None
        and model.fc_norm is None
        and not model.norm_output
        and not model.is_mrope_enabled
        and int(getattr(lm_head, "tp_size", 1)) == 1
        and getattr(lm_head, "bias", None) is None
        and getattr(head.logits_processor, "logit_scale", None) is None
        and not getattr(head.logits_processor, "final_logit_softcapping", None)
    )


def _row_slots(slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Per row of a draft step, the position in ``hedgespec_active`` of its head: ``slots`` is per request; a
    tree's draft step has k rows per request (request-major, as SGLang's top-k expansion orders them)."""
    rows, bs = int(positions.shape[0]), int(slots.numel())
    if rows == bs:
        return slots
    if bs == 0 or rows % bs:
        raise RuntimeError(f"{ARCH}: a draft step of {rows} rows for {bs} requests")
    return slots.repeat_interleave(rows // bs)


def _kept_rows(forward_batch: Any) -> torch.Tensor | None:
    """The rows SGLang's logits processor keeps: each sequence's last row in an extend (prefill), all rows
    (None) in a decode-mode draft-extend."""
    mode = forward_batch.forward_mode
    if mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2():
        return None
    return (torch.cumsum(forward_batch.extend_seq_lens, dim=0) - 1).long()


EntryClass = [HedgeSpecPoolForCausalLMEagle3]
