"""HEDGESPEC against stock EAGLE-3 at a real model's shapes: dummy weights, simulated acceptance, one table.

What a round costs depends on the shapes (target and head sizes, draft vocabulary, N) and on the serving path
(kernels, CUDA graphs, memory reserve), not on trained weights. So the servers are started on checkpoints that
hold only a ``config.json`` (``--load-format dummy``: SGLang fills the weights itself, nothing is downloaded)
and with SGLang's own ``SGLANG_SIMULATE_ACC_LEN``, which makes every verification accept the same number of
tokens for both servers. Then the two differ only in what each round does: stock EAGLE-3 drafts and
draft-extends with one head; HEDGESPEC selects, drafts with the chosen head, and draft-extends all N (with one
SGLang draft worker per head, or with the pool as one fused draft model, ``hedgespec_fused``). Plain decoding
(the target alone, no speculation) runs on the same checkpoints as the baseline every ratio is also given to.

For each server (started, measured, stopped in turn): startup time (process start to ``/health_generate``),
the KV-cache size SGLang allocated (``/server_info`` ``max_total_num_tokens``), peak memory while serving (GPU
memory in use on CUDA, from ``nvidia-smi``; resident memory of the server's processes on CPU), and output
tokens/s at each batch size: one ``/generate`` call with B prompts of random ids, ``new_tokens`` each, EOS
ignored, after one warm-up call at that batch size (the median of ``repeats`` such calls), and for HEDGESPEC
the milliseconds per round in each phase (draft, verify, evaluate, update). Every row carries its ratios to
plain decoding and to stock EAGLE-3.
``scripts/shapes_bench.py`` is the entry point; ``scripts/gpu_check.sh`` runs it at Llama-3.1-8B shapes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hedgespec.fixtures import CKPT_HEADS, CKPT_HIDDEN, CKPT_INTER, CKPT_KV_HEADS, SPECIAL_TOKENS, drafter_config
from hedgespec.pools import DrafterEntry, PoolManifest, TargetInfo, save_pool
from hedgespec.serving.argv import ServePlan, build_plan
from hedgespec.serving.launch import ServerProcess
from hedgespec.serving.loadtest import RssSampler, Sampler, generate

# Llama-3.1-8B-Instruct's config.json (shapes and rope only) and the EAGLE-3 head SGLang's examples serve for it
# (one decoder layer, the target's attention shapes, a 32000-token draft vocabulary, SpecForge's aux layers).
_LLAMA8B_ROPE = {
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}


@dataclass(frozen=True)
class Shape:
    """A target's shapes and its EAGLE-3 head's (``registry`` names the conf/target/ entry, for the manifest)."""

    registry: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    draft_vocab: int
    max_positions: int
    rope: dict[str, Any] = field(default_factory=dict)
    aux: tuple[int, ...] | None = None  # None: SpecForge's default capture layers for ``layers``

    @property
    def aux_layer_ids(self) -> list[int]:
        from hedgespec.training.features import default_aux_layer_ids

        return list(self.aux) if self.aux is not None else default_aux_layer_ids(self.layers)

    def target_config(self) -> dict[str, Any]:
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.intermediate,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "max_position_embeddings": self.max_positions,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "bfloat16",
            **self.rope,
        }

    def drafter_config(self) -> dict[str, Any]:
        return drafter_config(
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_heads=self.heads,
            num_kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab,
            draft_vocab_size=self.draft_vocab,
            aux_layer_ids=self.aux_layer_ids,
            max_position_embeddings=self.max_positions,
            rms_norm_eps=1e-5,
            rope=self.rope,
            extra={"torch_dtype": "bfloat16"},
        )


SHAPES: dict[str, Shape] = {
    "llama8b": Shape("llama8b", 4096, 14336, 32, 32, 8, 128, 128256, 32000, 131072, _LLAMA8B_ROPE),
    # the serve tests' tiny target's shapes (SGLang captures layers 0..L-2 only), with a draft vocabulary smaller
    # than the target's (a d2t map)
    # SmolLM2-135M-Instruct (the embedded default's target, conf/target/smollm2.yaml) with the embedded pool's
    # 4096-token draft vocabulary (conf/train/embedded.yaml)
    "smollm2": Shape("smollm2", 576, 1536, 30, 9, 3, 64, 49152, 4096, 8192, {"rope_theta": 100000.0}),
    "tiny": Shape(
        "tiny",
        CKPT_HIDDEN,
        CKPT_INTER,
        4,
        CKPT_HEADS,
        CKPT_KV_HEADS,
        CKPT_HIDDEN // CKPT_HEADS,
        256 + len(SPECIAL_TOKENS),
        128,
        1024,
        aux=(0, 1, 2),
    ),
}


def shape(name: str) -> Shape:
    if name not in SHAPES:
        raise ValueError(f"shape={name!r}: expected one of {sorted(SHAPES)}")
    return SHAPES[name]


#: drafter weights a comparison serves: ``dummy`` (config-only checkpoints, SGLang fills every weight) or
#: ``lowrank`` (written weights: drafter 0 random, every other drafter drafter 0 plus random rank-r deltas with
#: its ``lowrank.safetensors``, as scripts/lowrank_pool.py writes a pool, so the fused pool evaluates and drafts
#: with the base read once; the target stays dummy)
WEIGHTS = ("dummy", "lowrank")


def write_checkpoints(
    sh: Shape, root: Path, n_drafters: int, weights: str = "dummy", rank: int = 16
) -> tuple[Path, Path]:
    """Config-only target and ``n_drafters`` drafter directories under ``root`` (``weights``: :data:`WEIGHTS`)
    and a pool manifest that lists them; returns (target dir, manifest path)."""
    if n_drafters < 1:
        raise ValueError(f"drafters={n_drafters}: a pool needs at least one drafter")
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r}: expected one of {list(WEIGHTS)}")
    if root.exists():
        shutil.rmtree(root)
    target = root / "target"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps(sh.target_config(), indent=1))
    entries = []
    for i in range(n_drafters):
        d = root / f"d{i}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(sh.drafter_config(), indent=1))
        entries.append(
            DrafterEntry(
                name=f"d{i}",
                domain="general" if i == 0 else f"expert{i}",
                path=d.name,
                target_hash="dummy",
                vocab_mapping_hash="dummy",
                draft_vocab_size=sh.draft_vocab,
                aux_layer_ids=tuple(sh.aux_layer_ids),
                data_manifest_hash="dummy",
            )
        )
    if weights == "lowrank":
        write_low_rank_weights([root / e.path for e in entries], sh, rank)
    info = TargetInfo(sh.registry, "dummy", sh.hidden, sh.vocab, sh.layers)
    manifest = save_pool(PoolManifest(f"shapes-{sh.registry}", info, {}, tuple(entries), root), root / "pool.yaml")
    return target, manifest


def write_low_rank_weights(dirs: Sequence[Path], sh: Shape, rank: int, std: float = 0.02) -> None:
    """Weights for the drafter directories ``dirs`` (their config.json written): the first a random head, each
    other one that head plus random rank-``rank`` deltas of every matrix, saved by
    :meth:`hedgespec.engine.lowrank.LowRankDrafter.save` (dense weights plus the factors)."""
    import torch
    from safetensors.torch import save_file

    from hedgespec.engine.eagle3 import MATRICES, Eagle3Drafter
    from hedgespec.engine.lowrank import LowRankDrafter
    from hedgespec.fixtures import random_drafter_state

    if rank < 1:
        raise ValueError(f"rank={rank}: the experts' deltas need rank >= 1")
    cfg = sh.drafter_config()
    state = random_drafter_state(cfg, seed=0, std=std, lm_head_fan_in=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(dirs[0] / "model.safetensors"))
    base = Eagle3Drafter.load(dirs[0], name=dirs[0].name)
    norms = {k: v for k, v in base.weights.items() if k not in MATRICES}
    g = torch.Generator().manual_seed(1)
    for d in dirs[1:]:
        factors = {}
        for k in MATRICES:
            out, inp = base.weights[k].shape  # factors in the transposed layout: delta^T = a @ b
            scale = (std / rank**0.5) ** 0.5
            factors[k] = (torch.randn(inp, rank, generator=g) * scale, torch.randn(rank, out, generator=g) * scale)
        LowRankDrafter(base, factors, norms, rank, d.name).save(d)


@dataclass(frozen=True)
class Settings:
    """One comparison's settings (the same for both servers)."""

    device: str = "cuda"
    n_drafters: int = 8
    num_steps: int = 3
    batch_sizes: tuple[int, ...] = (1, 16, 64)
    new_tokens: int = 256
    prompt_tokens: int = 128
    accept_len: float = 3.0
    dtype: str = "bfloat16"
    weights: str = "dummy"  # WEIGHTS
    rank: int = 16  # the experts' delta rank with weights="lowrank"
    repeats: int = 1  # calls per batch size (the median is reported)
    max_total_tokens: int | None = None  # None: SGLang sizes the KV cache from free memory
    port: int = 31000
    startup_timeout_s: float = 600.0
    extra_args: tuple[str, ...] = ()

    def check(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device={self.device!r}: expected cuda or cpu")
        for name, v, lo in (
            ("num_steps", self.num_steps, 1),
            ("new_tokens", self.new_tokens, 1),
            ("prompt_tokens", self.prompt_tokens, 1),
            ("repeats", self.repeats, 1),
        ):
            if v < lo:
                raise ValueError(f"{name}={v}: must be >= {lo}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights={self.weights!r}: expected one of {list(WEIGHTS)}")
        if self.rank < 1:
            raise ValueError(f"rank={self.rank}: must be >= 1")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError(f"batch_sizes={list(self.batch_sizes)}: need batch sizes >= 1")
        if not 1.0 <= self.accept_len <= self.num_steps + 1:
            raise ValueError(
                f"accept_len={self.accept_len}: the simulated tokens per round must lie in [1, num_steps + 1 = "
                f"{self.num_steps + 1}]"
            )


#: the servers a comparison can start: label -> (serve config ``selector.name``, other serve config keys). Plain
#: decoding (no speculation) is every comparison's baseline; ``hedgespec_fused`` is the pool as one draft model.
SERVERS: dict[str, tuple[str, dict[str, Any]]] = {
    "plain": ("none", {}),
    "eagle": ("eagle", {}),
    "hedgespec": ("hedgespec", {}),
    "hedgespec_fused": ("hedgespec", {"fused": True}),
    "hedgespec_fused_heads": ("hedgespec", {"fused": True, "fused_layout": "heads"}),
}
DEFAULT_SERVERS = ("plain", "eagle", "hedgespec")


def server_plan(sh: Shape, root: Path, target: Path, manifest: Path, server: str, s: Settings) -> ServePlan:
    """The serve plan (the launcher's own ``build_plan``) of one server (a :data:`SERVERS` label) on the dummy
    checkpoints; on CUDA every server captures graphs up to the largest batch size measured (N drafters' graphs
    otherwise take minutes)."""
    if server not in SERVERS:
        raise ValueError(f"server={server!r}: expected one of {sorted(SERVERS)}")
    selector, overrides = SERVERS[server]
    # written drafter weights are loaded (the target stays dummy); plain decoding has no draft model
    draft_format = ["--speculative-draft-load-format", "auto"] if s.weights != "dummy" and selector != "none" else []
    graphs = ["--cuda-graph-max-bs", str(max(s.batch_sizes))] if s.device == "cuda" else []
    cfg = {
        "pool": {
            "name": f"shapes-{sh.registry}",
            "target": sh.registry,
            "manifest": str(manifest),
            "target_path": str(target),
        },
        "selector": {"name": selector},
        "device": s.device,
        "host": "127.0.0.1",
        "port": s.port,
        "decoding": {"mode": "chain", "num_steps": s.num_steps, "topk": 1, "num_draft_tokens": s.num_steps + 1},
        "max_running_requests": max(s.batch_sizes),
        "max_total_tokens": s.max_total_tokens,
        "dtype": s.dtype,
        "workdir": str(root),
        "extra_args": ["--load-format", "dummy", "--skip-tokenizer-init", *graphs, *draft_format, *s.extra_args],
        **overrides,
    }
    plan = build_plan(cfg, prepare=True)  # writes the fused pool's directory (the checkpoints are given)
    # SGLang's default method, named: a round accepts floor or ceil of accept_len (exactly it when an integer)
    plan.env.update(SGLANG_SIMULATE_ACC_LEN=f"{s.accept_len:g}", SGLANG_SIMULATE_ACC_METHOD="match-expected")
    return plan


def batch_tokens_per_s(base_url: str, b: int, s: Settings, vocab: int, seed: int) -> dict[str, Any]:
    """One ``/generate`` call with ``b`` random-id prompts; output tokens per second of wall time."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(10, vocab, size=(b, s.prompt_tokens)).tolist()
    sp = {"temperature": 0, "max_new_tokens": s.new_tokens, "ignore_eos": True}
    t0 = time.perf_counter()
    outs = generate(base_url, {"input_ids": prompts, "sampling_params": sp}, timeout_s=1800.0)
    wall = time.perf_counter() - t0
    outs = outs if isinstance(outs, list) else [outs]
    tokens = sum(len(o["output_ids"]) for o in outs)
    accept = [o["meta_info"].get("spec_accept_length") for o in outs]
    accept = [float(a) for a in accept if a is not None]
    return {
        "batch": b,
        "output_tokens": tokens,
        "wall_s": round(wall, 3),
        "tok_per_s": tokens / wall,
        "accept_length": float(np.mean(accept)) if accept else None,
        "phase_ms_per_round": phase_ms([o["meta_info"] for o in outs]),
    }


def phase_ms(metas: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """A HEDGESPEC server's mean milliseconds per round in each phase of its rounds (select + draft, verify,
    evaluate, update: the ``hedgespec_round_time_s`` and ``hedgespec_rounds`` meta fields), over the requests;
    None for other servers."""
    from hedgespec.serving.selection import PHASES

    per = [
        np.asarray(m["hedgespec_round_time_s"], dtype=float) * 1000.0 / m["hedgespec_rounds"][0]
        for m in metas
        if m.get("hedgespec_round_time_s") and m.get("hedgespec_rounds") and m["hedgespec_rounds"][0] > 0
    ]
    if not per:
        return None
    return {k: round(float(v), 2) for k, v in zip(PHASES, np.mean(per, axis=0))}


def repeated(base_url: str, b: int, s: Settings, vocab: int) -> dict[str, Any]:
    """``s.repeats`` calls of :func:`batch_tokens_per_s` (the same prompts each time): the median call's row, with
    every call's tok/s in ``tok_per_s_runs``."""
    runs = [batch_tokens_per_s(base_url, b, s, vocab, seed=b) for _ in range(s.repeats)]
    tps = [r["tok_per_s"] for r in runs]
    row = dict(sorted(runs, key=lambda r: r["tok_per_s"])[(len(runs) - 1) // 2])
    row["tok_per_s_runs"] = [round(x, 3) for x in tps]
    return row


def gpu_memory_used() -> int:
    """Bytes of GPU memory in use on the first visible GPU (``nvidia-smi``)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return int(out.split()[0]) * 2**20


def measure_server(plan: ServePlan, s: Settings, vocab: int, log: Path, startup_timeout_s: float) -> dict[str, Any]:
    """Start one server, measure it (module docstring), stop it."""
    t0 = time.perf_counter()
    srv = ServerProcess(plan, log, startup_timeout_s).start()
    try:
        startup = time.perf_counter() - t0
        with urllib.request.urlopen(plan.base_url + "/server_info", timeout=60) as r:
            info = json.load(r)
        mem = Sampler(gpu_memory_used, 0.5) if s.device == "cuda" else RssSampler(srv.proc.pid, 0.5)
        rows = []
        with mem:
            for b in s.batch_sizes:
                warm = dataclasses.replace(s, new_tokens=min(s.new_tokens, 16))
                batch_tokens_per_s(plan.base_url, b, warm, vocab, seed=b + 1000)  # warm-up (graphs, allocator)
                rows.append(repeated(plan.base_url, b, s, vocab))
        return {
            "algorithm": plan.algorithm,
            "selector": plan.selector,
            "drafters": len(plan.drafter_names),
            "startup_s": round(startup, 1),
            "kv_tokens": info.get("max_total_num_tokens"),
            "peak_memory_gib": round(mem.peak / 2**30, 2),
            "batches": rows,
        }
    finally:
        srv.stop()


def ratios(base: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """``run`` / ``base`` for startup, KV tokens, memory, and per batch size tokens/s and round cost (the round
    cost only where both speculate)."""

    def div(a: Any, b: Any) -> float | None:
        return None if a in (None, 0) or b in (None, 0) else float(a) / float(b)

    per_batch = []
    for h, st in zip(run["batches"], base["batches"]):
        tps = div(h["tok_per_s"], st["tok_per_s"])
        # a round's cost ∝ accepted tokens per round / tokens per second (equal simulated acceptance)
        al_h, al_s = h["accept_length"], st["accept_length"]
        cost = None if None in (tps, al_h, al_s) else (al_h / al_s) / tps
        per_batch.append({"batch": h["batch"], "tok_per_s": tps, "round_cost": cost})
    return {
        "startup_s": div(run["startup_s"], base["startup_s"]),
        "kv_tokens": div(run["kv_tokens"], base["kv_tokens"]),
        "peak_memory": div(run["peak_memory_gib"], base["peak_memory_gib"]),
        "batches": per_batch,
    }


def compare(name: str, s: Settings, workdir: Path, servers: Sequence[str] = DEFAULT_SERVERS) -> dict[str, Any]:
    """The servers at ``name``'s shapes, one after the other; the JSON record (module docstring): each server's
    measurements, and each one's ratios to plain decoding (``over_plain``) and to stock EAGLE-3
    (``over_stock``) where those ran."""
    s.check()
    for label in servers:
        if label not in SERVERS:
            raise ValueError(f"server={label!r}: expected one of {sorted(SERVERS)}")
    sh = shape(name)
    target, manifest = write_checkpoints(sh, workdir / f"ckpt-{name}", s.n_drafters, s.weights, s.rank)
    runs = {}
    for label in servers:
        plan = server_plan(sh, workdir, target, manifest, label, s)
        runs[label] = measure_server(plan, s, sh.vocab, workdir / f"{label}.log", s.startup_timeout_s)
    settings = {**dataclasses.asdict(s), "batch_sizes": list(s.batch_sizes), "extra_args": list(s.extra_args)}
    out: dict[str, Any] = {"shape": name, "settings": settings, "servers": runs, "over_plain": {}, "over_stock": {}}
    for key, base in (("over_plain", "plain"), ("over_stock", "eagle")):
        if base in runs:
            out[key] = {label: ratios(runs[base], run) for label, run in runs.items() if label != base}
    return out


def _fmt(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def table(result: dict[str, Any]) -> str:
    """The record as a markdown table: one row per server and batch size, its ratios to plain decoding and to
    stock EAGLE-3."""
    lines = [
        "| server | batch | tok/s | accept length | × plain tok/s | × stock tok/s | round cost × stock "
        "| draft / evaluate ms per round | startup s | KV tokens | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, run in result["servers"].items():
        plain = result["over_plain"].get(label)
        stock = result["over_stock"].get(label)
        for j, row in enumerate(run["batches"]):
            p = plain["batches"][j] if plain else {}
            st = stock["batches"][j] if stock else {}
            ph = row.get("phase_ms_per_round")
            phases = "–" if not ph else f"{ph['draft']:.1f} / {ph['evaluate']:.1f}"
            lines.append(
                f"| {run['algorithm']} ({label}) | {row['batch']} | {row['tok_per_s']:.1f} | "
                f"{_fmt(row['accept_length'])} | {_fmt(p.get('tok_per_s'))} | {_fmt(st.get('tok_per_s'))} | "
                f"{_fmt(st.get('round_cost'))} | {phases} | {run['startup_s']} | {run['kv_tokens']} | "
                f"{run['peak_memory_gib']} |"
            )
    return "\n".join(lines)
