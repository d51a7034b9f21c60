"""Target features through DeepSpeed ZeRO-Inference: ZeRO stage 3 with the parameters offloaded to CPU or NVMe.

The transformers path (:mod:`hedgespec.training.features`) holds the whole target on one device.  ZeRO-Inference
(Aminabadi et al., 2022, "DeepSpeed-Inference: Enabling Efficient Inference of Transformer Models at Unprecedented
Scale", and DeepSpeed's ZeRO-Inference tutorial) keeps the weights partitioned in CPU memory (or on NVMe) and
gathers each layer onto the GPU only for its own forward, so a target larger than the GPU (Qwen3-32B, 65 GB in
bfloat16, on one 24-48 GB card) still yields its hidden states, at the cost of moving every weight over PCIe once
per forward.

The features are written by the very same code as the transformers path: the worker builds the target under
``HfDeepSpeedConfig`` (so ``from_pretrained`` partitions it while loading), wraps it with ``deepspeed.initialize``
and hands ``engine.module`` to :func:`hedgespec.training.features.generate_features`.  Files, tensors, manifest
and cache key are therefore those of the transformers path (``input_ids``, ``loss_mask``, ``hidden_state``,
``aux_hidden_state``; the manifest adds ``"backend": "deepspeed-zero3"``), and the pipeline can switch backends
without its readers noticing.

DeepSpeed needs a launcher-initialised process group, so :func:`capture_features_deepspeed` runs the worker as a
child process, ``python -m torch.distributed.run --standalone --nproc_per_node 1 -m
hedgespec.training.capture_deepspeed ...``, with ``DS_ACCELERATOR=cpu`` on machines without CUDA (CPU runs are
what CI tests).  The child exits before the caller continues, so the GPU is free again for training.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from huggingface_hub import snapshot_download

from hedgespec.io import atomic_dir, write_json_atomic
from hedgespec.models.chat import pin_thinking
from hedgespec.models.fingerprint import target_fingerprint
from hedgespec.models.smollm2 import convert_smollm2
from hedgespec.training.features import (
    MANIFEST,
    FeatureSet,
    add_capture_arguments,
    cached_features,
    feature_key,
    generate_features,
)
from hedgespec.training.hashing import file_hash

DEEPSPEED_VERSION = "0.19.8"
BACKEND = "deepspeed-zero3"
OFFLOAD_DEVICES = ("cpu", "nvme")
FEATURE_BACKENDS = ("transformers", "deepspeed")
COMPUTE_DTYPES = ("float32", "bfloat16", "float16")
INSTALL_HINT = (
    f"the DeepSpeed capture backend needs deepspeed {DEEPSPEED_VERSION} (and accelerate). Install it with\n"
    "    bash scripts/install.d/30-train.sh\n"
    f"(or: pip install -c requirements/constraints.txt 'deepspeed=={DEEPSPEED_VERSION}' accelerate), "
    "or use train.features.backend=transformers."
)


def require_deepspeed() -> ModuleType:
    """Import and return ``deepspeed`` or raise ImportError with the install command."""
    try:
        deepspeed = importlib.import_module("deepspeed")
        importlib.import_module("accelerate")  # transformers' HfDeepSpeedConfig needs it
    except ImportError as exc:
        raise ImportError(f"{exc}.\n{INSTALL_HINT}") from exc
    return deepspeed


def zero_inference_config(
    hidden_size: int,
    offload: str = "cpu",
    nvme_path: str | None = None,
    compute_dtype: str = "float32",
    pin: bool = False,
) -> dict[str, Any]:
    """The DeepSpeed config of ZeRO-Inference: stage 3, parameters offloaded to ``offload`` (``cpu`` | ``nvme``).

    Bucket sizes follow DeepSpeed's ZeRO-Inference example (prefetch ``0.9 H^2``, parameters under ``10 H`` stay
    resident); ``pin`` pins the offloaded copy for faster host-to-GPU copies (CUDA only).
    """
    if offload not in OFFLOAD_DEVICES:
        raise ValueError(f"offload={offload!r}: expected one of {OFFLOAD_DEVICES}")
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype={compute_dtype!r}: expected one of {COMPUTE_DTYPES}")
    if hidden_size < 1:
        raise ValueError(f"hidden_size={hidden_size}: must be positive")
    offload_param: dict[str, Any] = {"device": offload, "pin_memory": pin}
    if offload == "nvme":
        if not nvme_path:
            raise ValueError("offload='nvme' needs nvme_path=<a directory on a fast local NVMe drive>")
        offload_param.update(nvme_path=str(nvme_path), buffer_count=5, buffer_size=int(1e8))
    return {
        "train_micro_batch_size_per_gpu": 1,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": compute_dtype == "bfloat16"},
        "fp16": {"enabled": compute_dtype == "float16"},
        "zero_optimization": {
            "stage": 3,
            "offload_param": offload_param,
            "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
            "stage3_param_persistence_threshold": 10 * hidden_size,
        },
    }


def _check_inputs(model_dir: Path, data_path: Path, aux_layer_ids: Sequence[int], offload: str, nvme_path: Any) -> int:
    """Validate before any process starts; returns the target's hidden size."""
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"model_dir={str(model_dir)!r}: no config.json; pass a Hugging Face model directory")
    cfg = json.loads(cfg_path.read_text())
    cfg = cfg.get("text_config", cfg)
    n_layers = int(cfg["num_hidden_layers"])
    if len(aux_layer_ids) != 3 or not all(0 <= int(i) < n_layers for i in aux_layer_ids):
        raise ValueError(f"aux_layer_ids={list(aux_layer_ids)}: need 3 layer ids in [0, {n_layers}) for this target")
    if not data_path.is_file():
        raise ValueError(f"data_path={str(data_path)!r}: no such conversation JSONL file")
    if offload not in OFFLOAD_DEVICES:
        raise ValueError(f"offload={offload!r}: expected one of {OFFLOAD_DEVICES}")
    if offload == "nvme" and not (nvme_path and Path(nvme_path).is_dir()):
        raise ValueError(f"nvme_path={nvme_path!r}: offload='nvme' needs an existing directory on an NVMe drive")
    return int(cfg["hidden_size"])


