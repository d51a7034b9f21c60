"""Generate with the reference speculative engine (PyTorch, CPU-friendly) and print text + stats.

    python scripts/generate.py target=tiny pool=tiny selector=hedgespec             # tiny random target, seconds
    python scripts/generate.py target=tiny pool=tiny selector=eagle decoding=tree   # Fixed generalist, tree drafts
    python scripts/generate.py target=tiny pool=tiny selector=ucbspec sampling.temperature=0.8 seed=3
    python scripts/generate.py target=tiny pool=tiny trace.path=$PWD/trace.jsonl trace.full_counterfactual=true

Writes results.json into the Hydra run dir (outputs/generate/<time>/).
"""

from __future__ import annotations

import json
import os

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hedgespec.engine.app import format_results, run_generate


@hydra.main(version_base="1.3", config_path="../conf", config_name="generate")
def main(cfg: DictConfig) -> None:
    out = run_generate(OmegaConf.to_container(cfg, resolve=True))
    print(format_results(out))
    path = os.path.join(HydraConfig.get().runtime.output_dir, "results.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=2)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
