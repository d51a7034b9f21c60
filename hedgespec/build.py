"""One builder from a composed config to (target, pool, selector, engine): generate, bench and tests use it.

``build(cfg)`` reads the composed Hydra config (``conf/generate.yaml`` or ``conf/bench.yaml`` as a plain dict):

* ``target`` → the loaded target and tokenizer (:func:`hedgespec.models.load_target`), unless injected;
* ``pool`` → the drafters: an inline ``drafters:`` list (``kind: random | fit | path``; fitted heads cached
  under ``pool_cache`` when set) or a trained pool's ``manifest:`` (validated by :func:`hedgespec.pools.load_pool`);
* ``selector`` (+ ``fixed=``, ``seed``) → a factory of fresh selectors (:func:`build_selector`): ``drafter:``
  and ``fixed=`` name a drafter by name or domain (``eagle`` = the generalist), a run's ``seed`` offsets
  ``selector.seed``, ``router`` is trained on the data recipes' prompts;
* ``decoding`` / ``sampling`` (+ ``seed``) → :class:`hedgespec.decoding.DecodingConfig` / ``SamplingParams``;
* ``pool.compute_dtype`` → the dtype the engine's drafters compute in (:func:`pool_compute_dtype`).

:class:`Built` then makes engines (:meth:`Built.engine`) and the oracle probe (:meth:`Built.oracle`: the best
fixed drafter in hindsight of one request, the only selector input that is not the request itself).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hedgespec.bench.workloads import domain_prompts
from hedgespec.decoding import DecodingConfig, SamplingParams
from hedgespec.engine.eagle3 import Eagle3Drafter
from hedgespec.engine.fit import fit_drafter
from hedgespec.engine.generate import SpeculativeEngine
from hedgespec.engine.lowrank import LowRankDrafter
from hedgespec.fixtures import random_drafter
from hedgespec.models import load_target
from hedgespec.pools import PoolManifest, TargetInfo
from hedgespec.pools import load_pool as load_manifest
from hedgespec.selectors import SELECTORS, make_selector
from hedgespec.selectors.hedgespec import RouterPrior, RunningPrior
from hedgespec.sim.greedy import best_fixed_mat
from hedgespec.types import RequestContext

#: ``selector=none``: plain autoregressive decoding with the target alone (the baseline of every "× plain" ratio)
PLAIN = "none"
#: selector names the bench and generate accept (conf/selector/*.yaml)
SELECTOR_CHOICES = (
    "hedgespec",
    "hedgespec_eal",
    "hedgespec_le",
    "hedgespec_late",
    "hedgespec_prior",
    "hedgespec_running",
    "eagle",
    "fixed",
    "ucbspec",
    "exp3spec",
    "metasd",
    "router",
    "oracle",
    PLAIN,
)
#: selector config keys the builder consumes itself (everything else goes to make_selector)
_META_KEYS = ("name", "label", "drafter")


# ------------------------------------------------------------------------------------------ pool
#: ``pool.compute_dtype``: null (float32) | float32 | bfloat16 | auto (bfloat16 on CUDA or a CPU with native bfloat16)
POOL_DTYPES = (None, "float32", "bfloat16", "auto")


def pool_compute_dtype(pool_cfg: Mapping[str, Any], device: Any = "cpu") -> torch.dtype:
    """The dtype the reference engine's drafters compute in (``pool.compute_dtype``; the target's is
    ``target.compute_dtype``). A drafter's precision changes which tokens it proposes, never the output: every
    token is the target's verdict. On a CPU the pool's evaluation reads every head's weights each round, so half
    the bytes is most of half the time; ``auto`` picks bfloat16 only where it is native (on an AVX2-only CPU a
    bfloat16 matmul is emulated and far slower)."""
    from hedgespec.models.linear_kernels import native_bfloat16

    want = pool_cfg.get("compute_dtype")
    if want not in POOL_DTYPES:
        raise ValueError(f"pool.compute_dtype={want!r}: expected null, float32, bfloat16 or auto")
    if want == "auto":
        want = "bfloat16" if torch.device(device).type == "cuda" or native_bfloat16() else "float32"
    return torch.bfloat16 if want == "bfloat16" else torch.float32


@dataclass
class Pool:
    """The drafters of a pool config, their names and data domains (pool order)."""

    drafters: list[Eagle3Drafter]
    names: list[str]
    domains: list[str]


def drafter_domains(
    pool_cfg: Mapping[str, Any],
    names: Sequence[str],
    aliases: Mapping[str, str] | None = None,
    manifest_domains: Mapping[str, str] | None = None,
) -> list[str]:
    """Domain of each drafter: manifest ``domain``, else the pool entry's ``domain``, else ``aliases[name]``, else
    its name."""
    entries = {str(d.get("name")): d for d in (pool_cfg.get("drafters") or []) if isinstance(d, Mapping)}
    out = []
    for n in names:
        if manifest_domains and n in manifest_domains:
            out.append(str(manifest_domains[n]))
        elif n in entries and entries[n].get("domain"):
            out.append(str(entries[n]["domain"]))
        else:
            out.append(str((aliases or {}).get(n, n)))
    return out


def _fit_entry(d: Mapping[str, Any], j: int, name: str, model: Any, tokenizer: Any) -> Eagle3Drafter:
    if tokenizer is None:
        raise ValueError(f"pool drafter {name!r}: kind 'fit' needs a tokenizer to encode its prompts")
    seqs = []
    for text in d.get("prompts") or []:
        ids = torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long)
        seqs.append(
            model.generate(
                ids[None], max_new_tokens=int(d.get("length", 48)), do_sample=False, eos_token_id=None, pad_token_id=0
            )[0].cpu()
        )
    if not seqs:
        raise ValueError(f"pool drafter {name!r}: kind 'fit' needs a non-empty `prompts` list")
    base = random_drafter(model, seed=int(d.get("seed", j)), name=name)
    fitted = fit_drafter(base, model, seqs, steps=int(d.get("steps", 300)), seed=int(d.get("seed", j)))
    fitted.name = name
    return fitted


def load_drafters(pool_cfg: Mapping[str, Any], model: Any, tokenizer: Any = None) -> list[Eagle3Drafter]:
    """Build the drafters an inline pool config lists (validated against ``model``)."""
    drafters = []
    for j, d in enumerate(pool_cfg.get("drafters") or []):
        name, kind = d.get("name", f"d{j}"), d.get("kind", "path" if "path" in d else "random")
        if kind == "random":
            drafters.append(random_drafter(model, seed=int(d.get("seed", j)), name=name))
        elif kind == "fit":
            drafters.append(_fit_entry(d, j, name, model, tokenizer))
        elif kind == "path":
            drafters.append(Eagle3Drafter.load(d["path"], model, name=name))
        else:
            raise ValueError(f"pool drafter {name!r}: kind must be random | fit | path, got {kind!r}")
    if not drafters:
        raise ValueError(f"pool {pool_cfg.get('name')!r} lists no drafters")
    return drafters


def manifest_drafters(man: PoolManifest, model: Any) -> list[Eagle3Drafter]:
    """A manifest's drafters in pool order; low-rank experts as their base plus factors
    (:class:`~hedgespec.engine.lowrank.LowRankDrafter`, evaluated with the base read once)."""
    dense = {d.name: Eagle3Drafter.load(man.drafter_path(d), model, name=d.name) for d in man.drafters if not d.lowrank}
    out: list[Eagle3Drafter] = []
    for d in man.drafters:
        if d.lowrank:
            low = LowRankDrafter.load_factors(man.drafter_path(d), dense[d.lowrank["base"]], d.name)
            low.validate(model)
            out.append(low)
        else:
            out.append(dense[d.name])
    return out


def _pool_cache_dir(cfg: Mapping[str, Any], pool_cfg: Mapping[str, Any]) -> Path | None:
    """Cache of an inline pool with fitted heads, keyed by pool + target config (a sweep fits them once)."""
    cache = cfg.get("pool_cache")
    needs_fit = any(isinstance(d, Mapping) and d.get("kind") == "fit" for d in pool_cfg.get("drafters") or [])
    if not cache or not needs_fit:
        return None
    fitted = {k: v for k, v in pool_cfg.items() if k != "compute_dtype"}  # the engine's dtype fits nothing
    blob = json.dumps({"pool": fitted, "target": cfg.get("target") or {}}, sort_keys=True, default=str)
    return Path(cache) / hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_pool(cfg: Mapping[str, Any], model: Any, tokenizer: Any) -> Pool:
    """Drafters of ``cfg['pool']``: a trained pool's ``manifest:`` or an inline ``drafters:`` list."""
    pool_cfg = dict(cfg["pool"])
    aliases = cfg.get("drafter_domains") or {}
    if pool_cfg.get("manifest"):
        info = TargetInfo.from_model(
            str((cfg.get("target") or {}).get("name", pool_cfg.get("target"))), model, tokenizer
        )
        man = load_manifest(pool_cfg["manifest"], info)
        drafters = manifest_drafters(man, model)
        names = [d.name for d in drafters]
        return Pool(
            drafters, names, drafter_domains(pool_cfg, names, aliases, {d.name: d.domain for d in man.drafters})
        )
    cdir = _pool_cache_dir(cfg, pool_cfg)
    names_cfg = [str(d.get("name", f"d{j}")) for j, d in enumerate(pool_cfg.get("drafters") or [])]
    if cdir is not None and names_cfg and all((cdir / n / "config.json").is_file() for n in names_cfg):
        drafters = [Eagle3Drafter.load(cdir / n, model, name=n) for n in names_cfg]
    else:
        drafters = load_drafters(pool_cfg, model, tokenizer)
        for d in drafters if cdir is not None else []:
            d.save(cdir / d.name)
    names = [d.name for d in drafters]
    return Pool(drafters, names, drafter_domains(pool_cfg, names, aliases))


