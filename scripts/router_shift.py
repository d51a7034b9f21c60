"""Router accuracy under prompt rewording (the paper's Table 4 measurement, without a model).

    python scripts/router_shift.py                                   # data under $HEDGESPEC_DATA (or ./data)
    python scripts/router_shift.py --data-dir data --out docs/results/router_shift/router_accuracy.json

Trains the prompt router exactly as ``selector=router`` does in the bench (hedgespec/build.py
``router_classifier``: TF-IDF + logistic regression on up to ``--max-train-per-domain`` training prompts of each
of the seven expert domains), then classifies every held-out eval prompt of those domains, original and rewritten
by each prompt variant of data_recipes/variants.py (``paraphrase`` rewrites the task wording itself; the others
wrap the unchanged prompt), and prints the accuracy table. ``paraphrase`` is also scored per fixed phrasing.
The JSON written to ``--out`` holds the overall and per-domain accuracies, the confusion counts and the eval files'
hashes. A measurement script over prepared data, not a Hydra experiment: plain argparse.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data_recipes import TRAIN_DOMAINS, VARIANTS, apply_variant
from data_recipes.common import sha256_file
from data_recipes.variants import PARAPHRASES, paraphrase
from hedgespec.bench.workloads import domain_eval_path, domain_prompts
from hedgespec.io import write_json_atomic

SCHEMA = "hedgespec.router_shift v1"


def router_accuracy(predicted: Sequence[str], domains: Sequence[str]) -> dict[str, Any]:
    """Accuracy of predicted domain labels against the true ones: overall, per true domain, and the confusion
    counts ``{true: {predicted: n}}``."""
    if len(predicted) != len(domains) or not domains:
        raise ValueError(
            f"predicted and domains must be non-empty and equally long, got {len(predicted)}, {len(domains)}"
        )
    confusion: dict[str, Counter[str]] = {}
    for p, d in zip(predicted, domains):
        confusion.setdefault(d, Counter())[str(p)] += 1
    per = {d: c[d] / sum(c.values()) for d, c in sorted(confusion.items())}
    hits = sum(str(p) == d for p, d in zip(predicted, domains))
    return {
        "accuracy": hits / len(domains),
        "n": len(domains),
        "per_domain": per,
        "confusion": {d: dict(sorted(c.items())) for d, c in sorted(confusion.items())},
    }


def rewrites(seed: int) -> dict[str, Any]:
    """Row name -> prompt transform: the original, every variant, and each fixed paraphrase phrasing."""
    rows: dict[str, Any] = {"original": lambda p: p}
    rows.update({v: (lambda p, v=v: apply_variant(p, v, seed)) for v in VARIANTS})
    n_max = max(len(ph) for _, ph in PARAPHRASES.values())
    rows.update({f"paraphrase[{j}]": (lambda p, j=j: paraphrase(p, seed, phrasing=j)) for j in range(n_max)})
    return rows


def measure(data: dict[str, Any], seed: int, max_train: int, n_eval: int | None) -> dict[str, Any]:
    from hedgespec.build import router_classifier  # loads torch; not needed for router_accuracy alone

    domains = list(TRAIN_DOMAINS) + ["general"]
    cfg = {"data": data, "router": {"split": "train", "max_train_per_domain": max_train}, "seed": seed}
    clf, _, info = router_classifier(cfg, domains, generalist=domains.index("general"))
    reqs = [r for d in TRAIN_DOMAINS for r in domain_prompts(data, d, n_eval)]
    truth = [r.domain for r in reqs]
    table = {}
    for name, fn in rewrites(seed).items():
        table[name] = router_accuracy([str(x) for x in clf.predict([fn(r.prompt) for r in reqs])], truth)
    files = {d: sha256_file(domain_eval_path(data["dir"], data["source"], d)) for d in TRAIN_DOMAINS}
    return {"router": {k: v for k, v in info.items() if k != "train_s"}, "eval_sha256": files, "rows": table}


def print_table(rows: dict[str, Any]) -> None:
    doms = list(TRAIN_DOMAINS)
    print("| prompts | accuracy | misrouted | " + " | ".join(doms) + " |")
    print("|---|---|---|" + "---|" * len(doms))
    for name, r in rows.items():
        per = " | ".join(f"{r['per_domain'].get(d, float('nan')):.2f}" for d in doms)
        print(f"| {name} | {r['accuracy']:.3f} | {1 - r['accuracy']:.3f} | {per} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("HEDGESPEC_DATA", "data"))
    ap.add_argument("--source", default="offline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--max-train-per-domain", type=int, default=400, help="as conf/bench.yaml router.max_train_per_domain"
    )
    ap.add_argument("--n-eval", type=int, default=None, help="eval prompts per domain (default: all)")
    ap.add_argument("--out", default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    if args.max_train_per_domain < 1:
        raise SystemExit(f"--max-train-per-domain must be >= 1, got {args.max_train_per_domain}")
    if not Path(args.data_dir, args.source).is_dir():
        raise SystemExit(
            f"--data-dir {args.data_dir} has no {args.source}/ folder; prepare it with "
            f"`python scripts/prepare_data.py source={args.source} data_dir={args.data_dir}`"
        )
    data = {"dir": args.data_dir, "source": args.source, "prepare_missing": False}
    t0 = time.perf_counter()
    res = measure(data, args.seed, args.max_train_per_domain, args.n_eval)
    wall = time.perf_counter() - t0
    print_table(res["rows"])
    argv_used = sys.argv[1:] if argv is None else argv
    out = {
        "schema": SCHEMA,
        "command": "python scripts/router_shift.py " + shlex.join(argv_used),
        "seed": args.seed,
        "source": args.source,
        "wall_s": wall,
        **res,
    }
    if args.out:
        write_json_atomic(out, Path(args.out))
        print(f"wrote {args.out} ({wall:.1f} s)")


if __name__ == "__main__":
    main()
