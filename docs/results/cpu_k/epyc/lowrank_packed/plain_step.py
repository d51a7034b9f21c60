"""Plain decoding's cost per decode step, its prefill taken out: the bench's plain side (PlainRunner: the target
alone, transformers' generate, one warm-up request first) on the same prompts, each prompt's prefill also timed
alone (one forward, output head on the last row) and subtracted. Run from the repository root with the bench's
overrides, e.g. ``python docs/results/cpu_k/epyc/lowrank_packed/plain_step.py pool=smollm2 workload=mixed
workload.n_per_domain=2 backend.threads=1 target.linear_kernels=onednn target.packed_min_rows=1 selector=none``."""

import json
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hedgespec.bench.runners import PlainRunner, encode_prompt
from hedgespec.bench.workloads import load_workload
from hedgespec.decoding import SamplingParams
from hedgespec.engine.plain import plain_generate
from hedgespec.models import load_target

with initialize_config_dir(version_base="1.3", config_dir=str(Path(__file__).resolve().parents[5] / "conf")):
    cfg = OmegaConf.to_container(compose("bench", overrides=sys.argv[1:]), resolve=True)
torch.set_num_threads(1)
model, tok = load_target(dict(cfg["target"]))
r = PlainRunner(cfg, model, tok)
reqs = load_workload(cfg["workload"], cfg["data"], 0)
r.warmup(reqs[0], 8)
tot_wall = tot_pre = 0.0
toks = 0
g = SamplingParams(0.0, 1.0, 0, None)
for q in reqs:
    ids, _ = encode_prompt(tok, q.prompt, True, r.max_prompt)
    x = torch.tensor(ids)
    with torch.no_grad():
        t = time.perf_counter()
        model(input_ids=x[None], logits_to_keep=1)
        pre = time.perf_counter() - t
    res = plain_generate(model, x, 64, g, tok.eos_token_id)
    tot_wall += res.wall_s
    tot_pre += pre
    toks += len(res.tokens) - 1
print(
    json.dumps(
        {
            "plain_wall_s": tot_wall,
            "prefill_s_separately": tot_pre,
            "tokens_after_first": toks,
            "ms_per_token_incl_prefill": 1000 * tot_wall / toks,
            "ms_per_decode_step": 1000 * (tot_wall - tot_pre) / toks,
        }
    )
)
