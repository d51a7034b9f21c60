"""Domain name -> recipe module (each exposes ``INFO``, ``build_offline``, ``build_hf``)."""

from __future__ import annotations

import importlib
from types import ModuleType

from .common import DOMAINS, DataRecipeError


def get_recipe(domain: str) -> ModuleType:
    if domain not in DOMAINS:
        raise DataRecipeError(f"domain={domain!r} is unknown; expected one of {', '.join(DOMAINS)} or all")
    return importlib.import_module(f"data_recipes.{domain}")
