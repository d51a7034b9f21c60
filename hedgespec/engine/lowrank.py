"""Low-rank expert pools: every expert as the base drafter (the generalist) plus rank-r weight deltas.

A domain expert fine-tuned from the generalist with the generalist's draft vocabulary
(``train.draft.init=general train.draft.vocab=init``) differs from it by one delta per weight matrix. The
truncated SVD of a delta is its best rank-r approximation in the Frobenius and spectral norms
(Eckart-Young), so an expert is kept as

    W_i^T = W_base^T + A_i B_i,        A_i = U_r S_r  [in, r],   B_i = V_r^T  [r, out]

(matrices in the pool's transposed [in, out] layout). Norm vectors stay per expert (H-sized). ``rank=None``
keeps every singular value: exact up to floating-point rounding. ``rank`` may also give each matrix its own
rank (``{"fc": 16, "lm_head": 4, ...}``; 0 keeps the base's matrix), and :func:`allocate_ranks` chooses such
per-matrix ranks for a budget on what one evaluation of the whole pool reads.

In the pool's batched forward (:func:`hedgespec.engine.eagle3.stacked_forward`) a :class:`LowRankStack` is
multiplied as ``x @ W_base^T + (x @ A_i) @ B_i``: the base matrix is read once for all N heads (one GEMM over
the N·T stacked rows; for ``fc``, whose input is the same target features for every head, over T rows only)
and each head adds its two thin factors. The weights read per pool evaluation are one head's plus
N·r·(in + out) per matrix instead of N heads'.

On disk an expert of a low-rank pool is an ordinary SGLang-format drafter directory whose
``model.safetensors`` holds the rank-r weights densely (so SGLang, the manifest checks and every other reader
work unchanged) plus ``lowrank.safetensors`` with the factors; the manifest entry records
``lowrank: {base: <drafter>, rank: r}`` (``scripts/lowrank_pool.py`` writes such a pool).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hedgespec.engine.eagle3 import MATRICES, WEIGHT_KEYS, Eagle3Drafter, stack_weights
from hedgespec.io import atomic_dir
from hedgespec.pools import CorruptCheckpointError, check_safetensors
from hedgespec.ranks import check_rank, rank_label, rank_of

FACTORS_FILE = "lowrank.safetensors"
_SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "draft_vocab_size",
    "vocab_size",
)
_KEY_OF = {short: key for key, short in WEIGHT_KEYS.items()}


def check_compatible(base: Eagle3Drafter, expert: Eagle3Drafter) -> None:
    """Refuse an expert that is not a same-shaped, same-vocabulary variant of ``base`` (naming both)."""
    for field in _SHAPE_FIELDS:
        got, want = getattr(expert.config, field), getattr(base.config, field)
        if got != want:
            raise ValueError(
                f"drafter {expert.name!r}: {field}={got} differs from base {base.name!r} ({want}); a low-rank pool "
                "stores experts as deltas of one base, so they must share its shape"
            )
    for short in MATRICES:
        if tuple(expert.weights[short].shape) != tuple(base.weights[short].shape):
            raise ValueError(
                f"drafter {expert.name!r}: weight {short} has shape {tuple(expert.weights[short].shape)}, its "
                f"base {base.name!r} has {tuple(base.weights[short].shape)}; the delta is undefined"
            )
    if not torch.equal(expert.d2t, base.d2t) or not torch.equal(expert.t2d, base.t2d):
        raise ValueError(
            f"drafter {expert.name!r}: its draft vocabulary differs from base {base.name!r}'s, so its lm_head rows "
            f"are other tokens than the base's; train it as a fine-tune with the base's vocabulary "
            f"(train.draft.init={base.name} train.draft.vocab=init)"
        )


#: the thin SVD (U, S, V^T) of every matrix delta of one expert from its base, in float64 (:func:`delta_svds`)
DeltaSVDs = dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def delta_svds(base: Eagle3Drafter, expert: Eagle3Drafter) -> DeltaSVDs:
    """The thin SVD of every matrix delta ``expert - base`` (transposed [in, out] layout, float64), computed once
    for :func:`allocate_ranks` (its singular values) and :func:`factorize` (its factors)."""
    check_compatible(base, expert)
    return {short: _svd(base, expert, short) for short in MATRICES}


def factorize(
    base: Eagle3Drafter, expert: Eagle3Drafter, rank: Any, svds: DeltaSVDs | None = None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Rank-``rank`` factors (A [in, r], B [r, out]) of every matrix delta ``expert - base`` (transposed layout);
    ``rank`` as :func:`check_rank` takes it (one rank for every matrix, or one per matrix); ``svds``: the deltas'
    :func:`delta_svds`, when already computed.

    Raises ``ValueError`` naming the drafter and weight when a rank exceeds the matrix's rank ``min(in, out)``.
    """
    check_compatible(base, expert)
    ranks = check_rank(rank)
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for short in MATRICES:
        shape = tuple(base.weights[short].t().shape)  # the delta's [in, out]
        full = min(shape)
        want = rank_of(ranks, short)
        if want is not None and want > full:
            raise ValueError(
                f"drafter {expert.name!r}: rank={want} exceeds the rank of weight {short} "
                f"({shape[0]}x{shape[1]}, at most {full}); use rank <= {full} or rank=full"
            )
        r = full if want is None else want
        u, s, vh = svds[short] if svds is not None else _svd(base, expert, short)
        out[short] = ((u[:, :r] * s[:r]).float().contiguous(), vh[:r].float().contiguous())
    return out


