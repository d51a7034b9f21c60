"""One drafter, end to end: data -> target features -> vocab mapping -> SpecForge training -> export -> pool.

``train_drafter(cfg)`` is what ``python train/run.py domain=<d> target=<t> train=<budget>`` calls.  It builds a
:class:`TrainRun` (the resolved config, names, paths and, stage by stage, what each one produced) and passes it
through six stage functions.  Each stage skips the work that is already done, so a rerun after an interruption
picks up where it stopped:

1. :func:`setup` (before any work): domain and target are known, SpecForge is installed, the budget's
   ``specforge`` block validates against SpecForge's strict ``Config`` (typos fail here), a CPU budget has
   the CPU settings, and the run/export directories are either absent or ours.
2. :func:`stage_data`: the target is loaded; the domain's conversation JSONL (``data.path`` overrides the
   recipe) and its manifest hash; a budget whose ``max_length`` cuts off every assistant turn is refused
   (:func:`check_budget_fits`); the run directory is claimed with its resume ledger ``<run>/state.json``.
3. :func:`stage_features`: target hidden states in SpecForge's offline format (``hedgespec.training.features``),
   cached under ``<cache>/features/<key>`` keyed by target hash + data hash + aux layer ids, then the draft
   vocabulary mapping from the supervised tokens (``hedgespec.training.vocab``).
4. :func:`stage_train`: SpecForge ``train`` in-process on the composed, validated config; resumes from the
   newest checkpoint under the run directory (``training.resume_from``) when one exists, and is skipped when
   the ledger records a finished run whose checkpoint reached ``max_steps``; a damaged checkpoint is refused
   by name before SpecForge reads it (:func:`check_training_state`).
5. :func:`stage_export`: ``specforge export --to sglang`` into ``<pools>/<pool>/<drafter>/`` (skipped when the
   ledger records an export of the same checkpoint; a failed or killed export leaves nothing there).
6. :func:`stage_register`: the drafter entry in ``<pools>/<pool>.yaml`` (``hedgespec.pools``), with the
   ``weights_hash`` of the export; an interrupted and resumed run registers the entry of an uninterrupted one.

On several nodes (``train.nodes > 1``) node 0 runs these stages and hands ``run.yaml`` to the other nodes, which
load nothing and only join SpecForge's training (:func:`follow`, :mod:`hedgespec.training.nodes`).

Progress: tqdm bars for feature generation and training; SpecForge's metrics go to
``<run>/metrics.jsonl`` and, with ``logger=wandb``, to an offline W&B run under ``<run>/wandb``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import re
import shutil
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

import data_recipes.build as recipe_build
import data_recipes.regenerate as recipe_regen  # a module: tests replace its transformers_generator
import hedgespec.models  # load_target is looked up at call time (tests replace it to prove no work is done)
from data_recipes.common import EVAL_ONLY_DOMAINS, SOURCES, TRAIN_DOMAINS
from hedgespec.io import atomic_dir, write_json_atomic
from hedgespec.models import TargetSpec, cache_dir, resolve_target
from hedgespec.pools import DrafterEntry, TargetInfo, pool_path, register_drafter, weights_hash
from hedgespec.training._specforge import require_specforge, specforge_cli_main, target_head_dtype
from hedgespec.training.capture_deepspeed import capture_features_deepspeed, check_features_backend, target_model_dir
from hedgespec.training.capture_sharded import capture_features_sharded, check_shards
from hedgespec.training.config import (
    compose_specforge,
    draft_config_dict,
    resolve_train_dtype,
    specforge_chat_template,
    validate_early,
    validate_specforge,
)
from hedgespec.training.cpu import check_cpu_config, cpu_runtime, save_target_head
from hedgespec.training.export import EXPORT_MARKER, export_sglang
from hedgespec.training.features import (
    FeatureSet,
    check_supervise,
    default_aux_layer_ids,
    generate_features,
    read_conversations,
    tokenize_conversation,
)
from hedgespec.training.hashing import file_hash, json_hash
from hedgespec.training.nodes import (
    HANDOFF_DIR,
    Heartbeat,
    Topology,
    announce,
    await_leader,
    check_nodes,
    check_visible,
    handoff_path,
    resolve_topology,
    specforge_launches,
)
from hedgespec.training.progress import MetricTee, capture_fd_stdout, summarize
from hedgespec.training.vocab import VocabMapping, build_vocab_mapping, shared_vocab_mapping
from hedgespec.training.warmstart import SCRATCH, TARGET_HEAD, build_warm_start, target_head_and_norm

#: The pool's domains: the data recipes' training domains and ``general`` (the generalist baseline).
DOMAINS = (*TRAIN_DOMAINS, "general")
RUN_MARKER = ".hedgespec-run.json"
_STEP_DIR = re.compile(r"-step(\d+)$")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


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
        _write_json(self.data, self.path)

    def clear(self, *stages: str) -> None:
        for s in stages:
            self.data["stages"].pop(s, None)
        _write_json(self.data, self.path)


@dataclass
class TrainRun:
    """One ``train_drafter`` call: what :func:`setup` resolves, then what each later stage adds."""

    cfg: dict[str, Any]  # the composed config as plain containers
    domain: str
    target: TargetSpec
    pool: str
    drafter: str
    run_dir: Path  # <outputs>/<pool>/<drafter>: checkpoints, ledger, run.yaml, metrics
    export_dir: Path  # <pools>/<pool>/<drafter>: the SGLang export
    pools_dir: Path
    device: str
    tracking: dict[str, Any]  # SpecForge's tracking section
    init_source: Path | None  # the exported drafter that train.draft.init=<drafter> starts from
    t_start: float
    topology: Topology = field(default_factory=Topology)  # train.nodes > 1: this node's rank and rendezvous
    timings: dict[str, float] = field(default_factory=dict)
    # stage_data
    model: Any = None  # the loaded target; released before SpecForge trains
    tokenizer: Any = None
    target_info: TargetInfo | None = None
    data_path: Path | None = None
    data_hash: str = ""
    aux: list[int] = field(default_factory=list)
    draft_vocab: int = 0
    key: str = ""  # the run key: same key -> resume, another key -> refuse (or overwrite)
    state: _RunState | None = None
    # stage_features
    features: FeatureSet | None = None
    vocab: VocabMapping | None = None
    # stage_train
    head_dir: Path | None = None
    draft_config_path: Path | None = None
    warm_start: Path | None = None
    specforge: Any = None  # the validated ``specforge.config.Config``
    latest: tuple[Path, int] | None = None  # newest complete checkpoint and its step
    final_step: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    # stage_register
    manifest: Path | None = None

    @property
    def train(self) -> dict[str, Any]:
        return self.cfg["train"]

    @property
    def progress(self) -> bool:
        return bool(self.cfg.get("progress", True))

    @property
    def run_id(self) -> str:
        return f"{self.pool}-{self.drafter}"

    @property
    def ckpt_root(self) -> Path:
        return self.run_dir / "checkpoints"

    def result(self) -> TrainResult:
        return TrainResult(
            self.drafter,
            self.domain,
            self.pool,
            self.run_dir,
            self.export_dir,
            self.manifest,
            self.final_step,
            self.metrics,
            dict(self.state.data["stages"]),
            self.timings,
            self.specforge.model_dump(mode="json"),
        )


def train_drafter(cfg: Any) -> TrainResult:
    """Run every stage for ``cfg`` (a composed ``conf/train.yaml``; DictConfig or dict).

    With ``train.nodes > 1`` node 0 runs the stages and the other nodes only join SpecForge's training
    (:func:`follow`; :mod:`hedgespec.training.nodes`)."""
    run = setup(cfg)
    if bool(run.train.get("plan_only", False)):
        return plan_only(run)
    if not run.topology.leader:
        return follow(run)
    with _leading(run):
        stage_data(run)
        stage_features(run)
        stage_train(run)
        stage_export(run)
        stage_register(run)
    run.timings["total"] = time.perf_counter() - run.t_start
    return run.result()


@contextlib.contextmanager
def _leading(run: TrainRun) -> Iterator[None]:
    """Node 0 of several: a heartbeat while it works, and a stage that fails tells the waiting nodes why (they
    stop instead of waiting)."""
    if run.topology.multi:  # a hand-off left by an earlier launch under the same id is not this launch's
        handoff_path(run.run_dir, run.topology).unlink(missing_ok=True)
    try:
        with Heartbeat(run.run_dir, run.topology):
            yield
    except BaseException as e:
        announce(run.run_dir, run.topology, "failed", error=f"{type(e).__name__}: {e}")
        raise


def follow(run: TrainRun) -> TrainResult:
    """Node > 0 of a multi-node run: load nothing, wait for node 0's hand-off, then run SpecForge's torchrun with
    this node's rank against node 0's ``run.yaml`` (node 0 exports and registers)."""
    topo = run.topology
    with _timed(run, "wait"):
        record = await_leader(run.run_dir, topo)
    stages: dict[str, Any] = {"node_rank": topo.node_rank, "handoff": str(handoff_path(run.run_dir, topo))}
    if record["status"] == "train":
        if record.get("gpus", _gpus(run)) != _gpus(run):
            raise RuntimeError(
                f"node 0 trains with train.gpus={record['gpus']} per node, node {topo.node_rank} has "
                f"train.gpus={_gpus(run)}: give every node the same command"
            )
        run_yaml = Path(record["run_yaml"])
        check_visible(run_yaml, topo)
        with _timed(run, "train"):
            _run_specforge_train(
                run_yaml,
                run.run_dir,
                run.device,
                None,
                0,
                run.progress,
                _gpus(run),
                node_rank=topo.node_rank,
                topology=topo,
            )
        stages["trained"] = str(run_yaml)
    run.timings["total"] = time.perf_counter() - run.t_start
    return TrainResult(run.drafter, run.domain, run.pool, run.run_dir, None, None, None, {}, stages, run.timings)


# -- helpers ------------------------------------------------------------------------------------------------


def _write_json(obj: Any, path: Path) -> Path:
    """The run directory's JSON files (marker, ledger, draft config): indented, keys sorted, atomic."""
    return write_json_atomic(obj, path, indent=2, sort_keys=True)


