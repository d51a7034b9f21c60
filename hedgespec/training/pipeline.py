"""One drafter, end to end: data -> target features -> vocab mapping -> SpecForge training -> export -> pool.

``train_drafter(cfg)`` is what ``python train/run.py domain=<d> target=<t> train=<budget>`` calls.  Stages
(each skipped when already done, so a rerun after an interruption picks up where it stopped):

1. **check** (before any work): domain and target are known, SpecForge is installed, the budget's
   ``specforge`` block validates against SpecForge's strict ``Config`` (typos fail here), a CPU budget has
   the CPU settings, and the run/export directories are either absent or ours.
2. **data**: the domain's conversation JSONL (``data.path`` overrides the recipe) and its manifest hash.
3. **features**: target hidden states in SpecForge's offline format (``hedgespec.training.features``),
   cached under ``<cache>/features/<key>`` keyed by target hash + data hash + aux layer ids.
4. **vocab**: the draft vocabulary mapping from the supervised tokens (``hedgespec.training.vocab``).
5. **train**: SpecForge ``train`` in-process on the composed, validated config; resumes from the newest
   checkpoint under the run directory (``training.resume_from``) when one exists.
6. **export**: ``specforge export --to sglang`` into ``<pools>/<pool>/<drafter>/``.
7. **register**: the drafter entry in ``<pools>/<pool>.yaml`` (``hedgespec.pools``).

Progress: tqdm bars for feature generation and training; SpecForge's metrics go to
``<run>/metrics.jsonl`` and, with ``logger=wandb``, to an offline W&B run under ``<run>/wandb``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hedgespec.training.config import compose_specforge, draft_config_dict, validate_early, validate_specforge, write_json
from hedgespec.training.hashing import file_hash, json_hash

#: The pool's domains (``general`` trains the generalist baseline).  ``data_recipes`` is authoritative when
#: it is installed; this list is the fallback and the documented default.
DOMAINS = ("python", "math", "biology", "chemistry", "medqa", "cnndm", "sql", "general")
RUN_MARKER = ".hedgespec-run.json"
_STEP_DIR = re.compile(r"-step(\d+)$")


@dataclass
class TrainResult:
    """What one ``train_drafter`` call produced (also printed by ``train/run.py``)."""

    drafter: str
    domain: str
    pool: str
    run_dir: Path
    export_dir: Path | None
    manifest: Path | None
    final_step: int | None
    metrics: dict[str, Any]
    stages: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    specforge_config: dict[str, Any] = field(default_factory=dict)


def _plain(node: Any) -> Any:
    """OmegaConf node -> plain containers (resolved); plain values pass through."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover
        return node
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def known_domains() -> tuple[str, ...]:
    """Trainable domains: ``data_recipes.common.TRAIN_DOMAINS`` + ``general`` when available, else :data:`DOMAINS`."""
    try:
        from data_recipes.common import TRAIN_DOMAINS  # type: ignore[import-not-found]

        return tuple(TRAIN_DOMAINS) + ("general",)
    except ImportError:
        return DOMAINS


def domain_name(domain: Any) -> str:
    """A trainable domain name (``data_recipes`` eval-only sets such as gsm8k are refused)."""
    name = str(domain)
    domains = known_domains()
    try:
        from data_recipes.common import EVAL_ONLY_DOMAINS  # type: ignore[import-not-found]
    except ImportError:
        EVAL_ONLY_DOMAINS = ()
    if name in EVAL_ONLY_DOMAINS:
        raise ValueError(f"domain={name!r} is an eval-only set (no train split); train one of {list(domains)}")
    if name not in domains:
        raise ValueError(f"domain={name!r} is unknown; expected one of {list(domains)}")
    return name


def tracking_block(logger: Mapping[str, Any] | None, run_dir: Path, name: str) -> dict[str, Any]:
    """``logger=none|wandb`` -> SpecForge ``tracking`` section (W&B always offline unless asked otherwise)."""
    logger = dict(logger or {})
    kind = logger.get("name", "none")
    if kind in (None, "none"):
        return {"report_to": "none"}
    if kind == "wandb":
        return {
            "report_to": "wandb",
            "wandb_project": logger.get("project") or "hedgespec",
            "wandb_name": name,
            "wandb_offline": str(logger.get("mode", "offline")) != "online" and bool(logger.get("offline", True)),
            "wandb_dir": str(run_dir / "wandb"),
        }
    raise ValueError(f"logger={kind!r} is not supported for training; use logger=none or logger=wandb")


