"""Domain data recipes (layer L3 data): one module per domain, offline by default, Hugging Face for real runs.

``prepare("sql", source="offline", n_train=800, n_eval=50)`` writes SpecForge conversation JSONL
(``{"id", "conversations": [{"role", "content"}]}``) train + held-out eval prompt splits, the prompt-variant eval
file (paper Table 4) and a manifest under ``<data_dir>/<source>/<domain>/``. Entry point:
``python scripts/prepare_data.py domain=sql``. See docs/data.md for sources and licences.
"""

from .build import prepare, prepare_domain
from .common import (
    DOMAINS,
    EVAL_ONLY_DOMAINS,
    SOURCES,
    TRAIN_DOMAINS,
    DataRecipeError,
    Example,
    NotEnoughDataError,
    SourceUnavailableError,
    read_jsonl,
    validate_record,
)
from .registry import get_recipe
from .variants import VARIANTS, apply_variant

__all__ = [
    "DOMAINS",
    "EVAL_ONLY_DOMAINS",
    "SOURCES",
    "TRAIN_DOMAINS",
    "VARIANTS",
    "DataRecipeError",
    "Example",
    "NotEnoughDataError",
    "SourceUnavailableError",
    "apply_variant",
    "get_recipe",
    "prepare",
    "prepare_domain",
    "read_jsonl",
    "validate_record",
]
