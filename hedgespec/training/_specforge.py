"""The one place that imports SpecForge (lazily), with an actionable error when it is missing.

SpecForge is an optional, heavy dependency (``pip install specforge==0.2.0 --no-deps`` plus its light
dependencies, see ``scripts/install.d/30-train.sh``).  Nothing in hedgespec imports it at module import:
every caller goes through :func:`require_specforge` first, so a missing install fails before any work with
the command that fixes it.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType

SPECFORGE_VERSION = "0.2.0"
INSTALL_HINT = (
    f"hedgespec training needs SpecForge {SPECFORGE_VERSION} (the unified-runtime wheel from PyPI). Install it with\n"
    "    bash scripts/install.d/30-train.sh\n"
    f"(pip install --no-deps 'specforge=={SPECFORGE_VERSION}' with the pinned wheel hash, "
    "then its light dependencies:\n"
    "    pip install -c requirements/constraints.txt -e '.[train]')."
)


def require_specforge() -> ModuleType:
    """Import and return the ``specforge`` package or raise ImportError with the install command.

    Also checks the light dependencies SpecForge imports on its training path (pydantic, accelerate,
    datasets, psutil, openai_harmony), because with ``--no-deps`` they are not pulled in automatically.
    """
    try:
        specforge = importlib.import_module("specforge")
    except ImportError as exc:  # pragma: no cover - exercised through a subprocess test
        raise ImportError(f"specforge is not installed ({exc}).\n{INSTALL_HINT}") from exc
    missing = []
    for dep in ("pydantic", "accelerate", "datasets", "psutil", "openai_harmony"):
        try:
            importlib.import_module(dep)
        except ImportError:
            missing.append(dep)
    if missing:
        raise ImportError(f"specforge is installed but its dependencies {missing} are missing.\n{INSTALL_HINT}")
    return specforge


def specforge_config_model() -> type:
    """SpecForge's strict pydantic run-config model (``specforge.config.Config``, ``extra='forbid'``)."""
    require_specforge()
    from specforge.config import Config

    return Config


def specforge_cli_main(argv: list[str]) -> int:
    """Run ``specforge <argv>`` in this process (``specforge.cli.main``) and return its exit code."""
    require_specforge()
    from specforge.cli import main

    return int(main(argv) or 0)


@contextlib.contextmanager
def target_head_dtype(dtype: str) -> Iterator[None]:
    """SpecForge 0.2.0's ``TargetHead.from_pretrained`` casts the frozen target head to bfloat16 whatever the
    run's ``model.torch_dtype``, so a float32 run fails at its first step ("expected m1 and m2 to have the same
    dtype"); for the duration of the call the loaded head is cast to ``dtype`` instead (bfloat16: unchanged)."""
    require_specforge()
    import torch
    from specforge.modeling.target.target_head import TargetHead

    if dtype == "bfloat16":
        yield
        return
    original = TargetHead.__dict__["from_pretrained"]

    def from_pretrained(cls: type, *args: object, **kwargs: object) -> object:
        return original.__func__(cls, *args, **kwargs).to(dtype=getattr(torch, dtype))

    TargetHead.from_pretrained = classmethod(from_pretrained)
    try:
        yield
    finally:
        TargetHead.from_pretrained = original
