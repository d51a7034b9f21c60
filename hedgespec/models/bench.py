"""Time a target: conversion/load and greedy decoding speed (plain ``transformers.generate``, no speculation).

python -m hedgespec.models.bench                       # smollm2, torch's default thread count
python -m hedgespec.models.bench --target tiny --threads 1 --new 64
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from hedgespec.models import load_target, resolve_target, target_fingerprint
from hedgespec.models.smollm2 import convert_smollm2

PROMPTS = ("What is the capital of France?", "Write a Python function that checks whether a number is prime.")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    ap.add_argument("--new", type=int, default=128, help="max new tokens per prompt")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read by transformers, which load_target imports lazily
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = resolve_target(args.target)
    t0 = time.perf_counter()
    if spec.kind == "smollm2":
        convert_smollm2(spec.cache_dir)
    t1 = time.perf_counter()
    model, tok = load_target(spec)
    t2 = time.perf_counter()
    print(
        f"target={spec.name} convert-or-cache-hit={t1 - t0:.2f}s load={t2 - t1:.2f}s "
        f"fingerprint={target_fingerprint(model)[:23]}…"
    )
    for q in PROMPTS:
        enc = tok.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            t3 = time.perf_counter()
            out = model.generate(**enc, max_new_tokens=args.new, do_sample=False)
            dt = time.perf_counter() - t3
        n = out.shape[1] - enc["input_ids"].shape[1]
        text = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        print(f"{q!r} -> {text[:100]!r}")
        print(f"  greedy: {n} new tokens in {dt:.2f}s = {n / dt:.1f} tok/s (threads={torch.get_num_threads()})")


if __name__ == "__main__":
    main()
