"""BatchedHedgeSpec select + observe, two package versions in one process, timed in alternating blocks of 20
rounds (N=8, K=4, K+1 tokens emitted per round, the same uniform random γ for both): slow drifts of a shared
machine hit both alike, so the paired ratio per block is the number to read. Also checks that both versions'
weights agree after the run.

    python docs/results/batched_solve/paired.py <dir holding the other version as package hedgespec_old>
"""

import sys
import time

import numpy as np


def make(mod, types, b, n=8, k=4):  # type: ignore[no-untyped-def]
    sel = mod.BatchedHedgeSpec(b, n, k)
    for slot in range(b):
        sel.begin(slot, types.RequestContext(request_id=slot))
    return sel


def run(mod, sel, emitted, gamma, r0, r1):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    for r in range(r0, r1):
        dec = sel.select()
        sel.observe(mod.BatchFeedback(dec.slots, emitted[r] - 1, emitted[r], gamma[r]))
    return (time.process_time() - t0) / (r1 - r0) * 1e6


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    import hedgespec.selectors as new
    import hedgespec.types as new_types
    import hedgespec_old.selectors as old
    import hedgespec_old.types as old_types

    print("CPU µs per round for the whole batch; 1000 rounds in blocks of 20, the first block dropped")
    print("| B | before: median | min | after: median | min | median of paired ratio after/before | max |Δw| |")
    print("|---|---|---|---|---|---|---|")
    for b in (1, 16, 64):
        rounds = 1000
        emitted = np.full((rounds, b), 5)
        gamma = np.random.default_rng(2).random((rounds, b, 5, 8))
        so, sn = make(old, old_types, b), make(new, new_types, b)
        to, tn = [], []
        for r0 in range(0, rounds, 20):
            to.append(run(old, so, emitted, gamma, r0, r0 + 20))
            tn.append(run(new, sn, emitted, gamma, r0, r0 + 20))
        a, c = np.array(to[1:]), np.array(tn[1:])
        dw = np.abs(so.weights(np.arange(b)) - sn.weights(np.arange(b))).max()
        print(
            f"| {b} | {np.median(a):.1f} | {a.min():.1f} | {np.median(c):.1f} | {c.min():.1f} | "
            f"{np.median(c / a):.3f} | {dw:.1e} |"
        )


if __name__ == "__main__":
    main()
