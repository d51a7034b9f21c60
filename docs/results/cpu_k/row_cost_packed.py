"""Best-of-7 milliseconds of one SmolLM2-135M target pass over r new rows after 150 cached tokens, for
r in 1..8, on aten and on oneDNN-packed weights used for every row count (target.packed_min_rows=1), with the
packing's row hint 1 and 5. Usage: python docs/results/cpu_k/row_cost_packed.py <threads>"""

import sys
import time

import torch

from hedgespec.engine.bench import _copy_cache
from hedgespec.engine.target import TargetModel
from hedgespec.models import load_target
from hedgespec.models.linear_kernels import use_linear_kernels

threads = int(sys.argv[1])
torch.set_num_threads(threads)
model, _ = load_target("smollm2", linear_kernels="aten")
tgt = TargetModel(model, (1, 14, 26))
ctx = torch.randint(0, 49152, (400,), generator=torch.Generator().manual_seed(0))
tgt.prefill(ctx[:150])
cached = tgt.cache
ROWS = (1, 2, 3, 4, 5, 6, 8)


def ms(r: int, n: int = 7) -> float:
    def run() -> None:
        tgt.cache, tgt.length = _copy_cache(cached), 150
        tgt.forward(ctx[150 : 150 + r])

    run()
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def line(label: str) -> str:
    return f"threads={threads} {label}: " + " ".join(f"{r}:{ms(r):.1f}" for r in ROWS)


print(line("aten"), flush=True)
for hint in (1, 5):
    use_linear_kernels(model, "onednn", rows=hint, min_rows=1)
    print(line(f"onednn every row, hint {hint}"), flush=True)
    use_linear_kernels(model, "aten")
