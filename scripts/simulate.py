"""Run the HedgeSpec simulator: every selector on the same synthetic mixed-domain requests.

    python scripts/simulate.py                              # experiment=scaling (Fig 5b analog), ~3 min on 2 cores
    python scripts/simulate.py experiment=regret            # cumulative regret vs tokens (Fig 5a analog)
    python scripts/simulate.py mode=greedy n_requests=14    # greedy decoding, fewer requests
    python scripts/simulate.py logger=wandb                 # offline wandb run in the run dir

Writes results.json and a PNG into the Hydra run dir (outputs/simulate/<experiment>/<time>/).
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hedgespec.sim.app import format_table, run_simulation


@hydra.main(version_base="1.3", config_path="../conf", config_name="simulate")
def main(cfg: DictConfig) -> None:
    out = run_simulation(OmegaConf.to_container(cfg, resolve=True), HydraConfig.get().runtime.output_dir)
    print(format_table(out))
    for label, g in out.get("growth", {}).items():
        print(f"{label}: avg regret N={g['from_n']} -> N={g['to_n']} grows {g['growth']:.2f}x")
    print(f"results: {HydraConfig.get().runtime.output_dir}/results.json")


if __name__ == "__main__":
    main()
