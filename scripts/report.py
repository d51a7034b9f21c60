"""Collect bench results into one table + figure set, or regenerate docs/RESULTS.md.

    python scripts/report.py collect multirun/bench/2026-11-29_18-00-00         # a Hydra multirun dir
    python scripts/report.py collect outputs/bench/smollm2 --out reports/main    # a wandb sweep's run dirs
    python scripts/report.py results                                            # docs/results/*.json -> docs/RESULTS.md
    python scripts/report.py replay traces/mixed.jsonl --out docs/results/engine_replay.json   # Fig 5a/5b, traces
    python scripts/report.py mat-matrix docs/results/table1_*.json    # Table 1 analog -> docs/results/mat_matrix.*
    python scripts/report.py seeds --traces t_s0.jsonl t_s1.jsonl t_s2.jsonl --live runs/*/results.json --out seeds.json

`collect` finds every results.json (hedgespec.bench.result v1) under the given paths/globs and writes table.md
(MAT mean ± 95% t-interval over seeds, ratios to the generalist and the oracle, the reproduction goals),
summary.json and per-workload figures (MAT per domain × selector, regret curves) into --out (default:
<first path>/report).
`results` regenerates docs/RESULTS.md from the committed small JSON under docs/results/ (bench results, simulator
results, learner timings), every number next to its command, side by side with the paper's
(hedgespec/bench/results_doc.py; words in hedgespec/bench/templates/RESULTS.md.tmpl, the paper's numbers with
their sources in hedgespec/bench/paper_numbers.yaml).

`replay` replays every selector exactly over full-counterfactual engine traces (`scripts/bench.py ... trace=<path>`,
greedy) for sub-pools of growing size, and writes the simulator-shaped JSON + regret/scaling PNGs next to --out.

`seeds` replays one trace per seed (each an independent draw of requests, `workload.draw=seeded`) and writes every
selector's MAT with a 95% interval over seeds, HedgeSpec's paired ratios, and the live runs' tok/s next to plain
decoding (their MAT checked against the replay of their seed) as JSON + markdown (hedgespec/bench/seeds.py).

A post-processing tool, not an experiment: plain argparse (no Hydra run dir).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from hedgespec.bench.report import (
    load_results,
    mat_matrix,
    results_markdown,
    write_collection,
    write_json_atomic,
    write_text_atomic,
)
from hedgespec.io import portable_paths
from hedgespec.plots import plot_mat_matrix, plot_regret_curves, plot_scaling


def collect(args: argparse.Namespace) -> None:
    runs = load_results(args.paths)
    out = Path(args.out) if args.out else Path(args.paths[0]) / "report"
    files = write_collection(runs, out)
    print((out / "table.md").read_text())
    print(f"{len(runs)} runs -> " + ", ".join(sorted(Path(f).name for f in files.values())) + f" in {out}")


def replay(args: argparse.Namespace, argv: list[str] | None) -> None:
    # not at module level: hedgespec.bench.replay imports the bench runners (and with them torch), which the
    # other subcommands do not need
    from hedgespec.bench.replay import replay_selectors, replay_table

    if not Path(args.trace).is_file():
        raise ValueError(
            f"trace {args.trace} does not exist; record one with `python scripts/bench.py ... trace=<path>`"
        )
    out = replay_selectors(args.trace, args.sizes, seed=args.seed)
    out["pool"] = args.pool or out.get("pool")
    words = argv if argv is not None else sys.argv[1:]
    out["command"] = "python scripts/report.py " + " ".join(shlex.quote(a) for a in words)
    path = Path(args.out)
    write_json_atomic(out, path)
    big = str(max(out["sizes"]))
    plot_regret_curves(
        {k: {big: v[big]} for k, v in out["results"].items()},
        path.with_suffix(".regret.png"),
        f"Engine-trace replay: cumulative regret (mean over {out['n_requests']} requests), N={big}",
    )
    if len(out["sizes"]) > 1:
        plot_scaling(
            out["results"], path.with_suffix(".scaling.png"), f"Engine-trace replay: scaling with N (K={out['k']})"
        )
    print(replay_table(out))
    print(f"wrote {path} (+ PNGs)")


def matrix(args: argparse.Namespace) -> None:
    m = mat_matrix(load_results(args.paths))
    out = Path(args.out)
    write_json_atomic(m, out)
    plot_mat_matrix(m, out.with_suffix(".png"), "Drafter × domain MAT (greedy, chain)")
    doms = list(next(iter(m.values())))
    print("| drafter | " + " | ".join(doms) + " |")
    for name, row in m.items():
        print(f"| {name} | " + " | ".join(f"{row[d]:.2f}" for d in doms) + " |")
    print(f"wrote {out} and {out.with_suffix('.png')}")


def seeds(args: argparse.Namespace, argv: list[str] | None) -> None:
    from hedgespec.bench.seeds import seed_summary, seeds_markdown  # replay imports the runners (torch)

    missing = [p for p in [*args.traces, *args.live] if not Path(p).is_file()]
    if missing:
        raise ValueError(f"no such file: {', '.join(missing)}")
    out = seed_summary(args.traces, args.live, exclude=args.exclude, generalist=args.generalist)
    if args.note:
        out["note"] = args.note
    words = argv if argv is not None else sys.argv[1:]
    out["command"] = portable_paths("python scripts/report.py " + " ".join(shlex.quote(a) for a in words))
    path = Path(args.out)
    write_json_atomic(out, path)
    text = seeds_markdown(out)
    write_text_atomic(text, path.with_suffix(".md"))
    print(text)
    print(f"wrote {path} and {path.with_suffix('.md')}")


def results(args: argparse.Namespace) -> None:
    if not Path(args.results_dir).is_dir():
        raise ValueError(f"--results-dir {args.results_dir} is not a directory")
    text = results_markdown(args.results_dir, args.embedded_pool)
    write_text_atomic(text, args.out)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="results.json files/dirs/globs -> table.md, summary.json, PNGs")
    c.add_argument("paths", nargs="+")
    c.add_argument("--out", default=None, help="output dir (default: <first path>/report)")
    r = sub.add_parser("results", help="regenerate docs/RESULTS.md from docs/results/*.json")
    r.add_argument("--results-dir", default="docs/results")
    r.add_argument("--out", default="docs/RESULTS.md")
    r.add_argument("--embedded-pool", default="smollm2")
    m = sub.add_parser(
        "mat-matrix", help="workload=domain oracle_probe=true results -> {drafter: {domain: MAT}} JSON + heatmap"
    )
    m.add_argument("paths", nargs="+")
    m.add_argument("--out", default="docs/results/mat_matrix.json")
    p = sub.add_parser("replay", help="full-counterfactual engine traces -> Fig 5a/5b JSON + PNGs")
    p.add_argument("trace")
    p.add_argument("--sizes", nargs="+", type=int, default=None, help="sub-pool sizes (default: 2, 4, ..., N)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="engine_replay.json")
    p.add_argument(
        "--pool",
        default=None,
        help="the traced pool's name (default: from <trace>.meta.json, written by scripts/bench.py)",
    )
    s = sub.add_parser("seeds", help="one trace per seed (+ live runs) -> MAT with 95%% intervals, tok/s x plain")
    s.add_argument("--traces", nargs="+", required=True, help="full-counterfactual traces, one per seed")
    s.add_argument("--live", nargs="*", default=[], help="live results.json of the same requests (tok/s, x plain)")
    s.add_argument("--out", default="seeds.json")
    s.add_argument(
        "--exclude", nargs="*", default=[], metavar="DRAFTER", help="traced drafters left out of the replayed pool"
    )
    s.add_argument("--generalist", default=None, help="the eagle baseline's drafter (default: general)")
    s.add_argument("--note", default=None, help="a sentence on the pool or the runs, shown with the table")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "collect":
            collect(args)
        elif args.cmd == "replay":
            replay(args, argv)
        elif args.cmd == "mat-matrix":
            matrix(args)
        elif args.cmd == "seeds":
            seeds(args, argv)
        else:
            results(args)
    except ValueError as err:
        print(f"report: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
