#!/usr/bin/env bash
# Install hedgespec and everything its default run and tests need, into the active Python environment.
#   bash scripts/install.sh            # core + data + train + serve (CPU) + dev
# torch is pinned to 2.13.0 first: that is the CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
# Each part lives in scripts/install.d/NN-*.sh and runs in order.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
for part in scripts/install.d/*.sh; do
  echo "== install: ${part}"
  bash "${part}"
done
