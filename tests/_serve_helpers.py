"""Shared by the serve-tier tests: the truth every served greedy output is compared with."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def hf_greedy(target: Path, prompts: Sequence[Sequence[int]], new_tokens: int) -> dict[tuple[int, ...], list[int]]:
    """Non-speculative greedy continuations of ``prompts`` by transformers' ``generate`` (independent of SGLang),
    exactly ``new_tokens`` each (no EOS stop), keyed by the prompt ids."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    out = {}
    for ids in prompts:
        with torch.no_grad():
            gen = model.generate(
                torch.tensor([list(ids)]), max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
            )
        out[tuple(ids)] = gen[0, len(ids) :].tolist()
    return out


def free_port() -> int:
    """A TCP port nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_ids(base_url: str, ids: Sequence[int], new_tokens: int, rid: str | None = None) -> dict:
    """One greedy native ``/generate`` call on token ids (exactly ``new_tokens``: EOS ignored; ``rid``: the request
    id, which seeds its selector); its JSON answer."""
    import json
    import urllib.request

    sp = {"temperature": 0, "max_new_tokens": new_tokens, "ignore_eos": True}
    body = {"input_ids": list(ids), "sampling_params": sp, **({} if rid is None else {"rid": rid})}
    req = urllib.request.Request(
        base_url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def assert_target_only(outs: Sequence[tuple[Sequence[int], dict]], reference: dict, dropped: list[str]) -> None:
    """Every drafter dropped: each output is the target's greedy one, the drafters are reported dropped, and the
    rounds (verified with a placeholder chain or tree) are in no drafter's histogram bin."""
    for ids, out in outs:
        meta = out["meta_info"]
        assert out["output_ids"] == reference[tuple(ids)], ids
        assert meta["hedgespec_dropped"] == dropped
        assert meta["hedgespec_histogram"] == [0] * len(dropped)
        assert meta["hedgespec_rounds"][0] == meta["spec_verify_ct"] > 0


def tiny_checkpoints(root: Path) -> Path:
    """The serve tests' tiny checkpoints under ``root``: a random target ``t_rand`` with random drafters d0..d2, and
    a constant target ``t_const`` with a drafter that always agrees (``d_const``) and one that never does
    (``d_anti``)."""
    from hedgespec.serving.tiny import make_drafter, make_target

    make_target(root / "t_rand", seed=0)
    for i in range(3):
        make_drafter(root / f"d{i}", root / "t_rand", seed=i)
    make_target(root / "t_const", seed=0, mode="const")
    make_drafter(root / "d_const", root / "t_const", mode="const")
    make_drafter(root / "d_anti", root / "t_const", mode="anti")
    return root


# scripts/gpu_check.sh sets cuda: the serve tests then run the same checks on the GPU
TEST_DEVICE = os.environ.get("HEDGESPEC_TEST_DEVICE", "cpu")
# fp32 needs the triton attention backend; small graph batch sizes keep the server starts fast
CUDA_ARGS = ["--attention-backend", "triton", "--cuda-graph-max-bs", "4", "--mem-fraction-static", "0.3"]


def tiny_server(
    root: Path,
    target: str,
    drafters: Sequence[str],
    log: Path,
    selector: str = "hedgespec",
    fused: bool = False,
    layout: str = "layers",
    decoding: dict | None = None,
    random_seed: int = 0,
):
    """A started server for the tiny checkpoints under ``root`` (``target`` and the ``drafters`` directories made
    by hedgespec.serving.tiny), chain K=3 (or ``decoding``), fp32, on ``TEST_DEVICE``; ``fused``: the pool as one
    draft model, its KV in ``layout`` (``fused_layout``). ``random_seed`` is SGLang's ``--random-seed`` (its
    sampler's generator; without it each start draws a new one, so sampled tests would not rerun the same).
    The caller stops it."""
    from hedgespec.serving.argv import build_plan
    from hedgespec.serving.launch import ServerProcess

    pool = {
        "name": "test",
        "target": "tiny",
        "drafters": [{"name": d, "kind": "path", "path": str(root / d)} for d in drafters],
    }
    cfg = {
        "pool": pool,
        "selector": {"name": selector},
        "device": TEST_DEVICE,
        "host": "127.0.0.1",
        "port": free_port(),
        "decoding": decoding or {"mode": "chain", "num_steps": 3, "topk": 1, "num_draft_tokens": 4},
        "max_running_requests": 16,
        "max_total_tokens": 4096,
        "dtype": "float32",
        "workdir": str(root),
        "fused": fused,
        "fused_layout": layout,
        "extra_args": [*(CUDA_ARGS if TEST_DEVICE == "cuda" else []), "--random-seed", str(random_seed)],
    }
    plan = build_plan(cfg, prepare=fused)  # prepare writes the fused pool's directory
    plan.argv[plan.argv.index("--model-path") + 1] = str(root / target)
    return ServerProcess(plan, log, startup_timeout_s=400).start()
