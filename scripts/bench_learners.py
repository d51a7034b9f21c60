"""Time one learner step (update with a loss vector + the next weights) for N in {7, 28, 112}.

    python scripts/bench_learners.py                 # table + bench_learners.json in the current dir
    python scripts/bench_learners.py --steps 20000 --out results/bench_learners.json

Goal: NormalHedge ≤ 20 µs per update at N=7 on this CPU (the paper reports 0.41 ms).
Also times the whole HedgeSpec selector round (select + observe with a K+1-row γ matrix), and one round of a
batch of B requests at N=8, K=4: B per-request HedgeSpec selectors in a loop against one BatchedHedgeSpec
(hedgespec/selectors/batched.py), in CPU µs per request per round (goal: ≤ 2 µs at B=64); and the SGLang
worker's whole selection step per round (hedgespec/serving/selection.py: select, substitutes, γ of the batch,
observe, the N drafters' next proposals and each request's meta_info) with the batched selector against its
per-request fallback.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from hedgespec.learners import Bold, Hedge, NormalHedge, Queued
from hedgespec.selectors import BatchedHedgeSpec, BatchFeedback, HedgeSpec
from hedgespec.serving.selection import WorkerSelection, round_gamma, substitutes
from hedgespec.types import RequestContext, RoundFeedback

BATCH_SIZES = (1, 16, 64, 256)
BATCH_GOAL_US = 2.0  # per request per round at B=64, N=8, K=4
BATCH_REPEATS = 7  # runs per batch size in the batch sections, of which the median is reported (short runs: noisy)


def time_learner(make, n: int, steps: int, seed: int = 0) -> tuple[float, float]:
    """Median-of-3 (CPU seconds, wall seconds) per (update + weights) step on random [0,1] losses.

    CPU time (time.process_time) is the number to read on a shared machine: wall time also counts the
    time other processes hold the cores.
    """
    rng = np.random.default_rng(seed)
    losses = rng.random((steps, n))
    cpu, wall = [], []
    for _ in range(3):
        learner = make(n)
        learner.weights()
        c0, t0 = time.process_time(), time.perf_counter()
        for row in losses:
            learner.update(row)
            learner.weights()
        cpu.append((time.process_time() - c0) / steps)
        wall.append((time.perf_counter() - t0) / steps)
    return float(np.median(cpu)), float(np.median(wall))


def time_selector_round(n: int, k: int, rounds: int) -> float:
    rng = np.random.default_rng(1)
    gammas = rng.random((rounds, k + 1, n))
    samples = []
    for _ in range(3):
        sel = HedgeSpec()
        sel.begin_request(n, k)
        t0 = time.process_time()
        pos = 0
        for r in range(rounds):
            d = sel.select()
            sel.observe(RoundFeedback(d, k, k + 1, pos, gammas[r]))
            pos += k + 1
        samples.append((time.process_time() - t0) / rounds)
    return float(np.median(samples))


def _batch_streams(b: int, n: int, k: int, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """Full rounds (K+1 emitted tokens, as hedgespec_round) [rounds, b] and uniform γ [rounds, b, K+1, N]."""
    return np.full((rounds, b), k + 1), np.random.default_rng(2).random((rounds, b, k + 1, n))


def time_batched_round(b: int, n: int, k: int, rounds: int) -> float:
    """Median CPU seconds per request per round: one BatchedHedgeSpec select + observe for the batch."""
    emitted, gamma = _batch_streams(b, n, k, rounds)
    samples = []
    for _ in range(BATCH_REPEATS):
        sel = BatchedHedgeSpec(b, n, k)
        for slot in range(b):
            sel.begin(slot, RequestContext(request_id=slot))
        t0 = time.process_time()
        for r in range(rounds):
            dec = sel.select()
            sel.observe(BatchFeedback(dec.slots, emitted[r] - 1, emitted[r], gamma[r]))
        samples.append((time.process_time() - t0) / (rounds * b))
    return float(np.median(samples))


def time_per_request_batch_round(b: int, n: int, k: int, rounds: int) -> float:
    """The same rounds through b per-request HedgeSpec selectors (select for all, then observe for all)."""
    emitted, gamma = _batch_streams(b, n, k, rounds)
    samples = []
    for _ in range(BATCH_REPEATS):
        sels = [HedgeSpec() for _ in range(b)]
        for slot, sel in enumerate(sels):
            sel.begin_request(n, k, RequestContext(request_id=slot))
        pos = [0] * b
        t0 = time.process_time()
        for r in range(rounds):
            decisions = [sel.select() for sel in sels]
            for slot, (sel, d) in enumerate(zip(sels, decisions)):
                e = int(emitted[r, slot])
                sel.observe(RoundFeedback(d, e - 1, e, pos[slot], gamma[r, slot, :e]))
                pos[slot] += e
        samples.append((time.process_time() - t0) / (rounds * b))
    return float(np.median(samples))


def _batch_meta(n: int, k: int, rounds: int) -> dict:
    """What every batch section's JSON block records about its runs."""
    return {"unit": "cpu_us_per_request_round", "n": n, "k": k, "rounds": rounds, "repeats": BATCH_REPEATS}


