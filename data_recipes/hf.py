"""Hugging Face source (``source=hf``) for real runs: a thin wrapper over ``datasets`` with clear failures.

Without network (or with ``HF_HUB_OFFLINE=1`` and nothing cached) it raises :class:`SourceUnavailableError`
quickly, naming the dataset id and suggesting ``source=offline``; the caller writes nothing in that case.

:func:`using` sets, for the recipes built inside it, a pinned ``revision`` per dataset id (a commit, tag or
branch, passed to ``datasets.load_dataset``) and a local ``path`` per dataset id (a directory of data files in
the dataset's own format, e.g. a mirror or a test fixture, loaded with ``datasets`` without the hub). The
recipes keep naming the hub ids; ``scripts/prepare_data.py`` fills these from its ``hf.revisions`` /
``hf.paths`` settings and records them in each domain's manifest.
"""

from __future__ import annotations

import contextlib
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .common import DataRecipeError, SourceUnavailableError

_OPTIONS: dict[str, dict[str, str]] = {"revisions": {}, "paths": {}}


@contextlib.contextmanager
def using(revisions: Mapping[str, str] | None = None, paths: Mapping[str, str] | None = None) -> Iterator[None]:
    """Pinned revisions and local paths (both keyed by Hugging Face dataset id) for the loads inside the block."""
    revisions = {str(k): str(v) for k, v in (revisions or {}).items() if v is not None}
    paths = {str(k): str(v) for k, v in (paths or {}).items() if v is not None}
    for ident, path in paths.items():
        if not Path(path).expanduser().is_dir():
            raise DataRecipeError(f"hf.paths[{ident!r}]={path!r} is not a directory of the dataset's data files")
    both = sorted(set(revisions) & set(paths))
    if both:
        raise DataRecipeError(f"hf: {both} have both a revision and a local path; a local copy has no revision")
    saved = {k: dict(v) for k, v in _OPTIONS.items()}
    _OPTIONS["revisions"], _OPTIONS["paths"] = revisions, paths
    try:
        yield
    finally:
        _OPTIONS.update(saved)


def options() -> dict[str, dict[str, str]]:
    """The revisions and local paths in effect (what a manifest records)."""
    return {k: dict(v) for k, v in _OPTIONS.items()}


def _offline_flag() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no")


def _fail(domain: str, ident: str, why: str) -> SourceUnavailableError:
    return SourceUnavailableError(
        f"domain={domain} source=hf: cannot load Hugging Face dataset {ident!r} ({why}); "
        "check the network/HF_ENDPOINT or use source=offline"
    )


def check_reachable(domain: str, ident: str, timeout: float = 5.0) -> None:
    """Fail fast when the hub is unreachable (avoids minutes of retries inside ``datasets``)."""
    if _offline_flag():
        raise _fail(domain, ident, "HF_HUB_OFFLINE=1 is set")
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        req = urllib.request.Request(f"{endpoint}/api/datasets/{ident}", method="HEAD")
        urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:  # the hub answered: fine unless the id does not exist
        if e.code == 404:
            raise _fail(domain, ident, "dataset not found on the hub") from e
    except Exception as e:  # DNS failure, refused, timeout ...
        raise _fail(domain, ident, f"hub unreachable: {type(e).__name__}: {e}") from e


def load(domain: str, ident: str, config: str | None = None, split: str = "train") -> Any:
    """``datasets.load_dataset(ident, config, split=split)`` with an actionable error; a local path set for
    ``ident`` (:func:`using`) is loaded instead (its data files in the dataset's format, split by file name), and
    a pinned revision is passed on."""
    local = _OPTIONS["paths"].get(ident)
    if local is None:
        check_reachable(domain, ident)
    try:
        import datasets  # lazy: an optional, heavy dependency (hedgespec[data]), only for source=hf
    except ImportError as e:
        raise SourceUnavailableError("source=hf needs the 'datasets' package: pip install 'hedgespec[data]'") from e
    try:
        if local is not None:  # a folder of data files has one (default) config
            return datasets.load_dataset(str(Path(local).expanduser()), split=split)
        return datasets.load_dataset(ident, config, split=split, revision=_OPTIONS["revisions"].get(ident))
    except Exception as e:
        where = f"local copy {local!r} of " if local is not None else ""
        raise _fail(domain, f"{where}{ident}", f"{type(e).__name__}: {e}") from e


def download_file(domain: str, ident: str, filename: str) -> str:
    """One file of a dataset repo (camel-ai ships zips) via ``huggingface_hub`` (or from its local copy)."""
    if ident not in _OPTIONS["paths"]:
        check_reachable(domain, ident)
    try:
        from huggingface_hub import hf_hub_download  # lazy, like datasets: only for source=hf

        local = _OPTIONS["paths"].get(ident)
        if local is not None:
            path = Path(local).expanduser() / filename
            if not path.is_file():
                raise FileNotFoundError(f"{filename} is not in the local copy {local}")
            return str(path)
        return hf_hub_download(
            repo_id=ident, repo_type="dataset", filename=filename, revision=_OPTIONS["revisions"].get(ident)
        )
    except Exception as e:
        raise _fail(domain, ident, f"{type(e).__name__}: {e}") from e
