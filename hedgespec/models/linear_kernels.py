"""Which kernels the target's linear layers run on CPU: ``target.linear_kernels`` = ``auto`` | ``onednn`` | ``aten``.

A speculative round verifies K+1 rows in one target pass. On CPU, PyTorch's default float32 matmul (``aten``)
repacks every weight matrix on every call, so five rows cost about twice one row although the pass reads the
same weights (``python scripts/bench_engine.py --dims smollm2 --kernels aten onednn``; docs/engine.md). oneDNN
packs each weight once (``torch.ops.mkldnn._reorder_linear_weight``), after which a pass over a few rows costs
little more than one row.

* ``onednn``: every ``nn.Linear`` of the target becomes a :class:`PackedLinear` (a subclass with the same
  parameters, so the same ``state_dict`` and fingerprint) that keeps a oneDNN-packed copy of its weight. Inputs
  of at least :attr:`PackedLinear.min_rows` rows run on the packed copy; in float32 up to three rows stay on
  ``aten``, whose small-row kernel costs about one row's time there (bfloat16 takes the packed copy for every
  row: faster at one row too). The same wrapped
  model serves the speculative engine and the plain-decoding baseline (``transformers.generate``: its prefill
  and batched regeneration steps take the packed path, its one-row decoding steps the aten path), so "× plain"
  compares each pass on its best kernel. The packed copies hold the linear weights' memory once more.
* ``aten``: plain PyTorch modules.
* ``auto``: ``onednn`` for a CPU target in float32 or bfloat16 when this PyTorch has oneDNN and this CPU can
  pack that dtype (bfloat16 packing needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT: an AVX2-only CPU cannot), else
  ``aten``.

The default is ``aten``. Measured on SmolLM2-135M (2 CPU cores, docs/engine.md): on one thread a 5-row pass costs
77 ms packed vs 95 ms on aten (one row: 55 ms); on two threads the two are equal (57 ms) and batched
generation is 13% slower packed, so packing pays only for one-thread runs verifying 4 or more rows. CPUs differ:
on a 2-core AMD EPYC (AVX-512, no AMX) the aten kernel's 2- and 3-row passes cost more than its 4- and 5-row
ones, a packed 5-row pass costs one aten row's time on one thread, and on two threads the packed copy is faster
at every row count, one row included (docs/engine.md). ``min_rows``
(``target.packed_min_rows``) moves the row count from which the packed copy is used (1: every pass, so plain
decoding's one-row steps run packed too).

Numerics: the kernels differ in summation order only (float rounding, ~1e-6 relative in float32), as two row
counts of the aten kernel already do; greedy outputs agree unless two logits tie at that precision. A weight
changed in place or replaced after wrapping is packed again on its next use.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .spec import LINEAR_KERNELS, check_min_rows

PACKED_DTYPES = (torch.float32, torch.bfloat16)
#: float32 passes of fewer rows stay on aten, whose small-row kernel is as fast as one row up to 3 rows (the
#: jump comes at 4: SmolLM2-135M, one thread, 55.4 / 60.1 / 64.3 / 90.7 ms for 1 / 2 / 3 / 4 rows)
FLOAT32_MIN_ROWS = 4


def onednn_available() -> bool:
    """Whether this PyTorch build packs linear weights with oneDNN (x86 and most aarch64 CPU wheels)."""
    ops = torch.ops.mkldnn
    return bool(torch.backends.mkldnn.is_available()) and all(
        hasattr(ops, op) for op in ("_reorder_linear_weight", "_linear_pointwise")
    )


@functools.cache
def native_bfloat16() -> bool:
    """Whether this CPU has oneDNN's bfloat16 path (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: AVX-512
    BW/VL/DQ or AVX-NE-CONVERT). Without it bfloat16 matmuls are emulated: on an AVX2-only CPU a draft lm_head's
    forward+backward is ~100x slower in bfloat16 than in float32 (docs/results/cpu_dtype/avx2/matmul_dtype.log)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@functools.cache
def packs_dtype(dtype: torch.dtype) -> bool:
    """Whether oneDNN packs linear weights of ``dtype`` on this CPU: float32 always, bfloat16 only where
    :func:`native_bfloat16` (elsewhere packing raises "bf16 path needs the cpu support avx_ne_convert or
    avx512bw, avx512vl and avx512dq")."""
    if dtype == torch.float32:
        return True
    return dtype == torch.bfloat16 and native_bfloat16()


