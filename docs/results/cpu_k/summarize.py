"""Summarise scripts/bench.py runs for this folder: per run MAT, tok/s, plain tok/s of the same prompts in the same
run, x plain, and ms per round by stage.

    python docs/results/cpu_k/summarize.py OUT.json RUN_DIR [RUN_DIR ...]   # each RUN_DIR holds a results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(result: dict) -> dict:
    agg, cfg = result["aggregate"], result["config"]
    rounds = max(int(agg["rounds"]), 1)
    return {
        "selector": result["selector"],
        "num_steps": int(result["decoding"]["num_steps"]),
        "linear_kernels": cfg["target"].get("linear_kernels", "aten"),
        "mat": agg["mat"],
        "tokens_per_s": agg["tokens_per_s"],
        "plain_tokens_per_s": agg["plain_tokens_per_s"],
        "speedup_vs_plain": agg["speedup_vs_plain"],
        "selection_overhead": agg["selection_overhead"],
        "plain_match_rate": agg["plain_match_rate"],
        "n_requests": agg["n_requests"],
        "generated": agg["generated"],
        "ms_per_round": {stage: 1000.0 * s / rounds for stage, s in agg["timings"].items()},
        "threads": result["env"]["threads"],
        "command": result["command"],
    }


def main(out: str, *dirs: str) -> None:
    results = [json.loads((Path(d) / "results.json").read_text()) for d in dirs]
    first = results[0]
    doc = {
        "pool": first["pool"]["name"],
        "workload": f"{first['workload']}, {first['config']['workload'].get('n_per_domain')} prompts per domain",
        "runs": sorted((summary(r) for r in results), key=lambda s: (s["selector"], s["num_steps"])),
    }
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