@contextlib.contextmanager
def _timed(run: TrainRun, name: str) -> Iterator[None]:
    """Record the block's wall time as ``run.timings[name]`` (only when it finishes)."""
    t0 = time.perf_counter()
    yield
    run.timings[name] = time.perf_counter() - t0


def _plain(node: Any) -> Any:
    """OmegaConf node -> plain containers (resolved); plain values pass through."""
    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def known_domains() -> tuple[str, ...]:
    """Trainable domains: ``data_recipes.common.TRAIN_DOMAINS`` + ``general``."""
    return DOMAINS


def domain_name(domain: Any) -> str:
    """A trainable domain name (``data_recipes`` eval-only sets such as gsm8k are refused)."""
    name = str(domain)
    domains = known_domains()
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


def _own_or_absent(path: Path, marker: str, what: str, ignore: tuple[str, ...] = ()) -> None:
    """Refuse a non-empty directory we did not write (no marker file); entries named in ``ignore`` do not count."""
    if path.exists() and (
        not path.is_dir() or (any(p.name not in ignore for p in path.iterdir()) and not (path / marker).is_file())
    ):
        raise FileExistsError(
            f"{what} {path} exists and holds content hedgespec did not write (no {marker}); refusing to touch it. "
            "Move it away or choose another location (paths.outputs / paths.pools / train.pool=...)"
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


def check_training_state(ckpt: Path) -> None:
    """Refuse to resume from a checkpoint whose ``training_state*.pt`` is truncated or corrupted (a ``torch.save``
    zip archive: its central directory and every member's CRC-32 are checked), naming the file."""
    for f in sorted(ckpt.glob("training_state*.pt")):
        try:
            with zipfile.ZipFile(f) as zf:
                broken = zf.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            broken = f"the archive ({exc})"
        if broken is not None:
            step = int(m.group(1)) if (m := _STEP_DIR.search(ckpt.name)) else 0
            older = sorted((int(m.group(1)), p.name) for p in ckpt.parent.iterdir() if (m := _STEP_DIR.search(p.name)))
            older = [name for n, name in older if n < step]
            raise RuntimeError(
                f"checkpoint file {f} is truncated or corrupted ({broken} fails its check); delete {ckpt}"
                + (f" (and its -latest link) to resume from {older[-1]}" if older else " to train from step 0")
            )


def resolve_data(cfg: Mapping[str, Any], domain: str, loaded: tuple[Any, Any] | None = None) -> tuple[Path, str]:
    """The domain's conversation JSONL and the hash of its data manifest (or of the file itself).

    ``data.path`` wins; otherwise ``<data_dir>/<source>/<domain>/train.jsonl`` (written by
    ``scripts/prepare_data.py`` with a ``manifest.json`` beside it).  A missing *offline* build is made on the
    fly with ``data_recipes.build.prepare_domain`` (a few seconds); a missing ``hf`` build is an error.
    ``data.regenerated=true`` (the embedded budget's default) trains on the target-regenerated answers
    ``<domain dir>/regen/train.<target>.jsonl`` (``.think`` / ``.nothink`` before ``.jsonl`` when the target's
    chat-template thinking switch is set); with ``loaded=(model, tokenizer)`` the missing ones (up to the
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
        out = _regenerated(cfg, domain, source, domain_dir, loaded)
        return out, file_hash(out)
    if not path.is_file():
        path = _build_domain(path, domain, source, cfg)
    manifest = path.parent / "manifest.json"
    return path, file_hash(manifest) if manifest.is_file() else file_hash(path)


def _regenerated(
    cfg: Mapping[str, Any], domain: str, source: str, domain_dir: Path, loaded: tuple[Any, Any] | None
) -> Path:
    """``<domain dir>/regen/train.<target>.jsonl``, first completed with the loaded target when it can be."""
    tname = _target_name(cfg)
    regen = dict((cfg.get("train") or {}).get("regenerate") or {})
    out = regenerated_path(cfg, domain_dir)
    if loaded is not None and regen.get("max_examples"):
        path = domain_dir / "train.jsonl"
        if not path.is_file():
            _build_domain(path, domain, source, cfg)
        max_new = int(regen.get("max_new_tokens", 128))
        temperature = float(regen.get("temperature", 0.0))
        seed = int(regen.get("seed", 0))
        backend = str(regen.get("backend") or "transformers")
        gen = (
            None
            if backend == "sglang"
            else recipe_regen.transformers_generator(tname, max_new, temperature, seed, loaded=loaded)
        )
        out = recipe_regen.regenerate(
            domain_dir,
            target=_plain(target_config(cfg)),  # with its thinking switch (the answers' file name carries it)
            target_name=tname,
            generator=gen,
            backend=backend,
            server=_regen_server_options(regen, domain_dir) if backend == "sglang" else None,
            max_examples=int(regen["max_examples"]),
            max_new_tokens=max_new,
            temperature=temperature,
            seed=seed,
            batch_size=int(regen.get("batch_size", 1)),
            progress=bool(cfg.get("progress", True)),
            window=regen_window(cfg),
        )
    if not out.is_file():
        raise FileNotFoundError(_missing_answers(out, domain, source, tname))
    return out


def regenerated_path(cfg: Mapping[str, Any], domain_dir: Path) -> Path:
    """``<domain dir>/regen/train.<target>[.think|.nothink][.<compute dtype>][.w<window>].jsonl``: the answers
    ``data.regenerated`` trains on (``.w<window>`` with ``train.regenerate.fit_window``)."""
    spec = resolve_target(target_config(cfg))
    stem = recipe_regen.output_stem(_target_name(cfg), spec.thinking, spec.compute_dtype, regen_window(cfg))
    return domain_dir / "regen" / f"train.{stem}.jsonl"


def regen_window(cfg: Mapping[str, Any]) -> int | None:
    """``train.regenerate.fit_window``: the answers are generated only as far as training reads them, the budget's
    window (the smaller of ``train.features.max_length`` and ``train.specforge.data.max_length``); else None."""
    train = cfg.get("train") or {}
    fit = (train.get("regenerate") or {}).get("fit_window", False)
    if not isinstance(fit, bool):
        raise ValueError(f"train.regenerate.fit_window={fit!r}: expected true or false")
    return min(window_settings(train).values()) if fit else None


def window_settings(train: Mapping[str, Any]) -> dict[str, int]:
    """The budget's settings that cut a training conversation, by name: the features' and SpecForge's max_length."""
    lengths = {"train.features.max_length": int((train.get("features") or {}).get("max_length", 512))}
    sf_len = ((train.get("specforge") or {}).get("data") or {}).get("max_length")
    if sf_len is not None:
        lengths["train.specforge.data.max_length"] = int(sf_len)
    return lengths


def _target_name(cfg: Mapping[str, Any]) -> str:
    target = cfg.get("target")
    return str(target.get("name") if isinstance(target, Mapping) else target)


def _missing_answers(out: Path, domain: str, source: str, tname: str) -> str:
    return (
        f"{out} does not exist: run `python scripts/prepare_data.py domain={domain} "
        f"source={source} regenerate=true target={tname}` first (docs/training.md, the paper-scale path step 2)"
    )


def check_answers_exist(cfg: Mapping[str, Any], domain: str) -> None:
    """A budget that only reads regenerated answers (``regenerate.max_examples: 0``, e.g. ``train=paper``) fails
    before the target is loaded when they are missing."""
    data, regen = cfg.get("data") or {}, (cfg.get("train") or {}).get("regenerate") or {}
    if data.get("path") or not data.get("regenerated") or regen.get("max_examples"):
        return
    source = str(cfg.get("source", "offline"))
    out = regenerated_path(cfg, Path(str(cfg.get("data_dir", "data"))).expanduser() / source / domain)
    if not out.is_file():
        raise FileNotFoundError(_missing_answers(out, domain, source, _target_name(cfg)))


def _regen_server_options(regen: Mapping[str, Any], domain_dir: Path) -> dict[str, Any]:
    """``train.regenerate.server`` (port, device, dtype, ...) for the plain SGLang server regeneration starts."""
    opts = dict(regen.get("server") or {})
    opts.setdefault("log_path", domain_dir / "regen" / "server.log")
    return opts


def _build_domain(path: Path, domain: str, source: str, cfg: Mapping[str, Any]) -> Path:
    """Build a missing offline domain on the fly (seconds); a missing ``hf`` build is an error."""
    if source != "offline":
        raise FileNotFoundError(
            f"{path} does not exist: run `python scripts/prepare_data.py domain={domain} source={source}` first"
        )
    out = recipe_build.prepare_domain(domain, source=source, data_dir=str(cfg.get("data_dir", "data")))
    return Path(out) / "train.jsonl"


def target_config(cfg: Mapping[str, Any]) -> Any:
    """The target node with the budget's ``target_overrides`` merged in (e.g. a 4-layer tiny target)."""
    target = cfg["target"]
    overrides = (cfg.get("train") or {}).get("target_overrides") or {}
    if not overrides:
        return target
    if isinstance(target, str):
        spec = resolve_target(target)
        target = {k: getattr(spec, k) for k in spec.__dataclass_fields__}
        if not isinstance(target.get("arch"), dict):
            target["arch"] = asdict(target["arch"])
    merged = dict(target)
    for k, v in overrides.items():
        merged[k] = {**(merged.get(k) or {}), **v} if isinstance(v, Mapping) else v
    return merged


def draft_init(train: Mapping[str, Any]) -> str:
    """``train.draft.init``: ``scratch`` (default), ``target_head`` or the name of a drafter of the same pool."""
    init = str((train.get("draft") or {}).get("init") or SCRATCH)
    if not _NAME.fullmatch(init):
        raise ValueError(f"train.draft.init={init!r}: expected scratch, target_head or a drafter name")
    return init


VOCAB_SOURCES = ("own", "init")


def draft_vocab_source(train: Mapping[str, Any]) -> str:
    """``train.draft.vocab``: ``own`` (default; the most frequent supervised tokens of this run's features) or
    ``init`` (the draft vocabulary of the ``train.draft.init`` drafter, for experts fine-tuned from it)."""
    draft = train.get("draft") or {}
    source = str(draft.get("vocab") or "own")
    if source not in VOCAB_SOURCES:
        raise ValueError(f"train.draft.vocab={source!r}: expected one of {', '.join(VOCAB_SOURCES)}")
    if source == "init" and draft_init(train) in (SCRATCH, TARGET_HEAD):
        raise ValueError(
            f"train.draft.vocab=init needs train.draft.init=<drafter of this pool> (got {draft_init(train)!r})"
        )
    return source


def _init_source(train: Mapping[str, Any], pools_dir: Path, pool: str, drafter: str) -> Path | None:
    """The exported drafter ``train.draft.init=<drafter>`` starts from (None for scratch / target_head)."""
    init = draft_init(train)
    draft_vocab_source(train)
    if init in (SCRATCH, TARGET_HEAD):
        return None
    if init == drafter:
        raise ValueError(f"train.draft.init={init!r} names the drafter being trained")
    source = pools_dir / pool / init
    if not (source / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"train.draft.init={init!r}: drafter {init!r} of pool {pool!r} is not exported "
            f"at {source}; train it first (python train/run.py domain={init} "
            f"train.pool={pool} ...) or use train.draft.init=target_head"
        )
    return source


def _cache_root(cfg: Mapping[str, Any]) -> Path:
    paths = cfg.get("paths") or {}
    if paths.get("cache"):
        return Path(paths["cache"]).expanduser()
    return cache_dir() / "training"


# -- stage 1: setup -----------------------------------------------------------------------------------------


def setup(cfg: Any) -> TrainRun:
    """Every check that needs no work (nothing is loaded or written); returns the run with its names and paths."""
    t_start = time.perf_counter()
    cfg = _plain(cfg)
    domain = domain_name(cfg["domain"])
    if str(cfg.get("source", "offline")) not in SOURCES:
        raise ValueError(f"source={cfg.get('source')!r} is unknown; expected one of {', '.join(SOURCES)}")
    tspec = resolve_target(target_config(cfg))
    train = cfg["train"] = resolve_train_dtype(cfg["train"])
    pool = str(cfg.get("pool") or train.get("pool") or "default")
    drafter = str(cfg.get("drafter") or domain)
    if not all(_NAME.fullmatch(n) and not n.startswith(".") for n in (pool, drafter)):
        raise ValueError(
            f"pool={pool!r} / drafter={drafter!r}: use letters, digits, '_', '-', '.' only, not starting with '.'"
        )
    data_path = (cfg.get("data") or {}).get("path")
    if data_path and not Path(data_path).expanduser().is_file():
        raise FileNotFoundError(f"data.path={str(data_path)!r} does not exist")
    require_specforge()
    paths = cfg.get("paths") or {}
    pools_dir = Path(paths.get("pools", "pools")).expanduser()
    run_dir = Path(paths.get("outputs", "outputs/train")).expanduser() / pool / drafter
    export_dir = pools_dir / pool / drafter
    block = train.get("specforge") or {}
    tracking = tracking_block(cfg.get("logger"), run_dir, f"{pool}-{drafter}")
    check_gpus(train)  # before SpecForge's validation, which would name its own nproc_per_node instead
    check_dtype_fits_gpus(train)
    topology = resolve_topology(train, planning=bool(train.get("plan_only")))
    validate_early(block, tracking)
    device = str(train.get("device", "cpu"))
    if device == "cpu":
        check_cpu_config(block)
    check_features_backend(train.get("features"))  # before anything is loaded: backend name, offload, install
    check_capture_shards(train, tspec)
    check_supervise((train.get("features") or {}).get("supervise", "assistant"))
    regen_window(cfg)  # a fit_window that is not a bool is named here, before the target loads
    if not train.get("plan_only"):
        check_answers_exist(cfg, domain)
    _own_or_absent(run_dir, RUN_MARKER, "run directory", ignore=(HANDOFF_DIR,))  # node 0 may be beating already
    _own_or_absent(export_dir, EXPORT_MARKER, "export directory")
    init_source = _init_source(train, pools_dir, pool, drafter)
    return TrainRun(
        cfg,
        domain,
        tspec,
        pool,
        drafter,
        run_dir,
        export_dir,
        pools_dir,
        device,
        tracking,
        init_source,
        t_start,
        topology,
    )


def check_capture_shards(train: Mapping[str, Any], target: TargetSpec) -> None:
    """``train.features.shards``: an int >= 1, at most the visible GPUs (not checked for a plan), and only for the
    transformers capture (the DeepSpeed capture is one process)."""
    feats = train.get("features") or {}
    shards = feats.get("shards", 1)
    check_shards(shards, "cpu" if train.get("plan_only") else target.device)
    if shards > 1 and check_features_backend(feats) != "transformers":
        raise ValueError(
            f"train.features.shards={shards} shards the transformers capture; the {feats.get('backend')} capture "
            "runs as one process: set train.features.shards=1"
        )


def check_dtype_fits_gpus(train: Mapping[str, Any]) -> None:
    """Only one in-process SpecForge run gets the target head in a dtype other than bfloat16
    (:func:`hedgespec.training._specforge.target_head_dtype`); its torchrun workers would fail at the first step."""
    dtype = train["features"]["dtype"]
    gpus, nodes = int(train.get("gpus") or 1), check_nodes(train)
    if (gpus > 1 or nodes != 1) and dtype != "bfloat16":
        raise ValueError(
            f"train.dtype={dtype} with train.gpus={gpus}"
            + (f" on train.nodes={nodes}" if nodes > 1 else "")
            + ": SpecForge's torchrun workers load the target head in bfloat16 only; set train.dtype=bfloat16 "
            "(or auto), or train in one process"
        )


def check_gpus(train: Mapping[str, Any]) -> None:
    """``train.gpus`` is a count SpecForge's torchrun can use: an int >= 1, more than one only on CUDA, and no
    more than the visible CUDA devices (a plan, which loads nothing, may be made on a machine without them)."""
    gpus, device, nodes = train.get("gpus", 1), str(train.get("device", "cpu")), check_nodes(train)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"train.gpus={gpus!r} must be an int >= 1")
    if not device.startswith("cuda"):
        if gpus > 1 or nodes != 1:
            what = f"train.gpus={gpus}" if gpus > 1 else f"train.nodes={nodes}"
            raise ValueError(f"{what} needs train.device=cuda (a {device} run is one process)")
        return
    if train.get("plan_only"):
        return
    import torch  # lazily, as the rest of training

    visible = torch.cuda.device_count()
    if gpus > visible:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ValueError(
            f"train.gpus={gpus} but {visible} CUDA device(s) are visible"
            + (f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else "")
            + (f"; set train.gpus<={visible}" if visible else "; run it on a machine with CUDA GPUs")
        )