def _own_or_absent(path: Path, marker: str, what: str) -> None:
    """Refuse a non-empty directory we did not write (no marker file)."""
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / marker).is_file())):
        raise FileExistsError(
            f"{what} {path} exists and holds content hedgespec did not write (no {marker}); refusing to touch it. "
            "Move it away or choose another location (paths.outputs / paths.pools / pool=...)"
        )


def latest_checkpoint(ckpt_root: Path, run_id: str) -> tuple[Path, int] | None:
    """Newest complete ``{run_id}-step{N}`` checkpoint under ``ckpt_root`` (via the ``-latest`` link), if any."""
    link = ckpt_root / f"{run_id}-latest"
    candidates: list[Path] = []
    if link.exists():
        candidates.append(link.resolve())
    else:
        candidates.extend(p for p in ckpt_root.glob(f"{run_id}-step*") if (p / "training_state.pt").is_file())
    best: tuple[Path, int] | None = None
    for p in candidates:
        m = _STEP_DIR.search(p.name)
        if m and (p / "training_state.pt").is_file() and (best is None or int(m.group(1)) > best[1]):
            best = (p, int(m.group(1)))
    return best


class _RunState:
    """``<run>/state.json``: which stages finished, with what results (the resume ledger)."""

    def __init__(self, run_dir: Path, key: str, fresh: bool):
        self.path = run_dir / "state.json"
        self.data: dict[str, Any] = {"key": key, "stages": {}}
        if not fresh and self.path.is_file():
            self.data = json.loads(self.path.read_text())

    def done(self, stage: str) -> dict[str, Any] | None:
        return self.data["stages"].get(stage)

    def mark(self, stage: str, info: Mapping[str, Any]) -> None:
        self.data["stages"][stage] = dict(info)
        write_json(self.path, self.data)

    def clear(self, *stages: str) -> None:
        for s in stages:
            self.data["stages"].pop(s, None)
        write_json(self.path, self.data)


def resolve_data(cfg: Mapping[str, Any], domain: str, loaded: tuple[Any, Any] | None = None) -> tuple[Path, str]:
    """The domain's conversation JSONL and the hash of its data manifest (or of the file itself).

    ``data.path`` wins; otherwise ``<data_dir>/<source>/<domain>/train.jsonl`` (written by
    ``scripts/prepare_data.py`` with a ``manifest.json`` beside it).  A missing *offline* build is made on the
    fly with ``data_recipes.build.prepare_domain`` (a few seconds); a missing ``hf`` build is an error.
    ``data.regenerated=true`` (the embedded budget's default) trains on the target-regenerated answers
    ``<domain dir>/regen/train.<target>.jsonl``; with ``loaded=(model, tokenizer)`` the missing ones (up to the
    budget's ``regenerate.max_examples``) are generated here first, resumably (``data_recipes.regenerate``, the
    same function as ``scripts/prepare_data.py ... regenerate=true``).
    """
    data = cfg.get("data") or {}
    if data.get("path"):
        path = Path(data["path"]).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"data.path={str(path)!r} does not exist")
        manifest = data.get("manifest")
        return path, file_hash(manifest) if manifest else file_hash(path)
    source = str(cfg.get("source", "offline"))
    domain_dir = Path(str(cfg.get("data_dir", "data"))).expanduser() / source / domain
    path = domain_dir / "train.jsonl"
    if data.get("regenerated"):  # answers regenerated by the target (data_recipes.regenerate)
        target = cfg.get("target")
        tname = target.get("name") if isinstance(target, Mapping) else str(target)
        regen = dict((cfg.get("train") or {}).get("regenerate") or {})
        out = domain_dir / "regen" / f"train.{tname}.jsonl"
        if loaded is not None and regen.get("max_examples"):
            from data_recipes.regenerate import regenerate, transformers_generator

            if not path.is_file():
                _build_domain(path, domain, source, cfg)
            gen = transformers_generator(tname, int(regen.get("max_new_tokens", 128)), float(regen.get("temperature", 0.0)),
                                         int(regen.get("seed", 0)), loaded=loaded)
            out = regenerate(domain_dir, target_name=tname, generator=gen, max_examples=int(regen["max_examples"]),
                             max_new_tokens=int(regen.get("max_new_tokens", 128)),
                             temperature=float(regen.get("temperature", 0.0)), seed=int(regen.get("seed", 0)),
                             batch_size=int(regen.get("batch_size", 1)), progress=bool(cfg.get("progress", True)))
        if not out.is_file():
            raise FileNotFoundError(f"{out} does not exist: run `python scripts/prepare_data.py domain={domain} "
                                    f"source={source} regenerate=true target={tname}` first")
        return out, file_hash(out)
    if not path.is_file():
        path = _build_domain(path, domain, source, cfg)
    manifest = path.parent / "manifest.json"
    return path, file_hash(manifest) if manifest.is_file() else file_hash(path)


