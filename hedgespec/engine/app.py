"""Library side of ``scripts/generate.py``: build a pool and a selector from config dicts and generate.

Config shapes (``conf/pool/*.yaml``, ``conf/selector/*.yaml``):

* pool: ``{name, drafters: [{name, kind: random|fit|path, seed, steps, prompts, path}]}``.
* selector: ``{name, label?, drafter?, **kwargs}`` → ``make_selector(name, **kwargs)``; ``drafter`` names a
  pool drafter and becomes ``index`` (the ``eagle`` = Fixed-generalist config); ``oracle`` is resolved by a
  greedy full-counterfactual pass per prompt (best fixed drafter in hindsight).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.fit import fit_drafter
from hedgespec.engine.generate import SpeculativeEngine
from hedgespec.types import RequestContext


def load_pool(pool_cfg: dict[str, Any], model: Any, tokenizer: Any = None) -> list[Eagle3Drafter]:
    """Build the drafters a pool config lists (validated against ``model``)."""
    drafters = []
    for j, d in enumerate(pool_cfg.get("drafters") or []):
        name, kind = d.get("name", f"d{j}"), d.get("kind", "path" if "path" in d else "random")
        if kind == "random":
            drafters.append(Eagle3Drafter.random_for(model, seed=int(d.get("seed", j)), name=name))
        elif kind == "fit":
            if tokenizer is None:
                raise ValueError(f"pool drafter {name!r}: kind 'fit' needs a tokenizer to encode its prompts")
            seqs = []
            for text in d.get("prompts") or []:
                ids = torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long)
                seqs.append(model.generate(ids[None], max_new_tokens=int(d.get("length", 48)), do_sample=False,
                                           eos_token_id=None, pad_token_id=0)[0].cpu())
            if not seqs:
                raise ValueError(f"pool drafter {name!r}: kind 'fit' needs a non-empty `prompts` list")
            base = Eagle3Drafter.random_for(model, seed=int(d.get("seed", j)), name=name)
            fitted = fit_drafter(base, model, seqs, steps=int(d.get("steps", 300)), seed=int(d.get("seed", j)))
            fitted.name = name
            drafters.append(fitted)
        elif kind == "path":
            drafters.append(Eagle3Drafter.load(d["path"], model, name=name))
        else:
            raise ValueError(f"pool drafter {name!r}: kind must be random | fit | path, got {kind!r}")
    if not drafters:
        raise ValueError(f"pool {pool_cfg.get('name')!r} lists no drafters")
    return drafters


def make_selector_from_config(sel_cfg: dict[str, Any], names: list[str]) -> Any:
    from hedgespec.selectors import make_selector

    if sel_cfg.get("name") == "router":
        raise ValueError(
            "selector=router needs a prompt classifier trained on the domain data: run it with "
            "`python scripts/bench.py selector=router ...`, which trains it from the data recipes"
        )

    kw = {k: v for k, v in sel_cfg.items() if k not in ("name", "label", "drafter")}
    if sel_cfg.get("drafter") is not None:
        if sel_cfg["drafter"] not in names:
            raise ValueError(f"selector.drafter={sel_cfg['drafter']!r} is not in the pool {names}")
        kw["index"] = names.index(sel_cfg["drafter"])
    return make_selector(sel_cfg["name"], **kw)


def run_generate(cfg: dict[str, Any], model: Any = None, tokenizer: Any = None) -> dict[str, Any]:
    """Generate for ``cfg['prompts']``; returns per-prompt text, tokens and stats (JSON-able)."""
    from hedgespec.sim.greedy import best_fixed_mat

    if model is None:
        from hedgespec.models import load_target

        model, tokenizer = load_target(cfg["target"])
    t0 = time.perf_counter()
    drafters = load_pool(cfg["pool"], model, tokenizer)
    build_s = time.perf_counter() - t0
    names = [d.name for d in drafters]
    sel_cfg = dict(cfg["selector"])
    selector = make_selector_from_config(sel_cfg, names)
    eos = getattr(tokenizer, "eos_token_id", None) if cfg.get("stop_at_eos", True) else None
    kw = dict(mode=cfg.get("mode", "chain"), k=int(cfg.get("k", 4)), topk=int(cfg.get("topk", 4)),
              num_draft_tokens=int(cfg.get("num_draft_tokens", 16)), eos_token_id=eos)
    trace = cfg.get("trace") or {}
    engine = SpeculativeEngine(model, drafters, selector, full_counterfactual=bool(trace.get("full_counterfactual")), **kw)
    results = []
    for r, text in enumerate(cfg["prompts"]):
        ids = torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long) if tokenizer is not None else torch.tensor(text)
        best = None
        if sel_cfg["name"] == "oracle":
            from hedgespec.selectors import make_selector

            probe = SpeculativeEngine(model, drafters, make_selector("fixed", index=0), full_counterfactual=True, **kw)
            probe.generate(ids, int(cfg["max_new_tokens"]), ctx=RequestContext(request_id=r))
            best, _ = best_fixed_mat(probe.last_trace.runs, probe.k)
        out, stats = engine.generate(
            ids, int(cfg["max_new_tokens"]), temperature=float(cfg.get("temperature", 0.0)), top_p=float(cfg.get("top_p", 1.0)),
            top_k=int(cfg.get("top_k", 0)), seed=cfg.get("seed"), ctx=RequestContext(request_id=r, prompt=text, best_drafter=best),
            trace_path=trace.get("path"),
        )
        new = out[len(ids):].tolist()
        results.append({
            "prompt": text, "completion": tokenizer.decode(new) if tokenizer is not None else None, "tokens": new,
            "rounds": stats.rounds, "generated": stats.generated, "mat": stats.mat, "histogram": stats.histogram(len(names)),
            "timings": stats.timings,
        })
    return {"drafters": names, "selector": sel_cfg.get("label", sel_cfg["name"]), "pool_build_s": build_s, "results": results}


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
