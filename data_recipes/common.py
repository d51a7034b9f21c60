"""Shared pieces of the domain data recipes: the example type, deterministic splitting, errors, JSONL I/O.

Output format (SpecForge conversation JSONL), one object per line::

    {"id": "sql-train-00001", "conversations": [{"role": "user", "content": ...},
                                                 {"role": "assistant", "content": ...}]}
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Domains with a train split (one expert drafter each) + the generalist mix, then the eval-only OOD sets.
TRAIN_DOMAINS: tuple[str, ...] = ("python", "math", "biology", "chemistry", "medqa", "cnndm", "sql")
EVAL_ONLY_DOMAINS: tuple[str, ...] = ("gsm8k", "humaneval")
DOMAINS: tuple[str, ...] = TRAIN_DOMAINS + ("general",) + EVAL_ONLY_DOMAINS
SOURCES: tuple[str, ...] = ("offline", "hf")
#: ``n_train=all`` (``source=hf``): every training row the dataset has after the held-out groups are removed
ALL_ROWS = 1 << 60


class DataRecipeError(ValueError):
    """A user-facing problem with a recipe request (bad domain, missing source, too few examples)."""


class NotEnoughDataError(DataRecipeError):
    """Raised when a split asks for more examples than the source can provide."""

    def __init__(self, domain: str, split: str, requested: int, available: int, hint: str = "") -> None:
        self.domain, self.split, self.requested, self.available = domain, split, requested, available
        knob = "n_train" if split == "train" else "n_eval"
        super().__init__(
            f"domain={domain}: {knob}={requested} is larger than the {available} {split} examples available "
            f"from this source; use {knob}<={available}{hint}"
        )


class SourceUnavailableError(DataRecipeError):
    """An offline source file/package is missing, or a Hugging Face dataset cannot be reached."""


@dataclass(frozen=True)
class Example:
    """One prompt/answer pair before it is written.

    Attributes:
        prompt: the user turn (shaped like the real domain task).
        answer: the reference assistant turn ('' for prompt-only eval items).
        group: examples sharing a group always land in the same split (a source file, a template, an article).
        key: stable source key used for the id suffix and de-duplication (e.g. ``GO:0000147``).
    """

    prompt: str
    answer: str
    group: str
    key: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Split:
    train: list[Example]
    eval: list[Example]


@dataclass(frozen=True)
class SourceInfo:
    """Provenance of one source, copied into the manifest and the README table."""

    name: str
    origin: str
    licence: str
    note: str = ""


def rng_for(domain: str, seed: int, salt: str = "") -> random.Random:
    """A ``random.Random`` seeded from (domain, seed, salt): independent streams per recipe, stable across runs."""
    h = hashlib.sha256(f"{domain}|{seed}|{salt}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def normalise_prompt(text: str) -> str:
    """Whitespace/case-insensitive form used to check that train and eval prompts are disjoint."""
    return re.sub(r"\s+", " ", text).strip().lower()


def dedupe(examples: Iterable[Example]) -> list[Example]:
    """Drop later examples whose normalised prompt was already seen (order preserved)."""
    seen: set[str] = set()
    out = []
    for ex in examples:
        k = normalise_prompt(ex.prompt)
        if k not in seen:
            seen.add(k)
            out.append(ex)
    return out


def is_eval_group(domain: str, seed: int, group: str, eval_fraction: float) -> bool:
    """Whether ``group`` is held out for eval. Depends only on (domain, seed, group), never on the sizes asked
    for, so a train split of any size is disjoint from an eval split of any size built with the same seed."""
    return stable_hash(f"{domain}|{seed}|eval|{group}") % 100_000 < eval_fraction * 100_000


def split_by_group(
    domain: str,
    examples: Sequence[Example],
    n_train: int,
    n_eval: int,
    seed: int,
    eval_per_group: int = 1,
    eval_fraction: float = 0.1,
) -> Split:
    """Deterministic, size-independent, group-disjoint split.

    A seed-dependent ``eval_fraction`` of the groups is held out (:func:`is_eval_group`); eval takes at most
    ``eval_per_group`` prompts from each held-out group (in hash order, so a larger ``n_eval`` extends a smaller
    one), and train draws ``n_train`` examples (seeded shuffle) from the other groups only. Near-duplicates within a
    group never straddle the split. Raises :class:`NotEnoughDataError` naming the available count.
    """
    examples = dedupe(examples)
    held: dict[str, list[Example]] = {}
    train_pool: list[Example] = []
    for ex in examples:
        if is_eval_group(domain, seed, ex.group, eval_fraction):
            held.setdefault(ex.group, []).append(ex)
        else:
            train_pool.append(ex)
    eval_set: list[Example] = []
    for g in sorted(held, key=lambda g: stable_hash(f"{domain}|{seed}|order|{g}")):
        if len(eval_set) >= n_eval:
            break
        eval_set.extend(held[g][: min(eval_per_group, n_eval - len(eval_set))])
    if len(eval_set) < n_eval:
        raise NotEnoughDataError(domain, "eval", n_eval, len(eval_set))
    eval_norm = {normalise_prompt(e.prompt) for e in eval_set}
    train_pool = [ex for ex in train_pool if normalise_prompt(ex.prompt) not in eval_norm]
    if n_train == ALL_ROWS:
        n_train = len(train_pool)
    if len(train_pool) < n_train:
        raise NotEnoughDataError(domain, "train", n_train, len(train_pool))
    rng_for(domain, seed, "split").shuffle(train_pool)
    return Split(train=train_pool[:n_train], eval=eval_set)


def take(domain: str, split: str, examples: Sequence[Example], n: int, seed: int) -> list[Example]:
    """``n`` de-duplicated examples in a seeded order, or :class:`NotEnoughDataError`."""
    examples = dedupe(examples)
    if len(examples) < n:
        raise NotEnoughDataError(domain, split, n, len(examples))
    idx = list(range(len(examples)))
    rng_for(domain, seed, f"take-{split}").shuffle(idx)
    return [examples[i] for i in idx[:n]]


def to_record(ex_id: str, ex: Example, with_answer: bool = True) -> dict[str, Any]:
    conv = [{"role": "user", "content": ex.prompt}]
    if with_answer and ex.answer:
        conv.append({"role": "assistant", "content": ex.answer})
    return {"id": ex_id, "conversations": conv}


def validate_record(rec: Any, require_answer: bool = True) -> None:
    """Schema check of one SpecForge conversation record; raises ValueError naming the problem."""
    if not isinstance(rec, dict) or set(rec) - {"id", "conversations"} or "id" not in rec or "conversations" not in rec:
        raise ValueError(
            f"record must be {{'id', 'conversations'}}, got keys {sorted(rec) if isinstance(rec, dict) else type(rec)}"
        )
    if not isinstance(rec["id"], str) or not rec["id"]:
        raise ValueError(f"record id must be a non-empty string, got {rec['id']!r}")
    conv = rec["conversations"]
    if not isinstance(conv, list) or not conv:
        raise ValueError(f"{rec['id']}: conversations must be a non-empty list")
    for i, turn in enumerate(conv):
        if not isinstance(turn, dict) or set(turn) != {"role", "content"}:
            raise ValueError(f"{rec['id']}: turn {i} must have exactly 'role' and 'content'")
        if turn["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"{rec['id']}: turn {i} has role {turn['role']!r}")
        if not isinstance(turn["content"], str) or not turn["content"].strip():
            raise ValueError(f"{rec['id']}: turn {i} has empty content")
    roles = [t["role"] for t in conv if t["role"] != "system"]
    if roles[0] != "user":
        raise ValueError(f"{rec['id']}: the first non-system turn must be 'user'")
    if require_answer and roles[-1] != "assistant":
        raise ValueError(f"{rec['id']}: the last turn must be 'assistant'")


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> str:
    """Write records as JSONL; returns the sha256 of the file."""
    h = hashlib.sha256()
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            line = json.dumps(rec, ensure_ascii=False) + "\n"
            f.write(line)
            h.update(line.encode("utf-8"))
    return "sha256:" + h.hexdigest()


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class RecipeInfo:
    """What a recipe module declares (``INFO``) besides its ``build_offline``/``build_hf`` functions."""

    name: str
    description: str
    offline: tuple[SourceInfo, ...]
    hf: tuple[SourceInfo, ...]
    eval_only: bool = False