def _svd(base: Eagle3Drafter, expert: Eagle3Drafter, short: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The thin SVD of the delta of one matrix (float64, transposed layout)."""
    delta = (expert.weights[short].double() - base.weights[short].double()).t()  # [in, out]
    return torch.linalg.svd(delta, full_matrices=False)


class LowRankDrafter(Eagle3Drafter):
    """An expert held as ``base`` + rank-r factors; ``weights`` are the dense rank-r weights (what SGLang loads)."""

    def __init__(
        self,
        base: Eagle3Drafter,
        factors: dict[str, tuple[torch.Tensor, torch.Tensor]],
        norms: dict[str, torch.Tensor],
        rank: int | None | dict[str, int | None],
        name: str,
    ) -> None:
        missing = [k for k in MATRICES if k not in factors]
        if missing:
            raise ValueError(f"drafter {name!r}: low-rank factors for {missing} are missing")
        weights = {k: v.float() for k, v in norms.items()}
        for short in MATRICES:
            a, b = factors[short]
            want = tuple(base.weights[short].t().shape)
            if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or (a.shape[0], b.shape[1]) != want:
                raise ValueError(
                    f"drafter {name!r}: factors of {short} have shapes {tuple(a.shape)} x {tuple(b.shape)}, which do "
                    f"not make the base {base.name!r}'s {want} (transposed) delta"
                )
            weights[short] = (base.weights[short].t() + a.float() @ b.float()).t().contiguous()
        super().__init__(base.config, weights, base.d2t, base.t2d, name=name)
        self.base, self.rank = base, rank
        self.delta_kept: float | None = None  # set by from_expert (see delta_kept)
        self.factors = {k: (a.float(), b.float()) for k, (a, b) in factors.items()}

    @classmethod
    def from_expert(
        cls, base: Eagle3Drafter, expert: Eagle3Drafter, rank: Any, svds: DeltaSVDs | None = None
    ) -> LowRankDrafter:
        """Truncate ``expert``'s deltas from ``base`` to ``rank`` (None: every singular value; or one per matrix);
        ``svds``: the deltas' :func:`delta_svds`, when already computed."""
        norms = {k: v for k, v in expert.weights.items() if k not in MATRICES}
        low = cls(base, factorize(base, expert, rank, svds), norms, check_rank(rank), expert.name)
        low.delta_kept = delta_kept(base, expert, low)
        return low

    @classmethod
    def load_factors(cls, path: str | os.PathLike[str], base: Eagle3Drafter, name: str) -> LowRankDrafter:
        """A low-rank expert directory (dense ``model.safetensors`` + ``lowrank.safetensors``) over ``base``.

        The dense weights must equal base + factors (a file that was edited or swapped is refused by name).
        """
        dense = Eagle3Drafter.load(path, name=name)
        fpath = os.path.join(os.fspath(path), FACTORS_FILE)
        if not os.path.isfile(fpath):
            raise ValueError(f"drafter {name!r}: {fpath} not found (a low-rank pool expert keeps its factors there)")
        check_safetensors(fpath, f"drafter {name!r}: ")
        state = load_file(fpath)
        factors = {}
        for short in MATRICES:
            key = _KEY_OF[short]
            if f"{key}.a" not in state or f"{key}.b" not in state:
                raise ValueError(f"drafter {name!r}: {fpath} lacks the factors of {key}")
            factors[short] = (state[f"{key}.a"], state[f"{key}.b"])
        check_compatible(base, dense)
        with safe_open(fpath, framework="pt") as fh:
            meta = fh.metadata() or {}
        if meta.get("base") != base.name:
            raise ValueError(
                f"drafter {name!r}: its factors are deltas of base {meta.get('base')!r}, not of {base.name!r}"
            )
        rank = check_rank(_rank_from_meta(meta.get("rank"), name), f"drafter {name!r}: rank")
        norms = {k: v for k, v in dense.weights.items() if k not in MATRICES}
        out = cls(base, factors, norms, rank, name)
        for short in MATRICES:
            w, want = dense.weights[short], out.weights[short]
            if not torch.allclose(w, want, rtol=1e-3, atol=1e-3 * float(want.abs().max()) + 1e-6):
                raise CorruptCheckpointError(
                    f"drafter {name!r}: {short} in model.safetensors is not base {base.name!r} + its factors in "
                    f"{FACTORS_FILE}; rewrite the pool with scripts/lowrank_pool.py"
                )
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """The dense SGLang-format directory plus ``lowrank.safetensors`` (factors), atomically."""
        state = {key: self.weights[short].contiguous() for key, short in WEIGHT_KEYS.items()}
        state["d2t"], state["t2d"] = self.d2t.contiguous(), self.t2d.contiguous()
        factors = {}
        for short, (a, b) in self.factors.items():
            factors[f"{_KEY_OF[short]}.a"], factors[f"{_KEY_OF[short]}.b"] = a.contiguous(), b.contiguous()
        label = rank_label(self.rank)
        rank = json.dumps(label, sort_keys=True) if isinstance(label, dict) else str(label)
        meta = {"base": self.base.name, "rank": rank}
        with atomic_dir(path) as tmp:
            save_file(state, os.path.join(tmp, "model.safetensors"))
            save_file(factors, os.path.join(tmp, FACTORS_FILE), metadata=meta)
            with open(os.path.join(tmp, "config.json"), "w") as fh:
                json.dump(self.config.raw, fh, indent=2, sort_keys=True)


def _rank_from_meta(value: str | None, name: str) -> Any:
    """The rank a factors file's metadata records: "full", an int, or a JSON object of per-matrix ranks."""
    if value == "full":
        return value
    if value is None:
        raise ValueError(
            f"drafter {name!r}: {FACTORS_FILE} records no rank; rewrite the pool with scripts/lowrank_pool.py"
        )
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"drafter {name!r}: {FACTORS_FILE} records rank {value!r}, which is not a rank") from err


