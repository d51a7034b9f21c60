"""The one place that checks for sglang: a lazy import with an error that names the install step."""

from __future__ import annotations

import importlib
from types import ModuleType

SGLANG_VERSION = "0.5.23"
INSTALL_HINT = (
    f"hedgespec serving needs sglang=={SGLANG_VERSION}. Install it with `bash scripts/install.d/40-serve.sh` "
    "(CPU: sglang --no-deps plus its pinned CPU-usable dependencies; see docs/serving.md), "
    f"or on a CUDA machine `pip install sglang=={SGLANG_VERSION}`."
)


def require_sglang() -> ModuleType:
    """Import sglang, or raise ImportError with the install step; warn-free version check."""
    try:
        sglang = importlib.import_module("sglang")
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"{INSTALL_HINT} (import error: {e})") from e
    version = getattr(sglang, "__version__", "?")
    if version != SGLANG_VERSION:
        raise ImportError(
            f"found sglang {version}, but hedgespec.serving is pinned to {SGLANG_VERSION}. {INSTALL_HINT}"
        )
    return sglang


def sglang_available() -> bool:
    """True when the pinned sglang is importable (used by tests to skip the serve tier)."""
    try:
        require_sglang()
    except ImportError:
        return False
    return True
