"""Simulation: synthetic full-information environments and exact replay of recorded traces."""

from hedgespec.sim.experiments import SimConfig, run_experiment, run_pool
from hedgespec.sim.greedy import ReplayResult, best_fixed_mat, replay_greedy, run_lengths
from hedgespec.sim.markov import DOMAINS, make_pool, make_requests, make_world
from hedgespec.sim.runner import greedy_table, run_greedy, run_sampling

__all__ = [
    "DOMAINS",
    "ReplayResult",
    "SimConfig",
    "best_fixed_mat",
    "greedy_table",
    "make_pool",
    "make_requests",
    "make_world",
    "replay_greedy",
    "run_experiment",
    "run_greedy",
    "run_lengths",
    "run_pool",
    "run_sampling",
]
