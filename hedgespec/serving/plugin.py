"""SGLang plugin (entry-point group ``sglang.srt.plugins``): adds ``--speculative-algorithm HEDGESPEC``.

SGLang calls :func:`register` in every process it starts (launcher, scheduler, detokenizer) through
``sglang.srt.plugins.load_plugins``; the entry point in ``pyproject.toml`` is::

    [project.entry-points."sglang.srt.plugins"]
    hedgespec = "hedgespec.serving.plugin:register"

It registers, and only when called:

* the ``HEDGESPEC`` algorithm (:class:`~hedgespec.serving.worker.HedgeSpecAlgo` →
  :class:`~hedgespec.serving.worker.HedgeSpecWorker`) with SGLang's speculative-algorithm registry;
* two hooks through SGLang's own ``HookRegistry`` (applied by ``load_plugins``), both inert unless the
  server runs HEDGESPEC: the ``hedgespec_*`` ``customized_info`` keys are reported once per request
  (request-level, not per token), and the target's KV budget counts the draft layers of all N drafters
  (SGLang's pool sizing counts one drafter).

Importing this module does nothing; sglang is imported inside :func:`register` only.
"""

from __future__ import annotations

import json
import os
from typing import Any

ALGORITHM = "HEDGESPEC"
META_PREFIX = "hedgespec_"
_STREAMER_KEY = (
    "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer."
    "is_request_level_customized_info_key"
)
_AUX_CONFIG = (
    "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state.resolve_spec_aux_hidden_state_config"
)
_registered = False


def _request_level_key(original: Any, self: Any, key: str) -> bool:
    return key.startswith(META_PREFIX) or original(self, key)


def _n_drafters() -> int:
    raw = os.environ.get("HEDGESPEC_CONFIG")
    if not raw:
        return 1
    try:
        return max(1, len(json.loads(raw).get("drafters") or []))
    except (ValueError, AttributeError):
        return 1


def _count_all_draft_pools(config: Any, *args: Any, **kwargs: Any) -> Any:
    spec_algorithm = kwargs.get("spec_algorithm")
    is_draft_worker = kwargs.get("is_draft_worker", False)
    n = _n_drafters()
    if (
        n > 1
        and not is_draft_worker
        and getattr(spec_algorithm, "name", None) == ALGORITHM
        and getattr(config, "eagle_draft_num_layers", None)
    ):
        config.eagle_draft_num_layers = int(config.eagle_draft_num_layers) * n
    return config


def register() -> None:
    """Register HEDGESPEC and its hooks with SGLang. Idempotent."""
    global _registered
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.speculative import spec_registry
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    if spec_registry.get_spec(ALGORITHM) is None:
        from hedgespec.serving.worker import HedgeSpecAlgo, HedgeSpecWorker  # lazy: the worker imports sglang

        @SpeculativeAlgorithm.register(ALGORITHM, supports_overlap=False, spec_class=HedgeSpecAlgo)
        def _factory(server_args: Any) -> type:
            return HedgeSpecWorker

    if not _registered:
        HookRegistry.register(_STREAMER_KEY, _request_level_key, HookType.AROUND)
        HookRegistry.register(_AUX_CONFIG, _count_all_draft_pools, HookType.AFTER)
        _registered = True
