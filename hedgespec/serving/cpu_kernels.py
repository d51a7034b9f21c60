"""Pure-torch stand-ins for the sgl-kernel CPU ops that SGLang's EAGLE/EAGLE-3 path calls (``device=cpu``).

Pinned to **sglang 0.5.23** (:data:`SGLANG_VERSION`). SGLang's CPU backend expects the source-built CPU
``sgl_kernel`` (AMX Xeon). On any other CPU the EAGLE path has no kernels at all, so this module supplies
functional (not fast) versions of exactly the ops that path calls:

* attention (``intel_amx`` backend): ``decode_attention_cpu``, ``extend_attention_cpu`` (torch ops
  ``torch.ops.sgl_kernel.*``), ``build_draft_decode_metadata_cpu``;
* speculative bookkeeping: ``build_tree_kernel_efficient_cpu``, ``verify_tree_greedy_cpu``,
  ``assign_draft_cache_locs_contiguous_cpu``, ``assign_extend_cache_locs_cpu``,
  ``assign_req_to_token_pool_cpu``, ``fill_bonus_tokens_cpu``, ``fill_accept_out_cache_loc_cpu``,
  ``copy_all_layer_kv_cache_cpu``, ``rotate_input_ids_cpu``.

The semantics follow the argument contracts documented at SGLang's call sites (``kernels/ops/speculative``,
``layers/attention/intel_amx_backend.py``) and the CPU kernel contracts in sgl-kernel ``csrc/cpu/spec.cpp``;
the bookkeeping ops are written from those contracts loop by loop, for readability; the two attention ops pad
the batch's sequences to one length and attend in one batched product (masking the padding), so a call costs a
few tensor ops whatever the batch size. Every op is tested against a straightforward reference in
``tests/test_serving_cpu_kernels.py``.

Nothing happens at import. :func:`install` (idempotent) registers the two attention ops in the
``sgl_kernel`` torch-library namespace with the **CPU** dispatch key only; the ``sgl_kernel`` Python module
that SGLang imports is the shim in ``hedgespec/serving/_cpu_shim`` which the launcher puts on
``PYTHONPATH`` only for ``device=cpu`` (see :mod:`hedgespec.serving.server`).

Unsupported features raise ``NotImplementedError`` naming the op and the feature (sliding windows,
attention sinks, cross-attention).
"""

from __future__ import annotations

import ctypes

import torch

SGLANG_VERSION = "0.5.23"

__all__ = [
    "SGLANG_VERSION",
    "OPS",
    "install",
    "decode_attention",
    "extend_attention",
    "build_draft_decode_metadata",
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
    "assign_draft_cache_locs_contiguous",
    "assign_extend_cache_locs",
    "assign_req_to_token_pool",
    "fill_bonus_tokens",
    "fill_accept_out_cache_loc",
    "copy_all_layer_kv_cache",
    "rotate_input_ids",
]


# ----------------------------------------------------------------------------------------------------------
# attention
# ----------------------------------------------------------------------------------------------------------
def _unsupported(op: str, what: str) -> NotImplementedError:
    return NotImplementedError(
        f"hedgespec CPU kernel {op}: {what} is not supported by the pure-torch CPU path "
        f"(sglang {SGLANG_VERSION}); use a CUDA GPU or an AMX Xeon with the source-built sgl-kernel"
    )


def _check_plain_attention(op: str, is_cross: bool, sliding_window: int, sinks: torch.Tensor | None) -> None:
    if is_cross:
        raise _unsupported(op, "cross-attention")
    if sliding_window is not None and sliding_window > 0:
        raise _unsupported(op, f"sliding-window attention (window {sliding_window - 1})")
    if sinks is not None:
        raise _unsupported(op, "attention sinks")


#: the most attention scores (batch × heads × queries × keys) one batched call materialises; an extend over longer
#: or more sequences runs in consecutive groups of sequences that fit (one sequence per group at worst)
SCORE_BUDGET = 1 << 25


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    visible: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
) -> torch.Tensor:
    """softmax(q kᵀ · scale [capped], masked) v for a batch of sequences padded to one length, grouped-query heads.

    q: [B, Tq, H, D], k: [B, Tk, Hkv, D], v: [B, Tk, Hkv, Dv], visible: [B, Tq, Tk] bool (padding invisible).
    Returns [B, Tq, H, Dv] fp32; a query row that sees no key gets zeros. Without a logit cap this is torch's
    fused ``scaled_dot_product_attention`` in fp32 (grouped-query heads, boolean mask); with one, the scores are
    computed, capped and normalised explicitly.
    """
    q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))  # [B, heads, T, D]
    mask = visible.unsqueeze(1)
    if not (logit_cap and logit_cap > 0):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sm_scale, enable_gqa=True)
        return out.nan_to_num(0.0).transpose(1, 2)
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = logit_cap * torch.tanh(torch.matmul(q, k.transpose(-1, -2)) * sm_scale / logit_cap)
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)  # no key seen: 0
    return torch.matmul(probs, v).transpose(1, 2)


