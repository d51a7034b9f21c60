"""Run one selector over one workload on a backend and return a result dict (schema v1, :mod:`.metrics`).

* ``backend=engine``: the reference PyTorch engine (:class:`hedgespec.engine.SpeculativeEngine`), batch 1.
  γ and per-round timings come from the engine's in-memory trace, so regret and selection overhead are exact.
* ``backend=server``: a running HedgeSpec SGLang server (``python serve/launch.py pool=<pool> selector=<s>``)
  through SGLang's native ``/generate``; MAT, rounds and the drafter histogram come from ``meta_info``
  (``spec_accept_length``, ``spec_verify_ct``, ``hedgespec_histogram``); the server reports no γ, so regret and
  overhead are ``null`` there.

Target, pool, selector and decoding settings come from :func:`hedgespec.build.build` (selector resolution:
``drafter:``/``fixed=`` by name or domain, the run seed as selector seed offset, the router trained on the data
recipes; the oracle's best fixed drafter per request from :meth:`hedgespec.build.Built.oracle`). Only the oracle
receives ``RequestContext.best_drafter``'s value from that probe.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

from hedgespec.bench.metrics import RESULT_FORMAT, RESULT_VERSION, aggregate, per_domain, request_metrics
from hedgespec.bench.workloads import BenchRequest, load_workload
from hedgespec.build import (
    PLAIN,
    SELECTOR_CHOICES,
    Built,
    Pool,
    build,
    check_selector_config,
    decoding_of,
    drafter_domains,
    sampling_of,
)
from hedgespec.decoding import SamplingParams
from hedgespec.engine.plain import plain_generate
from hedgespec.io import portable_paths
from hedgespec.models import load_target, load_tokenizer
from hedgespec.models.linear_kernels import onednn_available
from hedgespec.pools import load_pool as load_manifest
from hedgespec.types import RequestContext

BACKENDS = ("engine", "server")
BENCH_SELECTORS = SELECTOR_CHOICES
__all__ = [
    "BACKENDS",
    "BENCH_SELECTORS",
    "EngineRunner",
    "PlainRunner",
    "ServerRunner",
    "encode_prompt",
    "pool_provenance",
    "portable_paths",
    "run_bench",
]


def server_pool_names(cfg: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Drafter names in server order: ``backend.drafters``, else the manifest's, else the inline pool's."""
    if cfg["backend"].get("drafters"):
        return [str(n) for n in cfg["backend"]["drafters"]], {}
    man = cfg["pool"].get("manifest")
    if man and Path(man).is_file():
        m = load_manifest(man)
        return m.names, {d.name: d.domain for d in m.drafters}
    return [str(d.get("name")) for d in cfg["pool"].get("drafters") or []] or ["pool"], {}


def pool_provenance(cfg: Mapping[str, Any]) -> dict[str, Any] | None:
    """What identifies a trained pool's drafters, from its manifest (the manifest and the weights stay outside
    the repository, so a committed result carries this instead): the target's hash and, per drafter, its weights
    hash, data and vocabulary-mapping hashes, training budget, final step and feature key. None for inline pools."""
    man = (cfg.get("pool") or {}).get("manifest")
    if not man or not Path(man).is_file():
        return None
    m = load_manifest(man, check_files=False)
    drafters = []
    for d in m.drafters:
        tr = d.training or {}
        rec = {"name": d.name, "domain": d.domain, "weights_hash": d.weights_hash or None}
        rec.update(data_manifest_hash=d.data_manifest_hash, vocab_mapping_hash=d.vocab_mapping_hash)
        rec.update(draft_vocab_size=d.draft_vocab_size, budget=tr.get("budget"), final_step=tr.get("final_step"))
        rec.update(features=tr.get("features"), **({"lowrank": dict(d.lowrank)} if d.lowrank else {}))
        drafters.append(rec)
    return {"target_hash": m.target.hash, "drafters": drafters}


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


# -------------------------------------------------------------------------------------- engines
def encode_prompt(tokenizer: Any, prompt: str, chat_template: bool, max_tokens: int) -> tuple[list[int], bool]:
    """Token ids of a prompt (chat template with the generation prompt when asked); keeps the last ``max_tokens``."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
    else:
        ids = tokenizer(prompt)["input_ids"]
    ids = [int(i) for i in ids]
    if len(ids) > max_tokens:
        return ids[-max_tokens:], True
    return ids, False


def request_ids(cfg: Mapping[str, Any], tokenizer: Any, req: BenchRequest, max_tokens: int) -> tuple[list[int], bool]:
    """:func:`encode_prompt` of a bench request with the run's ``chat_template`` setting."""
    return encode_prompt(tokenizer, req.prompt, bool(cfg.get("chat_template", True)), max_tokens)