def check_features_backend(features_cfg: Mapping[str, Any] | None) -> str:
    """Validate ``train.features.backend`` (``transformers`` | ``deepspeed``) and ``train.features.deepspeed``.

    Meant for the pipeline's setup, before anything is loaded; returns the backend name.
    """
    features_cfg = features_cfg or {}
    backend = str(features_cfg.get("backend") or "transformers")
    if backend not in FEATURE_BACKENDS:
        raise ValueError(f"train.features.backend={backend!r}: expected one of {FEATURE_BACKENDS}")
    ds = features_cfg.get("deepspeed") or {}
    unknown = sorted(set(ds) - {"offload", "nvme_path"})
    if unknown:
        raise ValueError(f"train.features.deepspeed has unknown keys {unknown}; known: offload, nvme_path")
    if backend == "deepspeed":
        offload, nvme_path = str(ds.get("offload", "cpu")), ds.get("nvme_path")
        if offload not in OFFLOAD_DEVICES:
            raise ValueError(f"train.features.deepspeed.offload={offload!r}: expected one of {OFFLOAD_DEVICES}")
        if offload == "nvme" and not (nvme_path and Path(str(nvme_path)).is_dir()):
            raise ValueError(
                f"train.features.deepspeed.nvme_path={nvme_path!r}: offload=nvme needs an existing NVMe directory"
            )
        if importlib.util.find_spec("deepspeed") is None:
            raise ImportError(f"train.features.backend=deepspeed: deepspeed is not installed.\n{INSTALL_HINT}")
    return backend


def target_model_dir(spec: Any, root: str | os.PathLike[str], loaded: tuple[Any, Any] | None = None) -> Path:
    """The Hugging Face directory the DeepSpeed child loads for a :class:`~hedgespec.models.spec.TargetSpec`.

    ``hf`` targets: the local directory, or the hub id's cached snapshot (never downloaded here); ``smollm2``: the
    converted checkpoint; ``tiny`` (weights exist only in memory): ``loaded`` saved once under
    ``root/targets/tiny-<weights hash>``.
    """
    if spec.kind == "hf":
        if Path(str(spec.hf_id)).is_dir():
            return Path(str(spec.hf_id))
        try:
            return Path(snapshot_download(str(spec.hf_id), local_files_only=True))
        except Exception as exc:  # huggingface_hub raises several types for "not in the local cache"
            raise ValueError(
                f"target hf_id={spec.hf_id!r} is not in the local Hugging Face cache ({type(exc).__name__}); "
                f"download it first: huggingface-cli download {spec.hf_id}"
            ) from exc
    if spec.kind == "smollm2":
        return convert_smollm2(spec.cache_dir)
    if loaded is None:
        raise ValueError(f"target kind={spec.kind!r} lives in memory only: pass loaded=(model, tokenizer) to save it")
    model, tokenizer = loaded
    out = Path(root) / "targets" / f"{spec.kind}-{target_fingerprint(model).split(':')[-1][:16]}"
    if not (out / "config.json").is_file():
        with atomic_dir(out, replace=False) as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
    return out


