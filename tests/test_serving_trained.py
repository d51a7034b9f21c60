"""A pool trained by ``train/run.py`` (tiny budget, through SpecForge) served by SGLang on CPU, out of the box.

The drafter is what training exports (bfloat16 weights, a 256-token draft vocabulary) for the 4-layer tiny
target (float32 on disk): the launcher must reconcile the dtypes itself (``dtype`` left null: bfloat16, or float32
on a CPU without native bfloat16) and the served
greedy output must equal transformers' greedy output of the target. Marked ``serve`` and ``slow`` (one training
run of ~30 s and one server start of ~30-60 s on 2 cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from _requires import sglang_or_skip
from _serve_helpers import free_port, generate_ids, hf_greedy
from _train_helpers import REPO, specforge_or_skip, tiny_overrides, tmp_overrides

from hedgespec.serving.argv import build_plan
from hedgespec.serving.launch import ServerProcess

pytestmark = [pytest.mark.serve, pytest.mark.slow, pytest.mark.timeout(900)]

TINY4 = {"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}}  # what train=tiny trains against
PROMPTS = [[72, 101, 108, 108, 111], [40, 41, 42, 43, 44, 45, 46, 47], [200, 13, 77, 5, 5]]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """``(manifest, target dir)``: one drafter trained by ``train/run.py`` and the target it was trained for."""
    sglang_or_skip()
    if not any(ep.value.startswith("hedgespec.serving.plugin") for ep in entry_points(group="sglang.srt.plugins")):
        pytest.fail("the sglang.srt.plugins entry point of hedgespec is not installed: run `pip install -e .`")
    specforge_or_skip()
    tmp = tmp_path_factory.mktemp("trained")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, str(REPO / "train" / "run.py"), *tmp_overrides(tmp), *tiny_overrides()]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    manifest = tmp / "pools" / "tiny.yaml"

    from hedgespec.models import load_target
    from hedgespec.pools import TargetInfo, load_pool

    model, tok = load_target(TINY4)
    load_pool(manifest, TargetInfo.from_model("tiny", model, tok))  # the manifest is this target's
    target = tmp / "target"
    model.save_pretrained(target, safe_serialization=True)
    tok.save_pretrained(target)
    return manifest, target


def test_trained_pool_serves_with_reconciled_dtype_and_is_lossless(trained, tmp_path):
    manifest, target = trained
    cfg = {
        "pool": {"name": "tiny", "target": "tiny", "manifest": str(manifest), "target_path": str(target)},
        "selector": {"name": "hedgespec"},
        "device": "cpu",
        "port": free_port(),
        "decoding": {"mode": "chain", "num_steps": 3, "topk": 1, "num_draft_tokens": 4},
        "max_total_tokens": 4096,
        "dtype": None,  # the launcher picks the drafters' dtype for both
    }
    plan = build_plan(cfg)
    from hedgespec.models.linear_kernels import native_bfloat16

    # bfloat16 drafters, float32 target: bfloat16 for both where the CPU has it, else an exact upcast to float32
    assert plan.drafter_names == ["sql"] and plan.dtype == ("bfloat16" if native_bfloat16() else "float32")
    reference = hf_greedy(target, PROMPTS, NEW_TOKENS)
    with ServerProcess(plan, tmp_path / "server.log", startup_timeout_s=400) as srv:
        for ids in PROMPTS:
            out = generate_ids(srv.plan.base_url, ids, NEW_TOKENS)
            meta = out["meta_info"]
            assert out["output_ids"] == reference[tuple(ids)], ids
            assert sum(meta["hedgespec_histogram"]) == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"]