def exclude_drafters(pool: Pool, exclude: Sequence[str]) -> Pool:
    """``pool`` without the drafters named in ``exclude`` (the bench's ``exclude_drafters``), in pool order."""
    exclude = [str(n) for n in exclude]
    unknown = sorted(set(exclude) - set(pool.names))
    if unknown:
        raise ValueError(f"exclude_drafters={exclude}: the pool has no drafter {unknown}; drafters {pool.names}")
    keep = [j for j, n in enumerate(pool.names) if n not in exclude]
    if not keep:
        raise ValueError(f"exclude_drafters={exclude} leaves none of the pool's drafters {pool.names}")
    return Pool([pool.drafters[j] for j in keep], [pool.names[j] for j in keep], [pool.domains[j] for j in keep])


# -------------------------------------------------------------------------------------- selectors
def resolve_drafter(spec: str | int, names: Sequence[str], domains: Sequence[str], where: str) -> int:
    """Pool index of a drafter given by name, domain or index; ``ValueError`` naming the pool when absent."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        if 0 <= spec < len(names):
            return spec
        raise ValueError(f"{where}={spec}: index out of range for a pool of {len(names)} drafters {list(names)}")
    s = str(spec)
    if s in names:
        return list(names).index(s)
    if s in domains:
        return list(domains).index(s)
    raise ValueError(f"{where}={s!r}: the pool has no drafter for it; drafters {list(names)}, domains {list(domains)}")


def generalist_index(pool_cfg: Mapping[str, Any], names: Sequence[str], domains: Sequence[str]) -> int:
    """Index of ``pool.generalist`` (by name or domain; the router's fallback, the prior's generalist). The default
    ``general`` falls back to drafter 0 in a pool without one; another name must be in the pool."""
    g = str(pool_cfg.get("generalist") or "general")
    if g != "general":
        return resolve_drafter(g, names, domains, "pool.generalist")
    return resolve_drafter(g, names, domains, "pool.generalist") if g in (*names, *domains) else 0


def check_selector_config(cfg: Mapping[str, Any]) -> None:
    """Early, pool-independent checks of the selector / ``fixed=`` combination."""
    sel = cfg.get("selector") or {}
    name = sel.get("name")
    if name not in SELECTORS and name != PLAIN:
        raise ValueError(
            f"unknown selector {name!r}; expected selector=<one of {list(SELECTOR_CHOICES)}> "
            f"(library names: {sorted(SELECTORS)})"
        )
    if cfg.get("fixed") and (name != "fixed" or sel.get("label") not in (None, "fixed")):
        raise ValueError(
            f"fixed={cfg['fixed']!r} needs selector=fixed (got selector={sel.get('label') or name}): "
            f"python scripts/bench.py selector=fixed fixed={cfg['fixed']}"
        )


def router_classifier(
    cfg: Mapping[str, Any], domains: Sequence[str], generalist: int
) -> tuple[Any, dict[str, int], dict[str, Any]]:
    """Train the prompt router (TF-IDF + logistic regression) on the training prompts of the pool's expert domains."""
    from hedgespec.selectors.router import train_router  # scikit-learn: optional, only for selector=router

    if not cfg.get("data"):
        raise ValueError(
            "selector=router needs a prompt classifier trained on the domain data: run it with "
            "`python scripts/bench.py selector=router ...`, which trains it from the data recipes"
        )
    rcfg = dict(cfg.get("router") or {})
    experts = {d: i for i, d in enumerate(domains) if i != generalist and d != "general"}
    if len(experts) < 2:
        raise ValueError(
            f"selector=router needs at least two expert domains in the pool, got {sorted(experts)} "
            f"(drafter domains {list(domains)}; map drafter names to domains with drafter_domains)"
        )
    prompts, labels = [], []
    for d in experts:
        reqs = domain_prompts(cfg["data"], d, rcfg.get("max_train_per_domain"), split=str(rcfg.get("split", "train")))
        prompts += [r.prompt for r in reqs]
        labels += [d] * len(reqs)
    t0 = time.perf_counter()
    clf = train_router(prompts, labels, seed=int(cfg.get("seed", 0)))
    info = {
        "classes": sorted(experts),
        "n_train": len(prompts),
        "train_s": time.perf_counter() - t0,
        "classifier": "tfidf(1-2 grams)+logistic_regression",
    }
    return clf, experts, info