def _gather(buffer: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor, scale: float) -> torch.Tensor:
    """``buffer`` rows at ``slots`` [B, T] (slot 0 where not ``valid``: read, then masked out) as fp32 × scale."""
    rows = buffer[slots.masked_fill(~valid, 0)].float()
    return rows if scale == 1.0 else rows * scale


def decode_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    o: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    loc: torch.Tensor | None,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross: bool,
    sliding_window: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
) -> None:
    """One query token per sequence (``decode_attention_cpu``).

    Writes the new ``k``/``v`` rows into the KV buffers at ``loc`` (when given), then sequence i attends over the
    slots ``req_to_token[req_pool_indices[i], :seq_lens[i]]`` (the new token included) and writes ``o[i]``; the
    sequences are padded to the longest and attend in one batched product. ``attn_logits`` is the real kernel's
    split-K scratch; it is not used here.
    """
    _check_plain_attention("decode_attention_cpu", is_cross, sliding_window, sinks)
    if k is not None and v is not None:
        k_buffer[loc] = k.view(-1, *k_buffer.shape[1:]).to(k_buffer.dtype)
        v_buffer[loc] = v.view(-1, *v_buffer.shape[1:]).to(v_buffer.dtype)
    b = q.shape[0]
    if b == 0:
        return
    lens = seq_lens.long()
    width = int(lens.max())
    slots = req_to_token[req_pool_indices.long(), :width].long()
    valid = torch.arange(width) < lens[:, None]
    keys = _gather(k_buffer, slots, valid, key_scale)
    values = _gather(v_buffer, slots, valid, value_scale)
    out = _attend(q.view(b, 1, *q.shape[1:]), keys, values, valid[:, None, :], sm_scale, logit_cap)
    o.copy_(out.view(o.shape).to(o.dtype))


def extend_attention(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor | None,
    v_extend: torch.Tensor | None,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int | None,
    sm_scale: float,
    logit_cap: float,
    is_cross: bool,
    sliding_window: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
    tree_mask: torch.Tensor | None,
    is_causal: bool,
) -> None:
    """Prefill/extend and target-verify attention (``extend_attention_cpu``).

    Sequence i owns query rows ``extend_start_loc[i] : + extend_seq_lens[i]`` (E rows). It sees its prefix of
    ``seq_lens[i] - E`` cached slots (from ``req_to_token``) fully, and its own E new keys (``k_extend``, or
    the cache when ``k_extend`` is None) causally — or, when ``tree_mask`` is given, as the
    QLEN_ONLY tree mask says: new key m is visible to row j iff ``tree_mask[i·E·E + j·E + m]``. Sequences are
    padded to the longest prefix and extend and attend in one batched product per group of sequences whose
    scores fit :data:`SCORE_BUDGET`.
    """
    _check_plain_attention("extend_attention_cpu", is_cross, sliding_window, sinks)
    ext_all = extend_seq_lens.long()
    prefix_all = seq_lens.long() - ext_all

    def attend(group: range, ext_max: int, pre_max: int) -> None:
        """The sequences ``group``, padded to ``pre_max`` prefix and ``ext_max`` new keys (the keys of sequence i:
        its prefix slots, then its new keys)."""
        idx = torch.arange(group.start, group.stop)
        ext, prefix, start = ext_all[idx], prefix_all[idx], extend_start_loc.long()[idx]
        rows = req_to_token[req_pool_indices.long()[idx]].long()  # [G, pool width]
        j = torch.arange(ext_max)
        in_ext = j < ext[:, None]  # [G, E]: real query rows (and real new keys)
        in_pre = torch.arange(pre_max) < prefix[:, None]  # [G, P]
        pk = _gather(k_buffer, rows[:, :pre_max], in_pre, key_scale)
        pv = _gather(v_buffer, rows[:, :pre_max], in_pre, value_scale)
        q_rows = (start[:, None] + j).masked_fill(~in_ext, 0)  # [G, E] flat query rows (row 0 where padding)
        if k_extend is not None and v_extend is not None:
            ek, ev = k_extend[q_rows].float(), v_extend[q_rows].float()
        else:
            new_slots = torch.gather(rows, 1, (prefix[:, None] + j).clamp(max=rows.shape[1] - 1))
            ek = _gather(k_buffer, new_slots, in_ext, key_scale)
            ev = _gather(v_buffer, new_slots, in_ext, value_scale)
        inner = _inner_mask(tree_mask, is_causal, group, ext_max, int(ext.min())) & in_ext[:, None, :]
        visible = torch.cat([in_pre[:, None, :].expand(-1, ext_max, -1), inner], dim=2)  # [G, E, P + E]
        keys, values = torch.cat([pk, ek], dim=1), torch.cat([pv, ev], dim=1)
        out = _attend(q_extend[q_rows], keys, values, visible, sm_scale, logit_cap)
        o_extend[q_rows[in_ext]] = out[in_ext].to(o_extend.dtype)

    for group, ext_max, pre_max in _groups(ext_all.tolist(), prefix_all.tolist(), int(q_extend.shape[1])):
        attend(group, ext_max, pre_max)


