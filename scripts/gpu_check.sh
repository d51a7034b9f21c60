#!/usr/bin/env bash
# Check the real CUDA serving path on a machine with an NVIDIA GPU, unattended, in at most ~10 minutes:
#
#   bash scripts/gpu_check.sh                 # from the repository root; prints a summary, exit 0 = all checked OK
#
# 1. environment: nvidia-smi, python, torch CUDA
# 2. install (only what is missing): sglang==0.5.23 (the normal CUDA install) and hedgespec (editable, --no-deps,
#    so its `sglang.srt.plugins` entry point exists); skipped with a clear line when the machine has no index access
# 3. the serve tests on CUDA (tests/test_serving_server.py with HEDGESPEC_TEST_DEVICE=cuda): HEDGESPEC greedy ==
#    transformers greedy for pools of 1/2/3 tiny drafters, selection moves to the agreeing drafter, 16 concurrent
#    requests keep their own selector state, a malformed request gets a 4xx, stock EAGLE-3 greedy == greedy;
#    tests/test_serving_fused.py: the same for the pool as one draft model (fused=true), 8 concurrent requests
#    drafting with their own heads in one draft step (the heads layout: one attention call on CUDA's attention
#    backend for every head), a low-rank pool evaluated with its base read once;
#    then tests/test_serving_sampled.py: at T=0.8 the first two tokens of 3000 seeded requests follow the
#    target's law (chi-square per token), plain SGLang and HEDGESPEC with two drafters; then
#    scripts/shapes_bench.py: HEDGESPEC with 8 heads vs stock EAGLE-3 at Llama-3.1-8B shapes (dummy weights,
#    equal simulated acceptance), tok/s at bs 1/16/64 and round cost as HEDGESPEC / stock ratios
# 4. `python serve/launch.py pool=tiny dry_run=true` (the launcher's CUDA command line)
# 5. a 2-step SpecForge training smoke on the tiny target on one GPU (`train/run.py ... train.device=cuda`):
#    installs SpecForge as scripts/install.d/30-train.sh does (pinned wheel, --no-deps) when it is missing,
#    trains, exports and registers one drafter into a scratch pool under the log dir
# 6. tests/test_serving_tree.py on CUDA with what the budget has left: HEDGESPEC drafting EAGLE trees (topk 2;
#    per-drafter workers and the fused pool in both KV layouts) == transformers greedy alone and 8 concurrent, the
#    same choices as the reference engine's tree mode, selection moves to the agreeing drafter
# Each step has its own time limit; the whole run is bounded by HS_GPU_BUDGET_S (default 590 s).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET=${HS_GPU_BUDGET_S:-590}
LOG_DIR=${HS_GPU_LOG_DIR:-outputs/gpu_check}
declare -a SUMMARY=()
FAILED=0
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
note() { SUMMARY+=("$1"); echo "== $1"; }
run_step() {  # name, limit_s, command...
  local name=$1 limit=$2; shift 2
  local avail; avail=$(left)
  if (( avail < 20 )); then note "SKIP  $name (time budget spent)"; FAILED=1; return 1; fi
  (( limit > avail )) && limit=$avail
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$LOG_DIR/$name.log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if (( rc == 0 )); then note "PASS  $name (${dt}s)"; else
    note "FAIL  $name (rc=$rc, ${dt}s, log $LOG_DIR/$name.log)"; tail -25 "$LOG_DIR/$name.log"; FAILED=1; fi
  return $rc
}

# 1. environment
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi failed); nothing to check"; exit 2
fi
mkdir -p "$LOG_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
python --version
python - <<'EOF' 2>/dev/null || echo "torch: not importable yet"
import torch; print(f"torch {torch.__version__}, cuda {torch.version.cuda}, available {torch.cuda.is_available()}")
EOF

# 2. install what is missing
if python -c 'import sglang, sys; sys.exit(0 if sglang.__version__ == "0.5.23" else 1)' 2>/dev/null; then
  note "OK    sglang 0.5.23 already installed"