def _build_domain(path: Path, domain: str, source: str, cfg: Mapping[str, Any]) -> Path:
    """Build a missing offline domain on the fly (seconds); a missing ``hf`` build is an error."""
    if source != "offline":
        raise FileNotFoundError(f"{path} does not exist: run `python scripts/prepare_data.py domain={domain} "
                                f"source={source}` first")
    from data_recipes.build import prepare_domain

    out = prepare_domain(domain, source=source, data_dir=str(cfg.get("data_dir", "data")))
    return Path(out) / "train.jsonl"


def target_config(cfg: Mapping[str, Any]) -> Any:
    """The target node with the budget's ``target_overrides`` merged in (e.g. a 4-layer tiny target)."""
    target = cfg["target"]
    overrides = (cfg.get("train") or {}).get("target_overrides") or {}
    if not overrides:
        return target
    if isinstance(target, str):
        from hedgespec.models import resolve_target

        spec = resolve_target(target)
        target = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
        if not isinstance(target.get("arch"), dict):
            from dataclasses import asdict

            target["arch"] = asdict(target["arch"])
    merged = dict(target)
    for k, v in overrides.items():
        merged[k] = {**(merged.get(k) or {}), **v} if isinstance(v, Mapping) else v
    return merged


def _load_target(target_cfg: Any) -> tuple[Any, Any, Any]:
    from hedgespec.models import load_target, resolve_target

    spec = resolve_target(target_cfg)
    model, tokenizer = load_target(spec)
    return spec, model, tokenizer