def _groups(exts: list[int], prefixes: list[int], heads: int) -> list[tuple[range, int, int]]:
    """Consecutive groups of sequences whose padded scores (group size × heads × longest extend × (longest prefix +
    longest extend)) fit :data:`SCORE_BUDGET` (a sequence alone always forms a group): (sequences, longest extend,
    longest prefix) per group."""
    out, lo, n = [], 0, len(exts)
    while lo < n:
        hi, ext_max, pre_max = lo, 0, 0
        while hi < n:
            e, p = max(ext_max, exts[hi]), max(pre_max, prefixes[hi])
            if hi > lo and (hi - lo + 1) * heads * e * (p + e) > SCORE_BUDGET:
                break
            ext_max, pre_max, hi = e, p, hi + 1
        out.append((range(lo, hi), ext_max, pre_max))
        lo = hi
    return out


def _inner_mask(tree_mask: torch.Tensor | None, is_causal: bool, group: range, ext: int, shortest: int) -> torch.Tensor:
    """Which of a sequence's ``ext`` new keys each of its new rows sees, [G, E, E]: the QLEN_ONLY tree mask (every
    sequence of a tree verify has the same E), causal, or all."""
    if tree_mask is not None:
        if shortest != ext:
            raise _unsupported("extend_attention_cpu", "a tree mask with different draft lengths per sequence")
        inner = tree_mask.view(-1)[group.start * ext * ext : group.stop * ext * ext]
        return inner.view(len(group), ext, ext).bool()
    j = torch.arange(ext)
    if is_causal:
        return (j[None, :] <= j[:, None]).expand(len(group), -1, -1)
    return torch.ones(len(group), ext, ext, dtype=torch.bool)


