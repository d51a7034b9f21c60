#!/usr/bin/env bash
# Training bridge (docs/training.md): SpecForge 0.2.0 for CPU training.  Run by scripts/install.sh, or alone:
#   bash scripts/install.d/30-train.sh
# Idempotent (a second run takes ~2 s).
#
# * specforge==0.2.0 is installed --no-deps, pinned to the exact PyPI wheel by sha256: the version string
#   "0.2.0" also names an older (legacy) tree, and the wheel pins torch==2.11.0 / transformers==5.8.1 /
#   sglang==0.5.14, which would replace our CPU torch with an 11 GB CUDA stack.
# * Its light runtime dependencies come from pyproject's [train] extra, under requirements/constraints.txt.
# * triton is deliberately NOT installed (1 GB): specforge.core.loss imports it at module import, and
#   hedgespec.training.cpu registers a pure-torch stand-in for that module on CPU runs instead.
#   sglang, yunchang, tensorboard, flash-attn (GPU / online-capture only) are not installed either.
# * deepspeed==0.19.8 (sdist, pure Python: DS_BUILD_OPS=0, no op is compiled at install) for the opt-in
#   ZeRO-Inference feature capture (hedgespec/training/capture_deepspeed.py); it adds hjson, msgpack, ninja and
#   py-cpuinfo (pinned in requirements/constraints.txt) and leaves torch as it is.
# * hydra-submitit-launcher==1.2.0 (with submitit, cloudpickle): Hydra's launcher that submits a training
#   multirun to SLURM, one job per domain (conf/hydra/launcher/slurm.yaml); pure Python.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
SPECFORGE_WHEEL_SHA256=fbc79517adf483c6a8beea52561b1a8c8c8a99a54c820b47d2033a73966b55b0

if python - <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(0 if version("specforge") == "0.2.0" else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
then
  echo "   specforge 0.2.0 already installed"
else
  req="$(mktemp)"
  trap 'rm -f "${req}"' EXIT
  echo "specforge==0.2.0 --hash=sha256:${SPECFORGE_WHEEL_SHA256}" > "${req}"
  python -m pip install -q --no-deps --require-hashes --only-binary=:all: -r "${req}"
fi
python -c "import pydantic, accelerate, datasets, psutil, openai_harmony" 2>/dev/null \
  || python -m pip install -q -c requirements/constraints.txt "pydantic>=2" "accelerate>=1.0" "datasets>=3" psutil openai-harmony
if python -c "import importlib.metadata as m, sys; sys.exit(m.version('deepspeed') != '0.19.8')" 2>/dev/null; then
  echo "   deepspeed 0.19.8 already installed"
else
  DS_BUILD_OPS=0 python -m pip install -q -c requirements/constraints.txt "deepspeed==0.19.8"
fi
python -c "import hydra_plugins.hydra_submitit_launcher, submitit" 2>/dev/null \
  || python -m pip install -q -c requirements/constraints.txt "hydra-submitit-launcher==1.2.0"
python -c "import specforge.config, specforge.cli" || { echo "30-train.sh: specforge does not import" >&2; exit 1; }
echo "   specforge $(python -c 'import importlib.metadata as m; print(m.version("specforge"))') ready (CPU: no triton, see hedgespec/training/cpu.py)"