def _capture_plan(train: Mapping[str, Any]) -> str:
    """How the features stage will capture the target's hidden states (for ``train.plan_only``)."""
    feats = train.get("features") or {}
    if check_features_backend(feats) == "deepspeed":
        return "one DeepSpeed ZeRO-3 process (python -m torch.distributed.run -m hedgespec.training.capture_deepspeed)"
    shards = int(feats.get("shards", 1))
    if shards > 1:
        return f"{shards} processes (python -m hedgespec.training.capture_sharded), one GPU each, then released"
    return "transformers, in this process"


def plan_only(run: TrainRun) -> TrainResult:
    """Compose and validate the SpecForge config for a (GPU) target without loading or writing anything."""
    train = run.train
    n_layers = run.target.layer_count()
    if train.get("aux_layer_ids"):
        aux = [int(i) for i in train["aux_layer_ids"]]
    elif n_layers is not None:
        aux = default_aux_layer_ids(n_layers)
    else:
        raise ValueError(
            f"train.plan_only=true: target {run.target.name!r} has no num_layers, so the EAGLE-3 capture layers "
            "are unknown without loading it; set target.num_layers=<decoder layers> or train.aux_layer_ids=[a,b,c]"
        )
    raw = compose_specforge(
        train.get("specforge") or {},
        target_model_path=str(run.target.hf_id or run.target.name),
        draft_config_path="<derived from the target at run time>",
        vocab_mapping_path="<derived>",
        aux_layer_ids=aux,
        hidden_states_path="<features cache>",
        output_dir=str(run.ckpt_root),
        run_id=run.run_id,
        tracking=run.tracking,
        chat_template=specforge_chat_template(run.target),
        trainer=run.topology.specforge_trainer(),
    )
    sf_cfg = validate_specforge(raw)
    topo, run_yaml = run.topology, run.run_dir / "run.yaml"
    plan = {
        "plan_only": True,
        "aux_layer_ids": aux,
        "commands": [
            f"specforge train --config {run_yaml}" + (" --node-rank <node rank>" if topo.multi else ""),
            f"specforge export --to sglang <final checkpoint under {run.ckpt_root}> -> {run.export_dir}",
        ],
        "features": _capture_plan(train),
        # what SpecForge's launch planner starts on each node (one process, world size 1: in this process)
        "specforge_launch": specforge_launches(sf_cfg, str(run_yaml), topo),
        "manifest": str(pool_path(run.pools_dir, run.pool)),
        "export_dir": str(run.export_dir),
    }
    if topo.multi:
        plan["nodes"] = {
            "node 0": "data, features (train.features.shards processes), train, export, register",
            ("node 1" if topo.nodes == 2 else f"nodes 1-{topo.nodes - 1}"): "train only, after node 0's hand-off "
            f"{handoff_path(run.run_dir, topo)} (nothing loaded before)",
        }
        plan["rendezvous"] = {"master_addr": topo.master_addr, "master_port": topo.master_port}
    return TrainResult(
        run.drafter, run.domain, run.pool, run.run_dir, None, None, None, {}, plan, {}, sf_cfg.model_dump(mode="json")
    )


