"""The engine's non-finite check on a verify's target logits ([K+1, V] = [5, 49152] float32, one thread): the old
``torch.isfinite(x).all()`` against ``hedgespec.engine.verify.check_finite`` (one min/max pass), median of 7
blocks of 200 calls, in microseconds per call. ``python docs/results/cpu_k/epyc/lowrank_packed/finite_check.py``."""

import json
import statistics
import time

import torch

from hedgespec.engine.verify import check_finite

torch.set_num_threads(1)
x = torch.randn(5, 49152, generator=torch.Generator().manual_seed(0)) * 10


def per_call_us(fn) -> float:
    for _ in range(20):
        fn()
    blocks = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(200):
            fn()
        blocks.append((time.perf_counter() - t) / 200 * 1e6)
    return statistics.median(blocks)


old = per_call_us(lambda: bool(torch.isfinite(x).all()))
new = per_call_us(lambda: check_finite(x, "target (verification)"))
print(json.dumps({"shape": list(x.shape), "isfinite_all_us": round(old, 1), "check_finite_us": round(new, 1)}))