def capture_features_deepspeed(
    model_dir: str | os.PathLike[str],
    data_path: str | os.PathLike[str],
    cache_root: str | os.PathLike[str],
    *,
    target_hash: str,
    aux_layer_ids: Sequence[int],
    max_length: int,
    max_samples: int | None = None,
    dtype: str = "bfloat16",
    compute_dtype: str = "float32",
    offload: str = "cpu",
    nvme_path: str | None = None,
    progress: bool = True,
    tokenizer_hash: str = "",
    thinking: bool | None = None,
    supervise: str = "assistant",
) -> FeatureSet:
    """Write (or reuse) ``cache_root/<key>/`` like :func:`~hedgespec.training.features.generate_features`.

    ``model_dir`` is the target's Hugging Face directory (``save_pretrained`` output), ``compute_dtype`` the dtype
    the target runs in (match the transformers path's target dtype for equal features), ``dtype`` the stored one.
    The capture runs in a ``torch.distributed.run`` child; its output is shown when ``progress`` and quoted in the
    RuntimeError when it fails. ``thinking`` (the target's chat-template switch) is fixed in the tokenizer the
    child loads from ``model_dir``, so its renders are the parent's; ``tokenizer_hash`` joins the cache key.
    """
    model_dir, data_path = Path(model_dir), Path(data_path)
    _check_inputs(model_dir, data_path, aux_layer_ids, offload, nvme_path)
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"compute_dtype={compute_dtype!r}: expected one of {COMPUTE_DTYPES}")
    key = feature_key(
        target_hash, file_hash(data_path), aux_layer_ids, max_length, max_samples, dtype, tokenizer_hash, supervise
    )
    out = Path(cache_root) / key
    if (cached := cached_features(out, key)) is not None:
        return cached
    if importlib.util.find_spec("deepspeed") is None:
        raise ImportError(f"deepspeed is not installed.\n{INSTALL_HINT}")
    argv = [
        *("--model-dir", str(model_dir), "--data", str(data_path), "--cache-root", str(cache_root)),
        *("--target-hash", target_hash, "--aux-layer-ids", *[str(int(i)) for i in aux_layer_ids]),
        *("--max-length", str(max_length), "--dtype", dtype, "--compute-dtype", compute_dtype, "--offload", offload),
        *(("--max-samples", str(max_samples)) if max_samples is not None else ()),
        *(("--nvme-path", str(nvme_path)) if nvme_path else ()),
        *(("--tokenizer-hash", tokenizer_hash) if tokenizer_hash else ()),
        *(("--thinking", str(thinking).lower()) if thinking is not None else ()),
        *("--supervise", supervise),
        *(("--progress",) if progress else ()),
    ]
    _launch(argv, echo=progress)
    if not (out / MANIFEST).is_file():
        raise RuntimeError(f"the DeepSpeed capture finished but wrote no {out / MANIFEST}")
    m = json.loads((out / MANIFEST).read_text())
    return FeatureSet(out, key, m["num_samples"], m["num_tokens"], m["num_loss_tokens"], reused=False)


def launch_command(argv: Sequence[str]) -> list[str]:
    """The one-process ``torch.distributed.run`` command line that runs this module's worker with ``argv``."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"] + [
        "-m",
        __name__,
        *argv,
    ]


def launch_env() -> dict[str, str]:
    """The child's environment: ``DS_ACCELERATOR=cpu`` where CUDA is absent (unless the caller chose one)."""
    import torch

    env = dict(os.environ)
    if "DS_ACCELERATOR" not in env and not torch.cuda.is_available():
        env["DS_ACCELERATOR"] = "cpu"
    return env


