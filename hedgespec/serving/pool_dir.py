"""The pool directory the HEDGESPEC launcher writes for ``fused=true``: what SGLang loads as the one draft model.

``config.json`` is drafter 0's config with ``architectures`` set to :data:`ARCH` and a ``hedgespec_pool`` section
(the drafter checkpoints, their names, the KV layout); a marker safetensors file only lets SGLang's loader start
(:class:`hedgespec.serving.pool_model.HedgeSpecPoolForCausalLMEagle3` reads each drafter's weights itself).

Two KV layouts (the serve config's ``fused_layout``), both on SGLang's one draft KV pool and its shared allocator:

* ``heads`` (when the heads can share one attention, :func:`stacked_refusal` is None): **one** draft layer whose
  KV heads are every drafter's side by side: ``num_attention_heads`` = N·Hq, ``num_key_value_heads`` = N·Hkv, an
  explicit ``head_dim`` and ``model_type`` :data:`MODEL_TYPE` (each head's own config is rebuilt from it).
  Drafter i owns query heads ``[i·Hq, (i+1)·Hq)`` and KV heads ``[i·Hkv, (i+1)·Hkv)``, so grouped-query attention
  over the stacked heads is each drafter's own, and one attention call serves all heads.
* ``layers`` (asked for, or the fallback): ``num_hidden_layers`` = N, drafter i on KV layer i, each head its own
  attention call.

Torch is needed only to write the marker file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ARCH = "HedgeSpecPoolForCausalLMEagle3"
POOL_KEY = "hedgespec_pool"
MARKER = "hedgespec_pool.safetensors"
LAYOUTS = ("heads", "layers")
#: the heads layout's config type: its N·Hq query heads need not divide ``hidden_size``, which a Llama config
#: refuses; the plugin registers it with transformers (:class:`hedgespec.serving.pool_model.PoolConfig`)
MODEL_TYPE = "hedgespec_pool"

#: what every head must share to attend as slices of one layer, besides its attention shape (:func:`head_shape`)
SHARED_KEYS = ("hidden_size", "rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings")
#: config switches that put a head outside the stacked pass (norms or biases it does not compute)
_HEAD_FLAGS = ("norm_before_fc", "fc_norm", "use_aux_norm", "norm_output", "bias", "attention_bias", "mlp_bias")


def head_shape(cfg: dict[str, Any]) -> dict[str, int]:
    """One head's attention shape: query heads, KV heads and head dim (as SGLang's Llama attention derives it)."""
    hq = int(cfg["num_attention_heads"])
    hkv = int(cfg.get("num_key_value_heads") or hq)
    return {
        "num_attention_heads": hq,
        "num_key_value_heads": hkv,
        "head_dim": int(cfg.get("head_dim") or cfg["hidden_size"] // hq),
    }


def stacked_refusal(configs: Sequence[dict[str, Any]], names: Sequence[str]) -> str | None:
    """Why the heads cannot be served in the ``heads`` layout (None when they can): a head with a norm or bias
    the stacked pass does not compute, multi-axis rotary embeddings, or heads that differ in shape or rotary."""
    for name, cfg in zip(names, configs):
        eagle = cfg.get("eagle_config") or {}
        flags = [k for k in _HEAD_FLAGS if cfg.get(k) or eagle.get(k)]
        if flags:
            return f"drafter {name!r} sets {', '.join(flags)}"
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if isinstance(rope, dict) and "mrope_section" in rope:
            return f"drafter {name!r} uses multi-axis rotary embeddings (mrope_section)"
    shapes = {json.dumps(head_shape(c), sort_keys=True) for c in configs}
    differ = [k for k in SHARED_KEYS if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
    if len(shapes) > 1 or differ:
        return f"the drafters differ in {', '.join(differ + (['attention shape'] if len(shapes) > 1 else []))}"
    return None


def write_pool_dir(
    out: Path,
    drafters: Sequence[str | Path],
    configs: Sequence[dict[str, Any]],
    names: Sequence[str] | None = None,
    layout: str = "heads",
) -> Path:
    """Write the pool directory (module docstring) for ``drafters`` with their ``configs`` and ``names`` (a low-rank
    expert's factors name their base). ``layout`` ``heads`` falls back to ``layers`` when :func:`stacked_refusal`
    gives a reason, which the directory records. Files are rewritten only when they change."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: expected one of {LAYOUTS}")
    from safetensors.torch import save_file
    from torch import zeros

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if names is not None and len(names) != len(drafters):
        raise ValueError(f"{len(names)} drafter names for {len(drafters)} drafters")
    labels = [str(x) for x in names] if names is not None else [str(i) for i in range(len(drafters))]
    n = len(drafters)
    cfg = dict(configs[0])
    cfg["architectures"] = [ARCH]
    pool: dict[str, Any] = {"drafters": [str(Path(d).resolve()) for d in drafters]}
    if names is not None:
        pool["names"] = labels
    reason = stacked_refusal(configs, labels) if layout == "heads" else "fused_layout=layers"
    if reason is None:
        shape = head_shape(cfg)
        cfg["num_hidden_layers"] = 1
        cfg["num_attention_heads"] = n * shape["num_attention_heads"]
        cfg["num_key_value_heads"] = n * shape["num_key_value_heads"]
        cfg["head_dim"] = shape["head_dim"]
        cfg["model_type"] = MODEL_TYPE
        pool.update(layout="heads", head_model_type=str(configs[0].get("model_type", "llama")))
    else:
        cfg["num_hidden_layers"] = n
        pool.update(layout="layers", layout_reason=reason)
    cfg[POOL_KEY] = pool
    text = json.dumps(cfg, indent=2, sort_keys=True)
    path = out / "config.json"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    if not (out / MARKER).exists():
        save_file({"hedgespec_pool.marker": zeros(1)}, str(out / MARKER))
    return out