# -- stage 2: target + data + run directory -----------------------------------------------------------------


def _head_only(run: TrainRun) -> bool:
    """This process needs only the target's head (:func:`hedgespec.models.load_target_head`): its features come
    from the DeepSpeed child, and it regenerates no answers with transformers itself."""
    data = run.cfg.get("data") or {}
    regen = (run.train.get("regenerate") or {}) if data.get("regenerated") and not data.get("path") else {}
    regen_here = bool(regen.get("max_examples")) and str(regen.get("backend") or "transformers") != "sglang"
    in_child = check_features_backend(run.train.get("features")) == "deepspeed" or _shards(run) > 1
    return in_child and not regen_here


def _gpus(run: TrainRun) -> int:
    return int(run.train.get("gpus") or 1)


def _shards(run: TrainRun) -> int:
    """``train.features.shards`` (default 1): processes the transformers capture runs in, one GPU each."""
    return int((run.train.get("features") or {}).get("shards", 1))


def stage_data(run: TrainRun) -> None:
    """Load the target, resolve (or build/regenerate) the data, derive the run key and claim the run directory."""
    with _timed(run, "load"):
        load = hedgespec.models.load_target_head if _head_only(run) else hedgespec.models.load_target
        run.model, run.tokenizer = load(resolve_target(target_config(run.cfg)))
        run.target_info = TargetInfo.from_model(run.target.name, run.model, run.tokenizer)
    with _timed(run, "data"):
        run.data_path, run.data_hash = resolve_data(run.cfg, run.domain, loaded=(run.model, run.tokenizer))
        check_budget_fits(run.cfg, run.domain, run.data_path, run.tokenizer)
    n_layers, vocab_size = run.target_info.num_layers, run.target_info.vocab_size
    expected = run.target.layer_count()
    if expected is not None and expected != n_layers:
        raise ValueError(
            f"target {run.target.name!r} has {n_layers} layers but its config says num_layers={expected}; "
            "fix target.num_layers (plans made without loading the target use it)"
        )
    run.aux = [int(i) for i in (run.train.get("aux_layer_ids") or default_aux_layer_ids(n_layers))]
    if len(set(run.aux)) != 3 or not all(0 <= i < n_layers for i in run.aux):
        raise ValueError(
            f"aux_layer_ids={run.aux}: EAGLE-3 fuses three distinct layers in [0, {n_layers}) of "
            f"target {run.target.name!r}; set train.aux_layer_ids or use a target with more layers"
        )
    run.draft_vocab = min(int((run.train.get("draft") or {}).get("vocab_size") or vocab_size), vocab_size)
    init = run.init_source
    key: dict[str, Any] = {
        "target": run.target_info.hash,
        "data": run.data_hash,
        "aux": run.aux,
        "draft_vocab": run.draft_vocab,
        "train": _keyed_train(run.train),
        "init_source": file_hash(init / "model.safetensors") if init is not None else None,
        "thinking": run.target.thinking,  # the same data rendered with the other thinking setting is another run
    }
    run.key = json_hash(_without_late_defaults(key))[:20]
    _claim_run_dir(run)


