"""A pool of N EAGLE-3 heads as **one** SGLang draft model (architecture ``HedgeSpecPoolForCausalLMEagle3``).

The HEDGESPEC worker's fused mode (``fused=true`` in the serve config) registers this class with SGLang's model
registry and points ``--speculative-draft-model-path`` at a pool directory written by the launcher
(:func:`write_pool_dir`): ``config.json`` is drafter 0's config with ``architectures`` set to this class,
``num_hidden_layers`` = N (so SGLang gives the draft model **one** KV pool with one layer per drafter, on the
shared allocator) and ``hedgespec_pool.drafters`` listing the drafter checkpoints, whose weights
:meth:`HedgeSpecPoolForCausalLMEagle3.load_weights` reads itself (the directory's one small safetensors file only
lets SGLang's loader start).

Each head is SGLang's own ``LlamaForCausalLMEagle3`` (its fc, decoder layer, norm, lm_head and d2t map, loaded by
its own ``load_weights``); head i's attention writes and reads KV layer i. The heads share one token embedding
(the target's, set by SGLang through :meth:`set_embed`). The draft vocabularies of the heads may differ (each
domain's d2t map): the pool's vocabulary is their union (sorted target ids, :attr:`hot_token_id`), and each head's
logits are scattered into its columns, so SGLang's own top-k and id mapping work unchanged.

One forward runs:

* draft-extend (prefill or decode extend; ``forward_mode`` not decode): **every live head** over the same rows
  (same target features, same tokens), each matmul one batched product over the heads for plain unquantized
  single-GPU heads (:meth:`HedgeSpecPoolForCausalLMEagle3._evaluate_batched`), else each head's own SGLang
  forward. The returned logits and hidden states are those of the first live head (SGLang needs one valid
  tensor); every head's results are kept in :attr:`pool_output` (:class:`PoolOutput`) for the worker: its argmax
  (target ids) at the rows SGLang keeps (every row of a decode extend), its pool-vocabulary top-1 and hidden state
  there, and whether all of it is finite.
* a draft decode step: only the heads that some request chose (``spec_info.hedgespec_active``, a tuple of drafter
  indices) run; each row's logits and hidden state come from its request's head
  (``spec_info.hedgespec_slots``: per row, the position of its head in ``hedgespec_active``). A row's recurrent
  state is its own head's.

No module-level sglang import besides what the class needs: this module is imported only by the plugin when the
server runs the fused mode.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

ARCH = "HedgeSpecPoolForCausalLMEagle3"
POOL_KEY = "hedgespec_pool"
MARKER = "hedgespec_pool.safetensors"


@dataclass
class PoolOutput:
    """Every evaluated head's results of one draft-extend forward (device tensors; A heads, S rows SGLang's logits
    processor keeps: every row in a decode extend, each request's last row in a prefill extend)."""

    drafters: tuple[int, ...]  # pool indices of the A heads, in order
    top1: torch.Tensor  # [A, S] argmax of each head at the kept rows, target token ids
    kept_top1: torch.Tensor  # [A, S] argmax at the kept rows, pool-vocabulary ids (SGLang's draft input ids)
    kept_hidden: torch.Tensor  # [A, S, H] recurrent hidden state at the kept rows
    finite: torch.Tensor  # [A] bool: the head's logits have a finite maximum in every row, its hidden states finite


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
        n = len(self.drafters)
        if int(config.num_hidden_layers) != n:
            raise ValueError(f"{ARCH}: num_hidden_layers ({config.num_hidden_layers}) must equal the drafters ({n})")
        heads = []
        for i in range(n):
            cfg = copy.deepcopy(config)
            cfg.num_hidden_layers = 1
            cfg.architectures = ["LlamaForCausalLMEagle3"]
            if i:  # the heads share head 0's token embedding (replaced by the target's): no N copies of it
                cfg.vocab_size = 1
            head = LlamaForCausalLMEagle3(cfg, quant_config, prefix=f"{prefix}heads.{i}.")
            head.model.layers[0].self_attn.attn.layer_id = i  # head i owns KV layer i of the draft pool
            if i:
                head.model.embed_tokens = heads[0].model.embed_tokens
            heads.append(head)
        self.heads = nn.ModuleList(heads)
        self.live: list[int] = list(range(n))  # set by the worker when it drops a head
        self.pool_output: PoolOutput | None = None
        self.load_lm_head_from_target = False
        self._vocab: tuple[torch.Tensor, list[torch.Tensor]] | None = None
        self._batchable: bool | None = None
        self._stacked: dict[str, torch.Tensor] | None = None

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

    def _pool_vocab(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if self._vocab is None:
            device = self.heads[0].lm_head.weight.device
            union, cols = union_vocab([h.hot_token_id for h in self.heads], int(self.config.draft_vocab_size))
            self._vocab = union.to(device), [c.to(device) for c in cols]
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
        if evaluate and self._batched(forward_batch):
            logits, hidden = self._evaluate_batched(active, positions, forward_batch, embeds)
            self.pool_output = self._output(active, logits, hidden, union, cols)
            first = self._scatter(logits[0], cols[active[0]], union.numel())
            return LogitsProcessorOutput(next_token_logits=first, hidden_states=hidden[0])
        outs = [self._head(i, input_ids, positions, forward_batch, embeds) for i in active]
        if evaluate:  # SGLang builds its (unused) next draft input from the first head's; the worker reads them all
            logits = torch.stack([lo.next_token_logits for lo in outs])
            hidden = torch.stack([lo.hidden_states for lo in outs])
            self.pool_output = self._output(active, logits, hidden, union, cols)
            first = self._scatter(outs[0].next_token_logits, cols[active[0]], union.numel())
            return LogitsProcessorOutput(next_token_logits=first, hidden_states=outs[0].hidden_states)
        logits = [self._scatter(lo.next_token_logits, cols[i], union.numel()) for i, lo in zip(active, outs)]
        if len(active) == 1:
            return LogitsProcessorOutput(next_token_logits=logits[0], hidden_states=outs[0].hidden_states)
        slot = spec.hedgespec_slots  # [rows]: the position in `active` of each row's head
        rows = torch.arange(slot.numel(), device=slot.device)
        return LogitsProcessorOutput(
            next_token_logits=torch.stack(logits)[slot, rows],
            hidden_states=torch.stack([lo.hidden_states for lo in outs])[slot, rows],
        )

    # ------------------------------------------------------------------ evaluation with the heads' matmuls batched
    def _batched(self, forward_batch: Any) -> bool:
        """Whether an evaluation can run with stacked weights: plain unquantized single-GPU heads (no biases, no
        feature norms, no TP), target features as input. Otherwise every head runs its own SGLang forward."""
        if self._batchable is None:
            self._batchable = all(_plain_head(h) for h in self.heads)
        hidden = forward_batch.spec_info.hidden_states
        return self._batchable and hidden is not None and hidden.shape[-1] != int(self.config.hidden_size)

    def _stack(self) -> dict[str, torch.Tensor]:
        """Every head's matmul weights as one [N, out, in] tensor per kind, the heads' own parameters re-pointed
        at their slices (no second copy)."""
        if self._stacked is None:
            vocab = int(self.config.draft_vocab_size)
            params = {
                "fc": [h.model.fc.weight for h in self.heads],
                "qkv": [h.model.layers[0].self_attn.qkv_proj.weight for h in self.heads],
                "o": [h.model.layers[0].self_attn.o_proj.weight for h in self.heads],
                "gate_up": [h.model.layers[0].mlp.gate_up_proj.weight for h in self.heads],
                "down": [h.model.layers[0].mlp.down_proj.weight for h in self.heads],
                "lm_head": [h.lm_head.weight for h in self.heads],
            }
            self._stacked = {}
            for kind, ws in params.items():
                stacked = torch.stack([w.data for w in ws])
                for i, w in enumerate(ws):
                    w.data = stacked[i]
                self._stacked[kind] = stacked if kind != "lm_head" else stacked[:, :vocab]
        return self._stacked

    def _evaluate_batched(self, active, positions, forward_batch, embeds) -> tuple[torch.Tensor, torch.Tensor]:
        """The evaluation forward of heads ``active``: each matmul one batched product over the heads (the fc one
        product, its input being shared), norms, rotary embedding and attention by each head's own SGLang modules
        (head i's attention on KV layer i). Returns the logits [A, S, draft vocab] and recurrent hidden states
        [A, S, H] at the rows SGLang's logits processor keeps."""
        w = self._stack()
        if len(active) != len(self.heads):
            idx = torch.as_tensor(active, device=w["fc"].device)
            w = {k: v.index_select(0, idx) for k, v in w.items()}
        heads = [self.heads[i] for i in active]
        n, rows, size = len(heads), embeds.shape[0], int(self.config.hidden_size)
        feats = forward_batch.spec_info.hidden_states.to(w["fc"].dtype)
        x = torch.nn.functional.linear(feats, w["fc"].reshape(n * size, -1)).view(rows, n, size).transpose(0, 1)
        residual = [x[a].contiguous() for a in range(n)]
        inp = torch.stack(
            [
                torch.cat([h.model.layers[0].input_layernorm(embeds), h.model.layers[0].hidden_norm(r)], dim=-1)
                for h, r in zip(heads, residual)
            ]
        )
        qkv = torch.bmm(inp, w["qkv"].transpose(1, 2))
        attn = []
        for a, h in enumerate(heads):
            mod = h.model.layers[0].self_attn
            q, k, v = qkv[a].split([mod.q_size, mod.kv_size, mod.kv_size], dim=-1)
            q, k = mod.rotary_emb(positions, q, k)
            attn.append(mod.attn(q, k, v, forward_batch))
        out = torch.bmm(torch.stack(attn), w["o"].transpose(1, 2))
        normed = []
        for a, h in enumerate(heads):
            y, residual[a] = h.model.layers[0].post_attention_layernorm(out[a].contiguous(), residual[a])
            normed.append(y)
        up = torch.bmm(torch.stack(normed), w["gate_up"].transpose(1, 2))
        act = heads[0].model.layers[0].mlp.act_fn(up.view(n * rows, -1)).view(n, rows, -1)
        down = torch.bmm(act, w["down"].transpose(1, 2))
        keep = _kept_rows(forward_batch)
        final, hidden = [], []
        for a, h in enumerate(heads):
            to_logits, to_aux = h.model.norm(down[a].contiguous(), residual[a])
            final.append(to_logits if keep is None else to_logits[keep])
            hidden.append(to_aux if keep is None else to_aux[keep])
        return torch.bmm(torch.stack(final), w["lm_head"].transpose(1, 2)).float(), torch.stack(hidden)

    def _head(self, i: int, input_ids, positions, forward_batch, embeds) -> Any:
        head = self.heads[i]
        hidden, aux = head.model(input_ids, positions, forward_batch, input_embeds=embeds)
        return head.logits_processor(input_ids, hidden, head.lm_head, forward_batch, aux)

    @staticmethod
    def _scatter(logits: torch.Tensor, cols: torch.Tensor, width: int) -> torch.Tensor:
        """A head's logits [R, draft vocab] in the pool's columns, −inf elsewhere. The head's own argmax (first
        maximum in its draft order) is raised by one ulp, so exact ties break as the head alone breaks them
        (the pool's column order is by target id, which a head's d2t need not follow)."""
        out = logits.new_full((logits.shape[0], width), float("-inf"))
        out[:, cols] = logits
        rows, top = torch.arange(logits.shape[0], device=logits.device), cols[torch.argmax(logits, dim=-1)]
        out[rows, top] = torch.nextafter(out[rows, top], out.new_tensor(float("inf")))
        return out

    @staticmethod
    def _output(active, logits: torch.Tensor, hidden: torch.Tensor, union, cols) -> PoolOutput:
        """The heads' evaluation results from their logits [A, S, draft vocab] and hidden states [A, S, H]."""
        arg = torch.argmax(logits, dim=-1)  # [A, S], draft ids
        kept = torch.stack([cols[i][arg[a]] for a, i in enumerate(active)])
        finite = torch.isfinite(logits.amax(dim=-1)).all(dim=-1) & torch.isfinite(hidden).flatten(1).all(dim=-1)
        return PoolOutput(tuple(active), union[kept], kept, hidden, finite)


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


def _kept_rows(forward_batch: Any) -> torch.Tensor | None:
    """The rows SGLang's logits processor keeps: each sequence's last row in an extend (prefill), all rows
    (None) in a decode-mode draft-extend."""
    mode = forward_batch.forward_mode
    if mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2():
        return None
    return (torch.cumsum(forward_batch.extend_seq_lens, dim=0) - 1).long()


EntryClass = [HedgeSpecPoolForCausalLMEagle3]


def write_pool_dir(out: Path, drafters: Sequence[str | Path], configs: Sequence[dict[str, Any]]) -> Path:
    """The pool directory SGLang loads as the draft model: drafter 0's config with this architecture, one KV
    layer per drafter and the drafter list, plus a marker safetensors file. Written only when it changes."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(configs[0])
    cfg["architectures"] = [ARCH]
    cfg["num_hidden_layers"] = len(drafters)
    cfg[POOL_KEY] = {"drafters": [str(Path(d).resolve()) for d in drafters]}
    text = json.dumps(cfg, indent=2, sort_keys=True)
    path = out / "config.json"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    if not (out / MARKER).exists():
        save_file({"hedgespec_pool.marker": torch.zeros(1)}, str(out / MARKER))
    return out
