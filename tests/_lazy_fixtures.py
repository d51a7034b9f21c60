"""Module-scoped fixtures shared by the lazy catch-up and late-feedback engine tests (import both names)."""

from __future__ import annotations

import pytest
from _engine_helpers import lazy_model, mixed_heads


@pytest.fixture(scope="module")
def model():
    return lazy_model()


@pytest.fixture(scope="module")
def heads(model):
    return mixed_heads(model)
