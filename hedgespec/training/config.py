"""Hydra ``train`` config -> SpecForge's strict run config, plus the EAGLE-3 draft architecture.

The ``specforge:`` block of a budget (``conf/train/{tiny,embedded,paper}.yaml``) holds SpecForge
``Config`` sections verbatim (``model``, ``data``, ``training``, ``tracking``, ``deployment``, ...).  The bridge
fills in what only it knows (paths of the cached target head, features, vocab mapping, draft config, output
directory, resume point, tracker) and validates the result with ``specforge.config.Config.model_validate``
(pydantic, ``extra="forbid"``), so a typo such as ``training.learning_rat`` fails in :func:`validate_early`
before any target is loaded.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from hedgespec.training._specforge import specforge_config_model

#: Bridge-owned SpecForge fields: a budget may not set them (they are derived per run).
BRIDGE_OWNED = {
    ("model", "target_model_path"),
    ("model", "draft_model_config"),
    ("model", "vocab_mapping_path"),
    ("model", "aux_hidden_state_layer_ids"),
    ("data", "hidden_states_path"),
    ("training", "resume_from"),
    ("", "output_dir"),
    ("", "run_id"),
}
_PLACEHOLDER = "/nonexistent/hedgespec-placeholder"


def _format_validation_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    lines = []
    for e in errors():
        loc = ".".join(str(p) for p in e.get("loc", ()))
        got = f" (got {e.get('input')!r})" if e.get("type") == "extra_forbidden" else ""
        lines.append(f"  specforge.{loc}: {e.get('msg')}{got}")
    return "\n".join(lines) or str(exc)


def validate_specforge(raw: Mapping[str, Any]) -> Any:
    """Validate ``raw`` with SpecForge's ``Config``; raise ValueError listing each bad key and why."""
    Config = specforge_config_model()
    try:
        return Config.model_validate(copy.deepcopy(dict(raw)))
    except Exception as exc:  # pydantic.ValidationError
        raise ValueError(
            "invalid SpecForge config (conf/train/<budget>.yaml, key 'specforge'):\n" + _format_validation_error(exc)
        ) from exc


#: ``train.dtype`` values: ``auto`` is bfloat16 where it is native (a GPU, or a CPU with oneDNN's bfloat16 path)
#: and float32 elsewhere (an AVX2-only CPU emulates bfloat16 ~100x slower than float32)
TRAIN_DTYPES = ("auto", "bfloat16", "float16", "float32")
#: the two places a SpecForge run reads the training dtype, both filled from ``train.dtype`` by
#: :func:`resolve_train_dtype` (features are stored in it, and SpecForge's offline run computes in the
#: features' dtype: NO_SHARD does no mixed-precision cast)
DTYPE_FIELDS = (("features", "dtype"), ("specforge", "model", "torch_dtype"))


def auto_train_dtype(device: str) -> str:
    """``train.dtype=auto`` on ``device``: bfloat16 off CPU, on CPU bfloat16 only where it is native."""
    if device != "cpu":
        return "bfloat16"
    from hedgespec.models.linear_kernels import native_bfloat16

    return "bfloat16" if native_bfloat16() else "float32"


