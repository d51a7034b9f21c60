"""The HEDGESPEC speculative worker for SGLang 0.5.23: EAGLE-3 with a pool of N drafters chosen per request.

One decode round (the serving data flow of docs/architecture.md; HedgeSpec's full-information feedback with
delayed ETAP/EAL losses), for a batch of requests each with its own selector:

1. every request's selector picks a drafter ``i_t`` (:meth:`Selector.select`);
2. each drafter that was picked by at least one request drafts a chain for the batch (its own KV pool and its
   own per-request recurrent state); the verify input takes each request's rows from its chosen drafter;
3. **one** target verification (SGLang's ``run_eagle_verify``: lossless, greedy on CPU);
4. draft-extend for **all** N drafters over the verified tokens (refreshes every drafter's KV and state, and
   gives every drafter's prediction at every emitted position with no extra target forward);
5. γ[u, i] = 1{drafter i's argmax at emitted position u equals the committed token} (greedy γ, as
   ``hedgespec.acceptance.gamma_greedy`` with top-1) → :class:`RoundFeedback` → ``selector.observe`` (the
   selector's feedback ledger releases completed losses to its learner).

Per-request ``meta_info`` gains ``hedgespec_histogram`` (rounds drafted by each drafter),
``hedgespec_weights`` (the last decision's distribution), ``hedgespec_selector`` and ``hedgespec_rounds``
next to SGLang's own ``spec_accept_length`` / ``spec_verify_ct`` (request-level ``customized_info`` keys,
see :mod:`hedgespec.serving.plugin`).

Scope: chain drafting (``--speculative-eagle-topk 1``), no overlap scheduling, no pipeline parallelism, no
draft-extend CUDA graphs (the all-row draft logits exist only on the eager path). The worker is configured
through the ``HEDGESPEC_CONFIG`` environment variable (JSON written by :func:`hedgespec.serving.argv.build_plan`,
validated by :func:`hedgespec.serving.plugin.parse_worker_config`) because SGLang's ``ServerArgs`` is a sealed
struct. Per-request states live in :class:`hedgespec.serving.states.RequestStates`, freed at finish and at abort.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from hedgespec.selectors import make_selector
from hedgespec.serving.plugin import CONFIG_ENV, parse_worker_config
from hedgespec.serving.rounds import greedy_gamma
from hedgespec.serving.states import RequestStates
from hedgespec.types import RequestContext, RoundFeedback

logger = logging.getLogger(__name__)

META_KEYS = ("hedgespec_histogram", "hedgespec_weights", "hedgespec_selector", "hedgespec_rounds")

# ScheduleBatch fields that draft()/draft-extend rewrite; restored between the per-drafter calls.
_BATCH_FIELDS = (
    "spec_info",
    "input_ids",
    "out_cache_loc",
    "prefix_lens",
    "extend_lens",
    "extend_num_tokens",
    "forward_mode",
    "seq_lens",
    "seq_lens_cpu",
    "seq_lens_sum",
)


def load_config() -> dict[str, Any]:
    """The worker config written by the launcher (``HEDGESPEC_CONFIG``), validated by
    :func:`hedgespec.serving.plugin.parse_worker_config` (a bad key fails the server start, naming the key)."""
    try:
        return parse_worker_config(os.environ.get(CONFIG_ENV))
    except ValueError as e:
        raise RuntimeError(f"--speculative-algorithm HEDGESPEC: {e}") from None


class HedgeSpecAlgo(CustomSpecAlgo):
    """HEDGESPEC behaves as EAGLE-3 wherever SGLang branches on the algorithm (aux-state capture, draft KV,
    lm_head/embedding sharing, top-k handling)."""

    def is_eagle(self) -> bool:
        return True

    def is_eagle3(self) -> bool:
        return True

    def need_topk(self) -> bool:
        return True

    def carries_draft_hidden_states(self) -> bool:
        return True

    def get_platform_worker_cls(self) -> type | None:
        return None

    def create_future_map(
        self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True, needs_confidence_relay: bool = False
    ):
        return SpeculativeAlgorithm.create_future_map(
            self, device, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay
        )

    def validate_worker_args(self, server_args: Any) -> None:  # pragma: no cover - documented hook
        return None


@dataclass
class _RequestState:
    """Per-request selector and drafter states (keyed by SGLang's request id)."""

    selector: Any
    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]  # per drafter: topk_p, topk_index, hidden
    next_pred: list[int]  # per drafter: its proposal (target id) for the next committed token
    generated: int = 0
    rounds: int = 0
    histogram: list[int] = field(default_factory=list)
    weights: list[float] | None = None


