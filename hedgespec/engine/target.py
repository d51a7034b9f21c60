"""Target wrapper: any transformers causal LM with an incremental KV cache, tree verification and
EAGLE-3 feature capture.

* Features: the outputs of the target layers listed in ``aux_layer_ids`` (SpecForge/SGLang convention:
  id ``i`` is the output of decoder layer ``i`` = HF ``hidden_states[i+1]``), concatenated along the last
  dim, captured by forward hooks on the decoder layers (pre-norm even for the last layer, as SGLang). For
  models whose layer list is not found, HF ``hidden_states[i+1]`` is used (its last entry is normed).
* Verification rows are passed with explicit position ids (committed length + tree depth) and a custom
  4D additive mask (transformers passes a 4D mask through unchanged): committed rows are visible to every
  new row, new rows see their tree ancestors and themselves.
* :meth:`commit` keeps the committed prefix plus a chosen subset of the last forward's rows (the
  accepted path) and drops the rest: rollback to the accepted path.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch


class TargetModel:
    """Incremental, single-sequence view of a transformers causal LM (batch size 1)."""

    def __init__(self, model: Any, aux_layer_ids: Sequence[int] = ()) -> None:
        if not hasattr(model, "config") or not callable(model):
            raise ValueError(f"target must be a loaded transformers causal LM, got {type(model).__name__}")
        self.model = model.eval()
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.config = cfg
        self.hidden_size = int(cfg.hidden_size)
        self.vocab_size = int(cfg.vocab_size)
        self.num_layers = int(cfg.num_hidden_layers)
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 1 << 30) or (1 << 30))
        self.aux_layer_ids = tuple(int(i) for i in aux_layer_ids)
        for i in self.aux_layer_ids:
            if not 0 <= i < self.num_layers:
                raise ValueError(f"aux layer id {i} out of range for a {self.num_layers}-layer target")
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.embed_tokens = model.get_input_embeddings()
        self.cache: Any = None
        self.length = 0  # committed tokens in the cache
        self._layers = _decoder_layers(model)
        self._captured: dict[int, torch.Tensor] = {}
        # transformers' causal LMs can compute the output head for the last rows only (a prefill needs one)
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    def _hook(self, i: int):
        def capture(_module: Any, _inputs: Any, output: Any) -> None:
            self._captured[i] = output[0] if isinstance(output, tuple) else output

        return capture

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.length = 0

    @torch.no_grad()
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Input embeddings of target-vocab ids (shared with every EAGLE-3 head), float32."""
        return self.embed_tokens(ids.to(self.device)).float()

    @torch.no_grad()
    def forward(
        self,
        tokens: torch.Tensor,
        depth: torch.Tensor | None = None,
        tree_mask: torch.Tensor | None = None,
        last_logits: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run new rows after the committed prefix; they are appended to the cache *uncommitted*.

        Args:
            tokens: [T] token ids.
            depth: [T] offsets of each row from the committed length (default 0..T-1: a chain).
            tree_mask: [T, T] bool, row r may attend row c (ancestors incl. itself); default causal.
            last_logits: return the last row's logits only ([1, V]); the output head then runs on that row alone
                where the model supports it (``logits_to_keep``), as ``transformers``' ``generate`` prefills.

        Returns:
            logits [T, V] (float32; [1, V] with ``last_logits``) and aux features [T, n_aux·H] (float32; empty
            when no ids).
        """
        t = int(tokens.shape[0])
        if depth is None:
            depth = torch.arange(t)
        pos = (self.length + depth).to(self.device)
        kwargs: dict[str, Any] = {}
        if last_logits and self._keeps_logits:
            kwargs["logits_to_keep"] = 1
        if tree_mask is not None:
            full = torch.ones(t, self.length + t, dtype=torch.bool, device=self.device)
            full[:, self.length :] = tree_mask.to(self.device)
            add = torch.zeros(full.shape, dtype=self.dtype, device=self.device)
            add.masked_fill_(~full, torch.finfo(self.dtype).min)
            kwargs["attention_mask"] = add[None, None]
        hooks = []
        if self._layers is not None:  # hooks live for this call only (no leaks across TargetModels)
            hooks = [self._layers[i].register_forward_hook(self._hook(i)) for i in set(self.aux_layer_ids)]
        try:
            out = self._run(tokens, pos, kwargs)
        finally:
            for h in hooks:
                h.remove()
        self.cache = out.past_key_values
        logits = (out.logits[0, -1:] if last_logits else out.logits[0]).float()
        if self.aux_layer_ids and self._layers is not None:  # decoder-layer outputs (pre-norm, as SGLang)
            feats = torch.cat([self._captured[i][0] for i in self.aux_layer_ids], dim=-1).float()
            self._captured.clear()
        elif self.aux_layer_ids:  # fallback: HF hidden_states[i+1] (the last entry is normed)
            feats = torch.cat([out.hidden_states[i + 1][0] for i in self.aux_layer_ids], dim=-1).float()
        else:
            feats = logits.new_zeros(t, 0)
        return logits, feats

    def _run(self, tokens: torch.Tensor, pos: torch.Tensor, kwargs: dict[str, Any]) -> Any:
        return self.model(
            input_ids=tokens.to(self.device)[None],
            position_ids=pos[None],
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=bool(self.aux_layer_ids) and self._layers is None,
            **kwargs,
        )

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, last_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Reset, run the prompt and commit it; returns its logits (the last row's only with ``last_logits``)
        and features."""
        self.reset()
        logits, feats = self.forward(prompt, last_logits=last_logits)
        self.length = int(prompt.shape[0])
        return logits, feats

    def commit(self, keep: Sequence[int]) -> None:
        """Keep rows ``keep`` (indices into the last :meth:`forward`'s rows, in order) and drop the rest."""
        keep_t = torch.as_tensor(list(keep), dtype=torch.long, device=self.device)
        c = self.length
        contiguous = bool(len(keep)) and list(keep) == list(range(len(keep)))
        for layer in self.cache.layers:
            if contiguous:
                layer.keys = layer.keys[:, :, : c + len(keep)]
                layer.values = layer.values[:, :, : c + len(keep)]
            else:
                idx = torch.cat([torch.arange(c, device=self.device), c + keep_t])
                layer.keys = layer.keys.index_select(2, idx)
                layer.values = layer.values.index_select(2, idx)
        self.length = c + len(keep)


def _decoder_layers(model: Any) -> Any:
    """The decoder layer list of common HF causal LMs (``model.model.layers``), or None."""
    inner = getattr(model, "model", None)
    for obj in (inner, getattr(inner, "language_model", None), getattr(model, "transformer", None)):
        layers = getattr(obj, "layers", None) if obj is not None else None
        if isinstance(layers, torch.nn.ModuleList):
            return layers
    return None