def request_seed(cfg: Mapping[str, Any], j: int) -> int:
    """Request ``j``'s sampling seed, derived from the run seed (speculative and plain decoding alike)."""
    return int(cfg.get("seed", 0)) * 100_003 + j


class EngineRunner:
    """Batch-1 requests through the reference engine; one engine per run, fresh selector state per request."""

    def __init__(self, cfg: Mapping[str, Any], built: Built) -> None:
        self.cfg, self.built = cfg, built
        self.n = built.n
        self.engine = built.engine()
        ctx_len = int(self.engine.target.max_positions)
        self.max_new = int(cfg["max_new_tokens"])
        self.max_prompt = min(
            int(cfg.get("max_prompt_tokens", 256)), ctx_len - self.max_new - built.decoding.num_steps - 2
        )
        if self.max_prompt < 1:
            raise ValueError(
                f"max_new_tokens={self.max_new} leaves no room for a prompt in the target context ({ctx_len})"
            )

    def sampling(self, j: int) -> SamplingParams:
        """Request ``j``'s sampling settings: the run's, with a per-request seed derived from the run seed."""
        return self.built.sampling.with_seed(request_seed(self.cfg, j))

    def plain(self, ids: torch.Tensor, j: int, spec_tokens: list[int] | None = None) -> dict[str, Any]:
        """Plain decoding of the same request right after it (same ids, length, sampling and stopping rule).

        ``plain_generated`` counts like the engine's ``generated``: the tokens after the prefill's first one.
        Under greedy decoding ``matches_plain`` records that the speculative output is the plain one.
        """
        res = plain_generate(self.built.model, ids, self.max_new, self.sampling(j), self.built.eos_token_id)
        rec: dict[str, Any] = {"plain_generated": max(len(res.tokens) - 1, 0), "plain_wall_s": res.wall_s}
        if spec_tokens is not None and self.built.sampling.greedy:
            rec["matches_plain"] = spec_tokens == res.tokens
        return rec

    def warmup(self, req: BenchRequest, tokens: int) -> None:
        """An untimed request of ``tokens`` tokens on ``req``'s prompt, through the engine and (with
        ``plain_baseline``) plain decoding, so that one-time costs (kernel set-up, packed weights, first
        allocations) land on neither side of the timed runs. A copy of the selector runs it: the run's selector
        (e.g. a running prior over earlier requests) never sees the warm-up."""
        ids_list, _ = request_ids(self.cfg, self.built.tokenizer, req, self.max_prompt)
        ids, n = torch.tensor(ids_list, dtype=torch.long), min(tokens, self.max_new)
        ctx = RequestContext(request_id="warmup", prompt=req.prompt, domain=req.domain, best_drafter=0)
        selector = self.engine.selector
        self.engine.selector = copy.deepcopy(selector)
        try:
            self.engine.generate(ids, n, self.sampling(0), ctx=ctx)
        finally:
            self.engine.selector = selector
        if self.cfg.get("plain_baseline", True):
            plain_generate(self.built.model, ids, n, self.sampling(0), self.built.eos_token_id)

    def run_one(
        self, req: BenchRequest, j: int, need_oracle: bool, save_rounds: bool, trace_path: str | None
    ) -> dict[str, Any]:
        ids_list, truncated = request_ids(self.cfg, self.built.tokenizer, req, self.max_prompt)
        ids = torch.tensor(ids_list, dtype=torch.long)
        best = mats = None
        t = time.perf_counter()
        if need_oracle:
            best, mats = self.built.oracle(ids, self.max_new, self.sampling(j), req.request_id, trace_path)
        oracle_s = time.perf_counter() - t if need_oracle else 0.0
        ctx = RequestContext(request_id=req.request_id, prompt=req.prompt, domain=req.domain, best_drafter=best)
        t0 = time.perf_counter()
        out, stats = self.engine.generate(ids, self.max_new, self.sampling(j), ctx=ctx)
        wall = time.perf_counter() - t0
        tr = self.engine.last_trace
        extra: dict[str, Any] = {"prompt_tokens": len(ids_list), "truncated": truncated, "oracle_s": oracle_s}
        # heads that raised or produced non-finite values and were dropped for this request (the engine warns)
        extra["dropped"] = list(tr.summary.get("dropped") or [])
        # rounds whose pool evaluation ran (a skipped one, label-efficient or a baseline's deployed cost, says so)
        extra["evaluated_rounds"] = sum(1 for r in tr.rounds if r.get("evaluated", True))
        if self.cfg.get("plain_baseline", True):
            extra.update(self.plain(ids, j, out[len(ids_list) :].tolist()))
        if mats is not None:
            extra.update(oracle_drafter=best, oracle_mat=mats[best], fixed_mats=mats)
        if "predicted_domain" in stats.selector_state:
            extra["predicted_domain"] = stats.selector_state["predicted_domain"]
        return request_metrics(
            request_id=req.request_id,
            domain=req.domain,
            generated=stats.generated,
            rounds=stats.rounds,
            wall_s=wall,
            histogram=stats.histogram(self.n),
            timings=stats.timings,
            gamma=tr.gamma,
            trace_rounds=tr.rounds,
            accepted=stats.accepted_per_round,
            chosen=stats.chosen,
            weights=[r.get("weights") for r in tr.rounds],
            save_rounds=save_rounds,
            **extra,
        )


