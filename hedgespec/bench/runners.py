"""Run one selector over one workload on a backend and return a result dict (schema v1, :mod:`.metrics`).

* ``backend=engine``: the reference PyTorch engine (:class:`hedgespec.engine.SpeculativeEngine`), batch 1.
  γ and per-round timings come from the engine's in-memory trace, so regret and selection overhead are exact.
* ``backend=server``: a running HedgeSpec SGLang server (``python serve/launch.py pool=<pool> selector=<s>``)
  through SGLang's native ``/generate``; MAT, rounds and the drafter histogram come from ``meta_info``
  (``spec_accept_length``, ``spec_verify_ct``, ``hedgespec_histogram``); the server reports no γ, so regret and
  overhead are ``null`` there.

Selectors (``conf/selector/*.yaml``, SPEC §6): every name :func:`hedgespec.selectors.make_selector` knows, plus
the bench-side resolutions made here:

* ``drafter: <name or domain>`` (``eagle`` = the generalist) and ``fixed=<domain>`` → ``Fixed(index)``; a pool
  without that drafter is a ``ValueError`` listing the pool's drafters and domains;
* ``oracle``: the best fixed drafter in hindsight per request, computed before the request and passed as
  ``RequestContext.best_drafter``: under greedy decoding from one full-counterfactual pass (every drafter drafts
  from every position; exact), under sampling from one ``Fixed(i)`` run per drafter (same seed);
* ``router``: TF-IDF + logistic regression (:func:`hedgespec.selectors.router.train_router`) trained on the
  training prompts of the pool's expert domains; predictions map to that domain's drafter, the generalist
  otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hedgespec.bench.metrics import RESULT_FORMAT, RESULT_VERSION, aggregate, per_domain, request_metrics
from hedgespec.bench.workloads import BenchRequest, domain_prompts, load_workload

BACKENDS = ("engine", "server")
BENCH_SELECTORS = ("hedgespec", "hedgespec_eal", "eagle", "fixed", "ucbspec", "exp3spec", "metasd", "router", "oracle")
#: selector config keys the bench consumes itself (everything else goes to make_selector)
_BENCH_KEYS = ("name", "label", "drafter")


# ------------------------------------------------------------------------------------------ pool
def drafter_domains(pool_cfg: Mapping[str, Any], names: Sequence[str], aliases: Mapping[str, str] | None = None,
                    manifest_domains: Mapping[str, str] | None = None) -> list[str]:
    """Domain of each drafter: manifest ``domain``, else the pool entry's ``domain`` key, else ``aliases[name]``, else its name."""
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


