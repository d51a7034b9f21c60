"""From a composed ``conf/serve.yaml`` to the exact SGLang command line (no sglang import here).

:func:`build_plan` resolves the pool to on-disk checkpoints, validates it **before** anything is started
(pool for another target, missing drafter path, drafters with different aux layer ids, unknown selector,
unsupported tree settings; each refusal is a ``ValueError`` naming the cause), and returns a
:class:`ServePlan`: the argv of ``python -m hedgespec.serving.server`` (every speculative setting explicit,
host 127.0.0.1 by default) plus the environment (``HEDGESPEC_CONFIG`` for the worker; the CPU shim for
``device=cpu``).

Pool configs (``conf/pool/<pool>.yaml``) come in two shapes:

* trained pools: ``manifest: pools/<pool>.yaml`` (written by ``train/run.py``; read with
  :func:`hedgespec.pools.load_pool`) plus ``target_path`` (HF id or local directory of the target);
* ``pool=tiny``: ``drafters: [{name, kind, seed, ...}]`` built in place (random weights); the launcher writes
  a 4-layer random Llama target and one random EAGLE-3 drafter per entry under ``workdir``
  (:mod:`hedgespec.serving.tiny`); ``kind: fit`` entries are served as random heads (fitting needs the engine).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from hedgespec.decoding import DecodingConfig
from hedgespec.pools import load_pool
from hedgespec.selectors import SELECTORS
from hedgespec.serving.server import cpu_environment  # imports no sglang

DEVICES = ("cuda", "cpu")
SELECTOR_META_KEYS = ("name", "label", "drafter")
CPU_DEFAULT_MAX_TOTAL_TOKENS = 8192


@dataclass
class ServePlan:
    """Everything needed to start (or print) one server."""

    argv: list[str]
    env: dict[str, str]
    algorithm: str
    target_path: str
    drafter_names: list[str]
    drafter_paths: list[str]
    selector: str
    selector_kwargs: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 30000

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def command(self) -> str:
        """The shell command (environment assignments included) that starts this server."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + " ".join(shlex.quote(a) for a in self.argv)


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _plain(obj: Any) -> Any:
    return OmegaConf.to_container(obj, resolve=True) if OmegaConf.is_config(obj) else obj


def _drafter_config(path: Path, name: str) -> dict[str, Any]:
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise ValueError(
            f"drafter {name!r}: path {path} has no config.json (missing drafter checkpoint); "
            "train it with `python train/run.py` or fix the pool manifest"
        )
    return json.loads(cfg_path.read_text())


def _aux_ids(cfg: dict[str, Any]) -> tuple[int, ...] | None:
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return tuple(int(i) for i in ids) if ids is not None else None


def check_drafters(target_cfg: dict[str, Any] | None, drafters: list[tuple[str, Path]]) -> None:
    """Refuse drafters SGLang cannot serve together: missing files, another target's shapes, or aux layer
    ids that differ between drafters (SGLang captures one set of target layers for the whole pool)."""
    if not drafters:
        raise ValueError("pool has no drafters")
    seen: dict[tuple[int, ...] | None, str] = {}
    for name, path in drafters:
        dcfg = _drafter_config(path, name)
        if target_cfg is not None:
            hidden = dcfg.get("target_hidden_size", dcfg.get("hidden_size"))
            if hidden != target_cfg.get("hidden_size"):
                raise ValueError(
                    f"drafter {name!r} ({path}) is for another target: hidden size {hidden}, "
                    f"target has {target_cfg.get('hidden_size')}"
                )
            if dcfg.get("vocab_size") != target_cfg.get("vocab_size"):
                raise ValueError(
                    f"drafter {name!r} ({path}) is for another target: vocab_size "
                    f"{dcfg.get('vocab_size')}, target has {target_cfg.get('vocab_size')}"
                )
            layers = int(target_cfg.get("num_hidden_layers", 0))
            ids = _aux_ids(dcfg)
            if ids is not None and layers and (len(set(ids)) != len(ids) or not all(0 <= i < layers - 1 for i in ids)):
                raise ValueError(
                    f"drafter {name!r}: aux layer ids {list(ids)} cannot be captured by SGLang from a "
                    f"{layers}-layer target (need distinct ids in [0, {layers - 2}])"
                )
        seen.setdefault(_aux_ids(dcfg), name)
    if len(seen) > 1:
        detail = ", ".join(f"{n!r}: {list(i) if i is not None else 'default'}" for i, n in seen.items())
        raise ValueError(
            f"drafters use different aux layer ids ({detail}); SGLang captures one set of target "
            "layers per server, so a pool must share eagle_aux_hidden_state_layer_ids"
        )


