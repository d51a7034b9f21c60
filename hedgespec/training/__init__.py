"""SpecForge bridge: train EAGLE-3 domain drafters and register them in a pool (layer L2).

``train_drafter(cfg)`` runs one drafter end to end (see :mod:`hedgespec.training.pipeline`):
features with transformers in SpecForge's offline format -> vocab mapping -> ``specforge train`` in-process
(config validated by SpecForge's pydantic ``Config``) -> ``specforge export --to sglang`` -> ``pools/<pool>.yaml``.
CPU-only adaptations live in :mod:`hedgespec.training.cpu`.  Only this package imports ``specforge``, lazily
(:mod:`hedgespec.training._specforge` raises an ImportError with the install command when it is missing).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainResult", "train_drafter"]


def __getattr__(name: str) -> Any:  # lazy: importing hedgespec.training loads neither torch nor specforge
    if name in __all__:
        from hedgespec.training import pipeline

        return getattr(pipeline, name)
    raise AttributeError(name)