def resolve_train_dtype(train: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the train budget with ``train.dtype`` resolved into :data:`DTYPE_FIELDS` (and removed: what
    the run key and SpecForge see is the dtype trained in, so a run trained in bfloat16 keeps its key whether
    that came from ``auto`` or from ``bfloat16``). Either field set by hand is refused: ``train.dtype`` is the
    one setting."""
    out = copy.deepcopy(dict(train))
    for path in DTYPE_FIELDS:
        node: Any = out
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and path[-1] in node:
            raise ValueError(
                f"train.{'.'.join(path)} is set from train.dtype (features and SpecForge must share one dtype); "
                f"remove it and set train.dtype to one of {', '.join(TRAIN_DTYPES)}"
            )
    choice = str(out.pop("dtype", "auto"))
    if choice not in TRAIN_DTYPES:
        raise ValueError(f"train.dtype={choice!r} is unknown; expected one of {', '.join(TRAIN_DTYPES)}")
    dtype = auto_train_dtype(str(out.get("device", "cpu"))) if choice == "auto" else choice
    out["features"] = {**(out.get("features") or {}), "dtype": dtype}
    specforge = out["specforge"] = dict(out.get("specforge") or {})
    specforge["model"] = {**(specforge.get("model") or {}), "torch_dtype": dtype}
    return out


def check_budget_block(block: Mapping[str, Any]) -> None:
    """Reject bridge-owned keys in a budget's ``specforge`` block (they would be silently replaced)."""
    for section, key in BRIDGE_OWNED:
        node = block if not section else (block.get(section) or {})
        if key in node:
            where = f"{section}.{key}" if section else key
            raise ValueError(f"specforge.{where} is set by hedgespec for every run; remove it from the train budget")


def specforge_chat_template(target: Any) -> str | None:
    """SpecForge's registered chat template (``data.chat_template``) for a paper target, or None (its default).

    Only SpecForge's own tokenisation reads it (online training, its feature-preparation script); hedgespec's
    offline features are tokenised with the target's own template. Qwen3: ``qwen3-instruct`` with thinking off
    (the empty think block is not trained, as in our loss masks), else ``qwen3-thinking``.
    """
    ident = str(getattr(target, "hf_id", "") or "").lower()
    if "qwen3" in ident:
        return "qwen3-instruct" if getattr(target, "thinking", None) is False else "qwen3-thinking"
    if "llama-3" in ident:
        return "llama3"
    return None


def compose_specforge(
    block: Mapping[str, Any],
    *,
    target_model_path: str,
    draft_config_path: str,
    vocab_mapping_path: str,
    aux_layer_ids: Sequence[int],
    hidden_states_path: str,
    output_dir: str,
    run_id: str,
    resume_from: str | None = None,
    tracking: Mapping[str, Any] | None = None,
    chat_template: str | None = None,
    trainer: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge the budget's ``specforge`` block with the per-run fields; returns a plain dict (not validated).
    ``chat_template`` (:func:`specforge_chat_template`) fills ``data.chat_template`` unless the block sets it;
    ``trainer`` (:meth:`hedgespec.training.nodes.Topology.specforge_trainer`) sets ``deployment.trainer``'s
    node count and rendezvous."""
    check_budget_block(block)
    raw: dict[str, Any] = copy.deepcopy(dict(block))
    if chat_template is not None:
        raw.setdefault("data", {}).setdefault("chat_template", chat_template)
    model = raw.setdefault("model", {})
    model.update(
        target_model_path=target_model_path,
        draft_model_config=draft_config_path,
        vocab_mapping_path=vocab_mapping_path,
        aux_hidden_state_layer_ids=[int(i) for i in aux_layer_ids],
    )
    raw.setdefault("data", {})["hidden_states_path"] = hidden_states_path
    training = raw.setdefault("training", {})
    if resume_from:
        training["resume_from"] = resume_from
    if tracking:
        raw.setdefault("tracking", {}).update(tracking)
    if trainer:
        raw.setdefault("deployment", {}).setdefault("trainer", {}).update(trainer)
    raw["output_dir"] = output_dir
    raw["run_id"] = run_id
    return raw


def validate_early(block: Mapping[str, Any], tracking: Mapping[str, Any] | None = None) -> Any:
    """Validate a budget's ``specforge`` block with placeholder paths, before any work (so typos fail up front)."""
    raw = compose_specforge(
        block,
        target_model_path=_PLACEHOLDER,
        draft_config_path=_PLACEHOLDER + ".json",
        vocab_mapping_path=_PLACEHOLDER + ".pt",
        aux_layer_ids=[1, 2, 3],
        hidden_states_path=_PLACEHOLDER,
        output_dir=_PLACEHOLDER,
        run_id="validate",
        tracking=tracking,
    )
    return validate_specforge(raw)


def draft_config_dict(
    target_config: Any,
    *,
    draft_vocab_size: int,
    aux_layer_ids: Sequence[int],
    max_position_embeddings: int | None = None,
) -> dict[str, Any]:
    """EAGLE-3 draft architecture for a target (``LlamaForCausalLMEagle3``, one decoder layer).

    Same width/heads/rope as the target, ``num_hidden_layers=1`` (EAGLE-3 fixes it), untied ``lm_head`` over
    ``draft_vocab_size`` tokens, and ``eagle_config.eagle_aux_hidden_state_layer_ids`` recording which target
    layers are fused (read by SGLang and by ``hedgespec.engine.eagle3``).
    """
    text_config = getattr(target_config, "text_config", None) or target_config  # multimodal wrappers
    t = text_config.to_dict() if hasattr(text_config, "to_dict") else dict(text_config)
    keep = (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "rope_parameters",
        "rope_scaling",
        "hidden_act",
        "vocab_size",
        "max_position_embeddings",
        "attention_bias",
        "mlp_bias",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "initializer_range",
        "pretraining_tp",
    )
    d = {k: t[k] for k in keep if k in t and t[k] is not None}
    d.update(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        num_hidden_layers=1,
        draft_vocab_size=int(draft_vocab_size),
        tie_word_embeddings=False,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [int(i) for i in aux_layer_ids]},
    )
    if max_position_embeddings is not None:
        d["max_position_embeddings"] = int(max_position_embeddings)
    d.setdefault("hidden_act", "silu")
    return d
