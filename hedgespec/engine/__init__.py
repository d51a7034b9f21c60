"""Reference speculative engine in PyTorch (the project's correctness oracle and CPU research path).

``SpeculativeEngine(target, drafters, selector, decoding)`` (a :class:`~hedgespec.decoding.DecodingConfig`:
chain or EAGLE tree) drives a transformers causal LM with a pool of EAGLE-3 heads (:class:`Eagle3Drafter`,
SGLang checkpoint format); ``engine.generate(input_ids, max_new_tokens, sampling)`` (a
:class:`~hedgespec.decoding.SamplingParams`) runs lossless greedy/sampling verification, one batched
counterfactual evaluation of the whole pool per round and optional JSONL traces (:mod:`hedgespec.engine.trace`)
that :mod:`hedgespec.sim.replay` replays. The stages of a round exchange the records of
:mod:`hedgespec.engine.records`.
"""

from hedgespec.engine.eagle3 import Eagle3Config, Eagle3Drafter, default_aux_layer_ids
from hedgespec.engine.generate import SpeculativeEngine
from hedgespec.engine.pool import DrafterPool
from hedgespec.engine.target import TargetModel

__all__ = ["DrafterPool", "Eagle3Config", "Eagle3Drafter", "SpeculativeEngine", "TargetModel", "default_aux_layer_ids"]
