"""Library side of ``scripts/generate.py``: build the run from its config, generate for each prompt, format.

The pool, selector and decoding settings come from :func:`hedgespec.build.build` (``conf/pool/*.yaml``,
``conf/selector/*.yaml``, ``conf/decoding/*.yaml``, ``conf/sampling/*.yaml``); ``selector=oracle`` is resolved
per prompt by :meth:`hedgespec.build.Built.oracle` (best fixed drafter in hindsight).
"""

from __future__ import annotations

from typing import Any

import torch

from hedgespec.build import PLAIN, Built, build, sampling_of
from hedgespec.engine.plain import plain_generate
from hedgespec.models import load_target
from hedgespec.types import RequestContext


def _generate_one(built: Built, engine: Any, r: int, text: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    tok = built.tokenizer
    ids = torch.tensor(tok(text)["input_ids"], dtype=torch.long) if tok is not None else torch.tensor(text)
    max_new = int(cfg["max_new_tokens"])
    best = None
    if cfg["selector"]["name"] == "oracle":
        best, _ = built.oracle(ids, max_new, built.sampling, request_id=r)
    ctx = RequestContext(request_id=r, prompt=text, best_drafter=best)
    out, stats = engine.generate(ids, max_new, built.sampling, ctx=ctx, trace_path=(cfg.get("trace") or {}).get("path"))
    new = out[len(ids) :].tolist()
    return {
        "prompt": text,
        "completion": tok.decode(new) if tok is not None else None,
        "tokens": new,
        "rounds": stats.rounds,
        "generated": stats.generated,
        "mat": stats.mat,
        "histogram": stats.histogram(built.n),
        "timings": stats.timings,
    }


def _plain_one(model: Any, tok: Any, text: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """``selector=none``: the target alone; timings as one "round" per decoding step (MAT 1)."""
    ids = torch.tensor(tok(text)["input_ids"], dtype=torch.long) if tok is not None else torch.tensor(text)
    eos = getattr(tok, "eos_token_id", None) if cfg.get("stop_at_eos", True) else None
    res = plain_generate(model, ids, int(cfg["max_new_tokens"]), sampling_of(cfg), eos)
    n = max(len(res.tokens) - 1, 0)
    return {
        "prompt": text, "completion": tok.decode(res.tokens) if tok is not None else None, "tokens": res.tokens,
        "rounds": n, "generated": n, "mat": 1.0, "histogram": [],
        "timings": {"draft": 0.0, "verify": res.wall_s, "evaluate": 0.0, "update": 0.0},
    }  # fmt: skip


def check_request(cfg: dict[str, Any]) -> None:
    """Refuse an empty prompt list or a non-positive token budget before any model or pool is built."""
    prompts = cfg.get("prompts")
    if not prompts or isinstance(prompts, str):
        raise ValueError(
            f"prompts={prompts!r}: give a list of prompts, e.g. prompts='[\"def fib(n):\"]' (or prompts=[[1,2,3]] "
            "for token ids)"
        )
    n = cfg.get("max_new_tokens")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_new_tokens={n!r}: must be an int >= 1")


def run_generate(cfg: dict[str, Any], model: Any = None, tokenizer: Any = None) -> dict[str, Any]:
    """Generate for ``cfg['prompts']``; returns per-prompt text, tokens and stats (JSON-able)."""
    check_request(cfg)
    if cfg["selector"]["name"] == PLAIN:
        if model is None:
            model, tokenizer = load_target(dict(cfg["target"]))
        results = [_plain_one(model, tokenizer, text, cfg) for text in cfg["prompts"]]
        return {"drafters": [], "selector": PLAIN, "pool_build_s": 0.0, "results": results}
    built = build(cfg, model, tokenizer)
    engine = built.engine(full_counterfactual=bool((cfg.get("trace") or {}).get("full_counterfactual")))
    results = [_generate_one(built, engine, r, text, cfg) for r, text in enumerate(cfg["prompts"])]
    sel = cfg["selector"]
    return {
        "drafters": built.pool.names,
        "selector": sel.get("label", sel["name"]),
        "pool_build_s": built.timing["pool_s"],
        "results": results,
    }


def format_results(out: dict[str, Any]) -> str:
    lines = [f"selector={out['selector']} pool={out['drafters']}"]
    for r in out["results"]:
        t = r["timings"]
        lines.append(f"--- {r['prompt']!r}\n{r['completion']!r}")
        lines.append(
            f"rounds={r['rounds']} generated={r['generated']} MAT={r['mat']:.2f} chosen={r['histogram']} "
            f"draft={t['draft'] * 1e3:.1f}ms verify={t['verify'] * 1e3:.1f}ms evaluate={t['evaluate'] * 1e3:.1f}ms "
            f"update={t['update'] * 1e3:.1f}ms"
        )
    return "\n".join(lines)
