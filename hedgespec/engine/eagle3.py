"""EAGLE-3 draft head: SGLang-format checkpoint I/O and a batched functional forward.

Checkpoint layout (what ``specforge export --to sglang`` writes, checked against SpecForge
``modeling/draft/llama3_eagle.py`` and SGLang ``srt/models/llama_eagle3.py``)::

    DIR/config.json        architectures ["LlamaForCausalLMEagle3"], hidden_size, intermediate_size,
                           num_attention_heads, num_key_value_heads, [head_dim], rms_norm_eps, rope_*,
                           vocab_size (= target vocab), draft_vocab_size, [target_hidden_size],
                           [eagle_config.eagle_aux_hidden_state_layer_ids]
    DIR/model.safetensors  fc.weight [H, 3·H_t];
                           midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight;
                           midlayer.self_attn.{q,k,v}_proj.weight [., 2H]; midlayer.self_attn.o_proj.weight;
                           midlayer.mlp.{gate,up,down}_proj.weight; norm.weight; lm_head.weight [V_d, H];
                           d2t [V_d] int64 (target_id = draft_id + d2t[draft_id]); t2d [V] bool

There is no ``embed_tokens``: the head shares the target's input embeddings.

One draft step (row t reads token x_{t+1} and the feature f_t of position t; it predicts x_{t+2}):
``h = fc(f)`` for target features (3·H_t wide; the head's own pre-norm output is fed back unchanged on
deeper draft steps), ``a = h + o_proj(attn([input_layernorm(emb) ‖ hidden_norm(h)]))``,
``out = a + mlp(post_attention_layernorm(a))``; logits ``= lm_head(norm(out))`` over the draft vocabulary
and ``out`` (pre-norm) is the hidden state for the next draft step.

The forward below is written once for a *stack* of N heads (leading dim N, batched matmuls); a single
drafter is the N = 1 case, so the pool's batched evaluation and a drafter's own forward share the code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from hedgespec.io import atomic_dir
from hedgespec.pools import check_safetensors
from hedgespec.ranks import MATRICES

EAGLE3_ARCH = "LlamaForCausalLMEagle3"

# safetensors key -> short name used in the stacked parameter dict
WEIGHT_KEYS: dict[str, str] = {
    "fc.weight": "fc",
    "midlayer.input_layernorm.weight": "ln_emb",
    "midlayer.hidden_norm.weight": "ln_hid",
    "midlayer.self_attn.q_proj.weight": "q",
    "midlayer.self_attn.k_proj.weight": "k",
    "midlayer.self_attn.v_proj.weight": "v",
    "midlayer.self_attn.o_proj.weight": "o",
    "midlayer.post_attention_layernorm.weight": "ln_post",
    "midlayer.mlp.gate_proj.weight": "gate",
    "midlayer.mlp.up_proj.weight": "up",
    "midlayer.mlp.down_proj.weight": "down",
    "norm.weight": "norm",
    "lm_head.weight": "lm_head",
}


def default_aux_layer_ids(num_layers: int) -> tuple[int, int, int]:
    """SpecForge/SGLang default EAGLE-3 capture ids ``[1, L//2-1, L-4]`` (outputs of those layers).

    SGLang stores them +1 (``[2, L//2, L-3]``: inputs of the next layer); in HF ``hidden_states`` terms the
    feature of id ``i`` is ``hidden_states[i+1]``. For targets with fewer than 5 layers the default is
    out of range, so ids are clamped into ``[0, L-1]`` (a hedgespec choice for tiny test targets).
    """
    ids = (1, num_layers // 2 - 1, num_layers - 4)
    return tuple(min(max(i, 0), num_layers - 1) for i in ids)  # type: ignore[return-value]


@dataclass(frozen=True)
class Eagle3Config:
    """The fields of an EAGLE-3 ``config.json`` the engine uses (``raw`` keeps the whole file)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: tuple[int, ...] | None
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], where: str = "config.json") -> Eagle3Config:
        missing = [k for k in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size") if k not in cfg]
        if missing:
            raise ValueError(f"{where}: missing EAGLE-3 config fields {missing}")
        arch = cfg.get("architectures") or [EAGLE3_ARCH]
        if EAGLE3_ARCH not in arch:
            raise ValueError(f"{where}: architectures must contain {EAGLE3_ARCH!r}, got {arch!r}")
        if int(cfg.get("num_hidden_layers", 1)) != 1:
            raise ValueError(f"{where}: num_hidden_layers must be 1 for EAGLE-3 heads, got {cfg['num_hidden_layers']}")
        h = int(cfg["hidden_size"])
        nh = int(cfg["num_attention_heads"])
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        return cls(
            hidden_size=h,
            intermediate_size=int(cfg["intermediate_size"]),
            num_attention_heads=nh,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or nh),
            head_dim=int(cfg.get("head_dim") or h // nh),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            vocab_size=int(cfg["vocab_size"]),
            draft_vocab_size=int(cfg.get("draft_vocab_size") or cfg["vocab_size"]),
            target_hidden_size=int(cfg.get("target_hidden_size") or h),
            aux_layer_ids=tuple(int(i) for i in ids) if ids is not None else None,
            raw=dict(cfg),
        )

    def rope_config(self) -> Any:
        """A transformers ``LlamaConfig`` carrying this head's rotary settings (legacy or ``rope_parameters``)."""
        keys = ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings", "partial_rotary_factor")
        kw = {k: self.raw[k] for k in keys if self.raw.get(k) is not None}
        return LlamaConfig(
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            **kw,
        )


class Eagle3Drafter:
    """One EAGLE-3 draft head of a given target (weights on CPU/any device, inference only).

    Build with :meth:`load` (SGLang-format directory) or :meth:`from_state`; :meth:`save` writes the same format
    back. Random heads shaped for a target: :func:`hedgespec.fixtures.random_drafter`.
    """

    def __init__(
        self,
        config: Eagle3Config,
        weights: dict[str, torch.Tensor],
        d2t: torch.Tensor,
        t2d: torch.Tensor,
        name: str = "drafter",
    ) -> None:
        self.config = config
        self.weights = weights  # short names (see WEIGHT_KEYS)
        self.d2t = d2t.long()
        self.t2d = t2d.bool()
        self.name = name
        self._check_shapes()

    # ----------------------------------------------------------------------------------------- I/O
    @classmethod
    def from_state(cls, config: dict[str, Any], state: dict[str, torch.Tensor], name: str = "drafter") -> Eagle3Drafter:
        cfg = Eagle3Config.from_dict(config, where=f"drafter {name!r} config")
        missing = [k for k in list(WEIGHT_KEYS) + ["d2t", "t2d"] if k not in state]
        if missing:
            raise ValueError(f"drafter {name!r}: checkpoint is missing tensors {missing}")
        weights = {short: state[key].float() for key, short in WEIGHT_KEYS.items()}
        return cls(cfg, weights, state["d2t"], state["t2d"], name=name)

    @classmethod
    def load(cls, path: str | os.PathLike[str], target: Any | None = None, name: str | None = None) -> Eagle3Drafter:
        """Load an SGLang-format EAGLE-3 directory with ``safetensors``; validate against ``target`` if given."""
        path = os.fspath(path)
        name = name or os.path.basename(os.path.normpath(path))
        cfg_path, st_path = os.path.join(path, "config.json"), os.path.join(path, "model.safetensors")
        for p in (cfg_path, st_path):
            if not os.path.isfile(p):
                raise ValueError(
                    f"drafter {name!r}: {p} not found (expected the directory `specforge export --to sglang` writes)"
                )
        try:
            with open(cfg_path) as fh:
                config = json.load(fh)
        except json.JSONDecodeError as err:
            raise ValueError(f"drafter {name!r}: {cfg_path} is not valid JSON ({err}); re-export the drafter") from err
        check_safetensors(st_path, f"drafter {name!r}: ")  # a truncated/damaged file is named, not a bare error
        state = load_file(st_path)
        state = {k.removeprefix("model."): v for k, v in state.items()}  # tolerate a trainer prefix
        drafter = cls.from_state(config, state, name=name)
        if target is not None:
            drafter.validate(target)
        return drafter

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``config.json`` + ``model.safetensors`` (SGLang format) atomically, replacing ``path``."""
        state = {key: self.weights[short].contiguous() for key, short in WEIGHT_KEYS.items()}
        state["d2t"], state["t2d"] = self.d2t.contiguous(), self.t2d.contiguous()
        with atomic_dir(path) as tmp:
            save_file(state, os.path.join(tmp, "model.safetensors"))
            with open(os.path.join(tmp, "config.json"), "w") as fh:
                json.dump(self.config.raw, fh, indent=2, sort_keys=True)

    # ----------------------------------------------------------------------------------- checks
    def _check_shapes(self) -> None:
        c, w = self.config, self.weights
        h, hd, nh, nkv = c.hidden_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads
        expected = {
            "q": (nh * hd, 2 * h),
            "k": (nkv * hd, 2 * h),
            "v": (nkv * hd, 2 * h),
            "o": (h, nh * hd),
            "lm_head": (c.draft_vocab_size, h),
            "gate": (c.intermediate_size, h),
            "up": (c.intermediate_size, h),
            "down": (h, c.intermediate_size),
        }
        for key, shape in expected.items():
            if tuple(w[key].shape) != shape:
                raise ValueError(
                    f"drafter {self.name!r}: tensor {key} has shape {tuple(w[key].shape)}, config implies {shape}"
                )
        if w["fc"].shape[0] != h or w["fc"].shape[1] % c.target_hidden_size:
            raise ValueError(
                f"drafter {self.name!r}: fc.weight shape {tuple(w['fc'].shape)} "
                "is not [hidden_size, n·target_hidden_size]"
            )
        if self.d2t.shape != (c.draft_vocab_size,):
            raise ValueError(
                f"drafter {self.name!r}: d2t has shape {tuple(self.d2t.shape)}, expected ({c.draft_vocab_size},)"
            )
        if self.t2d.shape != (c.vocab_size,):
            raise ValueError(
                f"drafter {self.name!r}: t2d has shape {tuple(self.t2d.shape)}, expected ({c.vocab_size},)"
            )

    @property
    def target_ids(self) -> torch.Tensor:
        """Target-vocab id of every draft-vocab id (``draft_id + d2t[draft_id]``)."""
        return torch.arange(self.config.draft_vocab_size) + self.d2t

    def aux_layer_ids(self, num_layers: int) -> tuple[int, ...]:
        """The target layers whose outputs this head fuses (config, else the SGLang/SpecForge default)."""
        ids = self.config.aux_layer_ids
        return tuple(ids) if ids is not None else default_aux_layer_ids(num_layers)

    def validate(self, target: Any) -> None:
        """Raise ``ValueError`` naming this drafter and the field that does not fit ``target``."""
        tcfg = target_text_config(target)
        c, who = self.config, f"drafter {self.name!r}"
        th, tv, tl = tcfg.hidden_size, tcfg.vocab_size, tcfg.num_hidden_layers
        if c.hidden_size != th:
            raise ValueError(
                f"{who}: hidden_size {c.hidden_size} != target hidden_size {th} "
                "(the head shares the target's embeddings)"
            )
        if c.target_hidden_size != th:
            raise ValueError(f"{who}: target_hidden_size {c.target_hidden_size} != target hidden_size {th}")
        if c.vocab_size != tv:
            raise ValueError(f"{who}: vocab_size {c.vocab_size} != target vocab_size {tv}")
        ids = self.aux_layer_ids(tl)
        bad = [i for i in ids if not 0 <= i < tl]
        if bad:
            raise ValueError(
                f"{who}: eagle_aux_hidden_state_layer_ids {list(ids)} out of range for a {tl}-layer "
                f"target (valid: 0..{tl - 1})"
            )
        if self.weights["fc"].shape[1] != len(ids) * th:
            raise ValueError(
                f"{who}: eagle_aux_hidden_state_layer_ids has {len(ids)} layers but fc.weight expects "
                f"{self.weights['fc'].shape[1] // th} (fc input {self.weights['fc'].shape[1]} = n_aux x {th})"
            )
        tid = self.target_ids
        if int(tid.min()) < 0 or int(tid.max()) >= tv:
            raise ValueError(f"{who}: d2t vocab mapping sends draft ids outside the target vocab [0, {tv})")
        if len(set(tid.tolist())) != len(tid):
            raise ValueError(f"{who}: d2t vocab mapping is not injective (two draft ids map to one target id)")
        if int(self.t2d.sum()) != c.draft_vocab_size or not bool(self.t2d[tid].all()):
            raise ValueError(
                f"{who}: t2d vocab mapping is inconsistent with d2t (t2d must mark exactly the mapped target ids)"
            )


# ------------------------------------------------------------------------------------ functional core
def target_text_config(target: Any) -> Any:
    """The (text) model config of a transformers causal LM or :class:`~hedgespec.engine.target.TargetModel`."""
    cfg = getattr(target, "config", None)
    if cfg is None:
        raise ValueError(
            f"target must be a transformers causal LM or TargetModel with .config, got {type(target).__name__}"
        )
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm (computed in float32); ``weight`` is [N, H] and broadcasts over the token dim."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight[:, None, :] * xf).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, T, d]; cos/sin [T, d]."""
    return x * cos + _rotate_half(x) * sin


def _mm(x: torch.Tensor, w: Any) -> torch.Tensor:
    """x [N, T, in] times stacked matrices w [N, in, out]: a tensor, or a low-rank stack with its own ``bmm``
    (:class:`hedgespec.engine.lowrank.LowRankStack`: base read once plus thin per-head factors)."""
    return torch.bmm(x, w) if isinstance(w, torch.Tensor) else w.bmm(x)


def _attention(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, mask: torch.Tensor, gqa: bool) -> torch.Tensor:
    """Scaled dot-product attention; one query row in a reduced-precision dtype on CPU is computed in float32 from
    the same values: SDPA's bfloat16 path costs about 3x more there for one row (a draft step) and no less for
    several (``docs/results/cpu_k/epyc/lowrank_packed/attention_dtype.log``)."""
    if q.shape[2] == 1 and q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        out = F.scaled_dot_product_attention(q.float(), keys.float(), vals.float(), attn_mask=mask, enable_gqa=gqa)
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, enable_gqa=gqa)


def stacked_forward(
    w: dict[str, torch.Tensor],
    eps: float,
    n_heads: int,
    n_kv: int,
    emb: torch.Tensor,
    hidden: torch.Tensor,
    from_target: bool,
    cos: torch.Tensor,
    sin: torch.Tensor,
    past_k: torch.Tensor | None,
    past_v: torch.Tensor | None,
    mask: torch.Tensor | None,
    logits_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One EAGLE-3 midlayer pass for N stacked heads at once.

    Args:
        w: stacked *transposed* weights: matrices [N, in, out] (tensors, or low-rank stacks of one base:
            :mod:`hedgespec.engine.lowrank`), norms [N, H] (see :func:`stack_weights`).
        emb: token embeddings [N, T, H] (or [1, T, H], broadcast).
        hidden: target features [N, T, n·H_t] when ``from_target`` (passed through ``fc``), else the heads'
            own pre-norm outputs [N, T, H].
        cos, sin: rotary tables [T, d] for the T rows' positions.
        past_k, past_v: [N, kv_heads, L, d] cached rows (or None).
        mask: bool [T, L+T], True = may attend; None = plain causal over the new rows.
        logits_rows: the output head runs on the last ``logits_rows`` rows only (None: all T); a prefill or a
            catch-up needs the keys and values of every row but the logits of few.

    Returns:
        draft logits [N, T, V_d] ([N, logits_rows, V_d]), pre-norm hidden [N, T, H], new keys and values
        [N, kv_heads, T, d].
    """
    n, t = hidden.shape[0], hidden.shape[1]
    h = _mm(hidden, w["fc"]) if from_target else hidden
    emb = emb.expand(n, -1, -1)
    x = torch.cat([rms_norm(emb, w["ln_emb"], eps), rms_norm(h, w["ln_hid"], eps)], dim=-1)
    d = w["q"].shape[-1] // n_heads
    q = _mm(x, w["q"]).view(n, t, n_heads, d).transpose(1, 2)
    k = _mm(x, w["k"]).view(n, t, n_kv, d).transpose(1, 2)
    v = _mm(x, w["v"]).view(n, t, n_kv, d).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    keys = k if past_k is None else torch.cat([past_k, k], dim=2)
    vals = v if past_v is None else torch.cat([past_v, v], dim=2)
    if mask is None:
        past = keys.shape[2] - t
        mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(diagonal=past)
    attn = _attention(q, keys, vals, mask, n_heads != n_kv)
    a = h + _mm(attn.transpose(1, 2).reshape(n, t, n_heads * d), w["o"])
    m = rms_norm(a, w["ln_post"], eps)
    out = a + _mm(F.silu(_mm(m, w["gate"])) * _mm(m, w["up"]), w["down"])
    last = out if logits_rows is None or logits_rows >= t else out[:, t - logits_rows :]
    logits = _mm(rms_norm(last, w["norm"], eps), w["lm_head"])
    return logits, out, k, v


def stack_weights(
    drafters: Sequence[Eagle3Drafter], dtype: torch.dtype = torch.float32, device: Any = None
) -> dict[str, torch.Tensor]:
    """Stack heads into [N, ...] tensors (matrices as [N, in, out]: transposed views of [N, out, in] storage).

    Heads may differ in intermediate size and draft-vocab size: the MLP is zero-padded (an exact no-op:
    silu(0)·0 = 0) and the lm_head padded with zero rows whose logits the pool masks to −inf.
    """
    inter = max(d.config.intermediate_size for d in drafters)
    vd = max(d.config.draft_vocab_size for d in drafters)
    out: dict[str, list[torch.Tensor]] = {k: [] for k in WEIGHT_KEYS.values()}
    for dr in drafters:
        for key, t in dr.weights.items():
            if key == "gate" or key == "up":
                t = F.pad(t, (0, 0, 0, inter - t.shape[0]))
            elif key == "down":
                t = F.pad(t, (0, inter - t.shape[1]))
            elif key == "lm_head":
                t = F.pad(t, (0, 0, 0, vd - t.shape[0]))
            out[key].append(t)
    stacked = {k: torch.stack(v).to(dtype=dtype, device=device).contiguous() for k, v in out.items()}
    # matrices as [N, in, out] views of [N, out, in] storage (each head's own row-major layout): torch.bmm then
    # runs its transposed-B kernels, faster on CPU for a few rows and for bfloat16 (docs/engine.md, "The pool's
    # weights")
    return {k: v.transpose(1, 2) if k in MATRICES else v for k, v in stacked.items()}
