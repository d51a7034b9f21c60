"""Typed decoding settings shared by the engine, the bench, the server and the pool manifest.

Torch-free (core layer). The values live in ``conf/decoding/*.yaml`` (one group, one spelling per knob, the
names SGLang's ``--speculative-*`` flags use); code builds these records from the composed config with
:meth:`DecodingConfig.from_dict` / :meth:`SamplingParams.from_dict` and never carries defaults of its own.

* :class:`DecodingConfig` — how a round drafts: ``mode`` (``chain``: K drafts; ``tree``: EAGLE's dynamic tree),
  ``num_steps`` (K, the draft depth: ``--speculative-num-steps``), ``topk`` (children per tree node and the
  top-k of the tree γ: ``--speculative-eagle-topk``; 1 for a chain) and ``num_draft_tokens`` (draft nodes kept
  and verified: ``--speculative-num-draft-tokens``; K + 1 for a chain, as SGLang requires).
* :class:`SamplingParams` — how tokens are drawn: ``temperature`` (0 = greedy), ``top_p``, ``top_k``
  (0 = off) and ``seed`` (None = a fixed stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

MODES = ("chain", "tree")


def _fields_of(cls: type, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The dataclass fields of ``raw``; a key the record does not know is an error naming it."""
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected {names}")
    missing = [n for n in names if n not in raw]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing} (set them in conf/decoding/*.yaml or on the command line)")
    return {n: raw[n] for n in names}


def _int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


@dataclass(frozen=True)
class DecodingConfig:
    """One speculative round's shape (see the module docstring)."""

    mode: str
    num_steps: int
    topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"decoding.mode must be one of {MODES}, got {self.mode!r}")
        _int(self.num_steps, "decoding.num_steps (speculation depth K)", 1)
        _int(self.topk, "decoding.topk", 1)
        _int(self.num_draft_tokens, "decoding.num_draft_tokens", 1)
        if self.mode == "chain" and (self.topk != 1 or self.num_draft_tokens != self.num_steps + 1):
            raise ValueError(
                f"decoding.mode=chain drafts one token per step: it needs topk=1 and num_draft_tokens = num_steps + 1 "
                f"= {self.num_steps + 1}, got topk={self.topk}, num_draft_tokens={self.num_draft_tokens} "
                "(use decoding=tree for a tree)"
            )
        if self.mode == "tree" and not self.topk <= self.num_draft_tokens:
            raise ValueError(
                f"decoding.mode=tree needs topk <= num_draft_tokens, got topk={self.topk}, "
                f"num_draft_tokens={self.num_draft_tokens}"
            )

    @property
    def k(self) -> int:
        """The speculation depth K (the paper's name for ``num_steps``)."""
        return self.num_steps

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "decoding") -> DecodingConfig:
        """Build from a composed ``decoding`` block; ``num_draft_tokens: null`` means K + 1 (a chain)."""
        vals = _fields_of(cls, raw, where)
        if vals["num_draft_tokens"] is None:
            vals["num_draft_tokens"] = int(vals["num_steps"]) + 1 if isinstance(vals["num_steps"], int) else None
        return cls(**vals)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SamplingParams:
    """Token sampling settings of a request (see the module docstring)."""

    temperature: float
    top_p: float
    top_k: int
    seed: int | None

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        _int(self.top_k, "top_k (0 = off)", 0)
        if self.seed is not None:
            _int(self.seed, "seed", 0)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "sampling") -> SamplingParams:
        return cls(**_fields_of(cls, raw, where))

    def with_seed(self, seed: int | None) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k, seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
