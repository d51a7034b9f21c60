"""Layering: the core imports neither torch, sglang, wandb nor hydra (checked in a clean subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

CORE = [
    "hedgespec.acceptance",
    "hedgespec.types",
    "hedgespec.learners",
    "hedgespec.feedback",
    "hedgespec.learners_batched",
    "hedgespec.feedback_batched",
    "hedgespec.selectors",
    "hedgespec.selectors.batched",
    "hedgespec.selectors.batched_bandits",
    "hedgespec.serving.rounds_batched",
    "hedgespec.decoding",
    "hedgespec.io",
    "hedgespec.sim",
]
FORBIDDEN = ["torch", "sglang", "wandb", "hydra", "specforge", "transformers"]


def test_core_imports_no_heavy_modules():
    code = (
        "import importlib, json, sys\n"
        f"for m in {CORE!r}: importlib.import_module(m)\n"
        f"print(json.dumps([m for m in {FORBIDDEN!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_target_registry_and_data_recipes_import_no_torch():
    """``data_recipes`` reaches ``hedgespec.models`` (cache paths), so both must stay torch-free at import."""
    code = (
        "import json, sys\n"
        "import hedgespec.models, data_recipes, data_recipes.sources, hedgespec.bench.workloads\n"
        "print(json.dumps([m for m in ['torch', 'transformers', 'sglang'] if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
