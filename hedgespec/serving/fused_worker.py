"""The HEDGESPEC worker with the pool as one draft model (serve config ``fused=true``).

Same round, same selection and feedback as :class:`hedgespec.serving.worker.HedgeSpecWorker`; what changes is how
the drafters run. The draft model is :class:`hedgespec.serving.pool_model.HedgeSpecPoolForCausalLMEagle3` (N
EAGLE-3 heads on one draft KV pool, by default one layer holding every head's KV heads and one attention call
for all of them), served by SGLang's one EAGLE draft worker:

* **drafting**: one SGLang ``draft`` for the whole batch, whatever the requests chose. Each request's draft input
  (first token, recurrent hidden state) is its chosen drafter's row, gathered from :class:`DraftRows`; the draft
  model runs only the heads some request chose and takes each row from its own request's head.
* **evaluation**: one SGLang draft-extend over the verified tokens runs every live head (one forward, one
  attention-metadata build, each matmul batched over the heads); the model keeps every head's argmax at every
  row, its first-token proposal and its hidden state at each request's last accepted row, read back in one
  transfer.

A head whose outputs are not finite is dropped as in the per-drafter worker. A forward that raises cannot be
blamed on one head here (all heads run in it), so the error propagates: SGLang fails the batch.

Trees (``topk`` k > 1): the one draft step drafts each request's tree with its chosen head (the draft step's
k·B rows each take their request's head); the evaluation keeps each head's top-k ids at every row and its top-k
probabilities at each request's last accepted row (its next draft input), so γ is the per-drafter worker's.

Not yet: CUDA graphs for the draft step (it runs eager: a graph would replay the heads of its capture batch; the
heads' ids as a graph input are the next step), overlap scheduling.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from hedgespec.serving.pool_model import PoolOutput
from hedgespec.serving.selection import RoundChoice, substitutes
from hedgespec.serving.worker import HedgeSpecWorker, _restore, _snapshot


def _no_draft_graphs(drafter: Any) -> None:
    drafter.cuda_graph_runner = None
    drafter.cuda_graph_runner_for_draft_extend = None


class FusedHedgeSpecWorker(HedgeSpecWorker):
    """HEDGESPEC with one fused pool draft model (module docstring)."""

    def _setup_topk(self) -> None:
        """The pool keeps each head's top-k at every evaluated row (its argmax for a chain)."""
        self._pool.topk = int(self.topk)

    @staticmethod
    def _draft_model_path(cfg: dict[str, Any]) -> str:
        return str(cfg["pool_dir"])

    def _draft_workers(self, server_args: Any, gpu_id: int, nccl_port: int, target_worker: Any) -> list:
        return [self._draft_worker]

    def init_cuda_graphs(self):
        """SGLang's draft graphs are not captured: a captured draft step would replay the heads of the capture
        batch, not the ones each round's requests chose (the draft-extend graph is off for HEDGESPEC anyway)."""
        for d in self._drafters:
            d._capture_cuda_graphs = lambda d=d: _no_draft_graphs(d)
            d.init_cuda_graphs()

    @property
    def _pool(self) -> Any:
        return self._draft_worker.draft_runner.model

    def _extend(self, run: Any) -> PoolOutput | None:
        """Run a draft-extend over every live head; its pool output, or None with no head left."""
        live = self._live()
        if not live:
            return None
        self._pool.live = live
        self._pool.pool_output = None
        run()
        return self._pool.pool_output

    def _keep(
        self,
        po: PoolOutput,
        rows: np.ndarray,
        req_rows: torch.Tensor,
        kept: torch.Tensor | None,
        host: torch.Tensor,
        ok: list[bool],
    ) -> None:
        """Store each finite head's next draft input rows (its top-k probabilities and pool-vocabulary ids, its
        hidden state) and first-token proposals; drop the others."""
        ones = torch.ones((req_rows.numel(), 1), dtype=torch.float32, device=po.kept_top1.device)
        for a, j in enumerate(po.drafters):
            if not ok[a]:
                self._drop(j, "gave non-finite (NaN/inf) logits or hidden states in draft-extend")
                continue
            at = slice(None) if kept is None else kept
            ids, hidden = po.kept_top1[a][at].view(req_rows.numel(), -1), po.kept_hidden[a][at]
            probs = ones if po.kept_p is None else po.kept_p[a][at]
            self._draft_rows.store(j, req_rows, self._selection.n_rows, (probs, ids, hidden))
            self._selection.set_first_pred(rows, j, host[a].numpy())

    def _prefill(self, batch, on_publish, pp_proxy_tensors):
        out, kv_loc_plan = self._target_prefill(batch, on_publish, pp_proxy_tensors)
        _, rows, req_rows = self._records(list(batch.reqs))
        box: list[Any] = []

        def run() -> None:
            box.append(
                self._draft_worker._draft_extend_for_prefill(
                    batch,
                    out.logits_output.hidden_states,
                    out.next_token_ids,
                    out.logits_output.mm_input_embeds,
                    kv_loc_plan=kv_loc_plan,
                )
            )

        po = self._extend(run)
        if po is None:
            out.next_draft_input = self._stub_draft_input(out.next_token_ids)
            return out
        host, ok = self._read(po.top1, po.finite)
        self._keep(po, rows, req_rows, None, host, ok)
        out.next_draft_input = box[0]
        return out

    @staticmethod
    def _read(top1: torch.Tensor, finite: torch.Tensor) -> tuple[torch.Tensor, list[bool]]:
        """One device → host transfer: the heads' argmax (top-k) rows [A, S(, k)] and their finite flags."""
        host = torch.cat([top1.reshape(-1), finite.long().to(top1.device)]).to("cpu")
        return host[: top1.numel()].view(top1.shape), [bool(f) for f in host[top1.numel() :]]

    def _draft_round(self, batch: Any, req_rows: torch.Tensor, choice: RoundChoice) -> tuple[Any, list]:
        """One SGLang draft for the batch: each request drafts with the head that drafts for it."""
        drafted = substitutes(choice, self._alive)
        if drafted[0] is None:  # no drafter left (then no request has one)
            return self._placeholder_draft(batch), drafted
        active = tuple(sorted(set(drafted)))
        base, snap = batch.spec_info, _snapshot(batch)
        slots = torch.as_tensor([active.index(j) for j in drafted], device=req_rows.device)
        loaded = [self._draft_rows.load(j, req_rows) for j in active]
        at = torch.arange(len(drafted), device=req_rows.device)
        info = copy.copy(base)
        if len(active) == 1:
            info.topk_p, info.topk_index, info.hidden_states = loaded[0]
        else:
            info.topk_p, info.topk_index, info.hidden_states = (
                torch.stack([fields[f] for fields in loaded])[slots, at] for f in range(3)
            )
        info.hedgespec_active, info.hedgespec_slots = active, slots
        batch.spec_info = info
        verify_input = self._draft_worker.draft(batch)
        _restore(batch, snap)
        return verify_input, drafted

    def _evaluate(
        self, batch: Any, out: Any, verify_input: Any, rows: np.ndarray, req_rows: torch.Tensor
    ) -> list[torch.Tensor]:
        """One draft-extend of every live head over the verified tokens; per drafter its argmax (target ids) at
        every row, [B, ndt] ([B, ndt, k]: its top-k under tree drafting), −1 for a dropped drafter."""
        b, ndt = len(batch.reqs), self.speculative_num_draft_tokens
        shape = self._proposal_shape(b)
        argmaxes = [torch.full(shape, -1, dtype=torch.long)] * self.n_drafters

        def run() -> None:
            self._draft_worker._draft_extend_for_decode(batch, out, kv_loc_plan=verify_input.kv_loc_plan)

        po = self._extend(run)
        if po is None:
            self._stub_skipped_draft_extend(batch, out)  # SGLang's shape-valid rows; nothing drafts from them
            return argmaxes
        # each request's last accepted row (SGLang's select_index): the next round's first proposal and state
        last = torch.arange(0, b * ndt, ndt) + out.accept_lens.to("cpu").long() - 1
        host, ok = self._read(po.top1, po.finite)  # [A, B*ndt(, k)]
        self._keep(po, rows, req_rows, last.to(po.top1.device), host[:, last], ok)
        for a, j in enumerate(po.drafters):
            if ok[a]:
                argmaxes[j] = host[a].view(shape)
        return argmaxes