def check_inputs(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Stage 1: every check that needs no work; returns the resolved names and paths."""
    from hedgespec.models import resolve_target

    from hedgespec.training._specforge import require_specforge
    from hedgespec.training.cpu import check_cpu_config

    domain = domain_name(cfg["domain"])
    tspec = resolve_target(target_config(cfg))
    train = cfg["train"]
    pool = str(cfg.get("pool") or train.get("pool") or "default")
    drafter = str(cfg.get("drafter") or domain)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", drafter) or not re.fullmatch(r"[A-Za-z0-9_.-]+", pool):
        raise ValueError(f"pool={pool!r} / drafter={drafter!r}: use letters, digits, '_', '-', '.' only")
    data_path = (cfg.get("data") or {}).get("path")
    if data_path and not Path(data_path).expanduser().is_file():
        raise FileNotFoundError(f"data.path={str(data_path)!r} does not exist")
    require_specforge()
    paths = cfg.get("paths") or {}
    run_dir = Path(paths.get("outputs", "outputs/train")).expanduser() / pool / drafter
    export_dir = Path(paths.get("pools", "pools")).expanduser() / pool / drafter
    block = train.get("specforge") or {}
    tracking = tracking_block(cfg.get("logger"), run_dir, f"{pool}-{drafter}")
    validate_early(block, tracking)
    device = str(train.get("device", "cpu"))
    if device == "cpu":
        check_cpu_config(block)
    from hedgespec.training.export import EXPORT_MARKER

    _own_or_absent(run_dir, RUN_MARKER, "run directory")
    _own_or_absent(export_dir, EXPORT_MARKER, "export directory")
    pools_dir = Path(paths.get("pools", "pools")).expanduser()
    init = draft_init(train)
    init_source = None
    if init not in ("scratch", "target_head"):
        if init == drafter:
            raise ValueError(f"train.draft.init={init!r} names the drafter being trained")
        init_source = pools_dir / pool / init
        if not (init_source / "model.safetensors").is_file():
            raise FileNotFoundError(f"train.draft.init={init!r}: drafter {init!r} of pool {pool!r} is not exported "
                                    f"at {init_source}; train it first (python train/run.py domain={init} "
                                    f"pool={pool} ...) or use train.draft.init=target_head")
    return {"domain": domain, "target": tspec, "pool": pool, "drafter": drafter, "run_dir": run_dir,
            "export_dir": export_dir, "device": device, "tracking": tracking, "pools_dir": pools_dir,
            "init_source": init_source}


def _cache_root(cfg: Mapping[str, Any]) -> Path:
    paths = cfg.get("paths") or {}
    if paths.get("cache"):
        return Path(paths["cache"]).expanduser()
    from hedgespec.models import cache_dir

    return cache_dir() / "training"


def train_drafter(cfg: Any) -> TrainResult:
    """Run every stage for ``cfg`` (a composed ``conf/train.yaml``; DictConfig or dict)."""
    cfg = _plain(cfg)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    chk = check_inputs(cfg)
    train = cfg["train"]
    progress = bool(cfg.get("progress", True))
    run_dir: Path = chk["run_dir"]
    if bool(train.get("plan_only", False)):
        return _plan_only(cfg, chk)

    # -- target + data -------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    tspec, model, tokenizer = _load_target(target_config(cfg))
    from hedgespec.pools import TargetInfo

    tinfo = TargetInfo.from_model(tspec.name, model, tokenizer)
    timings["load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    data_path, data_hash = resolve_data(cfg, chk["domain"], loaded=(model, tokenizer))
    timings["data"] = time.perf_counter() - t0

    feats_cfg = train.get("features") or {}
    draft_cfg = train.get("draft") or {}
    from hedgespec.training.features import default_aux_layer_ids, generate_features

    aux = [int(i) for i in (train.get("aux_layer_ids") or default_aux_layer_ids(tinfo.num_layers))]
    if len(set(aux)) != 3 or not all(0 <= i < tinfo.num_layers for i in aux):
        raise ValueError(f"aux_layer_ids={aux}: EAGLE-3 fuses three distinct layers in [0, {tinfo.num_layers}) of "
                         f"target {tspec.name!r}; set train.aux_layer_ids or use a target with more layers")
    draft_vocab = min(int(draft_cfg.get("vocab_size") or tinfo.vocab_size), tinfo.vocab_size)
    run_key = json_hash({"target": tinfo.hash, "data": data_hash, "aux": aux, "draft_vocab": draft_vocab,
                         "train": {k: v for k, v in train.items() if k not in ("plan_only", "overwrite")},
                         "init_source": file_hash(chk["init_source"] / "model.safetensors")
                         if chk["init_source"] is not None else None})[:20]

    # -- run directory: ours (same key) -> resume; ours (other key) -> refuse unless overwrite ---------------
    marker = run_dir / RUN_MARKER
    fresh = True
    if marker.is_file():
        old = json.loads(marker.read_text()).get("key")
        if old != run_key:
            if not bool(train.get("overwrite", False)):
                raise FileExistsError(
                    f"run directory {run_dir} holds a run with another configuration (key {old} != {run_key}); "
                    "pass train.overwrite=true to discard it, or choose another pool/drafter name"
                )
            shutil.rmtree(run_dir)
        else:
            fresh = False
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(marker, {"key": run_key, "domain": chk["domain"], "pool": chk["pool"], "target": tspec.name})
    state = _RunState(run_dir, run_key, fresh)

    # -- features + vocab ------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    cache = _cache_root(cfg)
    fs = generate_features(
        model, tokenizer, data_path, cache / "features", target_hash=tinfo.hash, aux_layer_ids=aux,
        max_length=int(feats_cfg.get("max_length", 512)), max_samples=feats_cfg.get("max_samples"),
        dtype=str(feats_cfg.get("dtype", "bfloat16")), progress=progress,
    )
    timings["features"] = time.perf_counter() - t0
    state.mark("features", {"key": fs.key, "path": str(fs.path), "samples": fs.num_samples,
                            "tokens": fs.num_tokens, "loss_tokens": fs.num_loss_tokens, "reused": fs.reused})
    from hedgespec.training.vocab import build_vocab_mapping

    t0 = time.perf_counter()
    vm = build_vocab_mapping(fs.path, tinfo.vocab_size, draft_vocab)
    timings["vocab"] = time.perf_counter() - t0
    state.mark("vocab", {"path": str(vm.path), "hash": vm.hash, "coverage": round(vm.coverage, 6)})

    # -- target head + draft config + SpecForge config --------------------------------------------------------
    from hedgespec.training.cpu import save_target_head

    head_dir = cache / "target_head" / tinfo.hash.replace("sha256:", "")[:20]
    feat_dtype = str(feats_cfg.get("dtype", "bfloat16"))
    if not (head_dir / "model.safetensors.index.json").is_file():
        import torch

        tmp = head_dir.with_name(head_dir.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        save_target_head(model, tokenizer, tmp, getattr(torch, feat_dtype))
        if head_dir.exists():
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, head_dir)
    dcfg = draft_config_dict(model.config, draft_vocab_size=draft_vocab, aux_layer_ids=aux,
                             max_position_embeddings=draft_cfg.get("max_position_embeddings"))
    draft_config_path = write_json(run_dir / "draft_config.json", dcfg)
    warm = _warm_start(cfg, chk, run_dir, model, draft_config_path, vm.path)
    del model  # free the target before training (SpecForge only reads the head files)

    ckpt_root = run_dir / "checkpoints"
    run_id = f"{chk['pool']}-{chk['drafter']}"
    latest = latest_checkpoint(ckpt_root, run_id)
    raw = compose_specforge(
        train.get("specforge") or {}, target_model_path=str(head_dir), draft_config_path=str(draft_config_path),
        vocab_mapping_path=str(vm.path), aux_layer_ids=aux, hidden_states_path=str(fs.path),
        output_dir=str(ckpt_root), run_id=run_id, resume_from=str(latest[0]) if latest else None,
        tracking=chk["tracking"],
    )
    raw.setdefault("data", {}).setdefault("cache_dir", str(run_dir / "specforge_cache"))
    if warm is not None and latest is None:  # weights-only start of the first segment; a resume has its own
        raw["model"]["draft_checkpoint_path"] = str(warm)
    sf_cfg = validate_specforge(raw)
    run_yaml = run_dir / "run.yaml"
    run_yaml.write_text(yaml.safe_dump(sf_cfg.model_dump(mode="json"), sort_keys=False))

    # -- train -------------------------------------------------------------------------------------------------
    max_steps = sf_cfg.training.max_steps
    done = state.done("train")
    t0 = time.perf_counter()
    if done and latest and (max_steps is None or latest[1] >= max_steps):
        final_step, metrics = latest[1], done.get("metrics", {})
    else:
        state.clear("train", "export", "register")
        final_step, metrics = _run_specforge_train(run_yaml, run_dir, chk["device"], max_steps,
                                                   latest[1] if latest else 0, progress)
        latest = latest_checkpoint(ckpt_root, run_id)
        if latest is None:
            raise RuntimeError(f"SpecForge finished without writing a checkpoint under {ckpt_root}; "
                               "set specforge.training.save_interval > 0 in the train budget")
        final_step = latest[1]
        state.mark("train", {"final_step": final_step, "checkpoint": str(latest[0]), "metrics": metrics})
    timings["train"] = time.perf_counter() - t0

    # -- export + register -----------------------------------------------------------------------------------
    from hedgespec.training.export import export_sglang

    t0 = time.perf_counter()
    export_dir: Path = chk["export_dir"]
    done = state.done("export")
    if not (done and done.get("checkpoint") == str(latest[0]) and (export_dir / "model.safetensors").is_file()):
        export_sglang(latest[0], draft_config_path, vm.path, export_dir,
                      {"run_key": run_key, "checkpoint": str(latest[0]), "target_hash": tinfo.hash})
        state.mark("export", {"checkpoint": str(latest[0]), "path": str(export_dir)})
    timings["export"] = time.perf_counter() - t0

    from hedgespec.pools import DrafterEntry, pool_path, register_drafter

    manifest = pool_path(chk["pools_dir"], chk["pool"])
    entry = DrafterEntry(
        name=chk["drafter"], domain=chk["domain"], path=f"{chk['pool']}/{chk['drafter']}",
        target_hash=tinfo.hash, vocab_mapping_hash=vm.hash, draft_vocab_size=draft_vocab,
        aux_layer_ids=tuple(aux), data_manifest_hash=data_hash,
        training={"budget": train.get("name"), "final_step": final_step, "features": fs.key,
                  "vocab_coverage": round(vm.coverage, 6), "specforge": sf_cfg.model_dump(mode="json")},
        metrics=metrics,
    )
    register_drafter(manifest, chk["pool"], tinfo, entry, decoding=cfg.get("decoding"))
    state.mark("register", {"manifest": str(manifest)})
    timings["total"] = time.perf_counter() - t_start
    return TrainResult(chk["drafter"], chk["domain"], chk["pool"], run_dir, export_dir, manifest, final_step,
                       metrics, dict(state.data["stages"]), timings, sf_cfg.model_dump(mode="json"))


def draft_init(train: Mapping[str, Any]) -> str:
    """``train.draft.init``: ``scratch`` (default), ``target_head`` or the name of a drafter of the same pool."""
    init = str((train.get("draft") or {}).get("init") or "scratch")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", init):
        raise ValueError(f"train.draft.init={init!r}: expected scratch, target_head or a drafter name")
    return init


def _warm_start(cfg: Mapping[str, Any], chk: Mapping[str, Any], run_dir: Path, model: Any,
                draft_config_path: Path, mapping_path: Path) -> Path | None:
    """Build ``<run>/warm_start`` for ``train.draft.init`` (see :mod:`hedgespec.training.warmstart`)."""
    from hedgespec.training import warmstart as ws

    init = draft_init(cfg["train"])
    if init == ws.SCRATCH:
        return None
    source = chk["init_source"]
    head, norm = ws.target_head_and_norm(model)
    seed = int(((cfg["train"].get("specforge") or {}).get("training") or {}).get("seed", 0))
    return ws.build_warm_start(run_dir / "warm_start", draft_config_path, mapping_path, init=init,
                               target_head=head, target_norm=norm, seed=seed, source_export=source)


def _run_specforge_train(run_yaml: Path, run_dir: Path, device: str, max_steps: int | None, initial: int,
                         progress: bool) -> tuple[int | None, dict[str, Any]]:
    """``specforge train --config run.yaml`` in this process (CPU adaptations scoped to the call)."""
    import contextlib

    from hedgespec.training._specforge import specforge_cli_main
    from hedgespec.training.progress import MetricTee, summarize

    dist_env = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    preset = {k: os.environ[k] for k in dist_env if k in os.environ}
    tee = MetricTee(sys.stdout, run_dir / "metrics.jsonl", max_steps, initial, progress)
    if device == "cpu":
        from hedgespec.training.cpu import cpu_runtime

        runtime: Any = cpu_runtime()
    else:
        runtime = contextlib.nullcontext()
    try:
        with runtime, contextlib.redirect_stdout(tee):
            rc = specforge_cli_main(["train", "--config", str(run_yaml)])
    finally:
        tee.close()
        for k in dist_env:  # SpecForge bootstraps a one-rank env:// rendezvous; do not leak it to the next run
            if k not in preset:
                os.environ.pop(k, None)
    if rc != 0:
        raise RuntimeError(f"specforge train exited with code {rc} (interrupted?); rerun the same command to resume")
    return tee.last_step, summarize(tee.last)


def _plan_only(cfg: Mapping[str, Any], chk: Mapping[str, Any]) -> TrainResult:
    """Compose and validate the SpecForge config for a (GPU) target without loading or writing anything."""
    train = cfg["train"]
    aux = train.get("aux_layer_ids") or [1, 2, 3]
    raw = compose_specforge(
        train.get("specforge") or {}, target_model_path=str(chk["target"].hf_id or chk["target"].name),
        draft_config_path="<derived from the target at run time>", vocab_mapping_path="<derived>",
        aux_layer_ids=aux, hidden_states_path="<features cache>", output_dir=str(chk["run_dir"] / "checkpoints"),
        run_id=f"{chk['pool']}-{chk['drafter']}", tracking=chk["tracking"],
    )
    sf_cfg = validate_specforge(raw)
    return TrainResult(chk["drafter"], chk["domain"], chk["pool"], chk["run_dir"], None, None, None, {},
                       {"plan_only": True}, {}, sf_cfg.model_dump(mode="json"))
