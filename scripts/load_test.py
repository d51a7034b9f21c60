"""Load test of a HedgeSpec SGLang server with SGLang's own client (see hedgespec/serving/loadtest.py).

Usage:
    python scripts/load_test.py pool=tiny device=cpu
    python scripts/load_test.py pool=tiny device=cpu load.soak.requests=0 load.concurrency=[1,8]
Writes load_test.json into the Hydra run dir and prints one line per pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hedgespec.io import write_json_atomic
from hedgespec.serving.loadtest import run_load_test


@hydra.main(version_base="1.3", config_path="../conf", config_name="load_test")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    res = run_load_test(OmegaConf.to_container(cfg, resolve=True), run_dir)
    for p in [*res["passes"], res["soak"]]:
        if p.get("sent"):
            print(
                f"concurrency {p['concurrency']:>3}: {p['sent']} sent, {p['failed']} failed, {p['lost']} lost, "
                f"{p['greedy_mismatches']} greedy mismatches, {p['output_throughput']:.1f} tok/s, "
                f"p99 TTFT {p['p99_ttft_ms']:.0f} ms"
            )
    print("histograms:", json.dumps(res["histograms"]), "| soak RSS:", json.dumps(res["soak"].get("rss")))
    print(f"wrote {write_json_atomic(res, run_dir / 'load_test.json')}")


if __name__ == "__main__":
    main()