def delta_kept(base: Eagle3Drafter, expert: Eagle3Drafter, low: Eagle3Drafter) -> float:
    """Share of the expert's delta from ``base`` that ``low`` keeps: 1 - ||W_e - W_low||_F / ||W_e - W_base||_F
    over all matrices (1.0 at full rank; 1.0 for an expert equal to its base)."""
    lost = sum(float(((expert.weights[k] - low.weights[k]).double() ** 2).sum()) for k in MATRICES)
    total = sum(float(((expert.weights[k] - base.weights[k]).double() ** 2).sum()) for k in MATRICES)
    return 1.0 if total == 0.0 else 1.0 - (lost / total) ** 0.5


ALLOCATIONS = ("frobenius", "relative")


def pool_reads(base: Eagle3Drafter, n_drafters: int, rank: Any) -> float:
    """What one evaluation of a pool of ``n_drafters`` (the base and its experts at ``rank``) reads, as a multiple
    of one head's weights: every matrix of the base once, each drafter's factors (the base's rows are zeros in
    the stack, :func:`stack_pool_weights`) and each drafter's norms; the count :func:`weights_read` makes."""
    ranks = check_rank(rank)
    head = sum(v.numel() for v in base.weights.values())
    total = 0
    for k, v in base.weights.items():
        if k in MATRICES:
            out_f, in_f = v.shape
            r = rank_of(ranks, k)
            total += v.numel() + n_drafters * (min(in_f, out_f) if r is None else r) * (in_f + out_f)
        else:
            total += n_drafters * v.numel()
    return total / head


