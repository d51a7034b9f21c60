"""Target features captured by several processes at once, one GPU each (``train.features.shards``).

The conversations are dealt out round-robin: shard ``r`` of ``n`` loads the target on its own device (GPU ``r``
of the visible ones; on a CPU run every shard shares the cores) and writes the records of conversations
``r, r + n, r + 2n, ...`` with :func:`hedgespec.training.features.feature_record`, the in-process capture's own
code. When every shard has exited, the parent renumbers the records in conversation order, so the directory
is the one a single-process capture writes, file for file. The same cache key covers both, and so does a reuse.

The shards are child processes (``python -m hedgespec.training.capture_sharded``), so their GPU memory is
released when they exit, before SpecForge trains; the parent needs only the target's head
(:func:`hedgespec.models.load_target_head`). Each shard checks that the target it loaded has the parent's
fingerprint before it writes anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hedgespec.io import atomic_dir, write_json_atomic
from hedgespec.training.features import (
    FeatureSet,
    add_capture_arguments,
    cached_features,
    check_supervise,
    feature_key,
    read_conversations,
    record_path,
    write_manifest,
)
from hedgespec.training.hashing import file_hash

BACKEND = "transformers-sharded"
PARTS = "shards"


def check_shards(shards: Any, device: str, visible: int | None = None) -> int:
    """``train.features.shards`` as an int >= 1 that the devices allow (at most the visible CUDA GPUs on CUDA)."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"train.features.shards={shards!r} must be an int >= 1 (capture processes, one GPU each)")
    if shards > 1 and str(device).startswith("cuda"):
        if visible is None:
            import torch

            visible = torch.cuda.device_count()
        if shards > visible:
            raise ValueError(
                f"train.features.shards={shards} but {visible} CUDA device(s) are visible; "
                f"set train.features.shards<={visible}"
            )
    return shards


def capture_features_sharded(
    target: Any,
    data_path: str | os.PathLike[str],
    cache_root: str | os.PathLike[str],
    *,
    shards: int,
    target_hash: str,
    fingerprint: str | None = None,
    aux_layer_ids: Sequence[int],
    max_length: int,
    max_samples: int | None = None,
    dtype: str = "bfloat16",
    progress: bool = True,
    tokenizer_hash: str = "",
    supervise: str = "assistant",
) -> FeatureSet:
    """Write (or reuse) ``cache_root/<key>/`` as :func:`~hedgespec.training.features.generate_features` does,
    with ``shards`` child processes. ``target`` is the :class:`~hedgespec.models.TargetSpec` every shard loads
    (on CUDA, shard ``r`` gets the ``r``-th visible GPU as ``cuda:0``); ``fingerprint``, when given, is the
    :func:`~hedgespec.models.target_fingerprint` each shard's target must have (``target_hash`` is the cache
    key's, which may carry more)."""
    from hedgespec.models import resolve_target

    spec = resolve_target(target)
    check_shards(shards, spec.device)
    check_supervise(supervise)
    data_path = Path(data_path)
    if not data_path.is_file():
        raise FileNotFoundError(f"data_path={str(data_path)!r} does not exist")
    key = feature_key(
        target_hash, file_hash(data_path), aux_layer_ids, max_length, max_samples, dtype, tokenizer_hash, supervise
    )
    out = Path(cache_root) / key
    if (cached := cached_features(out, key)) is not None:
        return cached
    common = [
        *("--target", json.dumps(asdict(spec)), "--target-hash", target_hash, "--data", str(data_path)),
        *("--aux-layer-ids", *[str(int(i)) for i in aux_layer_ids], "--max-length", str(max_length)),
        *("--dtype", dtype, "--supervise", supervise, "--shards", str(shards)),
        *(("--max-samples", str(max_samples)) if max_samples is not None else ()),
    ]
    common += ["--fingerprint", fingerprint] if fingerprint else []
    with atomic_dir(out, replace=False) as tmp:
        t0 = time.perf_counter()
        _run_shards(common, tmp / PARTS, shards, spec.device, progress)
        counts = merge_shards(tmp / PARTS, tmp, shards)
        if counts[0] == 0:
            raise ValueError(
                f"{data_path}: no conversation has a supervised assistant token within max_length={max_length}"
            )
        write_manifest(
            tmp, key, target_hash, data_path, aux_layer_ids, max_length, dtype, counts, supervise,
            backend=BACKEND, shards=shards, capture_s=round(time.perf_counter() - t0, 2),
        )  # fmt: skip
    return FeatureSet(out, key, *counts, reused=False)


