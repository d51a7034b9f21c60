"""The fused pool's heads layout: one attention call over every drafter's heads gives each head its own attention.

The real :meth:`HedgeSpecPoolForCausalLMEagle3._attend` runs against an attention stand-in that knows nothing of
drafters (grouped-query attention over N·Hq query and N·Hkv KV heads, each row over a fixed KV context plus its
own new k/v, as a backend does for one step) and is compared with each head attending alone over its own slice.
Needs sglang only for the import of the module under test.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("sglang")

N, HQ, HKV, D, CTX = 3, 4, 2, 8, 5


def _rope(positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Neox-style rotary embedding of x [R, heads*D] per head, at each row's position."""
    rows = x.shape[0]
    x = x.view(rows, -1, D)
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = positions.float()[:, None, None] * inv[None, None, :]
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(rows, -1)


class _Rope:
    def __call__(self, positions, q, k):
        return _rope(positions, q), _rope(positions, k)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor) -> torch.Tensor:
    """One row's grouped-query attention: q [Hq', D] over the context ck/cv [T, Hkv', D] plus its own k/v [Hkv', D]."""
    keys, values = torch.cat([ck, k[None]]), torch.cat([cv, v[None]])
    group = q.shape[0] // keys.shape[1]
    kv = torch.arange(q.shape[0]) // group
    scores = torch.einsum("hd,thd->ht", q, keys[:, kv]) / D**0.5
    return torch.einsum("ht,thd->hd", scores.softmax(-1), values[:, kv])


class _Backend:
    """Attention over the stacked layer as a backend computes it: it sees N·Hq query heads, N·Hkv KV heads."""

    def __init__(self, ck: torch.Tensor, cv: torch.Tensor) -> None:
        self.ck, self.cv = ck, cv

    def __call__(self, q, k, v, forward_batch):
        rows = q.shape[0]
        q, k, v = q.view(rows, N * HQ, D), k.view(rows, N * HKV, D), v.view(rows, N * HKV, D)
        return torch.stack([_attention(q[r], k[r], v[r], self.ck, self.cv) for r in range(rows)]).view(rows, -1)


def _pool(ck, cv):
    attn = SimpleNamespace(q_size=HQ * D, kv_size=HKV * D, rotary_emb=_Rope())
    head = SimpleNamespace(model=SimpleNamespace(layers=[SimpleNamespace(self_attn=attn)]))
    return SimpleNamespace(heads=[head] * N, attn=_Backend(ck, cv))


def _alone(i: int, qkv_row: torch.Tensor, pos: torch.Tensor, ck, cv) -> torch.Tensor:
    """Head i attending alone over its own KV slice: [Hq*D]."""
    q, k, v = qkv_row[None].split([HQ * D, HKV * D, HKV * D], dim=-1)
    q, k = _rope(pos[None], q), _rope(pos[None], k)
    sl = slice(i * HKV, (i + 1) * HKV)
    return _attention(q.view(HQ, D), k.view(HKV, D), v.view(HKV, D), ck[:, sl], cv[:, sl]).reshape(-1)


@pytest.mark.parametrize("active, slots", [((0, 1, 2), None), ((0, 2), None), ((2, 0), [0, 1, 1, 0]), ((1,), [0] * 4)])
def test_one_attention_call_gives_every_head_its_own_attention(active, slots):
    """An evaluation (every row, each running head) and a draft step (each row its own head, chosen heads in any
    order) through the one stacked attention call equal each head attending alone; a mutation that places every
    row in the first head's slice fails the draft-step cases."""
    from hedgespec.serving.pool_model import HedgeSpecPoolForCausalLMEagle3 as Pool

    gen = torch.Generator().manual_seed(0)
    rows = 4
    ck, cv = torch.randn(CTX, N * HKV, D, generator=gen), torch.randn(CTX, N * HKV, D, generator=gen)
    qkv = torch.randn(len(active), rows, (HQ + 2 * HKV) * D, generator=gen)
    positions = torch.arange(CTX, CTX + rows)
    slot = None if slots is None else torch.tensor(slots)
    out = Pool._attend(_pool(ck, cv), active, qkv, positions, None, slot)
    assert out.shape == (len(active), rows, HQ * D)
    for r in range(rows):
        for a, i in enumerate(active):
            if slot is not None and int(slot[r]) != a:
                continue  # another head's output at this row: the caller discards it
            want = _alone(i, qkv[a, r], positions[r], ck, cv)
            torch.testing.assert_close(out[a, r], want, rtol=1e-5, atol=1e-5)
