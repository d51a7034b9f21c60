#!/usr/bin/env bash
# Serve (CPU): sglang 0.5.23 installed --no-deps on top of our torch==2.13.0+cpu / transformers==5.19.0, plus
# the CPU-usable part of its dependencies, pinned to the set tested with hedgespec (docs/serving.md).
#
#   bash scripts/install.d/40-serve.sh          # idempotent; run by scripts/install.sh
#
# Why not `pip install sglang==0.5.23`: its metadata pins torch==2.14.1 (a multi-GB CUDA build) and CUDA-only
# packages (flashinfer, sglang-kernel, cuda-python, cutlass-dsl, deep-ep/gemm, flash-attn-4, ...). None of them is
# needed on CPU: the sgl-kernel ops that SGLang's EAGLE path calls come from hedgespec.serving.cpu_kernels.
# torchvision: sglang imports it at config-import time; the only PyPI build for torch 2.13 (0.28.0) is linked
# against the CUDA libraries, so its C ops cannot load here. It is installed --no-deps and its two fake-op
# registrations for the missing C ops are made conditional (the only edit; python-only, marked, idempotent).
# On a CUDA machine use `pip install sglang==0.5.23` instead (scripts/gpu_check.sh does).
# Skip with HEDGESPEC_SKIP_SERVE=1 (e.g. a machine that never serves).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ "${HEDGESPEC_SKIP_SERVE:-0}" == "1" ]]; then
  echo "40-serve: skipped (HEDGESPEC_SKIP_SERVE=1)"; exit 0
fi
if ! python -c 'import sys, platform; sys.exit(0 if sys.version_info[:2] == (3, 11) and platform.machine() == "x86_64" else 1)'; then
  echo "40-serve: skipped (the sglang 0.5.23 wheel is cp311 / x86_64 only)"; exit 0
fi

C=requirements/constraints.txt
# sglang itself, without its CUDA-pinned requirements
python -m pip install -q --no-deps "sglang==0.5.23"
# torchvision without deps (it would replace torch); see the note above
python -m pip install -q --no-deps "torchvision==0.28.0"
# CPU-usable runtime dependencies of sglang 0.5.23 (server, tokenizer manager, grammar backends, openai API),
# pinned to the versions tested together with torch 2.13.0+cpu / transformers 5.19.0
python -m pip install -q -c "$C" \
  "aiohttp==3.14.5" "anthropic==2.14.0" "blobfile==3.0.0" "compressed-tensors==0.18.0" "einops==0.8.2" \
  "fastapi==0.165.0" "interegular==0.3.3" "llguidance==1.9.1" "msgspec==0.23.0" "openai==2.8.0" \
  "openai-harmony==0.0.4" "orjson==3.8.3" "partial-json-parser==0.2.1.1.post7" "pillow==13.0.0" \
  "prometheus-client==0.26.0" "psutil==7.2.2" "pybase64==1.5.1" "pydantic==2.13.4" "python-multipart==0.0.34" \
  "pyzmq==27.3.0" "requests==2.34.2" "scipy==1.17.1" "sentencepiece==0.2.1" "setproctitle==1.3.8" \
  "soundfile==0.13.1" "tiktoken==0.14.0" "uvicorn==0.54.0" "uvloop==0.23.0" "watchfiles==1.3.0" \
  "xgrammar==0.2.7" "triton==3.9.0" "xxhash==4.1.0" "zstandard==0.25.0" "ipython==8.12.3" "distro==1.9.0" "jsonschema==4.26.0"

python - <<'EOF'
"""Make torchvision's two fake-op registrations conditional on its C ops being loadable (CPU torch)."""
import importlib.util
import pathlib

spec = importlib.util.find_spec("torchvision")
path = pathlib.Path(spec.submodule_search_locations[0]) / "_meta_registrations.py"
text = path.read_text()
marker = "# hedgespec: cpu-torch guard"
if marker not in text:
    for op in ("nms", "qnms"):
        old = f'@torch.library.register_fake("torchvision::{op}")'
        if old not in text:
            raise SystemExit(f"40-serve: unexpected torchvision version, {old!r} not found in {path}")
        text = text.replace(old, f"@(torch.library.register_fake(\"torchvision::{op}\") "
                                 f"if torchvision.extension._has_ops() else (lambda f: f))  {marker}")
    path.write_text(text)
EOF

# smoke check: the versions we pin and the EAGLE worker import on the CPU path
SGLANG_USE_CPU_ENGINE=1 PYTHONPATH="$PWD/hedgespec/serving/_cpu_shim${PYTHONPATH:+:$PYTHONPATH}" python - <<'EOF'
import sglang, torch, transformers
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: F401
# the server's own import chain (a fresh venv lacks modules the base image may carry: IPython, jsonschema)
import sglang.launch_server, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler  # noqa: F401,E401
import sglang.srt.managers.tokenizer_manager, sglang.srt.managers.detokenizer_manager  # noqa: F401,E401
import sglang.srt.models.llama, sglang.srt.models.llama_eagle3  # noqa: F401,E401
assert sglang.__version__ == "0.5.23", sglang.__version__
assert torch.__version__.startswith("2.13.0"), torch.__version__
assert transformers.__version__ == "5.19.0", transformers.__version__
print(f"40-serve: sglang {sglang.__version__} on torch {torch.__version__}, transformers {transformers.__version__}: OK")
EOF
