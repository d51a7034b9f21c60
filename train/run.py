"""Train one EAGLE-3 domain drafter with SpecForge and register it in a pool manifest.

Usage (see conf/train.yaml and docs/training.md):
    python train/run.py domain=sql target=smollm2 train=embedded          # embedded default (CPU)
    python train/run.py -m domain=python,math,biology,chemistry,medqa,cnndm,sql,general   # the whole pool
    python train/run.py domain=sql target=tiny train=tiny data.path=tests/fixtures/training/conversations.jsonl
    python train/run.py domain=sql target=llama8b train=paper train.gpus=8  # GPU; SpecForge runs torchrun
Rerunning the same command resumes from the last checkpoint and skips finished stages.
"""

from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from hedgespec.training import train_drafter


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> None:
    result = train_drafter(cfg)
    print(
        json.dumps(
            {
                "drafter": result.drafter,
                "pool": result.pool,
                "manifest": str(result.manifest),
                "export": str(result.export_dir),
                "final_step": result.final_step,
                "metrics": result.metrics,
                "timings_s": {k: round(v, 2) for k, v in result.timings.items()},
                **(
                    {"plan": result.stages, "specforge": result.specforge_config}
                    if result.stages.get("plan_only")
                    else {}
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
