"""Layering: the core imports neither torch, sglang, wandb nor hydra (checked in a clean subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

CORE = ["hedgespec.acceptance", "hedgespec.types", "hedgespec.learners", "hedgespec.feedback",
        "hedgespec.selectors", "hedgespec.sim"]
FORBIDDEN = ["torch", "sglang", "wandb", "hydra", "specforge", "transformers"]


def test_core_imports_no_heavy_modules():
    code = (
        "import importlib, json, sys\n"
        f"for m in {CORE!r}: importlib.import_module(m)\n"
        f"print(json.dumps([m for m in {FORBIDDEN!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
