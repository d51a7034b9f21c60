"""From a composed ``conf/serve.yaml`` to the exact SGLang command line (no sglang import here).

:func:`build_plan` resolves the pool to on-disk checkpoints, validates it **before** anything is started
(pool for another target, missing drafter path, drafters that disagree on aux layer ids, vocabulary or shapes,
drafter dtypes that cannot be reconciled, ``topk`` above the draft vocabulary, rejection sampling with HEDGESPEC,
unknown selector, unsupported tree settings; each refusal is a ``ValueError`` naming the cause), and returns a
:class:`ServePlan`: the argv of ``python -m hedgespec.serving.server`` (every speculative setting explicit,
host 127.0.0.1 by default) plus the environment (``HEDGESPEC_CONFIG`` for the worker; the CPU shim for
``device=cpu``).

Pool configs (``conf/pool/<pool>.yaml``) come in two shapes:

* trained pools: ``manifest: pools/<pool>.yaml`` (written by ``train/run.py``; read with
  :func:`hedgespec.pools.load_pool`) plus ``target_path`` (HF id or local directory of the target; ``null``
  = the local copy hedgespec.models converts for the ``smollm2`` target, or the registry's id for an ``hf`` one);
* ``pool=tiny``: ``drafters: [{name, kind, seed, ...}]`` built in place (random weights); the launcher writes
  a 4-layer random Llama target and one random EAGLE-3 drafter per entry under ``workdir``
  (:mod:`hedgespec.serving.tiny`); ``kind: fit`` entries are served as random heads (fitting needs the engine).
"""

from __future__ import annotations

import hashlib
import json
import shlex
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from hedgespec.decoding import DecodingConfig
from hedgespec.models import resolve_target
from hedgespec.models.smollm2 import converted_dir
from hedgespec.pools import load_pool
from hedgespec.selectors import SELECTORS
from hedgespec.serving.pool_dir import LAYOUTS
from hedgespec.serving.server import cpu_environment  # imports no sglang

