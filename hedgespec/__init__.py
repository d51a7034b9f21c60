"""hedgespec: no-regret drafter selection for speculative decoding.

Layering (see docs/architecture.md): ``acceptance``/``types``/``decoding``/``io`` (L0) <-
``learners``/``feedback``/``selectors`` (L1) <- ``sim``/``engine``/``models``/``training``/``serving``/``bench``
(L2). L0/L1 import neither torch, sglang, wandb nor hydra, so the same selector objects run in the simulator,
the reference engine and the SGLang worker.
"""

__version__ = "0.1.0"
