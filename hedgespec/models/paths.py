"""Cache locations shared by the target registry and the data recipes.

Everything converted or unpacked lives outside the repository, under ``$HEDGESPEC_CACHE`` (default
``$XDG_CACHE_HOME/hedgespec`` or ``~/.cache/hedgespec``). Nothing here is ever committed.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE = "HEDGESPEC_CACHE"


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Root of the hedgespec cache.

    ``override`` > ``$HEDGESPEC_CACHE`` > ``$XDG_CACHE_HOME/hedgespec`` > ``~/.cache/hedgespec``.
    """
    if override:
        return Path(override).expanduser()
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "hedgespec"


def sources_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where ``scripts/install.d/20-data.sh`` unpacks files that ship inside wheels, sdists and Debian packages."""
    return cache_dir(override) / "sources"