DEVICES = ("cuda", "cpu")
SELECTOR_META_KEYS = ("name", "label", "drafter")
CPU_DEFAULT_MAX_TOTAL_TOKENS = 8192
SPECULATIVE_PARAMS = ("decoding", "sglang_default")
DTYPES = ("float32", "bfloat16", "float16")
_SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
# Drafter config fields SGLang sizes one draft KV layout and one hidden-state capture from (drafter 0's)
_SHARED_FIELDS = ("hidden_size", "num_hidden_layers", "num_key_value_heads", "head_dim", "vocab_size")
REJECTION_SAMPLING_FLAG = "--speculative-use-rejection-sampling"


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
    dtype: str | None = None  # --dtype passed to SGLang (target and drafters); None = SGLang's auto

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def notes(self) -> list[str]:
        """What a user of this server should know about its output (printed by ``serve/launch.py``)."""
        cpu = "--device" in self.argv[:-1] and self.argv[self.argv.index("--device") + 1] == "cpu"
        if cpu and self.algorithm != "NONE":
            return [
                "on CPU SGLang verifies every speculative round greedily: requests with temperature > 0 get the "
                "target's greedy continuation after their first token, not a sample (use selector=none to sample "
                "on CPU)"
            ]
        return []

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def command(self, redact: bool = True) -> str:
        """The shell command (environment assignments included) that starts this server; the ``--api-key``
        value is shown as ``***`` unless ``redact=False``."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        argv = list(self.argv)
        if redact and "--api-key" in argv[:-1]:
            argv[argv.index("--api-key") + 1] = "***"
        return (env + " " if env else "") + " ".join(shlex.quote(a) for a in argv)


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


def _draft_vocab(cfg: dict[str, Any]) -> int:
    return int(cfg.get("draft_vocab_size") or cfg.get("vocab_size") or 0)


def _check_against_target(target_cfg: dict[str, Any], name: str, path: Path, dcfg: dict[str, Any]) -> None:
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


def _check_shared(configs: list[tuple[str, dict[str, Any]]]) -> None:
    """Drafters served together must agree on what SGLang reads once for the pool: the captured target layers
    (aux ids), the vocabularies and the draft KV layout (SGLang sizes every draft pool from drafter 0's)."""
    first, cfg0 = configs[0]
    checks = [("eagle_aux_hidden_state_layer_ids", _aux_ids), ("draft_vocab_size", _draft_vocab)]
    checks += [(key, lambda c, k=key: c.get(k)) for key in _SHARED_FIELDS]
    for key, get in checks:
        values = {name: get(cfg) for name, cfg in configs}
        if len({json.dumps(v) for v in values.values()}) > 1:
            detail = ", ".join(f"{n!r}: {list(v) if isinstance(v, tuple) else v}" for n, v in values.items())
            what = "aux layer ids" if key.startswith("eagle") else key
            raise ValueError(
                f"drafters use different {what} ({detail}); SGLang serves a pool with one captured set of "
                f"target layers, one vocabulary mapping size and one draft KV layout, so every drafter must "
                f"share {key} (retrain the odd one with the pool's settings, or serve it in another pool)"
            )


def check_drafters(target_cfg: dict[str, Any] | None, drafters: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Refuse drafters SGLang cannot serve together: missing files, another target's shapes, or aux layer
    ids, vocabularies or draft shapes that differ between drafters. Returns the drafters' configs."""
    if not drafters:
        raise ValueError("pool has no drafters")
    configs = []
    for name, path in drafters:
        dcfg = _drafter_config(path, name)
        if target_cfg is not None:
            _check_against_target(target_cfg, name, path, dcfg)
        configs.append((name, dcfg))
    _check_shared(configs)
    return [c for _, c in configs]


def _safetensors_dtype(path: Path) -> str | None:
    """The floating dtype of the first float tensor in ``path/model.safetensors`` (header only, no torch)."""
    f = path / "model.safetensors"
    if not f.is_file():
        return None
    with open(f, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    for key, meta in sorted(header.items()):
        if key != "__metadata__" and meta.get("dtype") in _SAFETENSORS_DTYPES:
            return _SAFETENSORS_DTYPES[meta["dtype"]]
    return None


def checkpoint_dtype(path: Path, cfg: dict[str, Any] | None) -> str | None:
    """A checkpoint's stored dtype: its weights' (safetensors header), else config.json's ``dtype``."""
    found = _safetensors_dtype(path)
    if found is None and cfg is not None:
        found = cfg.get("dtype") or cfg.get("torch_dtype")
    return str(found) if found in DTYPES else None


def reconcile_dtype(
    dtype: Any,
    drafters: list[tuple[str, Path]],
    configs: list[dict[str, Any]],
    target_dtype: str | None = None,
    device: str = "cuda",
) -> str | None:
    """The ``--dtype`` to pass. SGLang casts target and drafters to one ``--dtype``, but its ``auto`` picks
    each checkpoint's own (float32 becomes float16), so a float32 target with bfloat16 drafters would meet in a
    matmul with two dtypes. Explicit ``dtype`` wins; ``null`` = the drafters' common dtype for both, except
    float32 drafters of a half-precision target, which are served in the target's dtype (no upcast target), and
    bfloat16 drafters of a float32 target on a CPU without native bfloat16, which are served in float32 (an
    exact upcast; emulated bfloat16 matmuls are ~100x slower there, docs/results/cpu_dtype/avx2)."""
    if dtype:
        if str(dtype) not in DTYPES:
            raise ValueError(f"dtype={dtype!r}: expected one of {DTYPES} or null (the drafters' dtype)")
        return str(dtype)
    if not drafters:
        return None
    found = {name: checkpoint_dtype(Path(p), c) for (name, p), c in zip(drafters, configs)}
    kinds = set(found.values())
    if len(kinds) > 1:
        raise ValueError(
            f"drafters are stored in different dtypes ({found}) and dtype is null; SGLang serves target and "
            f"drafters in one dtype: pass it, e.g. `dtype={'bfloat16' if 'bfloat16' in kinds else 'float32'}`"
        )
    drafter_dtype = kinds.pop()  # None (nothing readable): SGLang's auto, which then treats both alike
    if drafter_dtype == "float32" and target_dtype in ("bfloat16", "float16"):
        return target_dtype
    if drafter_dtype == "bfloat16" and target_dtype == "float32" and device == "cpu":
        from hedgespec.models.linear_kernels import native_bfloat16  # imports torch: only for this case

        return drafter_dtype if native_bfloat16() else "float32"
    return drafter_dtype


def _target_dtype(target_path: str) -> str | None:
    path = Path(target_path)
    return checkpoint_dtype(path, _local_target_config(target_path)) if path.is_dir() else None


def _local_target_config(target_path: str) -> dict[str, Any] | None:
    p = Path(target_path) / "config.json"
    if p.is_file():
        cfg = json.loads(p.read_text())
        return cfg.get("text_config", cfg)
    return None


def default_target_path(pool: str, target_name: str, prepare: bool = False) -> str:
    """Where the server loads ``target_name`` from when the pool sets no ``target_path``: the local
    safetensors copy hedgespec.models converts for ``smollm2`` (converted now when ``prepare``; offline), or the
    registry's id for an ``hf`` target. The Hugging Face id of smollm2 is used only when set as target_path."""
    try:
        spec = resolve_target(target_name)
    except ValueError as e:
        raise ValueError(f"pool {pool!r}: set pool.target_path (HF id or local dir of the target): {e}") from None
    if spec.kind == "smollm2":
        local = converted_dir(spec.cache_dir)
        if prepare and not (local / "config.json").is_file():
            from hedgespec.models.smollm2 import convert_smollm2  # torch: only when a conversion is needed

            print(f"converting target smollm2 into {local} (once, offline)", flush=True)
            local = convert_smollm2(spec.cache_dir)
        return str(local)
    if spec.kind == "hf" and spec.hf_id:
        return str(spec.hf_id)
    raise ValueError(
        f"pool {pool!r}: target {target_name!r} has no on-disk copy to serve; set pool.target_path to the local "
        "HF directory of the target the pool was trained for (save_pretrained of hedgespec.models.load_target)"
    )


def resolve_pool(
    pool: Any, workdir: str | Path, prepare: bool = False, plain: bool = False
) -> tuple[str, str, list[tuple[str, Path]]]:
    """``(target_name, target_path, [(drafter name, dir)])`` for a pool config (see module docstring);
    ``prepare``: convert a missing local target copy now (the launcher; a dry run only prints the path);
    ``plain`` (selector=none): a pool whose manifest is not trained yet serves its target with no drafters."""
    pool = _plain(pool)
    name = str(_get(pool, "name", "?"))
    manifest = _get(pool, "manifest")
    untrained = not (manifest and Path(str(manifest)).is_file()) and not _get(pool, "drafters")
    if plain and untrained and _get(pool, "target"):
        target_name = str(_get(pool, "target"))
        return target_name, str(_get(pool, "target_path") or default_target_path(name, target_name, prepare)), []
    if manifest:
        if not Path(str(manifest)).is_file():
            tgt = _get(pool, "target") or name
            budget = {"smollm2": "embedded", "tiny": "tiny"}.get(str(tgt), "paper")
            raise FileNotFoundError(
                f"pool {name!r}: manifest {manifest} does not exist; train its drafters first, e.g. `python "
                f"train/run.py -m domain=python,math,biology,chemistry,medqa,cnndm,sql,general target={tgt} "
                f"train={budget}` (registers them in {Path(str(manifest)).name} under paths.pools), or point "
                "pool.manifest at an existing manifest"
            )
        man = load_pool(manifest, target=None, check_files=False)
        target_name = str(_get(pool, "target", man.target.name))
        if man.target.name != target_name:
            raise ValueError(
                f"pool {name!r}: manifest {manifest} was trained for target {man.target.name!r}, "
                f"but this pool config serves target {target_name!r} (pool for another target)"
            )
        target_path = _get(pool, "target_path") or default_target_path(name, target_name, prepare)
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
    plain: bool = False  # selector=none: plain SGLang decoding of the target, no speculation (the × plain baseline)


#: ``selector=none``: the target alone (conf/selector/none.yaml), as in the bench's plain baseline
PLAIN_SELECTOR = "none"


def _selector_plan(cfg: Any) -> _SelectorPlan:
    sel = _plain(_get(cfg, "selector")) or {"name": "hedgespec"}
    if isinstance(sel, str):
        sel = {"name": sel}
    name, label = str(sel.get("name")), str(sel.get("label") or sel.get("name"))
    if name == PLAIN_SELECTOR:
        return _SelectorPlan(name, label, False, {}, None, plain=True)
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


def _speculative_args(cfg: Any, sel: _SelectorPlan, dec: DecodingConfig) -> list[str]:
    """``--speculative-*`` from the ``decoding`` group, or none (SGLang chooses by target architecture, e.g.
    steps 5, topk 4, 8 draft tokens for Llama) with ``speculative_params=sglang_default`` (stock EAGLE-3 only)."""
    mode = str(_get(cfg, "speculative_params", "decoding") or "decoding")
    if mode not in SPECULATIVE_PARAMS:
        raise ValueError(f"speculative_params={mode!r}: expected one of {SPECULATIVE_PARAMS}")
    if mode == "sglang_default":
        if not sel.stock:
            raise ValueError(
                "speculative_params=sglang_default is for selector=eagle (stock EAGLE-3): HEDGESPEC takes its draft "
                "shape from the decoding group (decoding=chain or decoding=tree); use speculative_params=decoding"
            )
        return []
    return [
        "--speculative-num-steps",
        str(dec.num_steps),
        "--speculative-eagle-topk",
        str(dec.topk),
        "--speculative-num-draft-tokens",
        str(dec.num_draft_tokens),
    ]


def _server_args(cfg: Any, sel: _SelectorPlan, dec: DecodingConfig, device: str, dtype: str | None) -> list[str]:
    """Every speculative and sizing flag explicit (``decoding`` group → ``--speculative-*``)."""
    argv = [] if sel.plain else _speculative_args(cfg, sel, dec)
    argv += ["--max-running-requests", str(int(_get(cfg, "max_running_requests", 16)))]
    # HEDGESPEC registers without overlap support; SGLang itself turns overlap off for speculation on CPU, and
    # plain decoding on CPU runs without it too, so every CPU server has the same scheduler
    if device == "cpu" or not (sel.plain or sel.stock):
        argv.append("--disable-overlap-schedule")
    max_total = _get(cfg, "max_total_tokens") or (CPU_DEFAULT_MAX_TOTAL_TOKENS if device == "cpu" else None)
    if max_total:
        argv += ["--max-total-tokens", str(int(max_total))]
    if _get(cfg, "mem_fraction_static") is not None:
        argv += ["--mem-fraction-static", str(_get(cfg, "mem_fraction_static"))]
    if dtype:
        argv += ["--dtype", dtype]
    if _get(cfg, "api_key"):
        argv += ["--api-key", str(_get(cfg, "api_key"))]
    if _get(cfg, "trust_remote_code", False) is True:
        argv.append("--trust-remote-code")
    if device == "cpu":
        argv += ["--device", "cpu", "--attention-backend", "intel_amx", "--skip-server-warmup"]
    return argv + _extra_args(cfg, sel)


def _extra_args(cfg: Any, sel: _SelectorPlan) -> list[str]:
    extra = [str(a) for a in (_plain(_get(cfg, "extra_args")) or [])]
    if not sel.stock and any(
        a == REJECTION_SAMPLING_FLAG or a.startswith(REJECTION_SAMPLING_FLAG + "=") for a in extra
    ):
        raise ValueError(
            f"extra_args has {REJECTION_SAMPLING_FLAG}: with HEDGESPEC that is not lossless (SGLang's rejection "
            "sampler would use the draft law of the last drafter extended, not of each request's chosen drafter); "
            "remove it (HEDGESPEC verifies with SGLang's target-only rule), or serve selector=eagle"
        )
    if any(a == "--trust-remote-code" for a in extra) and _get(cfg, "trust_remote_code", False) is not True:
        raise ValueError("extra_args has --trust-remote-code: set trust_remote_code=true instead (off by default)")
    return extra


def _check_tree(dec: DecodingConfig) -> None:
    """SGLang's draft step makes topk + (num_steps − 1)·topk² candidate nodes and keeps the num_draft_tokens − 1
    best-scored (``organize_draft_results``); more than it makes fails inside the server's first round."""
    if dec.mode != "tree":
        return
    made = dec.topk + (dec.num_steps - 1) * dec.topk**2
    if dec.num_draft_tokens - 1 > made:
        raise ValueError(
            f"decoding.num_draft_tokens={dec.num_draft_tokens}: a tree of num_steps={dec.num_steps}, "
            f"topk={dec.topk} makes {made} candidate nodes and SGLang keeps num_draft_tokens - 1 of them; set "
            f"decoding.num_draft_tokens <= {made + 1}"
        )


def _check_topk(dec: DecodingConfig, names: list[str], configs: list[dict[str, Any]]) -> None:
    for name, c in zip(names, configs):
        vocab = _draft_vocab(c)
        if vocab and dec.topk > vocab:
            raise ValueError(
                f"decoding.topk={dec.topk} is larger than drafter {name!r}'s draft vocabulary ({vocab} tokens); "
                f"set decoding.topk <= {vocab}"
            )


def _server_env(
    sel: _SelectorPlan, names: list[str], paths: list[str], device: str, pool_dir: str | None = None
) -> dict[str, str]:
    env: dict[str, str] = {}
    if not sel.stock and not sel.plain:
        worker = {"drafters": paths, "names": names, "selector": sel.name, "selector_kwargs": sel.kwargs}
        if pool_dir is not None:
            worker["pool_dir"] = pool_dir
        env["HEDGESPEC_CONFIG"] = json.dumps(worker)
        env["SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"] = "1"  # all-row draft logits exist on the eager path only
    if device == "cpu":
        cpu = cpu_environment({})
        env.update({"PYTHONPATH": cpu["PYTHONPATH"], "SGLANG_USE_CPU_ENGINE": "1"})
    return env


def _int_option(cfg: Any, key: str, default: Any, lo: int, hi: int | None = None, null_ok: bool = False) -> None:
    v = _get(cfg, key, default)
    if v is None and null_ok:
        return
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)
    if not ok:
        bound = f"an int in [{lo}, {hi}]" if hi is not None else f"an int >= {lo}"
        raise ValueError(f"{key}={v!r}: must be {bound}" + (" or null" if null_ok else ""))


def check_sizing(cfg: Any) -> None:
    """Port and sizing options, named when wrong (before anything is resolved or loaded)."""
    _int_option(cfg, "port", 30000, 1, 65535)
    _int_option(cfg, "max_running_requests", 16, 1)
    _int_option(cfg, "max_total_tokens", None, 1, null_ok=True)
    frac = _get(cfg, "mem_fraction_static")
    if frac is not None and (isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0.0 < frac < 1.0):
        raise ValueError(f"mem_fraction_static={frac!r}: must be a fraction in (0, 1) of the GPU memory, or null")


def _fused_pool_dir(
    cfg: Any, names: list[str], paths: list[str], configs: list[dict[str, Any]], prepare: bool
) -> str | None:
    """With ``fused=true``: the directory SGLang loads as the one pool draft model
    (:func:`hedgespec.serving.pool_dir.write_pool_dir`; written when ``prepare``, a dry run only names it),
    keyed by the drafters it holds and the KV layout asked for (``fused_layout``). None with ``fused=false``."""
    fused = _get(cfg, "fused", False)
    if not isinstance(fused, bool):
        raise ValueError(f"fused={fused!r}: must be true or false")
    layout = _get(cfg, "fused_layout", "layers")
    if layout not in LAYOUTS:
        raise ValueError(f"fused_layout={layout!r}: expected one of {LAYOUTS}")
    if not fused:
        return None
    key = hashlib.sha256("\n".join([*paths, layout]).encode()).hexdigest()[:12]
    out = Path(_get(cfg, "workdir", "outputs/serve")).resolve() / "fused-pools" / key
    if prepare:
        from hedgespec.serving.pool_dir import write_pool_dir

        write_pool_dir(out, paths, configs, names, layout=layout)
    return str(out)


def build_plan(cfg: Any, python: str | None = None, prepare: bool = False) -> ServePlan:
    """Validate a composed serve config and build the server command (see module docstring); ``prepare``:
    convert a missing local target copy (the launcher does; a dry run does not)."""
    device = str(_get(cfg, "device", "cuda"))
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: expected one of {DEVICES}")
    check_sizing(cfg)
    sel = _selector_plan(cfg)
    dec = DecodingConfig.from_dict(_plain(_get(cfg, "decoding")) or {})
    _check_tree(dec)
    _, target_path, drafters = resolve_pool(
        _get(cfg, "pool"), _get(cfg, "workdir", "outputs/serve"), prepare, plain=sel.plain
    )
    all_names = [n for n, _ in drafters]
    names, paths = _served_drafters(cfg, sel, all_names, [str(Path(p).resolve()) for _, p in drafters])
    served = [(n, p) for n, p in drafters if n in names]
    # selector=none on a pool not trained yet: the target alone (its dtype is `dtype` or SGLang's auto)
    configs = check_drafters(_local_target_config(target_path), served) if served or not sel.plain else []
    _check_topk(dec, names, configs)
    dtype = reconcile_dtype(_get(cfg, "dtype"), served, configs, _target_dtype(target_path), device)
    if sel.plain:  # the drafters only fixed the dtype, so plain decoding runs in the speculative servers' dtype
        names, paths = [], []
    host, port = str(_get(cfg, "host", "127.0.0.1")), int(_get(cfg, "port", 30000))
    algorithm = "NONE" if sel.plain else "EAGLE3" if sel.stock else "HEDGESPEC"
    pool_dir = _fused_pool_dir(cfg, names, paths, configs, prepare) if algorithm == "HEDGESPEC" else None
    draft_path = pool_dir or (paths[0] if paths else None)
    spec = [] if sel.plain else ["--speculative-algorithm", algorithm, "--speculative-draft-model-path", draft_path]
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
        *spec,
        *_server_args(cfg, sel, dec, device, dtype),
    ]
    return ServePlan(
        argv=argv,
        env=_server_env(sel, names, paths, device, pool_dir),
        algorithm=algorithm,
        target_path=target_path,
        drafter_names=names,
        drafter_paths=paths,
        selector=sel.label,
        selector_kwargs=sel.kwargs,
        host=host,
        port=port,
        dtype=dtype,
    )
