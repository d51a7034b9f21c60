"""DraftRows (hedgespec/serving/draft_rows.py) against keeping one cloned row per request and drafter (the
worker's earlier bookkeeping): the same rows come back after stores in changing batch compositions."""

from __future__ import annotations

import pytest
import torch

from hedgespec.serving.draft_rows import DraftRows


def test_rows_round_trip_across_batches_and_growth():
    gen = torch.Generator().manual_seed(0)
    store, ref = DraftRows(3), {}
    capacity = 4
    for step in range(30):
        if step == 12:
            capacity = 16  # the selection table grew
        b = int(torch.randint(1, capacity + 1, (1,), generator=gen))
        rows = torch.randperm(capacity, generator=gen)[:b]
        for j in range(3):
            p = torch.rand(b, 1, generator=gen)
            idx = torch.randint(0, 50, (b, 1), generator=gen)
            hidden = torch.rand(b, 6, generator=gen).to(torch.bfloat16)
            store.store(j, rows, capacity, (p, idx, hidden))
            for r, row in enumerate(rows.tolist()):
                ref[(j, row)] = (p[r].clone(), idx[r].clone(), hidden[r].clone())
        load = torch.tensor(sorted({row for (_, row) in ref}))
        for j in range(3):
            got = store.load(j, load)
            for f in range(3):
                want = torch.stack([ref[(j, row)][f] for row in load.tolist()])
                assert torch.equal(got[f], want)


def test_field_changes_and_missing_rows_are_named():
    store = DraftRows(2)
    rows = torch.tensor([0, 1])
    store.store(0, rows, 2, (torch.zeros(2, 1), torch.zeros(2, 1, dtype=torch.long), None))
    assert store.load(0, rows)[2] is None
    with pytest.raises(ValueError, match="'hidden_states' is present in some rounds"):
        store.store(0, rows, 2, (torch.zeros(2, 1), torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 4)))
    with pytest.raises(ValueError, match="'topk_p' changed from \\(1,\\) torch.float32 to \\(2,\\)"):
        store.store(0, rows, 2, (torch.zeros(2, 2), torch.zeros(2, 1, dtype=torch.long), None))
    with pytest.raises(ValueError, match="drafter 1 has stored no draft input rows"):
        store.load(1, rows)
