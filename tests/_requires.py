"""Optional packages the install scripts put in place: a local checkout without one skips the tests that need
it, naming the install command; under CI (``CI`` set, where ``scripts/install.sh`` installed everything) a
missing one fails the test instead, so CI never passes by skipping."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

SPECFORGE = "bash scripts/install.d/30-train.sh (SpecForge)"
DEEPSPEED = "bash scripts/install.d/30-train.sh (deepspeed)"
SUBMITIT = "bash scripts/install.d/30-train.sh (hydra-submitit-launcher)"
SGLANG = "bash scripts/install.d/40-serve.sh (sglang 0.5.23)"


def installed_or_skip(module: str, install: str) -> ModuleType:
    """``module`` imported; skipped locally when it is missing (naming ``install``), an error under CI."""
    if os.environ.get("CI"):
        try:
            return importlib.import_module(module)
        except ImportError as e:
            pytest.fail(f"{module} is not installed although CI installs it: {install} ({e})")
    return pytest.importorskip(module, reason=f"{module} is not installed: {install}")


def sglang_or_skip() -> None:
    """The pinned sglang (``hedgespec.serving.require_sglang``), as :func:`installed_or_skip` treats a package."""
    from hedgespec.serving import sglang_available
    from hedgespec.serving._sglang import require_sglang

    if os.environ.get("CI"):
        try:
            require_sglang()
        except ImportError as e:
            pytest.fail(f"the pinned sglang is not usable although CI installs it: {SGLANG} ({e})")
    elif not sglang_available():
        pytest.skip(f"the pinned sglang is not installed: {SGLANG}")
