"""Benchmark one drafter selector on one workload: MAT, tokens/s, target forwards per token, regret,
selection overhead; results.json + results.md + PNGs in the run dir.

    python scripts/bench.py pool=tiny selector=hedgespec workload=prompts            # tiny CPU check, seconds
    python scripts/bench.py pool=tiny selector=router workload=mixed workload.n_per_domain=2
    python scripts/bench.py pool=smollm2 selector=eagle workload=domain domain=sql oracle_probe=true
    python scripts/bench.py pool=smollm2 selector=fixed fixed=sql workload=mixed
    python scripts/bench.py pool=smollm2 selector=hedgespec backend=server            # against serve/launch.py
    python scripts/bench.py -m pool=tiny selector=hedgespec,eagle workload=mixed,shift seed=0,1   # Hydra multirun
    python scripts/report.py collect multirun/bench/<time>                            # collect a multirun/sweep

Selectors: hedgespec, hedgespec_eal, eagle, fixed (fixed=<domain>), ucbspec, exp3spec, metasd, router, oracle.
Workloads: mixed, domain (domain=<d>), ood, shift, prompts. Backends: engine, server. logger=wandb runs offline.
Decoding: decoding=chain|tree (decoding.num_steps=K, decoding.topk, decoding.num_draft_tokens);
sampling: sampling=greedy (sampling.temperature=0.7 sampling.top_p=0.95 to sample).
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hedgespec.bench.app import bench_main
from hedgespec.provenance import command_line


@hydra.main(version_base="1.3", config_path="../conf", config_name="bench")
def main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    command = command_line("scripts/bench.py", list(hc.overrides.task))  # no machine paths in committed results
    try:
        bench_main(
            OmegaConf.to_container(cfg, resolve=True),
            hc.runtime.output_dir,
            command=command,
            selector_choice=hc.runtime.choices.get("selector"),
        )
    except ValueError as err:  # bad user input: one clear line, exit code 2
        print(f"bench: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
