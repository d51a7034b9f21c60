"""Every drafter's next-round draft input for every request, in device buffers (torch, no sglang).

After a draft-extend, drafter j's ``next_draft_input`` holds one row per request of the batch: the top-k
probabilities and ids of its first draft token and its recurrent hidden state. The worker needs them again when
j next drafts for those requests, possibly in another batch composition, and SGLang reuses the
``next_draft_input`` buffers for the next drafter. :class:`DraftRows` keeps them in one buffer per drafter and
field, indexed by the request's row of :class:`hedgespec.serving.selection.WorkerSelection`: storing a batch is
one indexed copy per field and loading one gather, instead of B small copies and stacks (3 N B kernel launches
per round on a GPU at B requests and N drafters).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

FIELDS = ("topk_p", "topk_index", "hidden_states")


class DraftRows:
    """Per drafter, its rows ``topk_p`` [R, k], ``topk_index`` [R, k] and ``hidden_states`` [R, H] (None when the
    draft input carries none) for R request rows; buffers are created at the first store and grow to the rows."""

    def __init__(self, n_drafters: int) -> None:
        self._bufs: list[dict[str, torch.Tensor | None] | None] = [None] * int(n_drafters)

    def store(self, j: int, rows: torch.Tensor, capacity: int, tensors: Sequence[torch.Tensor | None]) -> None:
        """Drafter ``j``'s rows for the requests at ``rows`` (a long tensor on the tensors' device), one tensor per
        field in :data:`FIELDS` order, each with one leading row per request; ``capacity``: the rows in use."""
        bufs = self._bufs[j]
        if bufs is None:
            bufs = self._bufs[j] = {
                f: None if t is None else t.new_zeros((0, *t.shape[1:])) for f, t in zip(FIELDS, tensors)
            }
        for f, t in zip(FIELDS, tensors):
            buf = bufs[f]
            if t is None or buf is None:
                if (t is None) != (buf is None):
                    raise ValueError(f"drafter {j}: draft input field {f!r} is present in some rounds and not others")
                continue
            if t.shape[1:] != buf.shape[1:] or t.dtype != buf.dtype:
                raise ValueError(
                    f"drafter {j}: draft input field {f!r} changed from {tuple(buf.shape[1:])} {buf.dtype} to "
                    f"{tuple(t.shape[1:])} {t.dtype}"
                )
            if buf.shape[0] < capacity:
                buf = bufs[f] = torch.cat([buf, buf.new_zeros((capacity - buf.shape[0], *buf.shape[1:]))])
            buf[rows] = t
        return None

    def load(self, j: int, rows: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Drafter ``j``'s rows for the requests at ``rows``, in :data:`FIELDS` order (copies)."""
        bufs = self._bufs[j]
        if bufs is None:
            raise ValueError(f"drafter {j} has stored no draft input rows yet")
        return tuple(None if bufs[f] is None else bufs[f][rows] for f in FIELDS)