def _selector_kwargs(cfg: Mapping[str, Any], names: Sequence[str], domains: Sequence[str]) -> dict[str, Any]:
    sel = dict(cfg["selector"])
    kw = {k: v for k, v in sel.items() if k not in _META_KEYS}
    if "seed" in kw:  # a sweep's seed=<s> moves every seeded selector's RNG (selector.seed is the offset)
        kw["seed"] = int(kw["seed"] or 0) + int(cfg.get("seed") or 0)
    if cfg.get("fixed"):
        kw["index"] = resolve_drafter(str(cfg["fixed"]), names, domains, "fixed")
    elif sel.get("drafter") is not None:  # eagle's is ${pool.generalist}: name the setting a user sets
        where = "pool.generalist (selector=eagle)" if sel.get("label") == "eagle" else "selector.drafter"
        kw["index"] = resolve_drafter(sel["drafter"], names, domains, where)
    if sel["name"] == "fixed":
        idx = kw.get("index", 0)
        if not isinstance(idx, int) or not 0 <= idx < len(names):
            raise ValueError(f"selector.index={idx!r} is out of range for the pool {list(names)}")
    return kw


def hedgespec_prior_source(
    cfg: Mapping[str, Any], prior: str, names: Sequence[str], domains: Sequence[str], info: dict[str, Any]
) -> Any:
    """HedgeSpec's prior source, one per selector factory: the router's posterior (trained as for selector=router)
    or a running mean of final weights shared by every selector the factory makes."""
    if prior == "running":
        return RunningPrior()
    try:
        clf, mapping, info["router"] = router_classifier(cfg, domains, generalist_index(cfg["pool"], names, domains))
    except ValueError as err:
        raise ValueError(f"HedgeSpec prior='router' uses the prompt router: {err}") from err
    return RouterPrior(clf, mapping)