#: settings added to the run key after runs were first keyed, with the value that trains what the older runs
#: trained: at that value a setting is left out of the key, so runs from before it keep their key (and resume)
LATE_KEY_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("thinking",): None,
    ("train", "draft", "vocab"): "own",
    ("train", "features", "supervise"): "assistant",
    ("train", "nodes"): 1,
}


def _without_late_defaults(key: dict[str, Any]) -> dict[str, Any]:
    """``key`` without the :data:`LATE_KEY_DEFAULTS` settings that are at (or missing, i.e. at) their default."""
    out = copy.deepcopy(key)
    for path, default in LATE_KEY_DEFAULTS.items():
        *parents, leaf = path
        node: Any = out
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node and node[leaf] == default:
            del node[leaf]
    return out


def _keyed_train(train: Mapping[str, Any]) -> dict[str, Any]:
    """The training settings that define what is trained (the run key's ``train`` part).

    plan_only/overwrite change what is done, not what is trained; the data source is in the data hash; the
    rendezvous says where the nodes meet, which differs from one job to the next.
    """
    keyed = {k: v for k, v in train.items() if k not in ("plan_only", "overwrite", "source", "rendezvous")}
    if "shards" in (keyed.get("features") or {}):  # a sharded capture writes the single-process files
        keyed["features"] = {k: v for k, v in keyed["features"].items() if k != "shards"}
    return keyed


