"""Benchmarks of drafter selectors: workloads, metrics, runners (engine | server), reports.

``python scripts/bench.py pool=<pool> selector=<s> workload=<w> backend=engine|server`` composes a config and
calls :func:`hedgespec.bench.runners.run_bench`, which returns one result dict (schema
:data:`hedgespec.bench.metrics.RESULT_FORMAT` v1) and writes ``results.json``, ``results.md`` and PNGs through
:mod:`hedgespec.bench.report`.  Metrics (MAT, tokens/s, regret, overheads) and baselines
(Fixed, Oracle, UCBSpec, EXP3Spec, MetaSD-UCB, Router) follow the paper's evaluation.

The package imports torch only inside the engine runner, so workloads, metrics and reports stay cheap.
"""

from hedgespec.bench.metrics import RESULT_FORMAT, RESULT_VERSION, aggregate, validate_result
from hedgespec.bench.workloads import WORKLOADS, BenchRequest, load_workload

__all__ = [
    "RESULT_FORMAT",
    "RESULT_VERSION",
    "WORKLOADS",
    "BenchRequest",
    "aggregate",
    "load_workload",
    "validate_result",
]
