"""``load_target``: the one entry point that turns a target name / config into ``(model, tokenizer)``."""

from __future__ import annotations

import os
from typing import Any

from .chat import pin_thinking
from .checkpoint_hash import checkpoint_fingerprint
from .smollm2 import convert_smollm2, load_smollm2
from .spec import TargetSpec, resolve_target


def load_target(name_or_cfg: str | TargetSpec | dict[str, Any] | Any, **overrides: Any) -> tuple[Any, Any]:
    """Load a target model and its tokenizer.

    Args:
        name_or_cfg: ``"smollm2"`` (embedded default), ``"tiny"`` (random small Llama for tests), ``"llama8b"``,
            ``"qwen8b"``, ``"qwen32b"`` (the paper's targets, HF ids; GPU machines only), ``"hf:<id-or-path>"``,
            a ``conf/target/*.yaml`` node / dict, or a :class:`TargetSpec`.
        **overrides: TargetSpec fields to replace (e.g. ``dtype="bfloat16"``, ``seed=3``, ``cache_dir=...``).

    Returns:
        ``(model, tokenizer)``; the model is in eval mode on ``spec.device``, the tokenizer has a chat template
        (with ``spec.thinking`` fixed in it when set, :func:`hedgespec.models.chat.pin_thinking`).
    """
    spec = resolve_target(name_or_cfg)
    if overrides:
        d = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
        bad = set(overrides) - set(d)
        if bad:
            raise ValueError(
                f"load_target got unknown override(s) {sorted(bad)}; expected TargetSpec fields {sorted(d)}"
            )
        d.update(overrides)
        spec = TargetSpec(**d)
    if spec.kind == "hf":
        model, tok = _load_hf(spec)  # pins the thinking switch before the weights load
        return _computing(model, spec), tok
    if spec.kind == "tiny":
        from .tiny import build_tiny_target  # lazy: .tiny imports torch; hedgespec.models stays torch-free

        model, tok = build_tiny_target(spec.arch, seed=spec.seed, dtype=spec.dtype, device=spec.device)
    else:
        model, tok = load_smollm2(spec.cache_dir, dtype=spec.dtype, device=spec.device)
    return _computing(model, spec), pin_thinking(tok, spec.thinking, spec.name)


def _computing(model: Any, spec: TargetSpec) -> Any:
    """The loaded model cast to ``spec.compute_dtype``, its linear layers on ``spec.linear_kernels`` (packed from
    ``spec.packed_min_rows`` rows on)."""
    from .linear_kernels import use_linear_kernels  # lazy: imports torch

    model = cast_for_compute(model, spec.compute_dtype)
    return use_linear_kernels(model, spec.linear_kernels, min_rows=spec.packed_min_rows)


def cast_for_compute(model: Any, compute_dtype: str | None) -> Any:
    """``model`` cast to ``compute_dtype`` (None: unchanged), keeping the fingerprint of the weights as loaded."""
    if compute_dtype is None:
        return model
    import torch

    want = getattr(torch, compute_dtype)
    if model.dtype == want:
        return model
    from .fingerprint import target_fingerprint

    target_fingerprint(model)  # computed (or read) on the loaded weights, cached on the object, before the cast
    return model.to(want)


def _load_hf(spec: TargetSpec) -> tuple[Any, Any]:
    """Load any HF causal LM. Respects ``HF_HUB_OFFLINE``: offline, the id must already be in the local HF cache."""
    import torch  # lazy, with transformers: importing hedgespec.models stays torch-free
    from transformers import AutoModelForCausalLM, AutoTokenizer

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    kw: dict[str, Any] = {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code}
    if offline or os.path.isdir(str(spec.hf_id)):
        kw["local_files_only"] = True
    dtype = "auto" if spec.dtype == "auto" else getattr(torch, spec.dtype)
    try:
        tok = pin_thinking(AutoTokenizer.from_pretrained(spec.hf_id, **kw), spec.thinking, spec.name)  # before weights
        model = AutoModelForCausalLM.from_pretrained(spec.hf_id, dtype=dtype, **kw)
    except OSError as e:
        hint = " (HF_HUB_OFFLINE is set: download it first on a machine with network)" if offline else ""
        raise OSError(f"target {spec.name!r}: cannot load HF model {spec.hf_id!r}{hint}: {e}") from e
    model = model.to(spec.device)
    model.eval()
    _fingerprint_from_files(model, spec, kw)
    return model, tok


def _fingerprint_from_files(model: Any, spec: TargetSpec, kw: dict[str, Any]) -> None:
    """Set the model's fingerprint from its checkpoint files (:mod:`hedgespec.models.checkpoint_hash`), so a
    large target is never hashed tensor by tensor; left to ``target_fingerprint``'s tensor hash when the files
    cannot be found (e.g. weights that are not safetensors)."""
    from huggingface_hub import snapshot_download

    if os.path.isdir(str(spec.hf_id)):
        model_dir = str(spec.hf_id)
    else:
        try:  # the snapshot from_pretrained just used (in the local cache, never downloaded here)
            model_dir = snapshot_download(str(spec.hf_id), revision=spec.revision, local_files_only=True)
        except Exception:  # noqa: BLE001 - any "not cached" error: fall back to the tensor hash
            return
    dtypes = {str(t.dtype).removeprefix("torch.") for t in model.state_dict().values()}
    fp = checkpoint_fingerprint(model_dir, dtypes)
    if fp is not None:
        object.__setattr__(model, "_hedgespec_fingerprint", fp)