def check_budget_fits(cfg: Mapping[str, Any], domain: str, data_path: Path, tokenizer: Any) -> None:
    """Refuse, before any feature or training work, a budget whose ``max_length`` truncates away every assistant
    token of the conversations it would use (``train.features.max_samples`` of them), naming the length needed.

    Stops at the first conversation that fits, so a budget that works costs one tokenisation.
    """
    train = cfg.get("train") or {}
    feats = train.get("features") or {}
    lengths = window_settings(train)
    max_length = min(lengths.values())
    rows = read_conversations(data_path, feats.get("max_samples"))
    supervise = feats.get("supervise", "assistant")
    firsts = []
    for row in rows:
        _ids, mask = tokenize_conversation(tokenizer, row["conversations"], 1 << 30, supervise)
        first = int(mask.nonzero()[0, 0]) if bool(mask.any()) else None
        if first is not None and first < max_length:
            return
        if first is not None:
            firsts.append(first)
    if not firsts:
        raise ValueError(
            f"domain={domain}: {data_path} has no assistant turn to supervise in {len(rows)} conversations"
        )
    need = min(firsts) + 1
    fix = " ".join(f"{k}={-(-need // 64) * 64}" for k in lengths)
    raise ValueError(
        f"domain={domain}: budget train={train.get('name')} truncates every one of the {len(rows)} conversations it "
        f"uses before its first assistant token ({', '.join(f'{k}={v}' for k, v in lengths.items())}; the shortest "
        f"prompt of {data_path} needs {need} tokens). Raise it: {fix}, or pass data.path=<shorter conversations>"
    )


def _claim_run_dir(run: TrainRun) -> None:
    """Ours with the same key -> resume; ours with another key -> refuse unless ``train.overwrite``."""
    marker = run.run_dir / RUN_MARKER
    fresh = True
    if marker.is_file():
        old = json.loads(marker.read_text()).get("key")
        if old != run.key:
            if not bool(run.train.get("overwrite", False)):
                raise FileExistsError(
                    f"run directory {run.run_dir} holds a run with another configuration (key {old} != {run.key}); "
                    "pass train.overwrite=true to discard it, or choose another pool/drafter name"
                )
            shutil.rmtree(run.run_dir)
        else:
            fresh = False
    run.run_dir.mkdir(parents=True, exist_ok=True)
    _write_json({"key": run.key, "domain": run.domain, "pool": run.pool, "target": run.target.name}, marker)
    run.state = _RunState(run.run_dir, run.key, fresh)