def build_selector(
    cfg: Mapping[str, Any], names: Sequence[str], domains: Sequence[str]
) -> tuple[Callable[[], Any], dict[str, Any]]:
    """A factory of fresh selectors for ``cfg['selector']`` over this pool, and side info (resolved index, router)."""
    check_selector_config(cfg)
    name = cfg["selector"]["name"]
    kw = _selector_kwargs(cfg, names, domains)
    info: dict[str, Any] = {"index": kw["index"]} if name == "fixed" else {}
    if name == "router":
        gen = generalist_index(cfg["pool"], names, domains)
        clf, mapping, info["router"] = router_classifier(cfg, domains, gen)
        kw = {"classifier": clf, "drafter_of_domain": mapping, "fallback": gen, "evaluate": kw.get("evaluate", True)}
    elif name in ("hedgespec", "hedgespec_eal") and kw.get("prior") in ("router", "running"):
        kw["prior_source"] = hedgespec_prior_source(cfg, str(kw["prior"]), names, domains, info)
    make_selector(name, **kw)  # fail fast on bad arguments
    return (lambda: make_selector(name, **kw)), info


# ------------------------------------------------------------------------------------------ build
def decoding_of(cfg: Mapping[str, Any]) -> DecodingConfig:
    if not isinstance(cfg.get("decoding"), Mapping):
        raise ValueError("the config has no `decoding` block: compose it with a conf/decoding/ option (decoding=chain)")
    return DecodingConfig.from_dict(cfg["decoding"])


