"""Build the domain data recipes (data_recipes/, described in docs/data.md).

Usage:
    python scripts/prepare_data.py domain=sql source=offline n_train=800 n_eval=50
    python scripts/prepare_data.py domain=all                    # the ten recipes, offline, in about 20 s
    python scripts/prepare_data.py domain=sql source=hf          # Hugging Face datasets (real runs; needs network)
    python scripts/prepare_data.py domain=sql regenerate=true    # replace answers with the target's own (smollm2)
    python scripts/prepare_data.py domain=all regenerate=true regen.backend=sglang regen.batch_size=32
                                                                 # the same through a plain SGLang server, 32 at once
    python scripts/prepare_data.py domain=sql count_tokens=target target=smollm2

Outputs: <data_dir>/<source>/<domain>/{train,eval,eval_<variant>}.jsonl + manifest.json (data_dir defaults to
./data, git-ignored; override with data_dir=... or $HEDGESPEC_DATA). Offline sources come from
`bash scripts/install.d/20-data.sh`.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from data_recipes import DataRecipeError, prepare
from data_recipes.regenerate import BACKENDS, regenerate
from hedgespec.models import load_tokenizer


def run(cfg: DictConfig) -> dict[str, Path]:
    """Plain function behind the Hydra entry point (tests call it with a composed config)."""
    domain = str(cfg.domain)
    if cfg.regenerate and str(cfg.regen.get("backend") or "transformers") not in BACKENDS:
        raise DataRecipeError(f"regen.backend={cfg.regen.backend!r}: expected one of {BACKENDS}")
    has_target = "target" in cfg and cfg.target is not None
    target = OmegaConf.to_container(cfg.target, resolve=True) if has_target else "smollm2"
    tokenizer: Any = None
    if cfg.get("count_tokens"):
        if cfg.count_tokens != "target":
            raise DataRecipeError(f"count_tokens={cfg.count_tokens!r} is unknown; expected null or target")
        tokenizer = load_tokenizer(target)
    tokenizer_name = target.get("name") if isinstance(target, dict) else str(target)
    out = prepare(
        domain,
        source=cfg.source,
        n_train=cfg.n_train,
        n_eval=cfg.n_eval,
        seed=cfg.seed,
        data_dir=cfg.data_dir,
        variant=cfg.variant,
        tokenizer=tokenizer,
        tokenizer_name=tokenizer_name,
        hf=OmegaConf.to_container(cfg.hf, resolve=True) if cfg.get("hf") is not None else None,
    )
    if cfg.regenerate and cfg.regen.get("threads"):
        import torch  # lazy: only regeneration runs a model; preparing data stays torch-free

        torch.set_num_threads(int(cfg.regen.threads))
    if cfg.regenerate:
        with contextlib.ExitStack() as stack:
            url = cfg.regen.url or _server_url(stack, cfg, target)
            _regenerate_all(cfg, out, target, url)
    return out


def _server_url(stack: contextlib.ExitStack, cfg: DictConfig, target: Any) -> str | None:
    """``regen.backend=sglang``: one plain SGLang server of the target for every domain (stopped at the end)."""
    if str(cfg.regen.get("backend") or "transformers") != "sglang":
        return None
    from hedgespec.serving.launch import plain_server  # lazy: only the sglang backend starts a server

    opts = OmegaConf.to_container(cfg.regen.get("server") or {}, resolve=True)
    name = str(target.get("name") if isinstance(target, dict) else target)
    srv = plain_server(name, concurrency=int(cfg.regen.get("batch_size") or 1), **opts)
    print(f"[prepare_data] starting a plain SGLang server of {target}: {srv.plan.command()}", flush=True)
    stack.enter_context(srv)
    return srv.plan.base_url


def _regenerate_all(cfg: DictConfig, out: dict[str, Path], target: Any, url: str | None) -> None:
    """Regenerate the answers of every built domain, one after the other (each resumable)."""
    for d, path in out.items():
        if not (path / f"{cfg.regen.split}.jsonl").is_file():
            continue
        p = regenerate(
            path,
            split=cfg.regen.split,
            target=target,
            url=url,
            model=cfg.regen.model,
            max_examples=cfg.regen.max_examples,
            max_new_tokens=cfg.regen.max_new_tokens,
            temperature=cfg.regen.temperature,
            seed=cfg.seed,
            progress=cfg.regen.progress,
            batch_size=int(cfg.regen.get("batch_size") or 1),
            window=cfg.regen.get("window"),
        )
        print(f"[prepare_data] {d}: regenerated answers -> {p}")


@hydra.main(version_base="1.3", config_path="../conf", config_name="prepare_data")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except DataRecipeError as e:  # bad input or missing source: one clear line, exit code 2
        print(f"prepare_data: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
