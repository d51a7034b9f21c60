"""Micro-benchmark of the engine's three costs (the per-round overheads of online drafter selection), all from one run:

* one target forward: a verification pass of K+1 rows after a context of ``context`` tokens (and a 1-row
  decode step, for reference);
* one drafter forward: one draft step (1 row) of one EAGLE-3 head after ``context`` cached rows;
* batched pool evaluation: :meth:`DrafterPool.evaluate` of ``rows`` verified rows into N heads at once;
  with ``ranks``, also for low-rank pools (head 0 as the base, N-1 rank-r experts; :mod:`hedgespec.engine.lowrank`)
  next to the dense pool of the same N, with the parameters each evaluation reads; a rank may be one per matrix
  (``{"fc": 34, "q": 21, ...}``, as ``scripts/lowrank_pool.py reads=`` chooses them; :func:`rank_pools_from_files`
  reads them from that script's ``json=`` records).

Weights are random (timings do not depend on values). ``dims='tiny'`` is the registry's tiny target,
``dims='smollm2'`` has SmolLM2-135M's shapes (hidden 576, 30 layers, 9/3 heads, vocab 49152; draft vocab 32000).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from hedgespec.engine.lowrank import LowRankDrafter, weights_read
from hedgespec.engine.pool import DrafterPool
from hedgespec.engine.target import TargetModel
from hedgespec.fixtures import random_drafter
from hedgespec.models.linear_kernels import linear_kernels_of, use_linear_kernels
from hedgespec.ranks import check_rank, rank_of

DIMS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        draft_vocab=512,
    ),
    "smollm2": dict(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        draft_vocab=32000,
    ),
}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn, device: str, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    _sync(device)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        _sync(device)
        ts.append(time.perf_counter() - t)
    return min(ts)  # min: robust to other processes on a shared machine


def _draft_vocab(dims: str, d: dict[str, Any], draft_vocab: int | None) -> int:
    vd = d.pop("draft_vocab")
    if draft_vocab is None:
        return vd
    if not 0 < draft_vocab <= d["vocab_size"]:
        raise ValueError(f"draft_vocab={draft_vocab} must be in [1, {d['vocab_size']}] for dims={dims!r}")
    return int(draft_vocab)


@torch.no_grad()
def bench_engine(
    dims: str = "tiny",
    ns: Sequence[int] = (1, 2, 4, 7, 14, 28),
    context: int = 128,
    k: int = 4,
    rows: int = 4,
    repeats: int = 20,
    device: str = "cpu",
    dtype: str = "float32",
    draft_vocab: int | None = None,
    ranks: Sequence[int] | Mapping[str, Any] = (),
    kernels: str = "aten",
) -> dict[str, Any]:
    """Best-of-``repeats`` seconds of each cost and their ratios to one drafter forward and one target forward.

    ``draft_vocab`` overrides the dims' draft vocabulary (the embedded pool's trained drafters use 4096);
    ``ranks`` adds low-rank pools of each rank (``res["lowrank"][r][N]``), or of each labelled rank of a mapping
    ``{label: rank}`` (``res["lowrank"][label][N]``; a rank per matrix allowed); ``kernels`` is the target's
    ``linear_kernels`` (:mod:`hedgespec.models.linear_kernels`).
    """
    d = dict(DIMS[dims])
    vd = _draft_vocab(dims, d, draft_vocab)
    tdtype = getattr(torch, dtype)
    cfg = LlamaConfig(max_position_embeddings=4096, tie_word_embeddings=True, **d)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(tdtype).eval()
    use_linear_kernels(model, kernels, rows=k + 1)
    heads = [random_drafter(model, seed=s, draft_vocab_size=vd) for s in range(max(ns))]
    ctx = torch.randint(0, d["vocab_size"], (context + k + 1,))
    pool1 = DrafterPool(heads[:1], model, dtype=tdtype)
    tgt = TargetModel(model, pool1.capture_ids)
    _, feats = tgt.prefill(ctx[:context])
    res: dict[str, Any] = {
        "dims": dims,
        "device": device,
        "dtype": dtype,
        "context": context,
        "k": k,
        "rows": rows,
        "draft_vocab": vd,
        "threads": torch.get_num_threads(),
        "kernels": linear_kernels_of(model),
    }
    res.update(_single_costs(pool1, tgt, ctx, feats, context, k, repeats, device))
    res["verify_x_decode"] = res["target_verify_s"] / res["target_decode_s"]
    res["pool"] = {}
    for n in ns:
        pool = DrafterPool(heads[:n], model, dtype=tdtype)
        t = _evaluate_cost(pool, tgt, ctx, feats, context, rows, repeats, device)
        res["pool"][n] = {
            "evaluate_s": t,
            "x_drafter_forward": t / res["drafter_forward_s"],
            "x_target_verify": t / res["target_verify_s"],
        }
        res["pool"][n]["x_n1_evaluate"] = t / res["pool"][ns[0]]["evaluate_s"]
        res["pool"][n]["weights_read_x_one_head"] = weights_read(pool.w) / weights_read(pool1.w)
    res["lowrank"] = {}
    labelled = ranks.items() if isinstance(ranks, Mapping) else ((r, r) for r in ranks)
    for label, r in labelled:
        res["lowrank"][label] = {}
        experts = [_random_low_rank(heads[0], heads[i], check_rank(r, f"rank {label}")) for i in range(1, max(ns))]
        for n in ns:
            pool = DrafterPool([heads[0], *experts[: n - 1]], model, dtype=tdtype)
            t = _evaluate_cost(pool, tgt, ctx, feats, context, rows, repeats, device)
            res["lowrank"][label][n] = {
                "evaluate_s": t,
                "x_dense_evaluate": t / res["pool"][n]["evaluate_s"],
                "x_drafter_forward": t / res["drafter_forward_s"],
                "weights_read_x_one_head": weights_read(pool.w) / weights_read(pool1.w),
            }
    res["drafter_x_target_verify"] = res["drafter_forward_s"] / res["target_verify_s"]
    return res


def _random_low_rank(base: Any, other: Any, rank: int | None | dict[str, int | None]) -> LowRankDrafter:
    """An expert of ``base`` at ``rank`` (one for every matrix, None for full, or one per matrix; random factors
    scaled to the weights: timings do not depend on values)."""
    g = torch.Generator().manual_seed(0)
    factors = {}
    for key, w in base.weights.items():
        if w.dim() == 2:
            r = rank_of(rank, key)
            r = min(w.shape) if r is None else r
            a = torch.randn(w.shape[1], r, generator=g) * 0.01
            factors[key] = (a, torch.randn(r, w.shape[0], generator=g) * 0.01)
    norms = {k: v for k, v in other.weights.items() if v.dim() == 1}
    return LowRankDrafter(base, factors, norms, rank, name=f"{other.name}-lowrank")


def rank_pools_from_files(paths: Sequence[str | Path]) -> dict[str, Any]:
    """``{label: rank}`` from the records ``scripts/lowrank_pool.py json=<file>`` writes: a pool written for a reads
    budget is labelled ``b<reads>-<allocation>`` (the kind docs/RESULTS.md's low-rank tables use), one at a uniform
    rank ``<rank>``, any other by its file name. A file that is not such a record is refused, naming it."""
    out: dict[str, Any] = {}
    for path in map(Path, paths):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"rank file {path}: cannot read it as JSON ({err})") from None
        if not isinstance(rec, dict) or "rank" not in rec:
            raise ValueError(f"rank file {path}: no 'rank' (expected a record of scripts/lowrank_pool.py json=...)")
        rank = check_rank(rec["rank"], f"{path}: rank")
        budget = rec.get("budget") or {}
        if "reads" in budget and "allocation" in budget:
            label = f"b{float(budget['reads']):g}-{budget['allocation']}"
        elif isinstance(rank, int):
            label = str(rank)
        else:
            label = path.stem
        if label in out:
            raise ValueError(f"rank file {path}: a second pool labelled {label!r}")
        out[label] = rec["rank"]
    return out


def _single_costs(
    pool1: DrafterPool,
    tgt: TargetModel,
    ctx: torch.Tensor,
    feats: torch.Tensor,
    context: int,
    k: int,
    repeats: int,
    device: str,
) -> dict[str, float]:
    """One target verification forward (K+1 rows), one decode step and one draft step, after ``context`` rows."""
    emb = tgt.embed(ctx[:context])
    cached = tgt.cache

    def target_verify() -> None:
        tgt.cache, tgt.length = _copy_cache(cached), context
        tgt.forward(ctx[context : context + k + 1])

    def target_decode() -> None:
        tgt.cache, tgt.length = _copy_cache(cached), context
        tgt.forward(ctx[context : context + 1])

    pool1.prefill(ctx[1:context], feats[: context - 1], emb[1:][None])
    f1 = pool1.features(feats[-1:], [0])
    e1 = tgt.embed(ctx[context : context + 1])[None]

    def drafter_step() -> None:
        pool1.run([0], e1, f1, True, torch.tensor([context - 1], device=device))

    return {
        "target_verify_s": _time(target_verify, device, repeats),
        "target_decode_s": _time(target_decode, device, repeats),
        "drafter_forward_s": _time(drafter_step, device, repeats),
    }


def _evaluate_cost(
    pool: DrafterPool,
    tgt: TargetModel,
    ctx: torch.Tensor,
    feats: torch.Tensor,
    context: int,
    rows: int,
    repeats: int,
    device: str,
) -> float:
    """Seconds of one batched :meth:`DrafterPool.evaluate` of ``rows`` rows after ``context`` cached rows."""
    emb = tgt.embed(ctx[:context])
    pool.prefill(ctx[1:context], feats[: context - 1], emb[1:][None])
    base_k, base_v = pool.k, pool.v
    toks = ctx[context : context + rows]
    ef = feats[context - rows : context]  # any rows of the right shape
    et = tgt.embed(toks)[None]

    def evaluate() -> None:
        pool.k, pool.v = base_k, base_v
        pool.evaluate(toks, ef, et)

    return _time(evaluate, device, repeats)


def _copy_cache(cache: Any) -> Any:
    """A shallow copy of the target's KV cache (layers shared, so a forward after it does not grow ``cache``)."""
    if cache is None:
        return None
    new = DynamicCache()
    for li, layer in enumerate(cache.layers):
        new.update(layer.keys, layer.values, li)
    return new


def format_bench(res: dict[str, Any]) -> str:
    lines = [
        f"[{res['dims']} on {res['device']} {res['dtype']}, context {res['context']}, K={res['k']}, "
        f"eval rows {res['rows']}, draft vocab {res['draft_vocab']}, threads {res['threads']}, "
        f"linear kernels {res.get('kernels', 'aten')}]",
        f"target forward (verify {res['k'] + 1} rows): {res['target_verify_s'] * 1e3:8.3f} ms   "
        f"= {res['target_verify_s'] / res['target_decode_s']:.3f} x a decode step",
        f"target forward (decode 1 row):      {res['target_decode_s'] * 1e3:8.3f} ms",
        f"drafter forward (1 row):            {res['drafter_forward_s'] * 1e3:8.3f} ms   "
        f"= {res['drafter_x_target_verify']:.3f} x target",
    ]
    n1 = next(iter(res["pool"]))
    for n, r in res["pool"].items():
        lines.append(
            f"pool evaluate N={n:>2}: {r['evaluate_s'] * 1e3:8.3f} ms = {r['x_drafter_forward']:6.2f} x "
            f"drafter forward = {r['x_target_verify']:6.3f} x target forward = {r['x_n1_evaluate']:5.2f} "
            f"x N={n1}   reads {r['weights_read_x_one_head']:5.2f} x one head"
        )
    for rank, by_n in res.get("lowrank", {}).items():
        for n, r in by_n.items():
            lines.append(
                f"low-rank r={str(rank):<4} N={n:>2}: {r['evaluate_s'] * 1e3:8.3f} ms = "
                f"{r['x_dense_evaluate']:5.2f} x dense N={n} = {r['x_drafter_forward']:6.2f} x drafter forward   "
                f"reads {r['weights_read_x_one_head']:5.2f} x one head"
            )
    return "\n".join(lines)