def resolve_kernels(model: Any, choice: str) -> str:
    """``onednn`` or ``aten`` for ``model`` (see the module docstring); an impossible explicit choice is named."""
    if choice not in LINEAR_KERNELS:
        raise ValueError(f"target linear_kernels={choice!r} is unknown; expected one of {LINEAR_KERNELS}")
    param = next(model.parameters(), None)
    device = param.device.type if param is not None else "cpu"
    dtype = param.dtype if param is not None else torch.float32
    usable = device == "cpu" and dtype in PACKED_DTYPES
    if choice == "auto":
        return "onednn" if usable and onednn_available() and packs_dtype(dtype) else "aten"
    if choice == "onednn" and not usable:
        raise ValueError(
            f"target linear_kernels=onednn packs CPU weights in float32 or bfloat16; this target is "
            f"{str(dtype).removeprefix('torch.')} on {device}: use linear_kernels=auto or aten"
        )
    if choice == "onednn" and not onednn_available():
        raise ValueError(
            "target linear_kernels=onednn: this PyTorch build has no oneDNN linear packing "
            "(torch.backends.mkldnn.is_available() is False); use linear_kernels=auto or aten"
        )
    if choice == "onednn" and not packs_dtype(dtype):
        raise ValueError(
            f"target linear_kernels=onednn: this CPU cannot pack {str(dtype).removeprefix('torch.')} weights with "
            "oneDNN (bfloat16 needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT); use linear_kernels=auto or aten, or a "
            "float32 target"
        )
    return choice


def use_linear_kernels(model: Any, choice: str, rows: int = 5, min_rows: int | None = None) -> Any:
    """Put ``model``'s linear layers on the kernels ``choice`` resolves to, in place; returns ``model``.

    ``rows`` is the packing's row-count hint (a chain round verifies K+1 = 5 rows at the default K=4); ``min_rows``
    the rows from which a pass uses the packed copy (None: :data:`FLOAT32_MIN_ROWS` in float32, 1 in bfloat16);
    ``aten`` on a wrapped model restores plain ``nn.Linear`` modules.
    """
    kind = resolve_kernels(model, choice)
    min_rows = check_min_rows(min_rows)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if kind == "onednn" and type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear.wrap(child, rows, min_rows))
            elif kind == "aten" and isinstance(child, PackedLinear):
                setattr(parent, name, child.unwrap())
    return model


def linear_kernels_of(model: Any) -> str:
    """``onednn`` when the linear layers of ``model`` are packed, else ``aten`` (what a run records)."""
    return "onednn" if any(isinstance(m, PackedLinear) for m in model.modules()) else "aten"


def _linear_like(cls: type, lin: torch.nn.Linear) -> Any:
    new = cls.__new__(cls)
    torch.nn.Module.__init__(new)
    new.in_features, new.out_features = lin.in_features, lin.out_features
    new.weight, new.bias = lin.weight, lin.bias  # the same Parameters: tied weights stay tied
    new.train(lin.training)
    return new


class PackedLinear(torch.nn.Linear):
    """An ``nn.Linear`` that also keeps a oneDNN-packed copy of its weight (neither a parameter nor a buffer)."""

    rows_hint: int = 5
    min_rows_set: int | None = None  # ``min_rows`` chosen by the caller (None: the dtype's default)

    @classmethod
    def wrap(cls, lin: torch.nn.Linear, rows: int = 5, min_rows: int | None = None) -> PackedLinear:
        new = _linear_like(cls, lin)
        new.rows_hint, new.min_rows_set = int(rows), check_min_rows(min_rows)
        new._packed, new._packed_of = None, None
        return new

    def unwrap(self) -> torch.nn.Linear:
        return _linear_like(torch.nn.Linear, self)

    @property
    def min_rows(self) -> int:
        """Rows from which the packed copy is used: the caller's ``min_rows``, else measured per dtype (see the
        module docstring)."""
        if self.min_rows_set is not None:
            return self.min_rows_set
        return 1 if self.weight.dtype == torch.bfloat16 else FLOAT32_MIN_ROWS

    def _pack(self) -> torch.Tensor:
        w = self.weight
        key = (w.data_ptr(), w._version, w.dtype)
        if self._packed is None or self._packed_of != key:
            with torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), self.rows_hint)
            self._packed_of = key
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
        packed = (
            rows >= self.min_rows
            and x.device.type == "cpu"
            and x.dtype == self.weight.dtype
            and self.weight.dtype in PACKED_DTYPES
            and packs_dtype(self.weight.dtype)
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        )
        if not packed:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self._pack(), self.bias, "none", [], "")
