"""Drafter-selection policies behind one protocol (see :mod:`hedgespec.selectors.base`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hedgespec.selectors.bandits import EXP3Spec, MetaSDUCB, UCBSpec
from hedgespec.selectors.base import BanditSelector, BaseSelector, Selector
from hedgespec.selectors.batched import BatchDecision, BatchedHedgeSpec, BatchFeedback, SlotBatch
from hedgespec.selectors.batched_bandits import BatchedEXP3Spec, BatchedUCBSpec
from hedgespec.selectors.fixed import Fixed, Oracle
from hedgespec.selectors.hedgespec import HedgeSpec
from hedgespec.selectors.router import Router, train_router

SELECTORS: dict[str, Callable[..., Selector]] = {
    "hedgespec": HedgeSpec,
    "hedgespec_eal": lambda **kw: HedgeSpec(objective="eal", **kw),
    "fixed": Fixed,
    "oracle": Oracle,
    "ucbspec": UCBSpec,
    "exp3spec": EXP3Spec,
    "metasd": MetaSDUCB,
    "router": Router,
}


def register_selector(name: str, factory: Callable[..., Selector]) -> None:
    """Add a selector (e.g. the router baseline) under ``name``."""
    SELECTORS[name] = factory


def make_selector(name: str, **kwargs: Any) -> Selector:
    """Build a selector by name; unknown names and bad arguments raise ``ValueError``."""
    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r}; expected one of {sorted(SELECTORS)}")
    try:
        return SELECTORS[name](**kwargs)
    except TypeError as err:
        raise ValueError(f"bad arguments for selector {name!r}: {err}") from err


__all__ = [
    "SELECTORS",
    "BanditSelector",
    "BaseSelector",
    "BatchDecision",
    "BatchFeedback",
    "BatchedEXP3Spec",
    "BatchedHedgeSpec",
    "BatchedUCBSpec",
    "EXP3Spec",
    "Fixed",
    "HedgeSpec",
    "MetaSDUCB",
    "Oracle",
    "Router",
    "Selector",
    "SlotBatch",
    "UCBSpec",
    "make_selector",
    "register_selector",
    "train_router",
]