def batched_section(rounds: int, n: int = 8, k: int = 4) -> dict:
    """Per-request loop vs BatchedHedgeSpec for B in BATCH_SIZES: prints the table, returns the JSON block."""
    loop = {str(b): time_per_request_batch_round(b, n, k, rounds) * 1e6 for b in BATCH_SIZES}
    batch = {str(b): time_batched_round(b, n, k, rounds) * 1e6 for b in BATCH_SIZES}
    print(f"\nHedgeSpec round for a batch of B requests (N={n}, K={k}, K+1 emitted tokens, {rounds} rounds):")
    print("CPU microseconds per request per round (select + observe)")
    print("| B | per-request loop | batched | speed-up |")
    print("|---|---|---|---|")
    for b in BATCH_SIZES:
        print(f"| {b} | {loop[str(b)]:.2f} | {batch[str(b)]:.2f} | {loop[str(b)] / batch[str(b)]:.1f}x |")
    at64 = batch["64"]
    met = at64 <= BATCH_GOAL_US
    print(
        f"batched at B=64: {at64:.2f} us per request per round; goal <= {BATCH_GOAL_US} us: "
        + ("met" if met else "MISSED")
    )
    return {
        **_batch_meta(n, k, rounds),
        "per_request_loop": loop,
        "batched": batch,
        "goal_us_at_b64": BATCH_GOAL_US,
        "goal_met": met,
    }


def time_worker_round(b: int, n: int, k: int, rounds: int, batched: bool) -> float:
    """Median CPU seconds per request per round of the worker's selection step (greedy chain γ from
    random proposals over a 4-token vocabulary, every request emitting K+1 tokens, no drafter dropped)."""
    rng = np.random.default_rng(3)
    ndt, alive = k + 1, [True] * n
    rows = rng.integers(0, 4, size=(rounds, n, b, ndt))
    committed = rng.integers(0, 4, size=(rounds, b, ndt))
    preds = rng.integers(0, 4, size=(rounds, n, b))
    emitted = np.full(b, k + 1)
    samples = []
    for _ in range(BATCH_REPEATS):
        table = WorkerSelection("hedgespec", {}, n, k, capacity=b, batched=batched)
        recs = [table.begin(f"req-{i}") for i in range(b)]
        t0 = time.process_time()
        for r in range(rounds):
            choice = table.select(recs)
            req_rows = table.rows(recs)
            first = table.first_pred[req_rows]
            drafted = substitutes(choice, alive)
            gamma = round_gamma(first, rows[r], committed[r], alive)
            table.observe(recs, choice, drafted, emitted, gamma)
            for j in range(n):
                table.set_first_pred(req_rows, j, preds[r, j])
            for rec in recs:
                table.info(rec)
        samples.append((time.process_time() - t0) / (rounds * b))
    return float(np.median(samples))


