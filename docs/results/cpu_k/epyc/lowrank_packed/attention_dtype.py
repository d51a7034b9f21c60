"""The pool's attention in bfloat16 against the same bfloat16 q/k/v computed in float32 (torch SDPA, grouped-query
heads 9 over 3 as SmolLM2's heads, head dim 64, causal boolean mask, one thread), for N heads x T new rows over L
cached rows: median of 5 blocks of 40 calls, microseconds per call. Decides which passes the pool upcasts
(hedgespec/engine/eagle3.py, ``_attention``).
``python docs/results/cpu_k/epyc/lowrank_packed/attention_dtype.py``."""

import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)


def per_call_us(fn) -> float:
    for _ in range(5):
        fn()
    blocks = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(40):
            fn()
        blocks.append((time.perf_counter() - t) / 40 * 1e6)
    return statistics.median(blocks)


rows = []
for n, t, cached in ((1, 1, 100), (1, 1, 250), (1, 1, 400), (8, 2, 250), (8, 4, 250), (8, 6, 250), (8, 8, 250),
                     (8, 12, 250), (8, 16, 250), (8, 32, 200), (8, 64, 200), (8, 150, 0)):  # fmt: skip
    q = torch.randn(n, 9, t, 64, generator=g).bfloat16()
    k = torch.randn(n, 3, cached + t, 64, generator=g).bfloat16()
    v = torch.randn(n, 3, cached + t, 64, generator=g).bfloat16()
    mask = torch.ones(t, cached + t, dtype=torch.bool).tril(diagonal=cached)
    bf16 = per_call_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))
    up = per_call_us(
        lambda: F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True).to(
            torch.bfloat16
        )
    )
    rows.append({"n": n, "t": t, "cached": cached, "bf16_us": round(bf16, 1), "fp32_upcast_us": round(up, 1)})
    print(json.dumps(rows[-1]))
print(json.dumps({"torch": torch.__version__, "machine": platform.processor() or platform.machine()}))