def shard_env(rank: int, shards: int, device: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Shard ``rank``'s environment: on CUDA only its own GPU visible; on CPU an equal share of the cores."""
    env = dict(os.environ if base is None else base)
    if str(device).startswith("cuda"):
        visible = env.get("CUDA_VISIBLE_DEVICES")
        ids = [d for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(shards)]
        env["CUDA_VISIBLE_DEVICES"] = ids[rank]
    else:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // shards))
    return env


def _run_shards(common: Sequence[str], parts: Path, shards: int, device: str, progress: bool) -> None:
    """Start every shard, wait for all; the first that fails stops the others and is raised with its output."""
    parts.mkdir(parents=True)
    logs, procs = [], []
    for rank in range(shards):
        log = open(parts / f"shard{rank}.log", "w+b")  # noqa: SIM115 - closed below, after the process ends
        cmd = [sys.executable, "-m", __name__, *common, "--shard", str(rank), "--out", str(parts)]
        if progress and rank == 0:
            cmd.append("--progress")
        procs.append(subprocess.Popen(cmd, env=shard_env(rank, shards, device), stdout=log, stderr=subprocess.STDOUT))
        logs.append(log)
    try:
        failed = None
        while failed is None and any(p.poll() is None for p in procs):
            failed = next((r for r, p in enumerate(procs) if p.poll() not in (None, 0)), None)
            time.sleep(0.2)
        failed = next((r for r, p in enumerate(procs) if p.returncode not in (None, 0)), failed)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if progress:
            logs[0].seek(0)
            sys.stderr.write(logs[0].read().decode(errors="replace"))
    tails = []
    for log in logs:
        log.seek(0)
        tails.append(log.read()[-6000:].decode(errors="replace"))
        log.close()
    if failed is not None:
        raise RuntimeError(
            f"feature capture shard {failed} of {shards} failed (exit {procs[failed].returncode})\n"
            f"--- its last output ---\n{tails[failed]}"
        )


def merge_shards(parts: Path, out: Path, shards: int) -> tuple[int, int, int]:
    """Move the shards' records into ``out`` numbered in conversation order (a single process's numbering);
    returns (samples, tokens, loss tokens). Removes ``parts``."""
    index = []
    for rank in range(shards):
        done = parts / str(rank) / "index.json"
        if not done.is_file():
            raise RuntimeError(f"feature capture shard {rank} exited without writing {done}")
        index += [(row, rank, tokens, loss) for row, tokens, loss in json.loads(done.read_text())]
    index.sort()
    for n, (row, rank, _, _) in enumerate(index):
        os.replace(parts / str(rank) / f"row_{row}.ckpt", record_path(out, n))
    shutil.rmtree(parts)
    return len(index), sum(t for *_, t, _ in index), sum(x for *_, x in index)


# -- one shard (a child process) ------------------------------------------------------------------------------


def run_shard(args: argparse.Namespace) -> int:
    """Load the target, check its fingerprint, write the records of this shard's conversations and its index."""
    import torch
    from tqdm.auto import tqdm

    from hedgespec.models import TargetSpec, load_target, target_fingerprint
    from hedgespec.training.features import feature_record

    spec = TargetSpec.from_dict(json.loads(args.target))
    if spec.device.startswith("cuda"):
        spec = TargetSpec.from_dict({**asdict(spec), "device": "cuda:0"})  # the one GPU this shard sees
    model, tokenizer = load_target(spec)
    got = target_fingerprint(model)
    if args.fingerprint and got != args.fingerprint:
        raise ValueError(
            f"shard {args.shard} loaded a target with hash {got}; the training run's is {args.fingerprint}"
        )
    rows = read_conversations(args.data, args.max_samples)
    out = Path(args.out) / str(args.shard)
    out.mkdir(parents=True, exist_ok=True)
    index = []
    model.eval()
    mine = range(args.shard, len(rows), args.shards)
    for i in tqdm(mine, desc=f"target features (shard 0 of {args.shards})", disable=not args.progress):
        record = feature_record(
            model, tokenizer, rows[i], args.aux_layer_ids, args.max_length, getattr(torch, args.dtype), args.supervise
        )
        if record is not None:
            torch.save(record, out / f"row_{i}.ckpt")
            index.append((i, int(record["input_ids"].numel()), int(record["loss_mask"].sum())))
    write_json_atomic(index, out / "index.json")
    return len(index)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hedgespec.training.capture_sharded",
        description="One shard of a sharded target-feature capture (started by capture_features_sharded).",
    )
    add_capture_arguments(p)
    p.add_argument("--target", required=True, help="the TargetSpec as JSON")
    p.add_argument("--fingerprint", default=None, help="the fingerprint the loaded target must have")
    p.add_argument("--out", required=True, help="records go to <out>/<shard>/row_<i>.ckpt")
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--shards", type=int, required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 0 <= args.shard < args.shards:
        print(f"error: --shard {args.shard} is not in [0, {args.shards})", file=sys.stderr)
        return 2
    try:
        n = run_shard(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"shard {args.shard}: {n} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