def allocate_ranks(
    base: Eagle3Drafter,
    experts: Sequence[Eagle3Drafter],
    reads: float,
    allocation: str = "frobenius",
    svds: Sequence[DeltaSVDs] | None = None,
) -> dict[str, int]:
    """Per-matrix ranks, shared by every expert, that keep the most of the experts' deltas while one evaluation
    of the pool (the base and ``experts``) reads at most ``reads`` × one head's weights (:func:`pool_reads`).

    Each added rank of matrix m costs N·(in_m + out_m) parameters and keeps the next singular value of every
    expert's delta of m; ``allocation`` scores it by the squared singular values summed over the experts
    (``frobenius``: the experts' total squared Frobenius error, the quantity :func:`delta_kept` reports) or
    divided first by each delta's squared norm (``relative``: every matrix's relative error counts alike). The
    ranks are filled greedily by score per parameter; the scores of one matrix decrease with the rank, so this
    is the greedy solution of a knapsack with concave gains (optimal up to the last, partly fitting rank).
    ``svds``: the experts' :func:`delta_svds` (in ``experts`` order), when already computed.
    """
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation={allocation!r}: expected one of {list(ALLOCATIONS)}")
    if isinstance(reads, bool) or not isinstance(reads, (int, float)) or not reads >= 1.0:
        raise ValueError(
            f"reads={reads!r}: expected a number >= 1 (one evaluation's reads as a multiple of one head's weights)"
        )
    if not experts:
        raise ValueError("allocate_ranks needs at least one expert")
    n = len(experts) + 1
    floor = pool_reads(base, n, dict.fromkeys(MATRICES, 0))
    if reads < floor:
        raise ValueError(
            f"reads={reads}: a pool of {n} drafters reads {floor:.3f} x one head's weights at rank 0 (the base's "
            f"matrices once, every drafter's norms); ask for at least that"
        )
    for e in experts:
        check_compatible(base, e)
    if svds is not None and len(svds) != len(experts):
        raise ValueError(f"allocate_ranks: {len(svds)} delta SVDs for {len(experts)} experts; give one per expert")
    head = sum(v.numel() for v in base.weights.values())
    budget = (reads - floor) * head
    gains: list[tuple[float, str, int]] = []  # (score per parameter, matrix, rank index)
    for k in MATRICES:
        spectra = []
        for i, e in enumerate(experts):
            if svds is None:
                sv = torch.linalg.svdvals((e.weights[k].double() - base.weights[k].double()).t()) ** 2
            else:
                sv = svds[i][k][1] ** 2
            spectra.append(sv / sv.sum() if allocation == "relative" and float(sv.sum()) > 0 else sv)
        score = torch.stack(spectra).sum(0)
        cost = n * sum(base.weights[k].shape)
        gains += [(float(score[j]) / cost, k, j) for j in range(score.numel())]
    ranks = dict.fromkeys(MATRICES, 0)
    for _, k, _j in sorted(gains, key=lambda g: -g[0]):  # per matrix in order of j: its scores decrease
        cost = n * sum(base.weights[k].shape)
        if cost <= budget:
            ranks[k] += 1
            budget -= cost
    return ranks