# -- stage 3: features + vocab mapping ----------------------------------------------------------------------


def stage_features(run: TrainRun) -> None:
    """Target features (cached by content key) and the draft vocabulary mapping built from them."""
    feats_cfg = run.train.get("features") or {}
    computed = run.target.compute_dtype  # a cast target's features are another dtype's numerics: another key
    common = {
        "target_hash": run.target_info.hash + (f"|compute={computed}" if computed else ""),
        "aux_layer_ids": run.aux,
        "max_length": int(feats_cfg.get("max_length", 512)),
        "max_samples": feats_cfg.get("max_samples"),
        "dtype": str(feats_cfg["dtype"]),
        "progress": run.progress,
        "tokenizer_hash": hedgespec.models.tokenizer_fingerprint(run.tokenizer),  # chat template (thinking) too
        "supervise": check_supervise(feats_cfg.get("supervise", "assistant")),
    }
    root = _cache_root(run.cfg) / "features"
    with _timed(run, "features"):
        if check_features_backend(feats_cfg) == "deepspeed":  # ZeRO-Inference in a torchrun child
            ds = feats_cfg.get("deepspeed") or {}
            model_dir = target_model_dir(run.target, _cache_root(run.cfg), loaded=(run.model, run.tokenizer))
            fs = run.features = capture_features_deepspeed(
                model_dir,
                run.data_path,
                root,
                compute_dtype=str(run.model.dtype).removeprefix("torch."),
                offload=str(ds.get("offload", "cpu")),
                nvme_path=ds.get("nvme_path"),
                thinking=run.target.thinking,
                **common,
            )
        elif _shards(run) > 1:  # one child process per GPU, each with its share of the conversations
            target = resolve_target(target_config(run.cfg))
            fs = run.features = capture_features_sharded(
                target, run.data_path, root, shards=_shards(run), fingerprint=run.target_info.hash, **common
            )
        else:
            fs = run.features = generate_features(run.model, run.tokenizer, run.data_path, root, **common)
    run.state.mark(
        "features",
        {
            "key": fs.key,
            "path": str(fs.path),
            "samples": fs.num_samples,
            "tokens": fs.num_tokens,
            "loss_tokens": fs.num_loss_tokens,
            "reused": fs.reused,
        },
    )
    with _timed(run, "vocab"):
        if draft_vocab_source(run.train) == "init":  # the init drafter's vocabulary (a fine-tune of it)
            vm = shared_vocab_mapping(
                run.init_source / "model.safetensors", fs.path, run.target_info.vocab_size, run.draft_vocab
            )
        else:
            vm = build_vocab_mapping(fs.path, run.target_info.vocab_size, run.draft_vocab)
        run.vocab = vm
    run.state.mark("vocab", {"path": str(vm.path), "hash": vm.hash, "coverage": round(vm.coverage, 6)})


# -- stage 4: SpecForge training ----------------------------------------------------------------------------


def stage_train(run: TrainRun) -> None:
    """Write SpecForge's inputs and run config, then train (or skip: the ledger has a finished run)."""
    _train_inputs(run)
    run_yaml = _write_run_yaml(run)
    max_steps = run.specforge.training.max_steps
    done = run.state.done("train")
    with _timed(run, "train"):
        if done and run.latest and (max_steps is None or run.latest[1] >= max_steps):
            run.final_step, run.metrics = run.latest[1], done.get("metrics", {})
            announce(run.run_dir, run.topology, "done")
            return
        run.state.clear("train", "export", "register")
        if run.latest is not None:  # SpecForge resumes from it: refuse a damaged one by name
            check_training_state(run.latest[0])
        announce(run.run_dir, run.topology, "train", run_yaml=str(run_yaml), key=run.key, gpus=_gpus(run))
        _, run.metrics = _run_specforge_train(
            run_yaml,
            run.run_dir,
            run.device,
            max_steps,
            run.latest[1] if run.latest else 0,
            run.progress,
            int(run.train.get("gpus") or 1),
            run.specforge.model.torch_dtype,
            topology=run.topology,
        )
        run.latest = latest_checkpoint(run.ckpt_root, run.run_id)
        if run.latest is None:
            raise RuntimeError(
                f"SpecForge finished without writing a checkpoint under {run.ckpt_root}; "
                "set specforge.training.save_interval > 0 in the train budget"
            )
        run.final_step = run.latest[1]
        run.state.mark(
            "train", {"final_step": run.final_step, "checkpoint": str(run.latest[0]), "metrics": run.metrics}
        )


def _train_inputs(run: TrainRun) -> None:
    """The cached target head, ``<run>/draft_config.json`` and the warm start; then the target is released."""
    feat_dtype = str(run.train["features"]["dtype"])
    head_key = f"{run.target_info.hash.replace('sha256:', '')[:20]}-{feat_dtype}"
    run.head_dir = _cache_root(run.cfg) / "target_head" / head_key
    if not (run.head_dir / "model.safetensors.index.json").is_file():
        with atomic_dir(run.head_dir, replace=False) as tmp:  # another run that wrote it first keeps its copy
            save_target_head(run.model, run.tokenizer, tmp, getattr(torch, feat_dtype))
    draft_cfg = run.train.get("draft") or {}
    dcfg = draft_config_dict(
        run.model.config,
        draft_vocab_size=run.draft_vocab,
        aux_layer_ids=run.aux,
        max_position_embeddings=draft_cfg.get("max_position_embeddings"),
    )
    run.draft_config_path = _write_json(dcfg, run.run_dir / "draft_config.json")
    run.warm_start = _warm_start(run)
    _release_target(run)


def _release_target(run: TrainRun) -> None:
    """Free the target before training (SpecForge only reads the head files): drop the last reference, collect,
    and hand the CUDA caching allocator's blocks back, so SpecForge's torchrun workers get the whole GPU."""
    run.model = None
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _warm_start(run: TrainRun) -> Path | None:
    """Build ``<run>/warm_start`` for ``train.draft.init`` (see :mod:`hedgespec.training.warmstart`)."""
    init = draft_init(run.train)
    if init == SCRATCH:
        return None
    head, norm = target_head_and_norm(run.model)
    seed = int(((run.train.get("specforge") or {}).get("training") or {}).get("seed", 0))
    return build_warm_start(
        run.run_dir / "warm_start",
        run.draft_config_path,
        run.vocab.path,
        init=init,
        target_head=head,
        target_norm=norm,
        seed=seed,
        source_export=run.init_source,
    )


