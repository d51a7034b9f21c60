"""Hugging Face source (``source=hf``) for real runs: a thin wrapper over ``datasets`` with clear failures.

Without network (or with ``HF_HUB_OFFLINE=1`` and nothing cached) it raises :class:`SourceUnavailableError`
quickly, naming the dataset id and suggesting ``source=offline``; the caller writes nothing in that case.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Any

from .common import SourceUnavailableError


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
    """``datasets.load_dataset(ident, config, split=split)`` with an actionable error."""
    check_reachable(domain, ident)
    try:
        import datasets  # lazy: an optional, heavy dependency (hedgespec[data]), only for source=hf
    except ImportError as e:
        raise SourceUnavailableError("source=hf needs the 'datasets' package: pip install 'hedgespec[data]'") from e
    try:
        return datasets.load_dataset(ident, config, split=split)
    except Exception as e:
        raise _fail(domain, ident, f"{type(e).__name__}: {e}") from e


def download_file(domain: str, ident: str, filename: str) -> str:
    """One file of a dataset repo (camel-ai ships zips) via ``huggingface_hub``."""
    check_reachable(domain, ident)
    try:
        from huggingface_hub import hf_hub_download  # lazy, like datasets: only for source=hf

        return hf_hub_download(repo_id=ident, repo_type="dataset", filename=filename)
    except Exception as e:
        raise _fail(domain, ident, f"{type(e).__name__}: {e}") from e
