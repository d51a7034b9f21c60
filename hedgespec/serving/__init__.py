"""SGLang serving for HedgeSpec: the ``HEDGESPEC`` speculative algorithm plugin, its multi-drafter worker,
the launcher's argv builder, the CPU kernel stand-ins and tiny test checkpoints.

This is the only hedgespec package that imports sglang, always lazily (:func:`require_sglang`), so
``import hedgespec.serving`` works without sglang installed.
"""

from hedgespec.serving._sglang import INSTALL_HINT, SGLANG_VERSION, require_sglang, sglang_available

__all__ = ["INSTALL_HINT", "SGLANG_VERSION", "require_sglang", "sglang_available"]
