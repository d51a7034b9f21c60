"""Benchmark workloads: streams of (prompt, domain) requests built from the data recipes' held-out eval splits.

Workloads (``conf/workload/*.yaml``, key ``name``):

* ``mixed``: a shuffled stream of the seven training domains' held-out eval prompts (``n_per_domain`` each);
  the setting of the paper's main comparison (HedgeSpec vs EAGLE-3 and the bandit baselines).
* ``domain``: the held-out eval prompts of one domain (``domain=<d>``), e.g. for the Table-1 analog.
* ``ood``: GSM8K + HumanEval eval prompts (no drafter was trained on them; offline GSM8K keeps only the originals
  of the math recipe's held-out templates, data_recipes/gsm8k.py).
* ``shift``: the ``mixed`` stream rewritten by the prompt-variant transform (``data_recipes.apply_variant``,
  paper Table 4): same tasks and domains, different surface form.
* ``prompts``: an inline list (``prompts: [{prompt, domain}, ...]`` or plain strings) for smoke runs.

``draw`` picks which ``n_per_domain`` prompts of a domain's eval split a run uses: ``first`` (default) the first
ones in file order, ``seeded`` a sample drawn with the run's ``seed`` (without replacement, then in file order), so
runs at seeds 0, 1, 2 are independent draws of requests from the same split and their spread is a sampling
interval, not only a reordering of the same requests.

Prompts are read from ``<data.dir>/<data.source>/<domain>/eval.jsonl`` (written by
``python scripts/prepare_data.py``); a missing domain directory is prepared on demand when
``data.prepare_missing`` is true.  An empty workload is an error, never a silent zero-request benchmark.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_recipes import EVAL_ONLY_DOMAINS, TRAIN_DOMAINS, apply_variant, prepare

WORKLOADS = ("mixed", "domain", "ood", "shift", "prompts")
#: the eval-only (out-of-domain) domains; ``TRAIN_DOMAINS`` (imported above) are the seven with a trained expert
OOD_DOMAINS: tuple[str, ...] = EVAL_ONLY_DOMAINS


@dataclass(frozen=True)
class BenchRequest:
    """One benchmark request: a stable id, the user prompt text and the workload's domain label."""

    request_id: str
    prompt: str
    domain: str


def domain_eval_path(data_dir: str | Path, source: str, domain: str, split: str = "eval") -> Path:
    return Path(data_dir) / source / domain / f"{split}.jsonl"


