"""The chat template's thinking switch (Qwen3's ``enable_thinking``), fixed once per target.

``target.thinking`` (:class:`hedgespec.models.TargetSpec`) is ``null`` (the template's own default), ``true`` or
``false``. When set, :func:`pin_thinking` fixes the switch inside the loaded tokenizer's chat template, so every
render of that tokenizer agrees: regenerated answers, the training features and their loss masks, benchmark
prompts. Servers render prompts with their own copy of the template, so requests to them carry the same value as
``chat_template_kwargs`` (:func:`template_kwargs`; SGLang's and vLLM's OpenAI-compatible APIs read it).
"""

from __future__ import annotations

from typing import Any

#: the template variable Qwen3's chat template reads (``<think>`` blocks on or off)
SWITCH = "enable_thinking"
_PIN = "{% set " + SWITCH + " = "


def check_thinking(thinking: Any, target_name: str) -> bool | None:
    """``thinking`` as ``None`` / ``True`` / ``False``; anything else is an error naming the target."""
    if thinking is None or isinstance(thinking, bool):
        return thinking
    raise ValueError(
        f"target {target_name!r}: thinking={thinking!r} must be true, false or null (the chat template's default)"
    )


def template_kwargs(thinking: bool | None) -> dict[str, bool]:
    """The ``chat_template_kwargs`` of a chat request (empty when the template's default is kept)."""
    return {} if thinking is None else {SWITCH: bool(thinking)}


def pin_thinking(tokenizer: Any, thinking: bool | None, target_name: str) -> Any:
    """Fix ``enable_thinking`` in ``tokenizer.chat_template`` (in place; returns the tokenizer).

    A template without the switch cannot honour ``thinking``; that is an error rather than a silent no-op.
    """
    thinking = check_thinking(thinking, target_name)
    if thinking is None:
        return tokenizer
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or SWITCH not in template:
        raise ValueError(
            f"target {target_name!r}: thinking={str(thinking).lower()} but its chat template has no "
            f"{SWITCH!r} switch (Qwen3's has one); set target.thinking=null for this target"
        )
    if template.startswith(_PIN):  # pinned before: replace the old value
        template = template[template.index("%}") + 2 :]
    tokenizer.chat_template = f"{_PIN}{'true' if thinking else 'false'} %}}" + template
    return tokenizer
