"""SGLang plugin (entry-point group ``sglang.srt.plugins``): adds ``--speculative-algorithm HEDGESPEC``.

SGLang calls :func:`register` in every process it starts (launcher, scheduler, detokenizer) through
``sglang.srt.plugins.load_plugins``; the entry point in ``pyproject.toml`` is::

    [project.entry-points."sglang.srt.plugins"]
    hedgespec = "hedgespec.serving.plugin:register"

It registers, and only when called:

* the ``HEDGESPEC`` algorithm (:class:`~hedgespec.serving.worker.HedgeSpecAlgo` →
  :class:`~hedgespec.serving.worker.HedgeSpecWorker`, or with ``pool_dir`` in the worker config
  :class:`~hedgespec.serving.fused_worker.FusedHedgeSpecWorker`) with SGLang's speculative-algorithm registry,
  and in that fused mode the pool draft model
  (:class:`~hedgespec.serving.pool_model.HedgeSpecPoolForCausalLMEagle3`) with SGLang's model registry;
* three hooks through SGLang's own ``HookRegistry`` (applied by ``load_plugins``), all inert unless the
  server runs HEDGESPEC: the ``hedgespec_*`` ``customized_info`` keys are reported once per request
  (request-level, not per token); the target's KV budget counts the draft layers of all N drafters
  (SGLang's pool sizing counts one drafter); and a prompt with a token id outside the target's vocabulary is
  refused with a 400 naming the id (SGLang checks the prompt's length but not its ids, and the embedding
  lookup would raise inside the scheduler and take the whole server down).

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
_VALIDATE_REQUEST = "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request"
_registered = False


def _request_level_key(original: Any, self: Any, key: str) -> bool:
    return key.startswith(META_PREFIX) or original(self, key)


CONFIG_ENV = "HEDGESPEC_CONFIG"
# key -> (accepted JSON types, required); written by hedgespec.serving.argv (the launcher)
_CONFIG_KEYS: dict[str, tuple[tuple[type, ...], bool]] = {
    "drafters": ((list,), True),
    "names": ((list,), False),
    "selector": ((str,), False),
    "selector_kwargs": ((dict,), False),
    "stale_state_s": ((int, float), False),
    "pool_dir": ((str,), False),
}


def parse_worker_config(raw: str | None) -> dict[str, Any]:
    """The worker config from the ``HEDGESPEC_CONFIG`` JSON, validated: a ``ValueError`` names the bad key
    (unknown, missing, wrong type, empty or non-string drafter paths, names not matching the drafters)."""
    where = f"{CONFIG_ENV} (worker config written by `python serve/launch.py`)"
    if not raw:
        raise ValueError(f"{where} is not set; start the server with `python serve/launch.py pool=<pool>`")
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(cfg).__name__}")
    for key in cfg:
        if key not in _CONFIG_KEYS:
            raise ValueError(f"{where}: unknown key {key!r}; expected keys {sorted(_CONFIG_KEYS)}")
    for key, (types, required) in _CONFIG_KEYS.items():
        if key not in cfg:
            if required:
                raise ValueError(f"{where}: key {key!r} is missing")
            continue
        value = cfg[key]
        if not isinstance(value, types) or isinstance(value, bool):
            want = " or ".join(t.__name__ for t in types)
            raise ValueError(f"{where}: key {key!r} must be a {want}, got {value!r}")
    _check_lists(cfg, where)
    return cfg


def _check_lists(cfg: dict[str, Any], where: str) -> None:
    drafters = cfg["drafters"]
    if not drafters or not all(isinstance(d, str) and d for d in drafters):
        raise ValueError(f"{where}: key 'drafters' must be a non-empty list of drafter directories, got {drafters!r}")
    names = cfg.get("names")
    if names is not None and (len(names) != len(drafters) or not all(isinstance(n, str) for n in names)):
        raise ValueError(f"{where}: key 'names' must list one name per drafter ({len(drafters)}), got {names!r}")
    if "stale_state_s" in cfg and not cfg["stale_state_s"] > 0:
        raise ValueError(f"{where}: key 'stale_state_s' must be > 0, got {cfg['stale_state_s']!r}")


def _n_drafters() -> int:
    if not os.environ.get(CONFIG_ENV):
        return 1
    return len(parse_worker_config(os.environ[CONFIG_ENV])["drafters"])


def _fused() -> bool:
    """The server runs the pool as one draft model (``pool_dir`` in the worker config)."""
    return bool(os.environ.get(CONFIG_ENV)) and "pool_dir" in parse_worker_config(os.environ[CONFIG_ENV])


def _draft_layers_counted() -> bool:
    """Whether the draft model's own config already counts one draft KV layer per drafter: the per-drafter worker's
    drafters have one each; the fused pool's ``layers`` layout has N, its ``heads`` layout one layer of N heads'
    KV, as much memory as N layers of one head's."""
    from hedgespec.serving.pool_dir import POOL_KEY

    if not _fused():
        return False
    pool_dir = parse_worker_config(os.environ[CONFIG_ENV])["pool_dir"]
    with open(os.path.join(pool_dir, "config.json")) as fh:
        return (json.load(fh).get(POOL_KEY) or {}).get("layout", "layers") == "layers"


