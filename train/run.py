"""Train one EAGLE-3 domain drafter with SpecForge and register it in a pool manifest.

Usage (see conf/train.yaml and docs/training.md):
    python train/run.py domain=sql target=smollm2 train=embedded          # embedded default (CPU)
    python train/run.py -m domain=python,math,biology,chemistry,medqa,cnndm,sql,general   # the whole pool
    python train/run.py domain=sql target=tiny train=tiny data.path=tests/fixtures/training/conversations.jsonl
    python train/run.py domain=sql target=llama8b train=paper train.gpus=8  # GPU; SpecForge runs torchrun
    python train/run.py -m hydra/launcher=slurm domain=python,math target=llama8b train=paper train.gpus=8  # SLURM
Rerunning the same command resumes from the last checkpoint and skips finished stages.
The pool a drafter is registered in is `train.pool=<name>`; a bare `pool=` (the serve/bench config group,
conf/pool/) is refused before Hydra composes anything, with that fix.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import hydra
from omegaconf import DictConfig

from hedgespec.training import train_drafter


def pool_override_error(argv: list[str]) -> str | None:
    """The one-line fix for a ``pool=<name>`` (or ``+pool=``) override, which Hydra would reject as a config
    group it cannot override; ``None`` when ``argv`` has none."""
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and key.lstrip("+") == "pool":
            return (
                f"{arg}: training takes the pool as train.pool={value} (pool= selects a serve/bench pool config, "
                f"conf/pool/); rerun with train.pool={value}"
            )
    return None


def launcher_plugin_error(argv: list[str]) -> str | None:
    """The install command for ``hydra/launcher=slurm`` (or a ``submitit_*`` launcher) when Hydra's submitit
    plugin is missing, which Hydra would report only as a config it cannot find; ``None`` otherwise."""
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and key.lstrip("+") == "hydra/launcher" and value in ("slurm", "submitit_slurm", "submitit_local"):
            if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
                return (
                    f"{arg} needs Hydra's submitit launcher, which is not installed: "
                    "bash scripts/install.d/30-train.sh (or pip install hydra-submitit-launcher)"
                )
    return None


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
    if (error := pool_override_error(sys.argv[1:]) or launcher_plugin_error(sys.argv[1:])) is not None:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    main()
