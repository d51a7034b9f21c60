"""Register a published EAGLE-3 drafter (one this project did not train) in a pool manifest.

Usage:
    python scripts/add_drafter.py pool=llama8b name=eagle3-general path=yuhuili/EAGLE3-LLaMA3.1-Instruct-8B
    python scripts/add_drafter.py pool=llama8b name=eagle3-general path=/models/sglang-eagle3 external=true
    python scripts/add_drafter.py manifest=pools/mine.yaml name=g path=./my_eagle3 target=tiny   # a new manifest

``pool=<name>`` reads the manifest path and target from conf/pool/<name>.yaml (what serve/launch.py serves).
The checkpoint (a local directory, or a Hugging Face id read from the local cache only) is validated against
the pool's target, copied into ``<manifest dir>/<pool>/<name>/`` in the SGLang layout (pickle weights converted
to safetensors) or recorded by absolute path (``external=true``), and added to the manifest with
``source: published``. Config: conf/add_drafter.yaml; details: docs/pools.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from hedgespec.pools import TargetInfo, load_pool
from hedgespec.pools_import import AddResult, add_published_drafter


def manifest_of(cfg: DictConfig) -> Path:
    """``manifest=`` as given, else the ``manifest:`` of the ``pool=`` config (conf/pool/<pool>.yaml)."""
    if cfg.get("manifest"):
        return Path(str(cfg.manifest))
    pool = cfg.get("pool")
    if not pool:
        raise ValueError("pass pool=<name> (a conf/pool/ config with a manifest, e.g. pool=llama8b) or manifest=<path>")
    if not pool.get("manifest"):
        raise ValueError(
            f"pool={pool.get('name')!r} lists its drafters inline (no `manifest:` in conf/pool/); "
            "pass manifest=<path>.yaml to register into a manifest instead"
        )
    return Path(str(pool.manifest))


def target_info(cfg: DictConfig, manifest: Path) -> TargetInfo | None:
    """The target a new manifest is created for (``target=``, else the pool config's ``target``), loaded once to
    fingerprint it; ``None`` for an existing manifest (it names its own target, which must be the requested one)."""
    node = cfg.get("target")
    wanted = str(node.name) if node else ((cfg.get("pool") or {}).get("target") or None)
    if manifest.exists():
        have = load_pool(manifest, check_files=False).target.name
        if wanted and str(wanted) != have:
            raise ValueError(f"target={wanted!r}: pool manifest {manifest} belongs to target {have!r}")
        return None
    if not wanted:
        return None
    from hedgespec.models import load_target, resolve_target  # lazy: only a new manifest needs the target

    spec = resolve_target(OmegaConf.to_container(node, resolve=True) if node else str(wanted))
    model, tokenizer = load_target(spec)
    return TargetInfo.from_model(spec.name, model, tokenizer)


def run(cfg: DictConfig) -> AddResult:
    """Plain function behind the Hydra entry point (tests call it with a composed config)."""
    manifest = manifest_of(cfg)
    info = target_info(cfg, manifest)
    result = add_published_drafter(
        manifest,
        name=str(cfg.name),
        path=str(cfg.path),
        domain=str(cfg.domain),
        external=bool(cfg.external),
        target=info,
        revision=cfg.revision,
        cache_dir=cfg.hf_cache,
        overwrite=bool(cfg.overwrite),
    )
    e = result.entry
    print(
        f"[add_drafter] {e.name} ({e.domain}) -> {result.manifest}: path {e.path}, {e.weights_hash}, "
        f"draft vocab {e.draft_vocab_size}, aux layers {list(e.aux_layer_ids)}, "
        f"source {e.training['origin']}"
        + (" (converted to safetensors)" if result.converted and not e.external else "")
    )
    for w in result.warnings:
        print(f"[add_drafter] warning: {w}")
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="add_drafter")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (ValueError, FileNotFoundError) as e:  # bad input: one clear line, exit code 2, manifest untouched
        print(f"add_drafter: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