def sampling_of(cfg: Mapping[str, Any]) -> SamplingParams:
    """The run's sampling settings; its seed is the run's top-level ``seed``."""
    if not isinstance(cfg.get("sampling"), Mapping):
        raise ValueError(
            "the config has no `sampling` block: compose it with a conf/sampling/ option (sampling=greedy)"
        )
    return SamplingParams.from_dict({**cfg["sampling"], "seed": cfg.get("seed")})


@dataclass
class Built:
    """What one composed config builds; :meth:`engine` and :meth:`oracle` run requests on it."""

    model: Any
    tokenizer: Any
    pool: Pool
    decoding: DecodingConfig
    sampling: SamplingParams
    selector_factory: Callable[[], Any]
    selector_info: dict[str, Any]
    eos_token_id: int | None
    timing: dict[str, float] = field(default_factory=dict)
    drafter_dtype: torch.dtype = torch.float32  # pool.compute_dtype, resolved
    _probe: Any = None

    @property
    def n(self) -> int:
        return len(self.pool.drafters)

    def engine(self, selector: Any = None, full_counterfactual: bool = False) -> SpeculativeEngine:
        """A reference engine over this pool with ``selector`` (default: a fresh one from the factory)."""
        return SpeculativeEngine(
            self.model,
            self.pool.drafters,
            self.selector_factory() if selector is None else selector,
            self.decoding,
            eos_token_id=self.eos_token_id,
            full_counterfactual=full_counterfactual,
            dtype=self.drafter_dtype,
        )

    def oracle(
        self,
        ids: Any,
        max_new_tokens: int,
        sampling: SamplingParams,
        request_id: Any = 0,
        trace_path: str | None = None,
    ) -> tuple[int, list[float]]:
        """Best fixed drafter in hindsight by MAT for one request, and every fixed drafter's MAT.

        Greedy: one full-counterfactual pass (every drafter drafts from every position; exact), appended to
        ``trace_path`` when given (the replay table). Sampling: one ``Fixed(i)`` run per drafter, same seed.
        """
        if sampling.greedy:
            if self._probe is None:
                self._probe = self.engine(make_selector("fixed", index=0), full_counterfactual=True)
            self._probe.generate(
                ids, max_new_tokens, sampling, ctx=RequestContext(request_id=request_id), trace_path=trace_path
            )
            best, mats = best_fixed_mat(self._probe.last_trace.runs, self.decoding.num_steps)
            return int(best), [float(m) for m in mats]
        mats = []
        for i in range(self.n):
            _, st = self.engine(make_selector("fixed", index=i)).generate(ids, max_new_tokens, sampling)
            mats.append(st.mat)
        return max(range(self.n), key=lambda i: mats[i]), mats


def build(
    cfg: Mapping[str, Any], model: Any = None, tokenizer: Any = None, drafters: Sequence[Any] | None = None
) -> Built:
    """Build target, pool, selector factory and decoding settings from a composed config (see module docstring).

    ``model``/``tokenizer``/``drafters`` may be injected (tests, notebooks); otherwise they are built from
    ``cfg['target']`` and ``cfg['pool']``.
    """
    decoding, sampling = decoding_of(cfg), sampling_of(cfg)
    check_selector_config(cfg)
    pool_compute_dtype(cfg["pool"])  # a bad value is named before the target loads
    timing: dict[str, float] = {}
    t = time.perf_counter()
    if model is None:
        model, tokenizer = load_target(dict(cfg["target"]))
    timing["target_s"] = time.perf_counter() - t
    t = time.perf_counter()
    if drafters is None:
        pool = build_pool(cfg, model, tokenizer)
    else:
        names = [d.name for d in drafters]
        pool = Pool(list(drafters), names, drafter_domains(cfg["pool"], names, cfg.get("drafter_domains")))
    if cfg.get("exclude_drafters"):
        pool = exclude_drafters(pool, cfg["exclude_drafters"])
    timing["pool_s"] = time.perf_counter() - t
    factory, info = build_selector(cfg, pool.names, pool.domains)
    eos = getattr(tokenizer, "eos_token_id", None) if cfg.get("stop_at_eos", True) else None
    dtype = pool_compute_dtype(cfg["pool"], next(model.parameters()).device)
    return Built(model, tokenizer, pool, decoding, sampling, factory, info, eos, timing, dtype)