def read_prompts(path: Path) -> list[tuple[str, str]]:
    """(id, first user turn) of every record of a SpecForge conversation JSONL file."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            rec = json.loads(raw)
            turns = [t for t in rec.get("conversations", []) if t.get("role") == "user"]
            if not turns:
                raise ValueError(f"{path}:{n}: record {rec.get('id')!r} has no user turn")
            out.append((str(rec.get("id", f"{path.parent.name}-{n}")), str(turns[0]["content"])))
    return out


def _ensure_domain(data: Mapping[str, Any], domain: str, split: str = "eval") -> Path:
    path = domain_eval_path(data["dir"], data["source"], domain, split)
    if path.is_file():
        return path
    if data.get("prepare_missing") and not path.parent.exists():
        print(f"[bench] {path.parent} is missing; preparing domain={domain} (source={data['source']})")
        prepare(domain, source=data["source"], data_dir=data["dir"], seed=int(data.get("seed", 0)))
        if path.is_file():
            return path
    raise ValueError(
        f"the bench needs {path}, which does not exist; build it with "
        f"`python scripts/prepare_data.py domain={domain} source={data['source']} data_dir={data['dir']}` "
        f"(or set data.prepare_missing=true)"
    )


DRAWS = ("first", "seeded")


def domain_prompts(
    data: Mapping[str, Any], domain: str, n: int | None, split: str = "eval", draw: str = "first", seed: int = 0
) -> list[BenchRequest]:
    """``n`` (all when None) prompts of one domain's split in file order: the first ``n`` (``draw="first"``) or
    ``n`` drawn without replacement with ``seed`` (``draw="seeded"``; all of them when the split is shorter)."""
    if draw not in DRAWS:
        raise ValueError(f"workload.draw must be one of {list(DRAWS)}, got {draw!r}")
    path = _ensure_domain(data, domain, split)
    rows = read_prompts(path)
    if n is not None and draw == "seeded" and int(n) < len(rows):
        keep = sorted(random.Random(f"bench-draw-{seed}-{domain}").sample(range(len(rows)), int(n)))
        rows = [rows[j] for j in keep]
    elif n is not None:
        rows = rows[: int(n)]
    return [BenchRequest(rid, text, domain) for rid, text in rows]


def _check_domains(domains: Sequence[str], where: str) -> list[str]:
    if isinstance(domains, str) or not domains:
        raise ValueError(f"{where} must be a non-empty list of domain names, got {domains!r}")
    return [str(d) for d in domains]


def load_workload(cfg: Mapping[str, Any], data: Mapping[str, Any], seed: int = 0) -> list[BenchRequest]:
    """Build the request stream of a workload config (see the module doc); raises ``ValueError`` on bad input.

    Args:
        cfg: the ``workload`` config node (``name`` + its options).
        data: ``{dir, source, prepare_missing}`` of the data recipes' output.
        seed: shuffles the ``mixed``/``shift`` streams (and seeds the ``shift`` variant); with ``draw: seeded``
            it also draws which prompts of each domain are used.
    """
    name = cfg.get("name")
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; expected one of {list(WORKLOADS)} (workload=<name>)")
    n = cfg.get("n_per_domain")
    if n is not None and (not isinstance(n, int) or n < 0):
        raise ValueError(f"workload.n_per_domain must be null or an int >= 0, got {n!r}")
    draw = str(cfg.get("draw") or "first")
    if draw not in DRAWS:
        raise ValueError(f"workload.draw must be one of {list(DRAWS)}, got {draw!r}")
    reqs: list[BenchRequest]
    if name == "prompts":
        reqs = []
        for j, p in enumerate(cfg.get("prompts") or []):
            if isinstance(p, str):
                reqs.append(BenchRequest(f"prompt-{j}", p, str(cfg.get("domain") or "unknown")))
            else:
                rid = str(p.get("id", f"prompt-{j}"))
                reqs.append(BenchRequest(rid, str(p["prompt"]), str(p.get("domain", "unknown"))))
    elif name == "domain":
        dom = cfg.get("domain")
        if not dom:
            raise ValueError(
                "workload=domain needs a domain: python scripts/bench.py workload=domain domain=<d> "
                f"(one of {list(TRAIN_DOMAINS + OOD_DOMAINS)})"
            )
        reqs = domain_prompts(data, str(dom), n, draw=draw, seed=seed)
    else:
        key = "ood_domains" if name == "ood" else "domains"
        doms = _check_domains(cfg.get(key) or (OOD_DOMAINS if name == "ood" else TRAIN_DOMAINS), f"workload.{key}")
        reqs = [r for d in doms for r in domain_prompts(data, d, n, draw=draw, seed=seed)]
        if name in ("mixed", "shift") and cfg.get("shuffle", True):
            random.Random(f"bench-stream-{seed}").shuffle(reqs)  # shift = the mixed stream, same order
        if name == "shift":
            # the recipes' own prompt-variant transform (paper Table 4)
            variant = str(cfg.get("variant") or "two_answers")
            reqs = [
                BenchRequest(r.request_id + f"@{variant}", apply_variant(r.prompt, variant, seed), r.domain)
                for r in reqs
            ]
    limit = cfg.get("max_requests")
    if limit is not None:
        reqs = reqs[: int(limit)]
    if not reqs:
        raise ValueError(
            f"workload={name} is empty (0 prompts): check workload.n_per_domain (={n!r}), workload.max_requests "
            f"(={limit!r}) and the eval files under {data.get('dir')}/{data.get('source')}/"
        )
    return reqs