def _snapshot(batch: Any) -> dict[str, Any]:
    return {f: getattr(batch, f) for f in _BATCH_FIELDS if hasattr(batch, f)}


def _restore(batch: Any, snap: dict[str, Any]) -> None:
    for k, v in snap.items():
        setattr(batch, k, v)


@contextlib.contextmanager
def _capture_logits_argmax(runner: Any, sink: list[torch.Tensor]) -> Iterator[None]:
    """Record the argmax of every row of ``runner``'s next forward's logits (before SGLang keeps only the
    selected row). Scoped to this one runner instance and removed on exit."""
    original = runner.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        logits = out.logits_output.next_token_logits
        sink.append(torch.argmax(logits, dim=-1).to("cpu"))
        return out

    runner.forward = forward
    try:
        yield
    finally:
        del runner.forward


class HedgeSpecWorker(EAGLEWorkerV2):
    """EAGLE-3 worker with N draft workers and per-request drafter selection (see module docstring)."""

    def __init__(self, server_args: Any, gpu_id: int, nccl_port: int, target_worker: Any) -> None:
        cfg = load_config()
        paths = [str(p) for p in cfg["drafters"]]
        first = get_spec().speculative_draft_model_path
        if os.path.realpath(paths[0]) != os.path.realpath(str(first)):
            raise RuntimeError(
                f"{CONFIG_ENV} drafter 0 ({paths[0]}) must equal --speculative-draft-model-path ({first})"
            )
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        if self.topk != 1:
            raise RuntimeError("HEDGESPEC supports chain drafting only: pass --speculative-eagle-topk 1")
        drafters: list[EagleDraftWorker] = [self._draft_worker]
        for path in paths[1:]:
            with get_spec().override(speculative_draft_model_path=path):
                drafters.append(EagleDraftWorker(server_args, gpu_id, nccl_port, target_worker))
        self._drafters = drafters
        self._paths = paths
        self._selector_name = str(cfg.get("selector", "hedgespec"))
        self._selector_kwargs = dict(cfg.get("selector_kwargs") or {})
        make_selector(self._selector_name, **self._selector_kwargs)  # fail at startup, not per request
        # freed at finish, abort or disconnect (hedgespec.serving.states); stale_state_s is only a backstop
        self._states = RequestStates(lambda st: st.selector.end_request(), float(cfg.get("stale_state_s", 3600.0)))
        logger.info("HEDGESPEC worker: %d drafters %s, selector %s", len(drafters), paths, self._selector_name)

    # ------------------------------------------------------------------ lifecycle hooks (all drafters)
    @property
    def n_drafters(self) -> int:
        return len(self._drafters)

    def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None):
        for d in self._drafters:  # one draft KV pool per drafter, all indexed by the shared allocator
            d.alloc_memory_pool(
                memory_pool_config=memory_pool_config,
                req_to_token_pool=req_to_token_pool,
                token_to_kv_pool_allocator=token_to_kv_pool_allocator,
            )
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator

    def init_attention_backends(self):
        for d in self._drafters:
            d.init_attention_backends()

    def init_cuda_graphs(self):
        for d in self._drafters:
            d.init_cuda_graphs()

    def weight_update_runners(self) -> list:
        return [("draft", d.draft_runner) for d in self._drafters]

    @contextlib.contextmanager
    def _active(self, j: int) -> Iterator[EagleDraftWorker]:
        self._draft_worker = self._drafters[j]
        try:
            yield self._drafters[j]
        finally:
            self._draft_worker = self._drafters[0]

    # ------------------------------------------------------------------ per-request state
    def _state(self, req: Any) -> _RequestState:
        return self._states.get(req, lambda: self._new_state(req))

    def _new_state(self, req: Any) -> _RequestState:
        sel = make_selector(self._selector_name, **self._selector_kwargs)
        sel.begin_request(self.n_drafters, int(self.speculative_num_steps), RequestContext(request_id=str(req.rid)))
        return _RequestState(
            selector=sel,
            rows=[None] * self.n_drafters,
            next_pred=[-1] * self.n_drafters,
            histogram=[0] * self.n_drafters,
        )

    def note_request_finished(self, *, rid: str, natural_stop: bool) -> None:
        self._states.free(rid)

    @staticmethod
    def _target_ids(drafter: EagleDraftWorker, draft_ids: torch.Tensor) -> torch.Tensor:
        hot = getattr(drafter, "hot_token_id", None)
        draft_ids = draft_ids.long().to("cpu")
        return hot.to("cpu")[draft_ids] if hot is not None else draft_ids

    def _store_rows(self, j: int, reqs: list, ndi: Any) -> None:
        drafter = self._drafters[j]
        preds = self._target_ids(drafter, ndi.topk_index[:, 0]).tolist()
        for b, req in enumerate(reqs):
            st = self._state(req)
            st.rows[j] = (ndi.topk_p[b].clone(), ndi.topk_index[b].clone(), ndi.hidden_states[b].clone())
            st.next_pred[j] = int(preds[b])

    def _draft_input_for(self, j: int, base: Any, states: list[_RequestState]) -> Any:
        info = copy.copy(base)
        info.topk_p = torch.stack([st.rows[j][0] for st in states])
        info.topk_index = torch.stack([st.rows[j][1] for st in states])
        info.hidden_states = torch.stack([st.rows[j][2] for st in states])
        return info

    # ------------------------------------------------------------------ forward
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        if batch.forward_mode.is_idle() or self.speculative_num_steps == 0:
            return super().forward_batch_generation(batch, on_publish, grammar_barrier, pp_proxy_tensors)
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
            return self._prefill(batch, on_publish, pp_proxy_tensors)
        return self._decode(batch, on_publish, grammar_barrier, pp_proxy_tensors)

    def _prefill(self, batch, on_publish, pp_proxy_tensors):
        self._states.sweep()
        out = self.target_worker.forward_batch_generation(
            batch,
            pp_proxy_tensors=pp_proxy_tensors,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_kv_loc_plan=True,
        )
        kv_loc_plan, out.kv_loc_plan = out.kv_loc_plan, None
        out.new_seq_lens = batch.seq_lens
        if on_publish is not None:
            on_publish(out.new_seq_lens)
        snap = _snapshot(batch)
        for j in range(self.n_drafters):
            _restore(batch, snap)
            with self._active(j) as drafter:
                ndi = drafter._draft_extend_for_prefill(
                    batch,
                    out.logits_output.hidden_states,
                    out.next_token_ids,
                    out.logits_output.mm_input_embeds,
                    kv_loc_plan=kv_loc_plan,
                )
            self._store_rows(j, batch.reqs, ndi)
            if j == 0:
                out.next_draft_input = ndi
        return out

    def _decode(self, batch, on_publish, grammar_barrier, pp_proxy_tensors):
        t0 = time.perf_counter()
        self._states.sweep()  # requests that finished or were aborted since the last round (prefill included)
        reqs = list(batch.reqs)
        states = [self._state(r) for r in reqs]
        decisions = [st.selector.select() for st in states]
        choices = [int(d.drafter) for d in decisions]
        first_preds = [list(st.next_pred) for st in states]  # each drafter's proposal for e_0 (previous round)
        base = batch.spec_info
        snap = _snapshot(batch)
        proposals: dict[int, Any] = {}
        for j in sorted(set(choices)):
            _restore(batch, snap)
            batch.spec_info = self._draft_input_for(j, base, states)
            with self._active(j) as drafter:
                proposals[j] = drafter.draft(batch)
        _restore(batch, snap)
        verify_input = self._compose(proposals, choices)
        batch.spec_info = verify_input
        t1 = time.perf_counter()
        out = self.verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        if on_publish is not None:
            on_publish(out.new_seq_lens)
        t2 = time.perf_counter()

        ndt = self.speculative_num_draft_tokens
        argmaxes: list[torch.Tensor] = []
        snap = _snapshot(batch)
        for j in range(self.n_drafters):
            _restore(batch, snap)
            sink: list[torch.Tensor] = []
            with self._active(j) as drafter, _capture_logits_argmax(drafter.draft_runner, sink):
                drafter._draft_extend_for_decode(batch, out, kv_loc_plan=verify_input.kv_loc_plan)
            argmaxes.append(self._target_ids(drafter, sink[-1]).view(len(reqs), ndt))
            self._store_rows(j, reqs, out.next_draft_input)
        t3 = time.perf_counter()

        accept_lens = out.accept_lens.to("cpu").tolist()
        committed = out.next_token_ids.to("cpu").view(len(reqs), ndt)
        timings = {"draft": t1 - t0, "verify": t2 - t1, "evaluate": t3 - t2}
        for b, (req, st, dec) in enumerate(zip(reqs, states, decisions)):
            self._observe(
                req, st, dec, int(accept_lens[b]), committed[b], first_preds[b], [a[b] for a in argmaxes], timings
            )
        return out

    def _compose(self, proposals: dict[int, Any], choices: list[int]) -> Any:
        """Verify input whose request b rows come from drafter ``choices[b]`` (chain trees share structure)."""
        ref = choices[0]
        verify_input = proposals[ref]
        if len(proposals) == 1:
            return verify_input
        ndt = self.speculative_num_draft_tokens
        tokens = verify_input.draft_token.clone()
        probs = verify_input.draft_probs.clone() if verify_input.draft_probs is not None else None
        for b, j in enumerate(choices):
            if j == ref:
                continue
            tokens[b * ndt : (b + 1) * ndt] = proposals[j].draft_token[b * ndt : (b + 1) * ndt]
            if probs is not None and proposals[j].draft_probs is not None:
                probs[b] = proposals[j].draft_probs[b]
        verify_input.draft_token = tokens
        verify_input.draft_probs = probs
        return verify_input

    def _observe(
        self,
        req: Any,
        st: _RequestState,
        decision: Any,
        accept_len: int,
        committed: torch.Tensor,
        first_pred: list[int],
        row_preds: list[torch.Tensor],
        timings: dict[str, float],
    ) -> None:
        """Build γ for the emitted positions of one request and feed its selector (counterfactual γ, greedy chain case).

        Emitted tokens e_0..e_m (m accepted drafts + the bonus). Drafter i proposed e_0 from its state after the
        previous round (``first_pred[i]``); its draft-extend row u−1 of this round (input e_{u−1}) predicts e_u.
        """
        emitted = max(int(accept_len), 1)
        gamma = greedy_gamma(first_pred, [p.tolist() for p in row_preds], committed[:emitted].tolist())
        fb = RoundFeedback(
            decision=decision,
            accepted=emitted - 1,
            emitted=emitted,
            start=st.generated,
            gamma=gamma,
            timings=dict(timings),
        )
        st.selector.observe(fb)
        st.generated += emitted
        st.rounds += 1
        st.histogram[decision.drafter] += 1
        st.weights = [float(w) for w in decision.weights] if decision.weights is not None else None
        req.customized_info = {
            "hedgespec_histogram": list(st.histogram),
            "hedgespec_weights": list(st.weights) if st.weights is not None else [],
            "hedgespec_selector": [self._selector_name],
            "hedgespec_rounds": [st.rounds],
        }