# ----------------------------------------------------------------------------------------------------------
# speculative bookkeeping (index manipulation; tensors are small)
# ----------------------------------------------------------------------------------------------------------
def build_draft_decode_metadata(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Row ``b·topk + c`` = request b's committed prefix, then candidate c's ``num_steps`` draft slots
    (laid out contiguously at ``seq_len + c·num_steps`` by ``assign_draft_cache_locs_contiguous``)."""
    out = torch.zeros(req_pool_indices.shape[0] * topk, pool_len, dtype=req_to_token.dtype)
    for b in range(req_pool_indices.shape[0]):
        src, sl = req_to_token[int(req_pool_indices[b])], int(seq_lens[b])
        for c in range(topk):
            out[b * topk + c, :sl] = src[:sl]
            out[b * topk + c, sl : sl + num_steps] = src[sl + c * num_steps : sl + (c + 1) * num_steps]
    return out


def _parent_slot(sel: list[int], parents: list[int], node: int, topk: int) -> int:
    """Tree slot (1..n-1, 0 = root) of draft node ``node``'s parent; n when the parent is not in the tree."""
    parent_tb = sel[node] // topk
    if parent_tb == 0:
        return 0
    target = parents[parent_tb]
    for pos, s in enumerate(sel):
        if s == target:
            return pos + 1
    return len(sel) + 1


def build_tree_kernel_efficient(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """EAGLE draft tree → verify inputs: retrieval links (first child / next sibling, children linked
    newest-first), per-token positions (depth + committed length) and the ancestor mask
    (mode 1 = QLEN_ONLY: [bs, n, n]; mode 0 = FULL_MASK: per request [n, seq_len + n] with the prefix visible).
    ``retrieve_next_token``/``retrieve_next_sibling`` must be pre-filled with -1 by the caller."""
    if int(tree_mask_mode) not in (0, 1):
        raise _unsupported("build_tree_kernel_efficient_cpu", f"tree_mask_mode={int(tree_mask_mode)}")
    n = draft_token_num
    flat_mask = tree_mask.view(-1)
    full_offset = 0
    for b in range(parent_list.shape[0]):
        sel = [int(x) for x in selected_index[b, : n - 1]]
        parents = [int(x) for x in parent_list[b]]
        seq_len, off = int(verified_seq_len[b]), b * n
        retrieve_index.view(-1)[off : off + n] = torch.arange(off, off + n)
        # parent slot of every tree slot 1..n-1
        parent_of = {i: _parent_slot(sel, parents, i - 1, topk) for i in range(1, n)}
        for i in range(n - 1, 0, -1):
            p = parent_of[i]
            if p > n - 1:
                continue
            first = int(retrieve_next_token.view(-1)[off + p])
            retrieve_next_token.view(-1)[off + p] = i
            if first != -1:
                retrieve_next_sibling.view(-1)[off + i] = first
        # ancestors (slot 0 = root is everyone's ancestor) and depth
        width = n if int(tree_mask_mode) == 1 else seq_len + n
        base = off * n if int(tree_mask_mode) == 1 else full_offset
        col0 = 0 if int(tree_mask_mode) == 1 else seq_len
        for t in range(n):
            row = base + t * width
            if int(tree_mask_mode) == 0:
                flat_mask[row : row + seq_len] = True
            flat_mask[row + col0 : row + col0 + n] = False
            flat_mask[row + col0] = True
            depth_t, cur = 0, t
            while cur > 0:
                depth_t += 1
                flat_mask[row + col0 + cur] = True
                cur = parent_of[cur]
                if cur > n - 1:
                    break
            positions.view(-1)[off + t] = seq_len + depth_t
        full_offset += n * (seq_len + n)


def verify_tree_greedy(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy acceptance along the draft tree: from the root, descend into the child whose draft token
    equals the target's argmax at the current node; stop at the first level with no match.

    Writes ``accept_index[b]`` (flat indices of the root and accepted nodes), ``accept_token_num[b]``
    (accepted drafts, bonus excluded) and ``predicts`` (the target token after each accepted node)."""
    steps = accept_index.shape[1]
    flat_pred, flat_target = predicts.view(-1), target_predict.reshape(-1)
    for b in range(candidates.shape[0]):
        last = int(retrive_index[b, 0])
        accept_index[b, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = int(retrive_next_token[b, cur])
            while cur != -1:
                if int(candidates[b, cur]) == int(flat_target[last]):
                    flat_pred[last] = flat_target[last]
                    accepted += 1
                    last = int(retrive_index[b, cur])
                    accept_index[b, accepted] = last
                    break
                cur = int(retrive_next_sibling[b, cur])
            if cur == -1:
                break
        accept_token_num[b] = accepted
        flat_pred[last] = flat_target[last]


def assign_draft_cache_locs_contiguous(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """``out_cache_loc[b·w : (b+1)·w] = req_to_token[rpi[b], seq_lens[b] : + w]`` with w = topk·num_steps."""
    width = topk * num_steps
    for b in range(req_pool_indices.shape[0]):
        sl = int(seq_lens[b])
        out_cache_loc[b * width : (b + 1) * width] = req_to_token[int(req_pool_indices[b]), sl : sl + width]


def assign_extend_cache_locs(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Concatenate ``req_to_token[rpi[b], start[b]:end[b]]`` over b into ``out_cache_loc``."""
    pos = 0
    for b in range(req_pool_indices.shape[0]):
        s, e = int(start_offset[b]), int(end_offset[b])
        out_cache_loc[pos : pos + e - s] = req_to_token[int(req_pool_indices[b]), s:e]
        pos += e - s


def assign_req_to_token_pool(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Inverse of :func:`assign_extend_cache_locs`: scatter ``out_cache_loc`` into the request rows."""
    pos = 0
    for b in range(req_pool_indices.shape[0]):
        s, e = int(start_offset[b]), int(end_offset[b])
        req_to_token[int(req_pool_indices[b]), s:e] = out_cache_loc[pos : pos + e - s].to(req_to_token.dtype)
        pos += e - s


def fill_bonus_tokens(
    accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor, accept_stride: int
) -> None:
    """``bonus_tokens[b] = accept_tokens.flat[b·stride + accept_lens[b] − 1]`` (the last accepted token)."""
    flat = accept_tokens.reshape(-1)
    for b in range(accept_lens.shape[0]):
        bonus_tokens[b] = flat[b * accept_stride + int(accept_lens[b]) - 1]


def fill_accept_out_cache_loc(
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    accept_out_cache_loc: torch.Tensor,
    size: int | None = None,
) -> None:
    """Compact ``out_cache_loc[accept_index]`` over the non-negative entries, in order."""
    idx = accept_index.reshape(-1)[: size if size is not None else accept_index.numel()].long()
    kept = idx[idx >= 0]
    accept_out_cache_loc[: kept.numel()] = out_cache_loc[kept]


def copy_all_layer_kv_cache(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """For every buffer (raw base pointer, row stride in bytes) copy row ``src_loc[j]`` to ``tgt_loc[j]``.

    Reads every source row before writing any target row, so overlapping moves are safe. The buffers are
    addressed by raw pointer (that is the op's contract), hence ``ctypes``."""
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(base + int(s) * stride, stride) for s in src_loc.tolist()]
        for t, data in zip(tgt_loc.tolist(), rows):
            ctypes.memmove(base + int(t) * stride, data, stride)


def rotate_input_ids(
    input_ids: torch.Tensor,
    extend_start_loc: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    topk_index: torch.Tensor,
    select_index: torch.Tensor | None = None,
) -> None:
    """Shift each request's extend segment left by one and write its new token at the end (or at
    ``select_index[b]``), in place."""
    for b in range(extend_seq_lens.shape[0]):
        s, n = int(extend_start_loc[b]), int(extend_seq_lens[b])
        if n > 1:
            input_ids[s : s + n - 1] = input_ids[s + 1 : s + n].clone()
        if n > 0:
            where = int(select_index[b]) if select_index is not None else s + n - 1
            input_ids[where] = topk_index.reshape(-1)[b]


# sgl_kernel name -> implementation (what the shim module exports)
OPS = {
    "decode_attention_cpu": decode_attention,
    "extend_attention_cpu": extend_attention,
    "build_draft_decode_metadata_cpu": build_draft_decode_metadata,
    "build_tree_kernel_efficient_cpu": build_tree_kernel_efficient,
    "verify_tree_greedy_cpu": verify_tree_greedy,
    "assign_draft_cache_locs_contiguous_cpu": assign_draft_cache_locs_contiguous,
    "assign_extend_cache_locs_cpu": assign_extend_cache_locs,
    "assign_req_to_token_pool_cpu": assign_req_to_token_pool,
    "fill_bonus_tokens_cpu": fill_bonus_tokens,
    "fill_accept_out_cache_loc_cpu": fill_accept_out_cache_loc,
    "copy_all_layer_kv_cache_cpu": copy_all_layer_kv_cache,
    "rotate_input_ids_cpu": rotate_input_ids,
}

# torch-library schemas for the ops SGLang reaches through ``torch.ops.sgl_kernel`` (CPU dispatch key only)
_TORCH_OP_SCHEMAS = {
    "decode_attention_cpu": (
        "(Tensor q, Tensor(a!) k_buffer, Tensor(b!) v_buffer, float key_scale, float value_scale, "
        "Tensor(c!) o, Tensor? k, Tensor? v, Tensor? loc, Tensor(d!) attn_logits, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, bool is_cross, "
        "int sliding_window, Tensor? encoder_lens, Tensor? sinks) -> ()"
    ),
    "extend_attention_cpu": (
        "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, Tensor k_buffer, "
        "Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, int? max_len_extend, "
        "float sm_scale, float logit_cap, bool is_cross, int sliding_window, Tensor? encoder_lens, "
        "Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()"
    ),
}
_LIBRARY: list[torch.library.Library] = []


def install() -> None:
    """Register the attention ops as ``torch.ops.sgl_kernel.*`` (CPU dispatch key). Idempotent.

    Refuses when a real sgl-kernel already defines them (a CUDA or AMX install must keep its own kernels).
    """
    if _LIBRARY:
        return
    ns = torch.ops.sgl_kernel
    already = [name for name in _TORCH_OP_SCHEMAS if hasattr(ns, name)]
    if already:
        raise RuntimeError(
            f"torch.ops.sgl_kernel already defines {already}: a real sgl-kernel is loaded; the hedgespec "
            "CPU kernels are only for device=cpu without sgl-kernel"
        )
    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name, schema in _TORCH_OP_SCHEMAS.items():
        lib.define(name + schema)
        lib.impl(name, OPS[name], "CPU")
    _LIBRARY.append(lib)
