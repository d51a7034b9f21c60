"""The CPU path's attention ops (hedgespec.serving.cpu_kernels) batched against one call per sequence.

    python scripts/bench_cpu_attention.py --out docs/results/cpu_kernels/attention.json

At SmolLM2-135M's attention shapes (9 query / 3 KV heads of 64 dims, bfloat16 KV buffers): a decode step (one
query per sequence) and a 4-token verify extend, for B sequences of ``--seq`` cached tokens; each timed as one
batched call and as B calls of one sequence each (what one attention call per sequence costs), in one process,
alternating. Prints and writes microseconds per call and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from hedgespec.serving import cpu_kernels as ck

HEADS, KV_HEADS, DIM, SLOTS = 9, 3, 64, 16384


def _inputs(b: int, seq: int, ext: int, g: torch.Generator) -> dict:
    kb = torch.randn(SLOTS, KV_HEADS, DIM, generator=g).to(torch.bfloat16)
    vb = torch.randn(SLOTS, KV_HEADS, DIM, generator=g).to(torch.bfloat16)
    r2t = torch.randperm(SLOTS, generator=g)[: b * (seq + ext)].view(b, seq + ext).to(torch.int32)
    q = torch.randn(b * ext, HEADS, DIM, generator=g).to(torch.bfloat16)
    k = torch.randn(b * ext, KV_HEADS, DIM, generator=g).to(torch.bfloat16)
    return {"kb": kb, "vb": vb, "r2t": r2t, "q": q, "k": k}


def _decode(x: dict, rows: list[int], seq: int) -> None:
    idx = torch.tensor(rows)
    q = x["q"][idx]
    ck.decode_attention(
        q, x["kb"], x["vb"], 1.0, 1.0, torch.empty_like(q), None, None, None, None, x["r2t"], idx,
        torch.full((len(rows),), seq), DIM**-0.5, 0.0, False, 0, None, None,
    )  # fmt: skip


def _extend(x: dict, rows: list[int], seq: int, ext: int) -> None:
    idx = torch.tensor(rows)
    q_rows = (idx[:, None] * ext + torch.arange(ext)).view(-1)
    q, k = x["q"][q_rows], x["k"][q_rows]
    n = len(rows)
    ck.extend_attention(
        q, k, k, torch.empty_like(q), x["kb"], x["vb"], 1.0, 1.0, x["r2t"], idx, torch.full((n,), seq + ext),
        torch.full((n,), ext), torch.arange(n) * ext, ext, DIM**-0.5, 0.0, False, 0, None, None, None, True,
    )  # fmt: skip


def _time(fn, reps: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--seq", type=int, default=200, help="cached tokens per sequence")
    ap.add_argument("--ext", type=int, default=4, help="tokens per sequence in the verify extend")
    ap.add_argument("--reps", type=int, default=20, help="calls per timing")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timings per variant (median reported)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    rows = []
    for b in a.batch_sizes:
        x = _inputs(b, a.seq, a.ext, g)
        everyone = list(range(b))
        for op, batched, each in (
            ("decode", lambda: _decode(x, everyone, a.seq), lambda: [_decode(x, [i], a.seq) for i in everyone]),
            (
                "extend",
                lambda: _extend(x, everyone, a.seq, a.ext),
                lambda: [_extend(x, [i], a.seq, a.ext) for i in everyone],
            ),
        ):
            t_b, t_e = [], []
            for _ in range(a.rounds):
                t_b.append(_time(batched, a.reps))
                t_e.append(_time(each, a.reps))
            row = {
                "op": op,
                "batch": b,
                "batched_us": round(statistics.median(t_b), 1),
                "per_sequence_us": round(statistics.median(t_e), 1),
            }
            row["speedup"] = round(row["per_sequence_us"] / row["batched_us"], 2)
            rows.append(row)
            print(f"{op:6s} B={b:3d}  batched {row['batched_us']:9.1f} us  one call per sequence "
                  f"{row['per_sequence_us']:9.1f} us  {row['speedup']:.2f}x")  # fmt: skip
    result = {
        "shapes": {"heads": HEADS, "kv_heads": KV_HEADS, "dim": DIM, "seq": a.seq, "ext": a.ext},
        "threads": a.threads,
        "torch": torch.__version__,
        "rows": rows,
    }
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
