"""HedgeSpec with and without a prior against the router, side by side, on mixed / OOD / shift workloads.

    python scripts/bench_prior.py --data-dir data --out docs/results/prior/sim_prior.json

Acceptance comes from the Markov simulator (hedgespec/sim/markov.py: a target per domain, the generalist first
and one expert per training domain), replayed exactly under greedy decoding (hedgespec/sim/greedy.py); the
prompts, and so the router and the router prior, are real: each simulated request of domain d carries a held-out
prompt of recipe domain d (the bench's own workloads, hedgespec/bench/workloads.py), and the router is the bench's
TF-IDF + logistic-regression classifier trained on the seven expert domains' training prompts.

* ``mixed``: the seven expert domains' eval prompts, shuffled; the simulated target is the prompt's domain.
* ``shift``: the same stream with the prompts rewritten by the recipes' variant transform (``two_answers``); the
  simulated acceptance is unchanged (the domain's), only the router's input moves.
* ``shift_<variant>``: as ``shift`` with another variant (``--shift-variants``; ``paraphrase`` rewrites the task
  wording itself, the others wrap the unchanged prompt).
* ``ood``: GSM8K and HumanEval prompts; the simulated targets are two domains no drafter was trained on (the
  world has nine domains, the pool only the first seven experts), so the generalist is the right drafter.

MAT per selector per workload is tokens / rounds over the whole stream (the replay's pooling rule,
hedgespec/bench/replay.py), for each request length. Torch-free; about a minute on one core.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from hedgespec.bench.workloads import OOD_DOMAINS, TRAIN_DOMAINS, domain_prompts, load_workload
from hedgespec.io import write_json_atomic
from hedgespec.selectors import Router, make_selector, train_router
from hedgespec.selectors.hedgespec import RouterPrior, RunningPrior
from hedgespec.sim.greedy import best_fixed_mat, replay_greedy
from hedgespec.sim.markov import DOMAINS, Request, make_world
from hedgespec.sim.runner import greedy_table
from hedgespec.types import RequestContext

K = 4


def workloads(shift_variants: list[str]) -> dict[str, dict[str, Any]]:
    """mixed, one shift stream per prompt variant (``shift`` for the bench's default ``two_answers``,
    ``shift_<variant>`` otherwise), ood."""
    out: dict[str, dict[str, Any]] = {"mixed": {"name": "mixed", "domains": list(TRAIN_DOMAINS), "shuffle": True}}
    for v in shift_variants:
        out["shift" if v == "two_answers" else f"shift_{v}"] = {**out["mixed"], "name": "shift", "variant": v}
    out["ood"] = {"name": "ood", "ood_domains": list(OOD_DOMAINS)}
    return out


def sim_domain(domain: str) -> int:
    """Simulated target of a prompt's domain: the expert domains in order, then one unseen domain per OOD one."""
    names = list(DOMAINS) + list(OOD_DOMAINS)
    if domain not in names:
        raise ValueError(f"no simulated domain for {domain!r}; expected one of {names}")
    return names.index(domain)


def selectors(clf: Any, experts: dict[str, int], alphas: list[float]) -> dict[str, Any]:
    """label -> factory of one selector for a whole stream (running priors keep state across its requests)."""
    out: dict[str, Any] = {
        "hedgespec": lambda: make_selector("hedgespec"),
        "router": lambda: Router(clf, experts, fallback=0),
        "eagle": lambda: make_selector("fixed", index=0),
        "oracle": lambda: make_selector("oracle"),
    }
    for a in alphas:
        out[f"hedgespec_prior_router_a{a}"] = lambda a=a: make_selector(
            "hedgespec", prior="router", prior_alpha=a, prior_source=RouterPrior(clf, experts)
        )
        out[f"hedgespec_prior_running_a{a}"] = lambda a=a: make_selector(
            "hedgespec", prior="running", prior_alpha=a, prior_source=RunningPrior()
        )
    return out


def run_stream(reqs: list[Any], world: Any, length: int, seed: int, factories: dict[str, Any]) -> dict[str, Any]:
    """Replay every selector over one workload stream of ``length``-token requests."""
    tables = []
    for j, r in enumerate(reqs):
        g, runs = greedy_table(Request(sim_domain(r.domain), length, seed * 100003 + j, world))
        tables.append((r, g, runs, best_fixed_mat(runs, K)))
    res: dict[str, Any] = {}
    for label, make in factories.items():
        sel, rounds, tokens, correct = make(), 0, 0, 0
        for r, g, runs, (best, _) in tables:
            ctx = RequestContext(request_id=r.request_id, prompt=r.prompt, best_drafter=int(best))
            out = replay_greedy(g, runs, sel, K, ctx)
            rounds += out.rounds
            tokens += len(g)
            correct += int(label == "router" and sel.index == best)
        res[label] = {"mat": tokens / rounds, "rounds": rounds}
        if label == "router":
            res[label]["best_drafter_rate"] = correct / len(tables)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="data", help="the data recipes' output (prepared on demand, offline)")
    ap.add_argument("--out", default="docs/results/prior/sim_prior.json")
    ap.add_argument("--n-per-domain", type=int, default=8)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.5, 0.25])
    ap.add_argument("--shift-variants", nargs="+", default=["two_answers"], help="data_recipes.VARIANTS keys")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = {"dir": args.data_dir, "source": "offline", "prepare_missing": True, "seed": 0}
    experts = {d: i + 1 for i, d in enumerate(TRAIN_DOMAINS)}  # make_pool: the generalist, then domain order
    train = [r for d in TRAIN_DOMAINS for r in domain_prompts(data, d, 400, split="train")]
    clf = train_router([r.prompt for r in train], [r.domain for r in train], seed=0)
    world = make_world(1 + len(TRAIN_DOMAINS), n_domains=len(DOMAINS) + len(OOD_DOMAINS), seed=0)
    factories = selectors(clf, experts, args.alphas)
    results: dict[str, Any] = {}
    for wname, wcfg in workloads(args.shift_variants).items():
        for length in args.lengths:
            per_seed = []
            for seed in args.seeds:
                reqs = load_workload({**wcfg, "n_per_domain": args.n_per_domain}, data, seed)
                per_seed.append(run_stream(reqs, world, length, seed, factories))
            mats = {x: [p[x]["mat"] for p in per_seed] for x in factories}
            results.setdefault(wname, {})[str(length)] = {
                "mat": {x: float(np.mean(v)) for x, v in mats.items()},
                "mat_per_seed": mats,
                "router_best_drafter_rate": float(np.mean([p["router"]["best_drafter_rate"] for p in per_seed])),
                "n_requests": len(reqs),
            }
    out = {
        "format": "hedgespec.bench_prior",
        "version": 1,
        "command": "python scripts/bench_prior.py "
        + " ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items()
            if k != "data_dir"
        ),
        "acceptance": "Markov simulator (hedgespec/sim/markov.py), greedy, K=4 chain; real prompts and router",
        "router": {"n_train": len(train), "classes": sorted(experts)},
        "results": results,
        "wall_s": time.perf_counter() - t0,
    }
    write_json_atomic(out, Path(args.out))
    print_table(results)
    print(f"wrote {args.out} in {out['wall_s']:.1f} s")


def print_table(results: dict[str, Any]) -> None:
    for wname, by_len in results.items():
        for length, row in by_len.items():
            cells = "  ".join(f"{x}={m:.3f}" for x, m in row["mat"].items())
            rate = row["router_best_drafter_rate"]
            print(f"{wname:6s} T={length:>4s}  {cells}  (router picks the best drafter {rate:.2f})")


if __name__ == "__main__":
    main()
