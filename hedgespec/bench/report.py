"""Bench reports, one import away: the public names of the modules that make them.

* :mod:`hedgespec.bench.run_files` — one run's ``results.json``, ``results.md`` and PNGs (:func:`write_run`).
* :mod:`hedgespec.bench.collect` — finding and collecting sweep results (:func:`load_results`,
  :func:`write_collection`).
* :mod:`hedgespec.bench.tables` — the markdown tables, the reproduction goals and the pooled MAT matrix.
* :mod:`hedgespec.bench.results_doc` — ``docs/RESULTS.md`` (:func:`results_markdown`).
* :mod:`hedgespec.plots` — the figures.

``scripts/report.py``, ``hedgespec/bench/app.py`` and the tests import from here.
"""

from __future__ import annotations

from hedgespec.bench.collect import find_result_files, load_results, load_results_dir, write_collection
from hedgespec.bench.metrics import mean_curve
from hedgespec.bench.results_doc import SIM_DEFAULTS, results_markdown, sim_command
from hedgespec.bench.run_files import FIGURES, write_run
from hedgespec.bench.tables import collection_table, goals, group_runs, mat_matrix, pooled_fixed_mats, run_table
from hedgespec.io import write_json_atomic, write_text_atomic
from hedgespec.plots import plot_bench_regret as plot_regret
from hedgespec.plots import plot_mat_by_domain, plot_timeline, plot_weights

__all__ = [
    "FIGURES",
    "SIM_DEFAULTS",
    "collection_table",
    "find_result_files",
    "goals",
    "group_runs",
    "load_results",
    "load_results_dir",
    "mat_matrix",
    "mean_curve",
    "plot_mat_by_domain",
    "plot_regret",
    "plot_timeline",
    "plot_weights",
    "pooled_fixed_mats",
    "results_markdown",
    "run_table",
    "sim_command",
    "write_collection",
    "write_json_atomic",
    "write_run",
    "write_text_atomic",
]