def _launch(argv: Sequence[str], echo: bool) -> None:
    """Run the worker; stream its output when ``echo``; on failure raise with the output's tail."""
    cmd = launch_command(argv)
    tail = bytearray()
    with subprocess.Popen(cmd, env=launch_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
            if echo:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            tail = (tail + chunk)[-6000:]
    if proc.returncode != 0:
        raise RuntimeError(
            f"the DeepSpeed capture failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- last output ---\n{tail.decode(errors='replace')}"
        )


# -- the worker (runs inside torch.distributed.run) ---------------------------------------------------------


def _load_zero3(model_dir: Path, config: dict[str, Any], compute_dtype: str) -> tuple[Any, Any]:
    """The target partitioned by ZeRO-3 while loading, wrapped by ``deepspeed.initialize``; and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.integrations import HfDeepSpeedConfig

    deepspeed = require_deepspeed()
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().device_name() == "cpu":
        # One process needs no shared-memory all-reduce; skipping it avoids compiling DeepSpeed's C++ op (minutes).
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if config["zero_optimization"]["offload_param"]["device"] == "nvme" and not deepspeed.ops.__compatible_ops__.get(
        "async_io"
    ):
        raise RuntimeError("offload='nvme' needs DeepSpeed's async_io op (libaio-dev); use offload='cpu'")
    ds_hf = HfDeepSpeedConfig(config)  # must be alive while from_pretrained runs: it turns on zero.Init
    local = os.environ.get("HF_HUB_OFFLINE") == "1" or model_dir.is_dir()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, compute_dtype), local_files_only=local)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=local)
    engine = deepspeed.initialize(model=model, config=config)[0]
    del ds_hf
    return engine.module, tokenizer


def run_worker(args: argparse.Namespace) -> tuple[Path, float, float]:
    """Capture inside the launched process (world size 1) and mark the manifest with the backend.

    Returns the feature directory and the seconds spent loading the target and capturing.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != 1:
        raise RuntimeError(f"WORLD_SIZE={world}: the DeepSpeed capture runs as one process (--nproc_per_node 1)")
    model_dir = Path(args.model_dir)
    hidden = _check_inputs(model_dir, Path(args.data), args.aux_layer_ids, args.offload, args.nvme_path)
    import torch

    pin = torch.cuda.is_available()
    config = zero_inference_config(hidden, args.offload, args.nvme_path, args.compute_dtype, pin=pin)
    t0 = time.perf_counter()
    model, tokenizer = _load_zero3(model_dir, config, args.compute_dtype)
    thinking = None if args.thinking is None else args.thinking == "true"
    tokenizer = pin_thinking(tokenizer, thinking, str(model_dir))
    t1 = time.perf_counter()
    fs = generate_features(
        model,
        tokenizer,
        args.data,
        args.cache_root,
        target_hash=args.target_hash,
        aux_layer_ids=args.aux_layer_ids,
        max_length=args.max_length,
        max_samples=args.max_samples,
        dtype=args.dtype,
        progress=args.progress,
        tokenizer_hash=args.tokenizer_hash,
        supervise=args.supervise,
    )
    if not fs.reused:
        manifest = json.loads((fs.path / MANIFEST).read_text())
        manifest.update(backend=BACKEND, offload=args.offload, compute_dtype=args.compute_dtype)
        write_json_atomic(manifest, fs.path / MANIFEST, indent=2)
    return fs.path, t1 - t0, time.perf_counter() - t1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torch.distributed.run --standalone --nproc_per_node 1 -m hedgespec.training.capture_deepspeed",
        description="Target features in SpecForge's offline format through DeepSpeed ZeRO-Inference (stage 3).",
    )
    add_capture_arguments(p)
    p.add_argument("--model-dir", required=True, help="Hugging Face directory of the target")
    p.add_argument("--cache-root", required=True, help="features are written to <cache-root>/<key>/")
    p.add_argument("--compute-dtype", default="float32", choices=COMPUTE_DTYPES, help="dtype the target runs in")
    p.add_argument("--offload", default="cpu", choices=OFFLOAD_DEVICES)
    p.add_argument("--nvme-path", default=None)
    p.add_argument("--tokenizer-hash", default="", help="the parent's tokenizer fingerprint (part of the cache key)")
    p.add_argument("--thinking", default=None, choices=("true", "false"), help="fix the chat template's switch")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        path, load_s, capture_s = run_worker(args)
    except (ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"features: {path} (target load {load_s:.2f} s, capture {capture_s:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