class LowRankStack:
    """N stacked matrices ``W_i^T = base + a[i] @ b[i]`` ([N, in, out]), never materialised in the forward."""

    def __init__(self, base: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        self.base, self.a, self.b = base, a, b  # [in, out], [N, in, r], [N, r, out]

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.a.shape[0], *self.base.shape))

    def __getitem__(self, sel: Any) -> LowRankStack:
        return LowRankStack(self.base, self.a[sel], self.b[sel])

    def bmm(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, T, in] -> [N, T, out]; rows shared by every head (a stride-0 leading dim) pay the base once."""
        shared = x.shape[0] > 1 and x.stride(0) == 0
        # the shared rows as a 2-D mm against the base's transposed view: a 3-D operand would make matmul copy the
        # base into a contiguous [1, in, out] batch on every call
        y = (x[0] @ self.base).expand(x.shape[0], -1, -1) if shared else x @ self.base
        if self.a.shape[-1] == 0:
            return y.contiguous() if shared else y
        return y + torch.bmm(torch.bmm(x, self.a), self.b)


def common_base(drafters: Sequence[Eagle3Drafter]) -> Eagle3Drafter | None:
    """The one base every drafter is (or is a :class:`LowRankDrafter` of), else None (a dense pool)."""
    lows = [d for d in drafters if isinstance(d, LowRankDrafter)]
    if not lows:
        return None
    base = lows[0].base
    if all((d.base is base) if isinstance(d, LowRankDrafter) else (d is base) for d in drafters):
        return base
    return None


def stack_pool_weights(
    drafters: Sequence[Eagle3Drafter], dtype: torch.dtype = torch.float32, device: Any = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The pool's stacked weights for its batched pass and the dense stack (:func:`~hedgespec.engine.eagle3.
    stack_weights`) for one head's draft steps: the same dict, unless every drafter is one base's (low-rank) variant,
    when the batched pass gets :class:`LowRankStack` matrices (norms stay per head, shared with the dense stack)."""
    dense = stack_weights(drafters, dtype=dtype, device=device)
    base = common_base(drafters)
    if base is None:
        return dense, dense
    out: dict[str, Any] = {k: v for k, v in dense.items() if k not in MATRICES}
    for short in MATRICES:
        w = base.weights[short].t()  # [in, out]
        r = max(int(d.factors[short][0].shape[1]) if isinstance(d, LowRankDrafter) else 0 for d in drafters)
        a = torch.zeros(len(drafters), w.shape[0], r)
        b = torch.zeros(len(drafters), r, w.shape[1])
        for i, d in enumerate(drafters):
            if isinstance(d, LowRankDrafter):
                fa, fb = d.factors[short]
                a[i, :, : fa.shape[1]], b[i, : fb.shape[0]] = fa, fb  # zero-padded to the widest rank: exact
        out[short] = LowRankStack(
            base.weights[short].to(dtype=dtype, device=device).contiguous().t(),  # a view of the rows, as stack_weights
            a.to(dtype=dtype, device=device),
            b.to(dtype=dtype, device=device),
        )
    return out, dense


def weights_read(w: dict[str, Any]) -> int:
    """Parameters one full pool pass reads: dense [N, in, out] stacks count N·in·out, low-rank ones the base
    once plus the factors."""
    total = 0
    for v in w.values():
        if isinstance(v, LowRankStack):
            total += v.base.numel() + v.a.numel() + v.b.numel()
        else:
            total += v.numel()
    return total