def _pool_cache_key(pool_cfg: Mapping[str, Any], target_cfg: Mapping[str, Any]) -> str:
    blob = json.dumps({"pool": pool_cfg, "target": target_cfg}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_pool(cfg: Mapping[str, Any], model: Any, tokenizer: Any) -> tuple[list[Any], list[str], list[str]]:
    """Drafters of ``cfg['pool']`` (inline ``drafters:`` list or a ``manifest:``), their names and domains.

    Inline pools with fitted heads are cached under ``cfg['pool_cache']`` (keyed by pool + target config), so a
    sweep fits them once.
    """
    from hedgespec.engine import Eagle3Drafter
    from hedgespec.engine.app import load_pool

    pool_cfg = dict(cfg["pool"])
    aliases = cfg.get("drafter_domains") or {}
    if pool_cfg.get("manifest"):
        from hedgespec.pools import TargetInfo
        from hedgespec.pools import load_pool as load_manifest

        info = TargetInfo.from_model(str(cfg["target"].get("name", pool_cfg.get("target"))), model, tokenizer)
        man = load_manifest(pool_cfg["manifest"], info)
        drafters = [Eagle3Drafter.load(man.drafter_path(d), model, name=d.name) for d in man.drafters]
        names = [d.name for d in drafters]
        return drafters, names, drafter_domains(pool_cfg, names, aliases, {d.name: d.domain for d in man.drafters})
    cache = cfg.get("pool_cache")
    needs_fit = any(isinstance(d, Mapping) and d.get("kind") == "fit" for d in pool_cfg.get("drafters") or [])
    cdir = Path(cache) / _pool_cache_key(pool_cfg, cfg.get("target") or {}) if cache and needs_fit else None
    names_cfg = [str(d.get("name", f"d{j}")) for j, d in enumerate(pool_cfg.get("drafters") or [])]
    if cdir is not None and all((cdir / n / "config.json").is_file() for n in names_cfg) and names_cfg:
        drafters = [Eagle3Drafter.load(cdir / n, model, name=n) for n in names_cfg]
    else:
        drafters = load_pool(pool_cfg, model, tokenizer)
        if cdir is not None:
            for d in drafters:
                d.save(cdir / d.name)
    names = [d.name for d in drafters]
    return drafters, names, drafter_domains(pool_cfg, names, aliases)


def server_pool_names(cfg: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Drafter names in server order: ``backend.drafters``, else the manifest's, else the inline pool's."""
    if cfg["backend"].get("drafters"):
        return [str(n) for n in cfg["backend"]["drafters"]], {}
    man = cfg["pool"].get("manifest")
    if man and Path(man).is_file():
        from hedgespec.pools import load_pool as load_manifest

        m = load_manifest(man)
        return m.names, {d.name: d.domain for d in m.drafters}
    return [str(d.get("name")) for d in cfg["pool"].get("drafters") or []] or ["pool"], {}


def generalist_index(pool_cfg: Mapping[str, Any], names: Sequence[str], domains: Sequence[str]) -> int:
    g = pool_cfg.get("generalist") or "general"
    for cand in (g, "general"):
        if cand in names:
            return list(names).index(cand)
        if cand in domains:
            return list(domains).index(cand)
    return 0


# -------------------------------------------------------------------------------------- selectors
def selector_label(cfg: Mapping[str, Any], names: Sequence[str] | None = None) -> str:
    sel = cfg["selector"]
    if cfg.get("fixed"):
        return f"fixed:{cfg['fixed']}"
    if sel.get("label"):
        return str(sel["label"])
    if sel.get("name") == "fixed":
        idx = sel.get("index", 0)
        return f"fixed:{names[idx]}" if names and isinstance(idx, int) and 0 <= idx < len(names) else f"fixed:{idx}"
    return str(sel.get("name"))


def check_selector_config(cfg: Mapping[str, Any]) -> None:
    """Early, pool-independent checks of the selector / ``fixed=`` combination."""
    from hedgespec.selectors import SELECTORS

    sel = cfg.get("selector") or {}
    name = sel.get("name")
    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r}; expected selector=<one of {list(BENCH_SELECTORS)}> "
                         f"(library names: {sorted(SELECTORS)})")
    if cfg.get("fixed") and (name != "fixed" or sel.get("label") not in (None, "fixed")):
        raise ValueError(f"fixed={cfg['fixed']!r} needs selector=fixed (got selector={sel.get('label') or name}): "
                         f"python scripts/bench.py selector=fixed fixed={cfg['fixed']}")


def router_classifier(cfg: Mapping[str, Any], domains: Sequence[str], generalist: int) -> tuple[Any, dict[str, int], dict[str, Any]]:
    """Train the Table-4 router on the training prompts of the pool's expert domains."""
    from hedgespec.selectors.router import train_router

    rcfg = dict(cfg.get("router") or {})
    experts = {d: i for i, d in enumerate(domains) if i != generalist and d != "general"}
    if len(experts) < 2:
        raise ValueError(f"selector=router needs at least two expert domains in the pool, got {sorted(experts)} "
                         f"(drafter domains {list(domains)}; map drafter names to domains with drafter_domains)")
    n = rcfg.get("max_train_per_domain")
    prompts, labels = [], []
    for d in experts:
        reqs = domain_prompts(cfg["data"], d, n, split=str(rcfg.get("split", "train")))
        prompts += [r.prompt for r in reqs]
        labels += [d] * len(reqs)
    t0 = time.perf_counter()
    clf = train_router(prompts, labels, seed=int(cfg.get("seed", 0)))
    info = {"classes": sorted(experts), "n_train": len(prompts), "train_s": time.perf_counter() - t0,
            "classifier": "tfidf(1-2 grams)+logistic_regression"}
    return clf, experts, info


def make_bench_selector(cfg: Mapping[str, Any], names: Sequence[str], domains: Sequence[str]) -> tuple[Callable[[], Any], dict[str, Any]]:
    """A factory of fresh selectors for this run and side info (resolved index, router training)."""
    from hedgespec.selectors import make_selector

    check_selector_config(cfg)
    sel = dict(cfg["selector"])
    name = sel["name"]
    kw = {k: v for k, v in sel.items() if k not in _BENCH_KEYS}
    info: dict[str, Any] = {}
    if "seed" in kw:  # a sweep's seed=<s> moves every seeded selector's RNG (selector.seed is the offset)
        kw["seed"] = int(kw["seed"] or 0) + int(cfg.get("seed", 0))
    if cfg.get("fixed"):
        kw["index"] = resolve_drafter(str(cfg["fixed"]), names, domains, "fixed")
    elif sel.get("drafter") is not None:
        kw["index"] = resolve_drafter(sel["drafter"], names, domains, "selector.drafter")
    if name == "fixed":
        idx = kw.get("index", 0)
        if not isinstance(idx, int) or not 0 <= idx < len(names):
            raise ValueError(f"selector.index={idx!r} is out of range for the pool {list(names)}")
        info["index"] = idx
    if name == "router":
        gen = generalist_index(cfg["pool"], names, domains)
        clf, mapping, info["router"] = router_classifier(cfg, domains, gen)
        kw = {"classifier": clf, "drafter_of_domain": mapping, "fallback": gen}
    make_selector(name, **kw)  # fail fast on bad arguments
    return (lambda: make_selector(name, **kw)), info


# -------------------------------------------------------------------------------------- engines
def encode_prompt(tokenizer: Any, prompt: str, chat_template: bool, max_tokens: int) -> tuple[list[int], bool]:
    """Token ids of a prompt (chat template with the generation prompt when asked); keeps the last ``max_tokens``."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    ids = [int(i) for i in ids]
    if len(ids) > max_tokens:
        return ids[-max_tokens:], True
    return ids, False


class EngineRunner:
    """Batch-1 requests through the reference engine; one engine per run, fresh selector state per request."""

    def __init__(self, cfg: Mapping[str, Any], model: Any, tokenizer: Any, drafters: Sequence[Any],
                 selector_factory: Callable[[], Any]) -> None:
        from hedgespec.engine import SpeculativeEngine

        self.cfg, self.model, self.tokenizer, self.drafters = cfg, model, tokenizer, list(drafters)
        self.n = len(self.drafters)
        self.sel_name = str(cfg["selector"]["name"])
        self.eos = getattr(tokenizer, "eos_token_id", None) if cfg.get("stop_at_eos", True) else None
        self.kw = dict(mode=str(cfg.get("mode", "chain")), k=int(cfg.get("k", 4)), topk=int(cfg.get("topk", 4)),
                       num_draft_tokens=int(cfg.get("num_draft_tokens", 16)), eos_token_id=self.eos)
        self.engine = SpeculativeEngine(model, self.drafters, selector_factory(), **self.kw)
        self._probe: Any = None
        self._rid: Any = 0
        self.temperature = float(cfg.get("temperature", 0.0))
        ctx_len = int(self.engine.target.max_positions)
        self.max_new = int(cfg["max_new_tokens"])
        self.max_prompt = min(int(cfg.get("max_prompt_tokens", 256)), ctx_len - self.max_new - self.kw["k"] - 2)
        if self.max_prompt < 1:
            raise ValueError(f"max_new_tokens={self.max_new} leaves no room for a prompt in the target context ({ctx_len})")

    def _gen_kw(self, j: int) -> dict[str, Any]:
        return dict(temperature=self.temperature, top_p=float(self.cfg.get("top_p", 1.0)), top_k=int(self.cfg.get("top_k", 0)),
                    seed=int(self.cfg.get("seed", 0)) * 100_003 + j)

    def oracle(self, ids: Any, j: int, trace_path: str | None = None) -> tuple[int, list[float]]:
        """Best fixed drafter in hindsight by MAT, and every fixed drafter's MAT (SPEC §6 Oracle).

        Greedy: one full-counterfactual pass (appended to ``trace_path`` when given: the exact replay table).
        """
        from hedgespec.engine import SpeculativeEngine
        from hedgespec.selectors import make_selector
        from hedgespec.sim.greedy import best_fixed_mat
        from hedgespec.types import RequestContext

        rid = self._rid
        if self.temperature <= 0:  # greedy: one full-counterfactual pass is exact for every drafter
            if self._probe is None:
                self._probe = SpeculativeEngine(self.model, self.drafters, make_selector("fixed", index=0),
                                                full_counterfactual=True, **self.kw)
            self._probe.generate(ids, self.max_new, ctx=RequestContext(request_id=rid), trace_path=trace_path, **self._gen_kw(j))
            best, mats = best_fixed_mat(self._probe.last_trace.runs, self.kw["k"])
            return int(best), [float(m) for m in mats]
        mats = []
        for i in range(self.n):
            eng = SpeculativeEngine(self.model, self.drafters, make_selector("fixed", index=i), **self.kw)
            _, st = eng.generate(ids, self.max_new, **self._gen_kw(j))
            mats.append(st.mat)
        return max(range(self.n), key=lambda i: mats[i]), mats

    def run_one(self, req: BenchRequest, j: int, need_oracle: bool, save_rounds: bool, trace_path: str | None) -> dict[str, Any]:
        import torch

        from hedgespec.types import RequestContext

        ids_list, truncated = encode_prompt(self.tokenizer, req.prompt, bool(self.cfg.get("chat_template", True)), self.max_prompt)
        ids = torch.tensor(ids_list, dtype=torch.long)
        best = mats = None
        oracle_s = 0.0
        if need_oracle:
            t = time.perf_counter()
            self._rid = req.request_id
            best, mats = self.oracle(ids, j, trace_path)
            oracle_s = time.perf_counter() - t
        ctx = RequestContext(request_id=req.request_id, prompt=req.prompt, domain=req.domain, best_drafter=best)
        t0 = time.perf_counter()
        _, stats = self.engine.generate(ids, self.max_new, ctx=ctx, **self._gen_kw(j))
        wall = time.perf_counter() - t0
        tr = self.engine.last_trace
        extra: dict[str, Any] = {"prompt_tokens": len(ids_list), "truncated": truncated, "oracle_s": oracle_s}
        if mats is not None:
            extra.update(oracle_drafter=best, oracle_mat=mats[best], fixed_mats=mats)
        if "predicted_domain" in stats.selector_state:
            extra["predicted_domain"] = stats.selector_state["predicted_domain"]
        return request_metrics(
            request_id=req.request_id, domain=req.domain, generated=stats.generated, rounds=stats.rounds, wall_s=wall,
            histogram=stats.histogram(self.n), timings=stats.timings, gamma=tr.gamma, trace_rounds=tr.rounds,
            accepted=stats.accepted_per_round, chosen=stats.chosen, weights=[r.get("weights") for r in tr.rounds],
            save_rounds=save_rounds, **extra,
        )


class ServerRunner:
    """Requests to a running HedgeSpec SGLang server's native ``/generate`` (optionally concurrent)."""

    def __init__(self, cfg: Mapping[str, Any], tokenizer: Any, n_drafters: int | None = None) -> None:
        b = cfg["backend"]
        self.cfg, self.tokenizer = cfg, tokenizer
        self.url = str(b.get("url") or "http://127.0.0.1:30000").rstrip("/")
        self.timeout = float(b.get("timeout_s", 600))
        self.concurrency = int(b.get("concurrency", 1))
        self.check_selector = bool(b.get("check_selector", True))
        self.n = n_drafters
        name = cfg["selector"]["name"]
        if name in ("router", "oracle"):
            raise ValueError(f"selector={name} is not available with backend=server: the server's selector is fixed at launch "
                             "and its worker receives no per-request prompt/best drafter; use backend=engine")

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.url + "/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as fh:
                return json.loads(fh.read())
        except urllib.error.URLError as err:
            raise ValueError(f"backend=server: cannot reach {self.url}/generate ({err}); start it with "
                             f"`python serve/launch.py pool=<pool> selector=<s>` or set backend.url") from err

    def run_one(self, req: BenchRequest, j: int, need_oracle: bool, save_rounds: bool, trace_path: str | None) -> dict[str, Any]:
        cfg = self.cfg
        if self.tokenizer is not None and cfg.get("chat_template", True) and getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": req.prompt}], add_generation_prompt=True, tokenize=False)
        else:
            text = req.prompt
        sp = {"temperature": float(cfg.get("temperature", 0.0)), "top_p": float(cfg.get("top_p", 1.0)),
              "max_new_tokens": int(cfg["max_new_tokens"]), "ignore_eos": not cfg.get("stop_at_eos", True)}
        t0 = time.perf_counter()
        out = self._post({"text": text, "sampling_params": sp})
        wall = time.perf_counter() - t0
        m = out.get("meta_info") or {}
        if "completion_tokens" not in m:
            raise ValueError(f"backend=server: {self.url} returned no meta_info.completion_tokens: {str(out)[:200]}")
        want = str(cfg["selector"]["name"])
        served = (m.get("hedgespec_selector") or [None])[0]
        if self.check_selector and served is not None and served != want:
            raise ValueError(f"backend=server: {self.url} serves selector {served!r} but selector={want} was requested; "
                             f"relaunch `python serve/launch.py ... selector={want}`")
        gen = int(m["completion_tokens"])
        rounds = int(m.get("spec_verify_ct") or 0)
        hist = [int(h) for h in (m.get("hedgespec_histogram") or [])]
        if not hist:
            hist = [rounds]  # stock EAGLE-3 (selector=eagle): one drafter
        w = m.get("hedgespec_weights") or None
        mat = float(m["spec_accept_length"]) if m.get("spec_accept_length") else (gen / rounds if rounds else 0.0)
        rec = request_metrics(request_id=req.request_id, domain=req.domain, generated=gen, rounds=rounds, wall_s=wall,
                              histogram=hist, mat=mat, weights=[w] if w else None, save_rounds=save_rounds,
                              prompt_tokens=int(m.get("prompt_tokens", 0)), served_selector=served)
        rec["target_forwards"] = rounds + 1
        rec["target_forwards_per_token"] = (rounds + 1) / max(gen, 1)  # SGLang counts the prefill token in completion
        return rec


# ------------------------------------------------------------------------------------------ run
def portable_paths(obj: Any) -> Any:
    """Replace machine-local path prefixes in a JSON-like tree (home → ``~``, temp dir → ``$TMPDIR``, the
    working directory → ``.``) so committed results carry no paths of the machine that produced them."""
    import tempfile

    prefixes = [(os.getcwd().rstrip("/") + "/", "./"), (tempfile.gettempdir().rstrip("/") + "/", "$TMPDIR/"),
                (os.path.expanduser("~").rstrip("/") + "/", "~/")]
    if isinstance(obj, dict):
        return {k: portable_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable_paths(v) for v in obj]
    if isinstance(obj, str):
        import re

        for old, new in prefixes:  # anywhere a path starts: the whole string, or after '=', a space, a quote, ...
            if old != "/":
                obj = re.sub(r"(?<![\w./~$-])" + re.escape(old), lambda _m, n=new: n, obj)
    return obj


def _env(cfg: Mapping[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        env["loadavg"] = list(os.getloadavg())
    except OSError:  # pragma: no cover
        pass
    if "torch" in sys.modules:
        import torch

        env.update(torch=torch.__version__, threads=torch.get_num_threads(), cuda=torch.cuda.is_available())
    return env


def default_command(cfg: Mapping[str, Any]) -> str:
    parts = [f"pool={cfg['pool'].get('name')}", f"selector={cfg.get('selector_choice') or cfg['selector'].get('label') or cfg['selector']['name']}",
             f"workload={cfg['workload']['name']}", f"backend={cfg['backend']['name']}"]
    if cfg.get("fixed"):
        parts.append(f"fixed={cfg['fixed']}")
    return "python scripts/bench.py " + " ".join(parts)


def run_bench(cfg: Mapping[str, Any], model: Any = None, tokenizer: Any = None, drafters: Sequence[Any] | None = None,
              command: str | None = None, progress: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run ``cfg['selector']`` over ``cfg['workload']`` on ``cfg['backend']``; returns the v1 result dict.

    ``model``/``tokenizer``/``drafters`` may be injected (tests, notebooks); otherwise they are built from
    ``cfg['target']`` and ``cfg['pool']``. Writes nothing: :func:`hedgespec.bench.report.write_run` does.
    """
    backend = (cfg.get("backend") or {}).get("name")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected backend=engine or backend=server")
    check_selector_config(cfg)
    man = (cfg.get("pool") or {}).get("manifest")
    if backend == "engine" and drafters is None and man and not Path(man).is_file():
        raise ValueError(f"pool={cfg['pool'].get('name')}: its manifest {man} does not exist yet; train the pool first "
                         "(train/run.py, docs/training.md) or use pool=tiny")
    timing: dict[str, float] = {}
    t = time.perf_counter()
    requests = load_workload(cfg["workload"], cfg["data"], int(cfg.get("seed", 0)))
    timing["workload_s"] = time.perf_counter() - t
    sel_name = cfg["selector"]["name"]
    trace_path = cfg.get("trace") or None
    need_oracle = sel_name == "oracle" or bool(cfg.get("oracle_probe")) or trace_path is not None
    if trace_path is not None and float(cfg.get("temperature", 0.0)) > 0:
        raise ValueError("trace=<path> records full-counterfactual replay tables, which are exact only for greedy "
                         "decoding: use temperature=0")
    info: dict[str, Any] = {}
    runner: Any
    if backend == "engine":
        import torch

        if (cfg["backend"].get("threads")):
            torch.set_num_threads(int(cfg["backend"]["threads"]))
        t = time.perf_counter()
        if model is None:
            from hedgespec.models import load_target

            model, tokenizer = load_target(dict(cfg["target"]))
        timing["target_s"] = time.perf_counter() - t
        t = time.perf_counter()
        if drafters is None:
            drafters, names, domains = build_pool(cfg, model, tokenizer)
        else:
            names = [d.name for d in drafters]
            domains = drafter_domains(cfg["pool"], names, cfg.get("drafter_domains"))
        timing["pool_s"] = time.perf_counter() - t
        factory, info = make_bench_selector(cfg, names, domains)
        runner = EngineRunner(cfg, model, tokenizer, drafters, factory)
    else:
        if need_oracle:
            raise ValueError("oracle_probe / selector=oracle need backend=engine (the server reports no counterfactual trace)")
        if tokenizer is None and cfg.get("chat_template", True) and cfg.get("target"):
            from hedgespec.models import load_tokenizer

            tokenizer = load_tokenizer(dict(cfg["target"]))
        names, mdom = server_pool_names(cfg)
        domains = drafter_domains(cfg["pool"], names, cfg.get("drafter_domains"), mdom)
        runner = ServerRunner(cfg, tokenizer, len(names))
    label = selector_label(cfg, names)
    save_rounds = bool(cfg.get("save_rounds", True))
    t = time.perf_counter()
    records: list[dict[str, Any]] = []
    conc = int(cfg["backend"].get("concurrency", 1)) if backend == "server" else 1
    if conc > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(conc) as ex:
            records = list(ex.map(lambda a: runner.run_one(a[1], a[0], need_oracle, save_rounds, trace_path), enumerate(requests)))
    else:
        for j, req in enumerate(requests):
            rec = runner.run_one(req, j, need_oracle, save_rounds, trace_path)
            records.append(rec)
            if progress is not None:
                progress(j, rec)
    timing["run_s"] = time.perf_counter() - t
    if backend == "server":
        n_hist = max(len(r["histogram"]) for r in records)
        if n_hist != len(names):
            names = [f"d{i}" for i in range(n_hist)]
            domains = names
    agg = aggregate(records)
    if backend == "server":
        agg["throughput_tokens_per_s"] = agg["generated"] / timing["run_s"] if timing["run_s"] > 0 else None
        agg["concurrency"] = conc
    router = None
    if sel_name == "router":
        router = dict(info.get("router") or {})
        scored = [r for r in records if r["domain"] in router.get("classes", [])]
        router["n_scored"] = len(scored)
        router["accuracy"] = sum(r.get("predicted_domain") == r["domain"] for r in scored) / len(scored) if scored else None
        router["confusion"] = {}
        for r in records:
            row = router["confusion"].setdefault(r["domain"], {})
            row[str(r.get("predicted_domain"))] = row.get(str(r.get("predicted_domain")), 0) + 1
    resolved = {k: v for k, v in cfg.items() if k != "hydra"}
    return {
        "format": RESULT_FORMAT,
        "version": RESULT_VERSION,
        "command": command or default_command(cfg),
        "selector": label,
        "selector_name": str(sel_name),
        "workload": str(cfg["workload"]["name"]) + (f":{cfg['workload'].get('domain')}" if cfg["workload"]["name"] == "domain" else ""),
        "backend": backend,
        "seed": int(cfg.get("seed", 0)),
        "pool": {"name": str(cfg["pool"].get("name")), "drafters": list(names), "domains": list(domains)},
        "target": str((cfg.get("target") or {}).get("name")),
        "decoding": {"mode": cfg.get("mode", "chain"), "k": int(cfg.get("k", 4)), "topk": int(cfg.get("topk", 4)),
                     "num_draft_tokens": int(cfg.get("num_draft_tokens", 16)), "temperature": float(cfg.get("temperature", 0.0)),
                     "max_new_tokens": int(cfg["max_new_tokens"])},
        "aggregate": agg,
        "per_domain": per_domain(records),
        "router": router,
        "selector_info": {k: v for k, v in info.items() if k != "router"},
        "requests": records,
        "config": portable_paths(json.loads(json.dumps(resolved, default=str))),
        "env": _env(cfg),
        "timing": timing,
    }