def _local_target_config(target_path: str) -> dict[str, Any] | None:
    p = Path(target_path) / "config.json"
    if p.is_file():
        cfg = json.loads(p.read_text())
        return cfg.get("text_config", cfg)
    return None


def resolve_pool(pool: Any, workdir: str | Path) -> tuple[str, str, list[tuple[str, Path]]]:
    """``(target_name, target_path, [(drafter name, dir)])`` for a pool config (see module docstring)."""
    pool = _plain(pool)
    name = str(_get(pool, "name", "?"))
    manifest = _get(pool, "manifest")
    if manifest:
        man = load_pool(manifest, target=None, check_files=False)
        target_name = str(_get(pool, "target", man.target.name))
        if man.target.name != target_name:
            raise ValueError(
                f"pool {name!r}: manifest {manifest} was trained for target {man.target.name!r}, "
                f"but this pool config serves target {target_name!r} (pool for another target)"
            )
        target_path = _get(pool, "target_path")
        if not target_path:
            raise ValueError(f"pool {name!r}: set target_path (HF id or local dir of {target_name!r})")
        drafters = [(d.name, man.drafter_path(d)) for d in man.drafters]
        return target_name, str(target_path), drafters
    entries = _get(pool, "drafters")
    if not entries:
        raise ValueError(f"pool {name!r}: needs either `manifest:` (trained pool) or `drafters:` (tiny pool)")
    if str(_get(pool, "target", "tiny")) != "tiny" and name != "tiny":
        raise ValueError(f"pool {name!r}: in-place drafters are only supported for the tiny target")
    return "tiny", *_materialise_tiny(name, entries, workdir)


def _materialise_tiny(
    name: str, entries: list[dict[str, Any]], workdir: str | Path
) -> tuple[str, list[tuple[str, Path]]]:
    from hedgespec.serving.tiny import make_drafter, make_target  # torch: only for the in-place tiny pool

    root = Path(workdir) / f"pool-{name}"
    target = root / "target"
    if not (target / "config.json").is_file():
        make_target(target, seed=0)
    drafters = []
    for e in entries:
        dname, kind = str(e["name"]), str(e.get("kind", "random"))
        if kind == "path":
            drafters.append((dname, Path(e["path"])))
            continue
        dpath = root / f"drafter-{dname}"
        if not (dpath / "config.json").is_file():
            make_drafter(dpath, target, seed=int(e.get("seed", 0)), mode=str(e.get("mode", "random")))
        drafters.append((dname, dpath))
    return str(target), drafters


@dataclass
class _SelectorPlan:
    name: str
    label: str
    stock: bool  # stock SGLang EAGLE-3 with the pool's generalist (selector=eagle)
    kwargs: dict[str, Any]
    drafter: str | None


def _selector_plan(cfg: Any) -> _SelectorPlan:
    sel = _plain(_get(cfg, "selector")) or {"name": "hedgespec"}
    if isinstance(sel, str):
        sel = {"name": sel}
    name, label = str(sel.get("name")), str(sel.get("label") or sel.get("name"))
    stock = label == "eagle"
    if not stock and name not in SELECTORS:
        raise ValueError(
            f"unknown selector {name!r}; expected one of {sorted(SELECTORS)} or 'eagle' "
            "(stock SGLang EAGLE-3 with the pool's generalist)"
        )
    kwargs = {k: v for k, v in sel.items() if k not in SELECTOR_META_KEYS}
    drafter = None if sel.get("drafter") is None else str(sel["drafter"])
    return _SelectorPlan(name, label, stock, kwargs, drafter)