class PlainRunner:
    """``selector=none``: the target alone (plain autoregressive decoding), batch 1, same requests and settings."""

    def __init__(self, cfg: Mapping[str, Any], model: Any, tokenizer: Any) -> None:
        self.cfg, self.tokenizer = cfg, tokenizer
        self.model = model
        self.sampling_of_run = sampling_of(cfg)
        self.eos = getattr(tokenizer, "eos_token_id", None) if cfg.get("stop_at_eos", True) else None
        self.max_new = int(cfg["max_new_tokens"])
        ctx_len = int(getattr(getattr(model, "config", None), "max_position_embeddings", 1 << 30) or (1 << 30))
        self.max_prompt = min(int(cfg.get("max_prompt_tokens", 256)), ctx_len - self.max_new - 2)
        if self.max_prompt < 1:
            raise ValueError(
                f"max_new_tokens={self.max_new} leaves no room for a prompt in the target context ({ctx_len})"
            )

    def warmup(self, req: BenchRequest, tokens: int) -> None:
        """An untimed plain decoding of ``tokens`` tokens on ``req``'s prompt (as :meth:`EngineRunner.warmup`)."""
        ids_list, _ = request_ids(self.cfg, self.tokenizer, req, self.max_prompt)
        ids = torch.tensor(ids_list, dtype=torch.long)
        plain_generate(self.model, ids, min(tokens, self.max_new), self.sampling(0), self.eos)

    def sampling(self, j: int) -> SamplingParams:
        """Request ``j``'s sampling settings (as :meth:`EngineRunner.sampling`)."""
        return self.sampling_of_run.with_seed(request_seed(self.cfg, j))

    def run_one(
        self, req: BenchRequest, j: int, need_oracle: bool, save_rounds: bool, trace_path: str | None
    ) -> dict[str, Any]:
        ids_list, truncated = request_ids(self.cfg, self.tokenizer, req, self.max_prompt)
        res = plain_generate(
            self.model, torch.tensor(ids_list, dtype=torch.long), self.max_new, self.sampling(j), self.eos
        )
        gen = max(len(res.tokens) - 1, 0)  # as the engine counts: after the prefill's first token
        rec = request_metrics(
            request_id=req.request_id,
            domain=req.domain,
            generated=gen,
            rounds=gen,
            mat=1.0,
            wall_s=res.wall_s,
            histogram=[],
            save_rounds=save_rounds,
            prompt_tokens=len(ids_list),
            truncated=truncated,
            plain_generated=gen,
            plain_wall_s=res.wall_s,
        )
        rec["target_forwards_per_token"] = 1.0
        return rec


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
            raise ValueError(
                f"selector={name} is not available with backend=server: the server's selector is fixed at launch "
                "and its worker receives no per-request prompt/best drafter; use backend=engine"
            )

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + "/generate", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as fh:
                return json.loads(fh.read())
        except urllib.error.URLError as err:
            raise ValueError(
                f"backend=server: cannot reach {self.url}/generate ({err}); start it with "
                f"`python serve/launch.py pool=<pool> selector=<s>` or set backend.url"
            ) from err

    def _payload(self, req: BenchRequest) -> dict[str, Any]:
        """SGLang's native ``/generate`` body: the prompt (chat template applied when asked) and sampling params."""
        cfg, tok = self.cfg, self.tokenizer
        text = req.prompt
        if tok is not None and cfg.get("chat_template", True) and getattr(tok, "chat_template", None):
            msgs = [{"role": "user", "content": req.prompt}]
            text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        smp = sampling_of(cfg)
        sp = {
            "temperature": smp.temperature,
            "top_p": smp.top_p,
            "max_new_tokens": int(cfg["max_new_tokens"]),
            "ignore_eos": not cfg.get("stop_at_eos", True),
        }
        return {"text": text, "sampling_params": sp}

    def run_one(
        self, req: BenchRequest, j: int, need_oracle: bool, save_rounds: bool, trace_path: str | None
    ) -> dict[str, Any]:
        cfg = self.cfg
        t0 = time.perf_counter()
        out = self._post(self._payload(req))
        wall = time.perf_counter() - t0
        m = out.get("meta_info") or {}
        if "completion_tokens" not in m:
            raise ValueError(f"backend=server: {self.url} returned no meta_info.completion_tokens: {str(out)[:200]}")
        want = str(cfg["selector"]["name"])
        served = (m.get("hedgespec_selector") or [None])[0]
        if self.check_selector and served is not None and served != want:
            raise ValueError(
                f"backend=server: {self.url} serves selector {served!r} but selector={want} was requested; "
                f"relaunch `python serve/launch.py ... selector={want}`"
            )
        gen = int(m["completion_tokens"])
        rounds = int(m.get("spec_verify_ct") or 0)
        hist = [int(h) for h in (m.get("hedgespec_histogram") or [])]
        if not hist:
            hist = [rounds]  # stock EAGLE-3 (selector=eagle): one drafter
        w = m.get("hedgespec_weights") or None
        mat = float(m["spec_accept_length"]) if m.get("spec_accept_length") else (gen / rounds if rounds else 0.0)
        rec = request_metrics(
            request_id=req.request_id,
            domain=req.domain,
            generated=gen,
            rounds=rounds,
            wall_s=wall,
            histogram=hist,
            mat=mat,
            weights=[w] if w else None,
            save_rounds=save_rounds,
            prompt_tokens=int(m.get("prompt_tokens", 0)),
            served_selector=served,
        )
        rec["target_forwards"] = rounds + 1
        rec["target_forwards_per_token"] = (rounds + 1) / max(gen, 1)  # SGLang counts the prefill token in completion
        # drafters the server had dropped (raised / non-finite) by this request's last round, as the engine records
        rec["dropped"] = [str(d) for d in (m.get("hedgespec_dropped") or [])]
        return rec