def _write_run_yaml(run: TrainRun) -> Path:
    """Compose SpecForge's config (resuming from the newest checkpoint), validate it, write ``<run>/run.yaml``."""
    run.latest = latest_checkpoint(run.ckpt_root, run.run_id)
    raw = compose_specforge(
        run.train.get("specforge") or {},
        target_model_path=str(run.head_dir),
        draft_config_path=str(run.draft_config_path),
        vocab_mapping_path=str(run.vocab.path),
        aux_layer_ids=run.aux,
        hidden_states_path=str(run.features.path),
        output_dir=str(run.ckpt_root),
        run_id=run.run_id,
        resume_from=str(run.latest[0]) if run.latest else None,
        tracking=run.tracking,
        chat_template=specforge_chat_template(run.target),
        trainer=run.topology.specforge_trainer(),
    )
    raw.setdefault("data", {}).setdefault("cache_dir", str(run.run_dir / "specforge_cache"))
    if run.warm_start is not None and run.latest is None:  # weights-only start of the first segment only
        raw["model"]["draft_checkpoint_path"] = str(run.warm_start)
    run.specforge = validate_specforge(raw)
    run_yaml = run.run_dir / "run.yaml"
    run_yaml.write_text(yaml.safe_dump(run.specforge.model_dump(mode="json"), sort_keys=False))
    return run_yaml


def _run_specforge_train(
    run_yaml: Path,
    run_dir: Path,
    device: str,
    max_steps: int | None,
    initial: int,
    progress: bool,
    gpus: int = 1,
    dtype: str = "bfloat16",
    node_rank: int = 0,
    topology: Topology | None = None,
) -> tuple[int | None, dict[str, Any]]:
    """``specforge train --config run.yaml`` in this process (CPU adaptations and the target head's ``dtype``
    scoped to the call); on several nodes with ``--node-rank``, node ``node_rank``'s metrics in its own file."""
    dist_env = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    preset = {k: os.environ[k] for k in dist_env if k in os.environ}
    multi = topology is not None and topology.multi
    metrics = run_dir / ("metrics.jsonl" if node_rank == 0 else f"nodes/metrics.node{node_rank}.jsonl")
    metrics.parent.mkdir(parents=True, exist_ok=True)
    tee = MetricTee(sys.stdout, metrics, max_steps, initial, progress)
    runtime: Any = cpu_runtime() if device == "cpu" else contextlib.nullcontext()
    # gpus > 1 or several nodes: SpecForge's torchrun workers print the metric lines on the inherited descriptor 1
    children = capture_fd_stdout(tee) if gpus > 1 or multi else contextlib.nullcontext()
    argv = ["train", "--config", str(run_yaml)] + (["--node-rank", str(node_rank)] if multi else [])
    try:
        with runtime, target_head_dtype(dtype), children, contextlib.redirect_stdout(tee):
            rc = specforge_cli_main(argv)
    finally:
        tee.close()
        for k in dist_env:  # SpecForge bootstraps a one-rank env:// rendezvous; do not leak it to the next run
            if k not in preset:
                os.environ.pop(k, None)
    if rc != 0:
        raise RuntimeError(f"specforge train exited with code {rc} (interrupted?); rerun the same command to resume")
    return tee.last_step, summarize(tee.last)


# -- stages 5 and 6: export + register ----------------------------------------------------------------------


def stage_export(run: TrainRun) -> None:
    """``specforge export --to sglang`` of the final checkpoint (skipped when the ledger has exported it)."""
    checkpoint = run.latest[0]
    with _timed(run, "export"):
        done = run.state.done("export")
        exported = (run.export_dir / "model.safetensors").is_file()
        if not (done and done.get("checkpoint") == str(checkpoint) and exported):
            export_sglang(
                checkpoint,
                run.draft_config_path,
                run.vocab.path,
                run.export_dir,
                {"run_key": run.key, "checkpoint": str(checkpoint), "target_hash": run.target_info.hash},
            )
            run.state.mark("export", {"checkpoint": str(checkpoint), "path": str(run.export_dir)})


def _recorded_config(sf: dict[str, Any]) -> dict[str, Any]:
    """The SpecForge config as the pool entry records it: without ``training.resume_from``, which says only where
    the last invocation picked up, so an interrupted and resumed run registers the entry of an uninterrupted one."""
    training = dict(sf.get("training") or {})
    training["resume_from"] = None
    out = {**sf, "training": training}
    trainer = ((sf.get("deployment") or {}).get("trainer")) or {}
    if trainer.get("master_addr"):  # which host the nodes met at is not what was trained
        out["deployment"] = {**sf["deployment"], "trainer": {**trainer, "master_addr": None}}
    return out


def stage_register(run: TrainRun) -> None:
    """Add (or replace) the drafter's entry in ``<pools>/<pool>.yaml``."""
    cfg = run.cfg
    run.manifest = pool_path(run.pools_dir, run.pool)
    vm = run.vocab
    entry = DrafterEntry(
        name=run.drafter,
        domain=run.domain,
        path=f"{run.pool}/{run.drafter}",
        target_hash=run.target_info.hash,
        vocab_mapping_hash=vm.hash,
        draft_vocab_size=run.draft_vocab,
        aux_layer_ids=tuple(run.aux),
        data_manifest_hash=run.data_hash,
        weights_hash=weights_hash(run.export_dir / "model.safetensors"),
        training={
            "budget": run.train.get("name"),
            "final_step": run.final_step,
            "features": run.features.key,
            "vocab_coverage": round(vm.coverage, 6),
            "specforge": _recorded_config(run.specforge.model_dump(mode="json")),
        },
        metrics=run.metrics,
    )
    register_drafter(run.manifest, run.pool, run.target_info, entry, decoding=cfg.get("decoding"))
    run.state.mark("register", {"manifest": str(run.manifest)})
