"""Prompt-variant transforms for the router distribution-shift experiment (paper Table 4).

A router trained on the original prompt distribution is evaluated on *rewritten* prompts of the same tasks:
the domain (and hence the best drafter) is unchanged, but the surface form the router keys on moves. Each
variant is a deterministic function of the prompt (and a seed, for variants that choose among phrasings).
"""

from __future__ import annotations

from collections.abc import Callable

from .common import rng_for

VARIANTS: dict[str, Callable[[str, int], str]] = {
    # "Give two answers and pick the better one": the paper's example of a shifted prompt.
    "two_answers": lambda p, s: (
        f"Give two different answers to the following request, then pick the better one and explain why.\n\n{p}"
    ),
    "step_by_step": lambda p, s: f"{p}\n\nThink step by step before giving your final answer.",
    "expert_persona": lambda p, s: "You are a careful expert. " + p,
    "terse": lambda p, s: f"Answer as concisely as possible.\n\n{p}",
    "mixed": lambda p, s: VARIANTS[
        rng_for("variant", s, p).choice(["two_answers", "step_by_step", "expert_persona", "terse"])
    ](p, s),
}


def apply_variant(prompt: str, variant: str, seed: int = 0) -> str:
    """Rewrite one prompt; ``variant`` is a key of :data:`VARIANTS`."""
    try:
        fn = VARIANTS[variant]
    except KeyError:
        raise ValueError(f"variant={variant!r} is unknown; expected one of {', '.join(VARIANTS)}") from None
    return fn(prompt, seed)
