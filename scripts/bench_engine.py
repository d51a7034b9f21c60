"""Time one target forward, one drafter forward and the batched pool evaluation for N in {1,2,4,7,14,28}.

    python scripts/bench_engine.py                         # tiny target and SmolLM2-sized dims, CPU, ~2-5 min
    python scripts/bench_engine.py --dims tiny --repeats 50
    python scripts/bench_engine.py --dims smollm2 --draft-vocab 4096 --ns 1 2 4 8 --ranks 8 32 128   # low-rank pools
    python scripts/bench_engine.py --dims smollm2 --draft-vocab 4096 --ns 1 8 --rank-files pool_b1.3-frobenius.json
                                   # ... at the ranks per matrix a `scripts/lowrank_pool.py json=` record names
    python scripts/bench_engine.py --dims smollm2 --draft-vocab 4096 --ns 1 8 --kernels aten onednn   # CPU kernels
    python scripts/bench_engine.py --device cuda --dtype bfloat16 --json bench_engine.json   # GPU machine

Prints each cost as a ratio to one drafter forward and to one target forward (goal: N=7 pool evaluation
<= 1.5x one drafter forward) and writes all numbers as JSON (stdout or --json). Random weights; plain
argparse (a micro-benchmark with no config groups).
"""

from __future__ import annotations

import argparse
import json

import torch

from hedgespec.engine.bench import bench_engine, format_bench, rank_pools_from_files


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", nargs="+", default=["tiny", "smollm2"], choices=["tiny", "smollm2"])
    ap.add_argument("--ns", nargs="+", type=int, default=[1, 2, 4, 7, 14, 28])
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rows", type=int, default=4, help="verified rows per evaluation (about one round's MAT)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument(
        "--draft-vocab", type=int, default=None, help="draft vocabulary (default: the dims' own, 512 / 32000)"
    )
    ap.add_argument(
        "--ranks",
        nargs="*",
        type=int,
        default=[],
        help="also time low-rank pools of these ranks (head 0 + rank-r experts)",
    )
    ap.add_argument(
        "--rank-files",
        nargs="*",
        default=[],
        help="also time low-rank pools at the ranks (one per matrix allowed) of these `scripts/lowrank_pool.py "
        "json=` records; a pool written for a reads budget is labelled b<reads>-<allocation>",
    )
    ap.add_argument(
        "--kernels",
        nargs="+",
        default=["aten"],
        choices=["auto", "onednn", "aten"],
        help="the target's linear kernels (target.linear_kernels); several: one run each, side by side",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    ap.add_argument("--json", default=None, help="write the results here (default: print JSON to stdout)")
    args = ap.parse_args(argv)
    ranks = {r: r for r in args.ranks} | rank_pools_from_files(args.rank_files)  # files checked before any run
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for dims, kernels in [(d, kern) for d in args.dims for kern in args.kernels]:
        res = bench_engine(
            dims,
            args.ns,
            args.context,
            args.k,
            args.rows,
            args.repeats,
            args.device,
            args.dtype,
            draft_vocab=args.draft_vocab,
            ranks=ranks,
            kernels=kernels,
        )
        print(format_bench(res), flush=True)
        results.append(res)
    text = json.dumps(results, indent=2)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)
    else:
        print(text)
    return results


if __name__ == "__main__":
    main()
