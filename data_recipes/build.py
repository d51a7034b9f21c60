"""Build one domain (or all) into ``<data_dir>/<source>/<domain>/``: the library behind ``scripts/prepare_data.py``.

Outputs per domain (nothing is written if anything fails: the files go to a temporary sibling directory that
is renamed into place at the end)::

    train.jsonl                 SpecForge conversations (user prompt + reference answer); absent for eval-only sets
    eval.jsonl                  held-out prompts (+ reference answer), disjoint from train
    eval_<variant>.jsonl        the same eval prompts rewritten by the prompt-variant transform (paper Table 4)
    manifest.json               counts, source(s), licence(s), seed, sha256 of every file, token counts
    regen/                      target-regenerated answers (see data_recipes.regenerate), kept across rebuilds
                                 that reproduce the same train.jsonl
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hedgespec.io import atomic_dir

from . import hf as hfsrc
from .common import (
    ALL_ROWS,
    DOMAINS,
    EVAL_ONLY_DOMAINS,
    SOURCES,
    TRAIN_DOMAINS,
    DataRecipeError,
    Split,
    normalise_prompt,
    to_record,
    validate_record,
    write_jsonl,
)
from .registry import get_recipe
from .variants import VARIANTS, apply_variant

DEFAULT_N_TRAIN = 800
DEFAULT_N_EVAL = {"gsm8k": 20, "humaneval": 164}  # gsm8k offline: the 20 held-out-template originals
DEFAULT_N_EVAL_OTHER = 50
MANIFEST_VERSION = 1


def default_sizes(domain: str, n_train: int | str | None, n_eval: int | None) -> tuple[int, int]:
    """``(n_train, n_eval)`` with the defaults filled in; ``n_train="all"`` is :data:`ALL_ROWS`."""
    if n_train == "all":
        return (0 if domain in EVAL_ONLY_DOMAINS else ALL_ROWS), default_sizes(domain, None, n_eval)[1]
    if isinstance(n_train, str) and not n_train.lstrip("-").isdigit():
        raise DataRecipeError(f"n_train={n_train!r}: expected a count or all")
    nt = 0 if domain in EVAL_ONLY_DOMAINS else (DEFAULT_N_TRAIN if n_train is None else int(n_train))
    ne = DEFAULT_N_EVAL.get(domain, DEFAULT_N_EVAL_OTHER) if n_eval is None else int(n_eval)
    if nt < 0 or ne < 0:
        raise DataRecipeError(f"n_train={nt} / n_eval={ne} must be >= 0")
    if domain not in EVAL_ONLY_DOMAINS and nt == 0:
        raise DataRecipeError(
            f"domain={domain}: n_train must be >= 1 (eval-only sets are {', '.join(EVAL_ONLY_DOMAINS)})"
        )
    if ne == 0:
        raise DataRecipeError(f"domain={domain}: n_eval must be >= 1")
    return nt, ne


def domain_dir(data_dir: str | os.PathLike[str], source: str, domain: str) -> Path:
    return Path(data_dir) / source / domain


def _check(domain: str, split: Split, n_train: int, n_eval: int) -> None:
    if n_train == ALL_ROWS:  # every row there is: at least one
        n_train = max(1, len(split.train))
    if len(split.train) != n_train or len(split.eval) != n_eval:
        raise RuntimeError(
            f"recipe {domain} returned {len(split.train)}/{len(split.eval)} examples, expected {n_train}/{n_eval}"
        )
    tr = {normalise_prompt(e.prompt) for e in split.train}
    overlap = [e.key for e in split.eval if normalise_prompt(e.prompt) in tr]
    if overlap:
        raise RuntimeError(f"recipe {domain}: eval prompts also in train: {overlap[:3]}")


def _sources(domain: str, source: str) -> list[dict[str, str]]:
    names = TRAIN_DOMAINS if domain == "general" else (domain,)
    out: list[dict[str, str]] = []
    for d in names:
        info = get_recipe(d).INFO
        specs = info.offline if source == "offline" else info.hf
        out += [asdict(s) | ({"domain": d} if domain == "general" else {}) for s in specs]
    return out


def _count_tokens(tokenizer: Any, records: list[dict]) -> dict[str, int]:
    p = a = 0
    for r in records:
        for t in r["conversations"]:
            n = len(tokenizer(t["content"], add_special_tokens=False)["input_ids"])
            if t["role"] == "assistant":
                a += n
            else:
                p += n
    return {"prompt_tokens": p, "answer_tokens": a, "total_tokens": p + a}


def prepare_domain(
    domain: str,
    source: str = "offline",
    n_train: int | None = None,
    n_eval: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike[str] = "data",
    variant: str | None = "two_answers",
    tokenizer: Any = None,
    tokenizer_name: str | None = None,
) -> Path:
    """Build one domain; returns its output directory. Raises :class:`DataRecipeError` (a ValueError) on bad input."""
    if source not in SOURCES:
        raise DataRecipeError(f"source={source!r} is unknown; expected one of {', '.join(SOURCES)}")
    if variant is not None and variant not in VARIANTS:
        raise DataRecipeError(f"variant={variant!r} is unknown; expected one of {', '.join(VARIANTS)} or null")
    recipe = get_recipe(domain)
    nt, ne = default_sizes(domain, n_train, n_eval)
    if nt == ALL_ROWS and source != "hf":
        raise DataRecipeError(
            f"domain={domain}: n_train=all needs source=hf (the offline recipes generate as many rows as asked)"
        )
    t0 = time.perf_counter()
    split = (recipe.build_offline if source == "offline" else recipe.build_hf)(nt, ne, int(seed))
    _check(domain, split, nt, ne)
    build_s = time.perf_counter() - t0

    def rid(split_name: str, i: int, e: Any) -> str:  # general keeps the source domain in the id
        return f"{domain}-{split_name}-{i:05d}" + (f"-{e.meta['domain']}" if "domain" in e.meta else "")

    train = [to_record(rid("train", i, e), e) for i, e in enumerate(split.train)]
    evals = [to_record(rid("eval", i, e), e) for i, e in enumerate(split.eval)]
    for r in train + evals:
        validate_record(r)
    out = domain_dir(data_dir, source, domain)
    with atomic_dir(out) as tmp:
        files = _write_files(tmp, train, evals, variant, seed)
        manifest = _manifest(domain, source, recipe, split, train, evals, files, seed, build_s)
        if source == "hf" and any(hfsrc.options().values()):  # where the rows came from, when not the hub's head
            manifest["hf"] = hfsrc.options()
        if tokenizer is not None:
            manifest["tokens"] = {
                "tokenizer": tokenizer_name or type(tokenizer).__name__,
                "train": _count_tokens(tokenizer, train),
                "eval": _count_tokens(tokenizer, evals),
            }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        # keep target-regenerated answers when train.jsonl is reproduced byte for byte
        old_manifest = out / "manifest.json"
        if (out / "regen").is_dir() and old_manifest.is_file():
            old = json.loads(old_manifest.read_text(encoding="utf-8"))
            if old.get("files", {}).get("train.jsonl", {}).get("sha256") == files.get("train.jsonl", {}).get("sha256"):
                shutil.move(str(out / "regen"), str(tmp / "regen"))
    return out


def _write_files(
    tmp: Path, train: list[dict], evals: list[dict], variant: str | None, seed: int
) -> dict[str, dict[str, Any]]:
    """train.jsonl (when there is a train split), eval.jsonl and eval_<variant>.jsonl; returns their entries."""
    files: dict[str, dict[str, Any]] = {}
    if train:
        files["train.jsonl"] = {"records": len(train), "sha256": write_jsonl(tmp / "train.jsonl", train)}
    files["eval.jsonl"] = {"records": len(evals), "sha256": write_jsonl(tmp / "eval.jsonl", evals)}
    if variant:
        var = [
            {
                "id": r["id"],
                "conversations": [
                    {"role": "user", "content": apply_variant(r["conversations"][0]["content"], variant, seed)}
                ]
                + r["conversations"][1:],
            }
            for r in evals
        ]
        name = f"eval_{variant}.jsonl"
        files[name] = {"records": len(var), "sha256": write_jsonl(tmp / name, var), "variant": variant}
    return files


def _manifest(
    domain: str,
    source: str,
    recipe: Any,
    split: Split,
    train: list[dict],
    evals: list[dict],
    files: dict[str, dict[str, Any]],
    seed: int,
    build_s: float,
) -> dict[str, Any]:
    """manifest.json without its optional ``tokens`` block."""
    mix: dict[str, int] = {}
    for e in split.train:
        if "domain" in e.meta:
            mix[e.meta["domain"]] = mix.get(e.meta["domain"], 0) + 1
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "domain": domain,
        "description": recipe.INFO.description,
        "source": source,
        "sources": _sources(domain, source),
        "eval_only": recipe.INFO.eval_only,
        "seed": int(seed),
        "n_train": len(train),
        "n_eval": len(evals),
        "files": files,
        "chars": {
            "train": sum(len(t["content"]) for r in train for t in r["conversations"]),
            "eval": sum(len(t["content"]) for r in evals for t in r["conversations"]),
        },
        "build_seconds": round(build_s, 3),
        "train_keys_sample": [e.key for e in split.train[:5]],
    }
    if mix:
        manifest["mix"] = mix
    return manifest


def prepare(
    domain: str,
    source: str = "offline",
    n_train: int | None = None,
    n_eval: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike[str] = "data",
    variant: str | None = "two_answers",
    tokenizer: Any = None,
    tokenizer_name: str | None = None,
    log: Any = print,
    hf: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Build ``domain`` (a name, a list of names, or ``"all"`` for the ten recipes). Returns ``{domain: dir}``.

    ``hf`` (``source=hf``): ``{"revisions": {dataset id: revision}, "paths": {dataset id: local dir}}``
    (:func:`data_recipes.hf.using`), recorded in each manifest."""
    names = list(DOMAINS) if domain == "all" else ([domain] if isinstance(domain, str) else list(domain))
    for d in names:
        get_recipe(d)  # validate every name before building anything
    hf = dict(hf or {})
    unknown = sorted(set(hf) - {"revisions", "paths"})
    if unknown:
        raise DataRecipeError(f"hf has unknown keys {unknown}; expected revisions and paths")
    out: dict[str, Path] = {}
    with hfsrc.using(hf.get("revisions"), hf.get("paths")):
        for d in names:
            args = (n_train, n_eval, seed, data_dir, variant, tokenizer, tokenizer_name)
            out[d] = _prepare_logged(d, source, *args, log=log)
    return out


def _prepare_logged(d: str, source: str, *args: Any, log: Any) -> Path:
    """:func:`prepare_domain` with its one-line summary (``args`` are its arguments after ``source``)."""
    t = time.perf_counter()
    out = prepare_domain(d, source, *args)
    m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    tok = f", {m['tokens']['train']['total_tokens']} train tokens" if "tokens" in m else ""
    if log:
        log(
            f"[prepare_data] {d:9s} {source}: {m['n_train']} train / {m['n_eval']} eval in "
            f"{time.perf_counter() - t:.1f}s{tok} -> {out}"
        )
    return out
