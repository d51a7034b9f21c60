"""Serve a drafter pool with SGLang (HEDGESPEC speculative algorithm, or stock EAGLE-3 with ``selector=eagle``).

    python serve/launch.py pool=tiny device=cpu                 # tiny random pool on CPU (functional, not fast)
    python serve/launch.py pool=llama8b                         # trained pool on a CUDA GPU
    python serve/launch.py pool=llama8b selector=eagle          # stock EAGLE-3 with the generalist, side by side
    python serve/launch.py pool=tiny device=cpu dry_run=true    # print the command only

Prints the OpenAI-compatible base URL once the server is healthy. See docs/serving.md.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from hedgespec.serving.launch import serve


@hydra.main(version_base="1.3", config_path="../conf", config_name="serve")
def main(cfg: DictConfig) -> None:
    serve(cfg)


if __name__ == "__main__":
    main()
