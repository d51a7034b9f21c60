"""Typed decoding settings for engine tests, built from the shipped config values.

:func:`decoding` reads ``conf/decoding/<mode>.yaml`` and :func:`sampling` ``conf/sampling/greedy.yaml`` (the
values a composed run uses), then applies the test's overrides, so call sites stay one short expression.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml

from hedgespec.decoding import DecodingConfig, SamplingParams
from hedgespec.fixtures import agreeing_drafter, random_drafter, tiny_llama

CONF = Path(__file__).resolve().parents[1] / "conf"


def _yaml(*parts: str) -> dict[str, Any]:
    return yaml.safe_load(CONF.joinpath(*parts).read_text())


def decoding(
    mode: str, num_steps: int | None = None, topk: int | None = None, num_draft_tokens: int | None = None
) -> DecodingConfig:
    """``conf/decoding/<mode>.yaml`` at depth ``num_steps``; ``topk`` / ``num_draft_tokens`` apply to a tree.

    A chain keeps its own values (topk 1, K + 1 rows), so a test parametrized over the mode passes the tree
    settings either way. A mode with no file (e.g. ``"beam"``) takes the chain's values, so
    :class:`DecodingConfig` rejects the mode itself (error-message tests).
    """
    path = CONF / "decoding" / f"{mode}.yaml"
    raw = _yaml("decoding", path.name) if path.is_file() else {**_yaml("decoding", "chain.yaml"), "mode": mode}
    over = {"num_steps": num_steps}
    if raw["mode"] == "tree":
        over.update(topk=topk, num_draft_tokens=num_draft_tokens)
    return DecodingConfig.from_dict({**raw, **{k: v for k, v in over.items() if v is not None}})


def sampling(**over: Any) -> SamplingParams:
    """``conf/sampling/greedy.yaml`` (seed None) with ``over`` applied, e.g. ``temperature=0.8, seed=3``."""
    return SamplingParams.from_dict({**_yaml("sampling", "greedy.yaml"), "seed": None, **over})


GREEDY = sampling()


class Recorder:
    """Wraps a selector and keeps every RoundFeedback it observes."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.feedback = inner, []
        self.name, self.full_information = inner.name, inner.full_information
        self.late_feedback = getattr(inner, "late_feedback", False)

    def begin_request(self, *a: Any, **kw: Any) -> None:
        self.inner.begin_request(*a, **kw)

    def select(self) -> Any:
        return self.inner.select()

    def observe(self, fb: Any) -> None:
        self.feedback.append(fb)
        self.inner.observe(fb)

    def end_request(self) -> None:
        self.inner.end_request()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()


#: the prompt the lazy/late engine tests' heads are fitted to
LAZY_PROMPT = torch.tensor([[1, 5, 7, 9, 3]])


def mixed_heads(model: Any) -> list[Any]:
    """Four heads of ``model`` that disagree: random, one distilled on :data:`LAZY_PROMPT`, one with a smaller
    draft vocabulary and MLP, one with other aux layers (the lazy catch-up and late-feedback tests' pool)."""
    return [
        random_drafter(model, seed=0),
        agreeing_drafter(model, [LAZY_PROMPT[0]], seed=1, steps=200),
        random_drafter(model, seed=2, draft_vocab_size=40, intermediate_size=20),
        random_drafter(model, seed=3, aux_layer_ids=[0, 1, 2]),
    ]


def lazy_model() -> Any:
    """The 3-layer tiny target of the lazy catch-up and late-feedback tests."""
    return tiny_llama(seed=4, layers=3)