def _served_drafters(cfg: Any, sel: _SelectorPlan, names: list[str], paths: list[str]) -> tuple[list[str], list[str]]:
    """Resolve ``selector.drafter`` to a Fixed index; stock EAGLE-3 serves the generalist alone."""
    if sel.drafter is not None:
        if sel.drafter not in names:
            raise ValueError(f"selector {sel.label!r} wants drafter {sel.drafter!r}, but the pool has {names}")
        if sel.name == "fixed":
            sel.kwargs["index"] = names.index(sel.drafter)
    if not sel.stock:
        return names, paths
    general = sel.drafter or str(_get(_plain(_get(cfg, "pool")), "generalist", names[0]))
    if general not in names:
        raise ValueError(f"selector=eagle needs the generalist drafter {general!r}, but the pool has {names}")
    return [general], [paths[names.index(general)]]


def _server_args(cfg: Any, dec: DecodingConfig, device: str) -> list[str]:
    """Every speculative and sizing flag explicit (``decoding`` group → ``--speculative-*``)."""
    argv = [
        "--speculative-num-steps",
        str(dec.num_steps),
        "--speculative-eagle-topk",
        str(dec.topk),
        "--speculative-num-draft-tokens",
        str(dec.num_draft_tokens),
        "--max-running-requests",
        str(int(_get(cfg, "max_running_requests", 16))),
        "--disable-overlap-schedule",
    ]
    max_total = _get(cfg, "max_total_tokens") or (CPU_DEFAULT_MAX_TOTAL_TOKENS if device == "cpu" else None)
    if max_total:
        argv += ["--max-total-tokens", str(int(max_total))]
    if _get(cfg, "mem_fraction_static") is not None:
        argv += ["--mem-fraction-static", str(_get(cfg, "mem_fraction_static"))]
    if _get(cfg, "dtype"):
        argv += ["--dtype", str(_get(cfg, "dtype"))]
    if device == "cpu":
        argv += ["--device", "cpu", "--attention-backend", "intel_amx", "--skip-server-warmup"]
    return argv + [str(a) for a in (_plain(_get(cfg, "extra_args")) or [])]


def _server_env(sel: _SelectorPlan, names: list[str], paths: list[str], device: str) -> dict[str, str]:
    env: dict[str, str] = {}
    if not sel.stock:
        env["HEDGESPEC_CONFIG"] = json.dumps(
            {"drafters": paths, "names": names, "selector": sel.name, "selector_kwargs": sel.kwargs}
        )
        env["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"] = "1"  # all-row draft logits exist on the eager path only
    if device == "cpu":
        cpu = cpu_environment({})
        env.update({"PYTHONPATH": cpu["PYTHONPATH"], "SGLANG_USE_CPU_ENGINE": "1"})
    return env


def build_plan(cfg: Any, python: str | None = None) -> ServePlan:
    """Validate a composed serve config and build the server command (see module docstring)."""
    device = str(_get(cfg, "device", "cuda"))
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: expected one of {DEVICES}")
    sel = _selector_plan(cfg)
    dec = DecodingConfig.from_dict(_plain(_get(cfg, "decoding")) or {})
    if not sel.stock and dec.mode != "chain":
        raise ValueError(f"decoding.mode={dec.mode}: the HEDGESPEC worker drafts chains only (decoding=chain)")
    _, target_path, drafters = resolve_pool(_get(cfg, "pool"), _get(cfg, "workdir", "outputs/serve"))
    check_drafters(_local_target_config(target_path), drafters)
    names, paths = _served_drafters(cfg, sel, [n for n, _ in drafters], [str(Path(p).resolve()) for _, p in drafters])
    host, port = str(_get(cfg, "host", "127.0.0.1")), int(_get(cfg, "port", 30000))
    algorithm = "EAGLE3" if sel.stock else "HEDGESPEC"
    argv = [
        python or sys.executable,
        "-m",
        "hedgespec.serving.server",
        "--model-path",
        target_path,
        "--host",
        host,
        "--port",
        str(port),
        "--speculative-algorithm",
        algorithm,
        "--speculative-draft-model-path",
        paths[0],
        *_server_args(cfg, dec, device),
    ]
    return ServePlan(
        argv=argv,
        env=_server_env(sel, names, paths, device),
        algorithm=algorithm,
        target_path=target_path,
        drafter_names=names,
        drafter_paths=paths,
        selector=sel.label,
        selector_kwargs=sel.kwargs,
        host=host,
        port=port,
    )
