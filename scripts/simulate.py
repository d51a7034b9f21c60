"""Run the HedgeSpec simulator: every selector on the same synthetic mixed-domain requests.

    python scripts/simulate.py                              # experiment=scaling (Fig 5b analog), ~3 min on 2 cores
    python scripts/simulate.py experiment=regret            # cumulative regret vs tokens (Fig 5a analog)
    python scripts/simulate.py mode=greedy n_requests=14    # greedy decoding, fewer requests
    python scripts/simulate.py logger=wandb                 # offline wandb run in the run dir
    python scripts/simulate.py experiment=regret 'selectors=[{name:hedgespec},{name:hedgespec,label:le,epsilon:0.25}]'

Writes results.json (with the command line that produced it under "command") and a PNG into the Hydra run dir
(outputs/simulate/<experiment>/<time>/). Selector entries are make_selector kwargs plus an optional label, e.g.
label-efficient HedgeSpec with ``epsilon`` or ``evaluation: adaptive`` (conf/selector/hedgespec_le.yaml).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hedgespec.io import write_json_atomic
from hedgespec.sim.app import format_table, run_simulation


@hydra.main(version_base="1.3", config_path="../conf", config_name="simulate")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    out = run_simulation(OmegaConf.to_container(cfg, resolve=True), run_dir)
    # the command line next to the numbers, so a committed copy under docs/results/ names what produced it
    out["command"] = shlex.join(["python", "scripts/simulate.py", *sys.argv[1:]])
    write_json_atomic(out, run_dir / "results.json")
    print(format_table(out))
    for label, g in out.get("growth", {}).items():
        print(f"{label}: avg regret N={g['from_n']} -> N={g['to_n']} grows {g['growth']:.2f}x")
    print(f"results: {run_dir}/results.json")


if __name__ == "__main__":
    main()
