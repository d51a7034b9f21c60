"""The worker's per-round read-back: finiteness flags stay on the device and every drafter's argmax rows, first-token
proposals and flag come back in one transfer, split exactly (no server needed; sglang must import)."""

from __future__ import annotations

import torch
from _requires import SGLANG, installed_or_skip

worker = installed_or_skip("hedgespec.serving.worker", SGLANG)


def test_finiteness_flags_are_device_tensors_with_the_engine_rule():
    ninf = float("-inf")
    ok = torch.tensor([[0.0, ninf, 1.0], [ninf, 2.0, ninf]])  # -inf marks masked ids: fine
    for logits, want in (
        (ok, True),
        (torch.tensor([[ninf, ninf, ninf], [0.0, 1.0, 2.0]]), False),  # a row without a finite logit
        (torch.tensor([[0.0, float("nan"), 1.0]]), False),
        (torch.tensor([[0.0, float("inf"), 1.0]]), False),
        (torch.empty((0, 3)), True),
    ):
        flag = worker._finite_logits(logits)
        assert isinstance(flag, torch.Tensor) and flag.shape == () and bool(flag) is want
    hidden = torch.ones(2, 4)
    assert bool(worker._finite(worker._finite_logits(ok), hidden, None))
    hidden[1, 2] = float("nan")
    assert not bool(worker._finite(worker._finite_logits(ok), hidden))


def test_read_back_splits_one_transfer_per_drafter():
    pending = [
        (0, torch.tensor([5, 6, 7, 8]), torch.tensor([9, 10]), torch.tensor(True)),
        (2, torch.tensor([[1, 2], [3, 4]]), torch.tensor([11, 12]), torch.tensor(False)),
        (3, torch.tensor([0, 0, 0, 0]), torch.tensor([13, 14]), torch.tensor(True)),
    ]
    got = worker.HedgeSpecWorker._read_back(pending)
    assert [(r.tolist(), p.tolist(), ok) for r, p, ok in got] == [
        ([5, 6, 7, 8], [9, 10], True),
        ([1, 2, 3, 4], [11, 12], False),
        ([0, 0, 0, 0], [13, 14], True),
    ]
    assert worker.HedgeSpecWorker._read_back([]) == []