# ------------------------------------------------------------------------------------------ run
def _env(cfg: Mapping[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        env["loadavg"] = list(os.getloadavg())
    except OSError:  # pragma: no cover
        pass
    env.update(torch=torch.__version__, threads=torch.get_num_threads(), cuda=torch.cuda.is_available())
    env["onednn"] = onednn_available()  # with target.linear_kernels=auto: packed CPU linear weights when True
    return env


def default_command(cfg: Mapping[str, Any]) -> str:
    parts = [
        f"pool={cfg['pool'].get('name')}",
        f"selector={cfg.get('selector_choice') or cfg['selector'].get('label') or cfg['selector']['name']}",
        f"workload={cfg['workload']['name']}",
        f"backend={cfg['backend']['name']}",
    ]
    if cfg.get("fixed"):
        parts.append(f"fixed={cfg['fixed']}")
    return "python scripts/bench.py " + " ".join(parts)


def _check_run(cfg: Mapping[str, Any], drafters: Any) -> str:
    """Pool-independent checks before any work; returns the backend name."""
    backend = (cfg.get("backend") or {}).get("name")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected backend=engine or backend=server")
    warm = cfg.get("warmup_tokens", 0)
    if warm is not None and (isinstance(warm, bool) or not isinstance(warm, int) or warm < 0):
        raise ValueError(f"warmup_tokens must be an int >= 0 (0: no warm-up request), got {warm!r}")
    check_selector_config(cfg)
    if cfg["selector"]["name"] == PLAIN:
        if backend != "engine" or _needs_oracle(cfg):
            raise ValueError(
                "selector=none decodes with the target alone in this process: use backend=engine without "
                "oracle_probe/trace (for plain SGLang, serve the target without --speculative-algorithm)"
            )
        return backend
    man = (cfg.get("pool") or {}).get("manifest")
    if backend == "engine" and drafters is None and man and not Path(man).is_file():
        raise ValueError(
            f"pool={cfg['pool'].get('name')}: its manifest {man} does not exist yet; train the pool first "
            "(train/run.py, docs/training.md) or use pool=tiny"
        )
    if cfg.get("trace") and sampling_of(cfg).temperature > 0:
        raise ValueError(
            "trace=<path> records full-counterfactual replay tables, which are exact only for greedy "
            "decoding: use sampling.temperature=0"
        )
    if backend == "server" and _needs_oracle(cfg):
        raise ValueError(
            "oracle_probe / selector=oracle need backend=engine (the server reports no counterfactual trace)"
        )
    return backend


def _needs_oracle(cfg: Mapping[str, Any]) -> bool:
    return cfg["selector"]["name"] == "oracle" or bool(cfg.get("oracle_probe")) or bool(cfg.get("trace"))


def _engine_runner(
    cfg: Mapping[str, Any], model: Any, tokenizer: Any, drafters: Any, timing: dict[str, float]
) -> tuple[Any, Pool, dict[str, Any]]:
    if cfg["backend"].get("threads"):
        torch.set_num_threads(int(cfg["backend"]["threads"]))
    built = build(cfg, model, tokenizer, drafters)
    timing.update(built.timing)
    return EngineRunner(cfg, built), built.pool, built.selector_info


def _plain_runner(
    cfg: Mapping[str, Any], model: Any, tokenizer: Any, timing: dict[str, float]
) -> tuple[Any, Pool, dict[str, Any]]:
    if cfg["backend"].get("threads"):
        torch.set_num_threads(int(cfg["backend"]["threads"]))
    t = time.perf_counter()
    if model is None:
        model, tokenizer = load_target(dict(cfg["target"]))
    timing["target_s"] = time.perf_counter() - t
    return PlainRunner(cfg, model, tokenizer), Pool([], [], []), {}


def _server_runner(cfg: Mapping[str, Any], tokenizer: Any) -> tuple[Any, Pool, dict[str, Any]]:
    if tokenizer is None and cfg.get("chat_template", True) and cfg.get("target"):
        tokenizer = load_tokenizer(dict(cfg["target"]))
    names, mdom = server_pool_names(cfg)
    domains = drafter_domains(cfg["pool"], names, cfg.get("drafter_domains"), mdom)
    return ServerRunner(cfg, tokenizer, len(names)), Pool([], names, domains), {}


def _run_requests(
    cfg: Mapping[str, Any],
    runner: Any,
    requests: Sequence[BenchRequest],
    conc: int,
    progress: Callable[[int, dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    need_oracle, save_rounds, trace_path = (
        _needs_oracle(cfg),
        bool(cfg.get("save_rounds", True)),
        cfg.get("trace") or None,
    )
    if conc > 1:  # progress(k, record) in completion order (k counts finished requests: loggers need rising steps)
        with ThreadPoolExecutor(conc) as ex:
            futs = [
                ex.submit(runner.run_one, req, j, need_oracle, save_rounds, trace_path)
                for j, req in enumerate(requests)
            ]
            for k, fut in enumerate(as_completed(futs)):
                if progress is not None:
                    progress(k, fut.result())
            return [f.result() for f in futs]
    records = []
    for j, req in enumerate(requests):
        records.append(runner.run_one(req, j, need_oracle, save_rounds, trace_path))
        if progress is not None:
            progress(j, records[-1])
    return records


def _router_summary(info: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Router accuracy over the requests of its classes and its confusion table (domain → predicted)."""
    router = dict(info.get("router") or {})
    scored = [r for r in records if r["domain"] in router.get("classes", [])]
    router["n_scored"] = len(scored)
    router["accuracy"] = sum(r.get("predicted_domain") == r["domain"] for r in scored) / len(scored) if scored else None
    router["confusion"] = {}
    for r in records:
        row = router["confusion"].setdefault(r["domain"], {})
        row[str(r.get("predicted_domain"))] = row.get(str(r.get("predicted_domain")), 0) + 1
    return router


def _decoding_record(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The result's ``decoding`` block: the round shape, the sampling settings and the length budget."""
    dec, smp = decoding_of(cfg), sampling_of(cfg)
    return {
        **dec.to_dict(),
        "temperature": smp.temperature,
        "top_p": smp.top_p,
        "top_k": smp.top_k,
        "max_new_tokens": int(cfg["max_new_tokens"]),
    }


def _result(
    cfg: Mapping[str, Any],
    backend: str,
    pool: Pool,
    records: list[dict[str, Any]],
    agg: dict[str, Any],
    info: dict[str, Any],
    timing: dict[str, float],
    command: str | None,
) -> dict[str, Any]:
    workload = str(cfg["workload"]["name"])
    resolved = {k: v for k, v in cfg.items() if k != "hydra"}
    return {
        "format": RESULT_FORMAT,
        "version": RESULT_VERSION,
        "command": command or default_command(cfg),
        "selector": selector_label(cfg, pool.names),
        "selector_name": str(cfg["selector"]["name"]),
        "workload": workload + (f":{cfg['workload'].get('domain')}" if workload == "domain" else ""),
        "backend": backend,
        "seed": int(cfg.get("seed", 0)),
        "pool": {
            "name": str(cfg["pool"].get("name")),
            "drafters": list(pool.names),
            "domains": list(pool.domains),
            "provenance": pool_provenance(cfg),
        },
        "target": str((cfg.get("target") or {}).get("name")),
        "decoding": _decoding_record(cfg),
        "aggregate": agg,
        "per_domain": per_domain(records),
        "router": _router_summary(info, records) if cfg["selector"]["name"] == "router" else None,
        "selector_info": {k: v for k, v in info.items() if k != "router"},
        "requests": records,
        "config": portable_paths(json.loads(json.dumps(resolved, default=str))),
        "env": _env(cfg),
        "timing": timing,
    }


def run_bench(
    cfg: Mapping[str, Any],
    model: Any = None,
    tokenizer: Any = None,
    drafters: Sequence[Any] | None = None,
    command: str | None = None,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run ``cfg['selector']`` over ``cfg['workload']`` on ``cfg['backend']``; returns the v1 result dict.

    ``model``/``tokenizer``/``drafters`` may be injected (tests, notebooks); otherwise they are built from
    ``cfg['target']`` and ``cfg['pool']`` by :func:`hedgespec.build.build`. Writes nothing:
    :func:`hedgespec.bench.report.write_run` does.
    """
    backend = _check_run(cfg, drafters)
    timing: dict[str, float] = {}
    t = time.perf_counter()
    requests = load_workload(cfg["workload"], cfg["data"], int(cfg.get("seed", 0)))
    timing["workload_s"] = time.perf_counter() - t
    if cfg["selector"]["name"] == PLAIN:
        runner, pool, info = _plain_runner(cfg, model, tokenizer, timing)
    elif backend == "engine":
        runner, pool, info = _engine_runner(cfg, model, tokenizer, drafters, timing)
    else:
        runner, pool, info = _server_runner(cfg, tokenizer)
    conc = int(cfg["backend"].get("concurrency", 1)) if backend == "server" else 1
    warm = int(cfg.get("warmup_tokens") or 0)
    if warm and requests and hasattr(runner, "warmup"):  # the server warms itself up at start
        t = time.perf_counter()
        runner.warmup(requests[0], warm)
        timing["warmup_s"] = time.perf_counter() - t
    t = time.perf_counter()
    records = _run_requests(cfg, runner, requests, conc, progress)
    timing["run_s"] = time.perf_counter() - t
    if backend == "server" and max(len(r["histogram"]) for r in records) != len(pool.names):
        names = [f"d{i}" for i in range(max(len(r["histogram"]) for r in records))]
        pool = Pool([], names, names)
    agg = aggregate(records)
    if backend == "server":
        agg["throughput_tokens_per_s"] = agg["generated"] / timing["run_s"] if timing["run_s"] > 0 else None
        agg["concurrency"] = conc
    return _result(cfg, backend, pool, records, agg, info, timing, command)