else
  run_step install-sglang 300 python -m pip install -q "sglang==0.5.23" || {
    echo "gpu_check: could not install sglang==0.5.23 (no package index access?)"; }
fi
if ! python -c 'from importlib.metadata import entry_points as e; import sys; sys.exit(0 if any(p.value.startswith("hedgespec.serving") for p in e(group="sglang.srt.plugins")) else 1)' 2>/dev/null; then
  run_step install-hedgespec 120 python -m pip install -q --no-deps -e . || true
fi
python -c 'import hydra, omegaconf, yaml, pytest' 2>/dev/null || \
  run_step install-test-deps 60 python -m pip install -q "hydra-core==1.3.2" "omegaconf==2.3.0" pyyaml pytest pytest-timeout || true
python - <<'EOF' || { note "FAIL  CUDA torch / sglang not importable; see above"; printf '%s\n' "${SUMMARY[@]}"; exit 1; }
import torch, sglang
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"torch {torch.__version__} (cuda {torch.version.cuda}) on {torch.cuda.get_device_name(0)}, sglang {sglang.__version__}")
EOF

# 3. serve tests on CUDA
export HEDGESPEC_TEST_DEVICE=cuda
run_step serve-tests-cuda 360 \
  python -m pytest -m serve tests/test_serving_server.py tests/test_serving_fused.py -q -x -p no:cacheprovider -rA \
  --durations=10 || true
grep -E "passed|failed|error" "$LOG_DIR/serve-tests-cuda.log" | tail -3 || true
# sampled requests (T=0.8): the first two tokens' law vs the target's, plain SGLang and HEDGESPEC (its sampled
# verification and the exact sampled gamma run only on CUDA)
run_step sampled-law-cuda 150 \
  python -m pytest -m serve tests/test_serving_sampled.py -q -p no:cacheprovider -rA || true

# 3b. HEDGESPEC (8 heads) vs stock EAGLE-3 at Llama-3.1-8B shapes: dummy weights, equal simulated acceptance
#     (3 tokens per round), bs 1/16/64 x 256 tokens; startup, KV tokens, peak memory, tok/s and round cost ratios
#     (stock first, then HEDGESPEC; plain decoding and the fused pool are --servers choices left out for time)
run_step shapes-llama8b 300 python scripts/shapes_bench.py --shape llama8b --device cuda --servers eagle hedgespec \
  --workdir "$LOG_DIR/shapes" --out "$LOG_DIR/shapes_llama8b.json" || true
cat "$LOG_DIR/shapes_llama8b.md" 2>/dev/null || true

# 4. launcher command line for CUDA
run_step launcher-dry-run 60 python serve/launch.py pool=tiny dry_run=true workdir="$LOG_DIR/ckpt" || true
grep -o -- "--speculative-algorithm [A-Z0-9]*" "$LOG_DIR/launcher-dry-run.log" || true

# 5. SpecForge training smoke on CUDA (2 steps, tiny target)
python -c 'import specforge.config' 2>/dev/null || run_step install-specforge 120 bash scripts/install.d/30-train.sh || true
run_step train-smoke-cuda 150 python train/run.py domain=sql target=tiny train=tiny train.device=cuda \
  train.specforge.training.max_steps=2 train.specforge.training.save_interval=2 progress=false \
  paths.outputs="$LOG_DIR/train" paths.pools="$LOG_DIR/pools" || true
grep -E "registered|manifest|loss" "$LOG_DIR/train-smoke-cuda.log" | tail -3 || true

# 6. HEDGESPEC drafting trees on CUDA (last: it takes what the budget has left)
run_step serve-trees-cuda 240 \
  python -m pytest -m serve tests/test_serving_tree.py -q -x -p no:cacheprovider -rA || true

echo
echo "================ gpu_check summary ($(( $(date +%s) - START ))s) ================"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
