"""HEDGESPEC against stock EAGLE-3 at a real model's shapes, dummy weights, equal simulated acceptance.

    python scripts/shapes_bench.py --shape llama8b --device cuda          # 8 heads, bs 1/16/64 x 256 tokens
    python scripts/shapes_bench.py --shape tiny --device cpu --drafters 2 --batch-sizes 1 2 --new-tokens 16 \
        --max-total-tokens 4096 --dtype float32
    python scripts/shapes_bench.py --shape smollm2 --device cpu --servers plain eagle hedgespec_fused \
        --batch-sizes 1 8 --new-tokens 64 --max-total-tokens 16384

Writes checkpoints that hold only config.json (``--load-format dummy``; nothing is downloaded), starts (by
default) plain decoding, stock EAGLE-3 and HEDGESPEC on them with ``SGLANG_SIMULATE_ACC_LEN``, and prints startup
time, KV tokens, peak memory and tokens/s per batch size with each server's ratios to plain decoding and to stock
EAGLE-3 (hedgespec/serving/shapes.py). Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hedgespec.serving.shapes import DEFAULT_SERVERS, SERVERS, SHAPES, Settings, compare, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama8b", choices=sorted(SHAPES))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument(
        "--servers",
        nargs="+",
        default=list(DEFAULT_SERVERS),
        choices=sorted(SERVERS),
        help="servers to measure, in order (plain: the target alone, the baseline of every ratio)",
    )
    ap.add_argument("--drafters", type=int, default=8, help="N, the HEDGESPEC pool size")
    ap.add_argument("--num-steps", type=int, default=3, help="chain depth K (both servers)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--accept-len", type=float, default=3.0, help="simulated tokens per round (both servers)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--weights",
        default="dummy",
        choices=["dummy", "lowrank"],
        help="drafter weights: dummy (SGLang fills them) or lowrank (a written low-rank pool; target stays dummy)",
    )
    ap.add_argument("--rank", type=int, default=16, help="the experts' delta rank with --weights lowrank")
    ap.add_argument("--repeats", type=int, default=1, help="calls per batch size; the median is reported")
    ap.add_argument("--max-total-tokens", type=int, default=None)
    ap.add_argument("--port", type=int, default=31000)
    ap.add_argument("--workdir", default="outputs/shapes_bench")
    ap.add_argument("--out", default=None, help="JSON path (default <workdir>/shapes_<shape>.json)")
    ap.add_argument("--extra-arg", action="append", default=[], help="one more SGLang server argument (repeatable)")
    a = ap.parse_args(argv)
    settings = Settings(
        device=a.device,
        n_drafters=a.drafters,
        num_steps=a.num_steps,
        batch_sizes=tuple(a.batch_sizes),
        new_tokens=a.new_tokens,
        prompt_tokens=a.prompt_tokens,
        accept_len=a.accept_len,
        dtype=a.dtype,
        weights=a.weights,
        rank=a.rank,
        repeats=a.repeats,
        max_total_tokens=a.max_total_tokens,
        port=a.port,
        extra_args=tuple(a.extra_arg),
    )
    try:
        settings.check()
    except ValueError as e:
        print(f"shapes_bench: {e}", file=sys.stderr)
        return 2
    workdir = Path(a.workdir)
    result = compare(a.shape, settings, workdir, tuple(a.servers))
    out = Path(a.out) if a.out else workdir / f"shapes_{a.shape}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    md = table(result)
    out.with_suffix(".md").write_text(md + "\n")
    print(md)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