def _count_all_draft_pools(config: Any, *args: Any, **kwargs: Any) -> Any:
    """The target sizes its KV budget with the draft KV pool as ``eagle_draft_num_layers`` layers of its own per-layer
    size: with N drafters that is N times the count of one draft model's config (unless it counts them already)."""
    spec_algorithm = kwargs.get("spec_algorithm")
    is_draft_worker = kwargs.get("is_draft_worker", False)
    n = _n_drafters()
    if (
        n > 1
        and not is_draft_worker
        and getattr(spec_algorithm, "name", None) == ALGORITHM
        and getattr(config, "eagle_draft_num_layers", None)
        and not _draft_layers_counted()
    ):
        config.eagle_draft_num_layers = int(config.eagle_draft_num_layers) * n
    return config


def check_token_ids(input_ids: Any, vocab_size: int) -> None:
    """Raise ``ValueError`` naming the first prompt token id outside ``[0, vocab_size)`` (``None``: no ids)."""
    for i, token in enumerate(input_ids or ()):
        if not 0 <= token < vocab_size:
            raise ValueError(
                f"input_ids[{i}] = {token} is outside the target's vocabulary; valid token ids are [0, {vocab_size})."
            )


def _refuse_out_of_vocab_ids(manager: Any, obj: Any, input_ids: Any, *args: Any, **kwargs: Any) -> None:
    from sglang.srt.runtime_context import get_spec

    if str(get_spec().speculative_algorithm).upper() == ALGORITHM:
        check_token_ids(input_ids, int(manager.model_config.vocab_size))


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
            if _fused():
                from hedgespec.serving.fused_worker import FusedHedgeSpecWorker

                return FusedHedgeSpecWorker
            return HedgeSpecWorker

    if _fused():
        from sglang.srt.models.registry import ModelRegistry
        from transformers import AutoConfig

        from hedgespec.serving.pool_model import ARCH, HedgeSpecPoolForCausalLMEagle3, PoolConfig

        ModelRegistry.models.setdefault(ARCH, HedgeSpecPoolForCausalLMEagle3)
        AutoConfig.register(PoolConfig.model_type, PoolConfig, exist_ok=True)

    if not _registered:
        HookRegistry.register(_STREAMER_KEY, _request_level_key, HookType.AROUND)
        HookRegistry.register(_AUX_CONFIG, _count_all_draft_pools, HookType.AFTER)
        HookRegistry.register(_VALIDATE_REQUEST, _refuse_out_of_vocab_ids, HookType.BEFORE)
        _registered = True