def load_target_head(name_or_cfg: str | TargetSpec | dict[str, Any] | Any) -> tuple[Any, Any]:
    """The target for a process that leaves its forward passes to another one: ``(model, tokenizer)`` where, for
    an ``hf`` target, only the input embedding, the output head and the final norm hold weights (read from the
    checkpoint's safetensors files, on the CPU) and every other parameter is on the meta device.

    Enough for the config, the fingerprint (the same as :func:`load_target`'s: checkpoint files and dtypes), the
    tokenizer, SpecForge's target-head files and a ``target_head`` warm start; a forward pass fails. ``tiny`` and
    ``smollm2`` targets are small and load whole, as :func:`load_target` loads them.
    """
    spec = resolve_target(name_or_cfg)
    if spec.kind != "hf":
        return load_target(spec)
    import torch  # lazy, with transformers: importing hedgespec.models stays torch-free
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    kw: dict[str, Any] = {"revision": spec.revision, "trust_remote_code": spec.trust_remote_code}
    if offline or os.path.isdir(str(spec.hf_id)):
        kw["local_files_only"] = True
    try:
        tok = pin_thinking(AutoTokenizer.from_pretrained(spec.hf_id, **kw), spec.thinking, spec.name)
        config = AutoConfig.from_pretrained(spec.hf_id, **kw)
    except OSError as e:
        raise OSError(f"target {spec.name!r}: cannot load HF config/tokenizer {spec.hf_id!r}: {e}") from e
    auto = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    dtype = (
        (getattr(torch, auto) if isinstance(auto, str) else auto)
        if spec.dtype == "auto"
        else getattr(torch, spec.dtype)
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=spec.trust_remote_code)
    model_dir = _model_dir(spec)
    _assign_from_checkpoint(model, model_dir, _head_parameter_names(model), dtype, spec.name)
    model.eval()
    dtypes = {str(t.dtype).removeprefix("torch.") for t in model.state_dict().values()}
    fp = checkpoint_fingerprint(model_dir, dtypes)
    if fp is None:
        raise ValueError(
            f"target {spec.name!r}: {model_dir} has no *.safetensors files to read the head from; "
            "use train.features.backend=transformers"
        )
    object.__setattr__(model, "_hedgespec_fingerprint", fp)
    return model, tok


def _model_dir(spec: TargetSpec) -> str:
    """An ``hf`` target's local directory: its path, or its snapshot in the local Hugging Face cache."""
    if os.path.isdir(str(spec.hf_id)):
        return str(spec.hf_id)
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(str(spec.hf_id), revision=spec.revision, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - huggingface_hub raises several types for "not in the local cache"
        raise OSError(
            f"target {spec.name!r}: {spec.hf_id!r} is not in the local Hugging Face cache; "
            f"download it first: huggingface-cli download {spec.hf_id}"
        ) from e


def _head_parameter_names(model: Any) -> list[str]:
    """The parameter names of the input embedding, the output head (absent when tied to the embedding) and the
    decoder's final norm."""
    names = {id(p): n for n, p in model.named_parameters()}
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    wanted = [model.get_input_embeddings(), model.get_output_embeddings(), getattr(decoder, "norm", None)]
    return [names[id(m.weight)] for m in wanted if m is not None and id(getattr(m, "weight", None)) in names]


def _assign_from_checkpoint(model: Any, model_dir: str, names: list[str], dtype: Any, target: str) -> None:
    """Read ``names`` from the checkpoint's safetensors files into ``model`` (CPU tensors, ``dtype``)."""
    from pathlib import Path

    from safetensors import safe_open

    found: dict[str, Any] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            for name in set(names) & set(sf.keys()) - set(found):
                found[name] = sf.get_tensor(name).to(dtype)
    missing = sorted(set(names) - set(found))
    if missing:
        raise ValueError(
            f"target {target!r}: {missing} not found in the safetensors files of {model_dir}; "
            "use train.features.backend=transformers"
        )
    model.load_state_dict(found, strict=False, assign=True)
    if (
        getattr(model.get_output_embeddings(), "weight", None) is not None
        and model.get_output_embeddings().weight.is_meta
    ):
        model.tie_weights()  # a tied head shares the embedding's tensor


def load_tokenizer(name_or_cfg: str | TargetSpec | dict[str, Any] | Any) -> Any:
    """Only the target's tokenizer (cheap: no weights for ``tiny``; ``smollm2``: the cached conversion's tokenizer),
    with ``spec.thinking`` fixed in its chat template as :func:`load_target` does."""
    spec = resolve_target(name_or_cfg)
    return pin_thinking(_load_tokenizer(spec), spec.thinking, spec.name)


def _load_tokenizer(spec: TargetSpec) -> Any:
    if spec.kind == "tiny":
        from .tiny import build_tiny_tokenizer  # lazy, as in load_target

        return build_tiny_tokenizer(spec.arch.vocab_size)
    from transformers import AutoTokenizer  # lazy: transformers imports torch

    if spec.kind == "smollm2":
        return AutoTokenizer.from_pretrained(convert_smollm2(spec.cache_dir), local_files_only=True)
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    local_only = offline or os.path.isdir(str(spec.hf_id))
    return AutoTokenizer.from_pretrained(spec.hf_id, revision=spec.revision, local_files_only=local_only)