def worker_section(rounds: int, n: int = 8, k: int = 4) -> dict:
    """The worker's selection step, per-request fallback vs batched, for B in BATCH_SIZES."""
    loop = {str(b): time_worker_round(b, n, k, rounds, batched=False) * 1e6 for b in BATCH_SIZES}
    batch = {str(b): time_worker_round(b, n, k, rounds, batched=True) * 1e6 for b in BATCH_SIZES}
    print(f"\nSGLang worker selection step (hedgespec/serving/selection.py; N={n}, K={k}, {rounds} rounds):")
    print("CPU microseconds per request per round (select, γ, observe, proposals, meta_info)")
    print("| B | per-request selectors | batched | speed-up |")
    print("|---|---|---|---|")
    for b in BATCH_SIZES:
        print(f"| {b} | {loop[str(b)]:.2f} | {batch[str(b)]:.2f} | {loop[str(b)] / batch[str(b)]:.1f}x |")
    return {**_batch_meta(n, k, rounds), "per_request": loop, "batched": batch}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--batch-rounds", type=int, default=100, help="rounds per batch size in the batched section")
    ap.add_argument("--out", type=Path, default=Path("bench_learners.json"))
    args = ap.parse_args()
    learners = {
        "normal_hedge": NormalHedge,
        "hedge": Hedge,
        "queued(normal_hedge)": lambda n: _Adapter(Queued(NormalHedge(n))),
        "bold(normal_hedge)": lambda n: _Adapter(Bold(lambda: NormalHedge(n), 15)),
    }
    sizes = [7, 28, 112]
    results: dict[str, dict[str, float]] = {}
    wall: dict[str, dict[str, float]] = {}
    for name, make in learners.items():
        timings = {str(n): time_learner(make, n, args.steps) for n in sizes}
        results[name] = {n: t[0] * 1e6 for n, t in timings.items()}
        wall[name] = {n: t[1] * 1e6 for n, t in timings.items()}
    results["hedgespec_round(K=7)"] = {str(n): time_selector_round(n, 7, args.steps // 8) * 1e6 for n in sizes}
    print("CPU microseconds per step (update + next weights); hedgespec_round = select + observe of one K=7 round")
    print("| learner | " + " | ".join(f"N={n}" for n in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for name, by_n in results.items():
        print(f"| {name} | " + " | ".join(f"{by_n[str(n)]:.1f}" for n in sizes) + " |")
    nh7 = results["normal_hedge"]["7"]
    print(
        f"NormalHedge at N=7: {nh7:.1f} us/update = {nh7 / 410.0:.3f} x the paper's 0.41 ms; goal <= 20 us: "
        f"{'met' if nh7 <= 20 else 'MISSED'}"
    )
    print(
        "wall microseconds (includes other processes' share of the cores): "
        + ", ".join(f"{k} N=7 {v['7']:.1f}" for k, v in wall.items())
    )
    payload = {
        "unit": "cpu_us_per_step",
        "machine": platform.processor() or platform.machine(),
        "steps": args.steps,
        "results": results,
        "wall_us_per_step": wall,
        "batched_round": batched_section(args.batch_rounds),
        "worker_round": worker_section(args.batch_rounds),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {args.out}")


class _Adapter:
    """Drive a delayed reduction with zero delay through the learner interface."""

    def __init__(self, red) -> None:  # type: ignore[no-untyped-def]
        self.red = red
        self._ticket, self._w = red.predict()

    def weights(self):  # type: ignore[no-untyped-def]
        return self._w

    def update(self, loss, weights_used=None):  # type: ignore[no-untyped-def]
        self.red.feedback(self._ticket, loss, self._w)
        self.red.release(self._ticket)
        self._ticket, self._w = self.red.predict()


if __name__ == "__main__":
    main()
