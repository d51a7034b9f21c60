"""The HEDGESPEC speculative worker for SGLang 0.5.23: EAGLE-3 with a pool of N drafters chosen per request.

One decode round (the serving data flow of docs/architecture.md; HedgeSpec's full-information feedback with
delayed ETAP/EAL losses), for a batch of requests each with its own selector:

1. every request's selector picks a drafter ``i_t`` (one vectorized ``select`` for the whole batch, see
   :mod:`hedgespec.serving.selection`);
2. each drafter that was picked by at least one request drafts a chain (or an EAGLE tree, ``topk > 1``) for the
   batch (its own KV pool and its own per-request recurrent state); the verify input takes each request's rows
   from its chosen drafter (for trees: each request's tree topology and tokens, then one
   ``build_eagle_verify_input`` for the batch);
3. **one** target verification (SGLang's ``run_eagle_verify``: lossless, greedy on CPU);
4. draft-extend for **all** N drafters over the verified tokens (refreshes every drafter's KV and state, and
   gives every drafter's prediction at every emitted position with no extra target forward);
5. γ[u, i], the probability that SGLang's verification would accept drafter i's proposal at emitted position u:
   under greedy verification 1{it equals the committed token} (as ``hedgespec.acceptance.gamma_greedy`` with
   top-1; for trees 1{the committed token is among drafter i's top-k}), built for the whole batch in one
   comparison (:func:`hedgespec.serving.rounds_batched.greedy_gamma_batch`);
   when SGLang verified a sampled batch (target-only, CUDA), the target probability of the proposal under the law
   the verification sampled from (:mod:`hedgespec.serving.sampled_gamma`: one gather on the device, one copy) →
   one ``observe`` for the batch (the selectors' feedback ledgers release completed losses to their learners).

Per-request ``meta_info`` gains ``hedgespec_histogram`` (rounds drafted by each drafter),
``hedgespec_weights`` (the last decision's distribution), ``hedgespec_selector``, ``hedgespec_rounds``,
``hedgespec_dropped`` and ``hedgespec_round_time_s`` (seconds of the request's rounds per phase: select + draft,
verify, evaluate, update; a batch's round counts for each request in it) next to SGLang's own
``spec_accept_length`` / ``spec_verify_ct`` (request-level ``customized_info`` keys, see
:mod:`hedgespec.serving.plugin`).

Faulty drafters (the server-side counterpart of :meth:`hedgespec.engine.pool.DrafterPool.drop`): a drafter
whose draft or draft-extend raises, or whose draft-extend gives non-finite logits or hidden states (NaN, +inf,
a row without a finite logit), is dropped **for the rest of the server's life** (its weights are shared by
every request, so a per-request drop would only fail again), with one logged warning naming it and the cause.
A dropped drafter runs no more forwards and its γ reads 0. A request whose selector picks a dropped drafter is
drafted by the live drafter with the largest weight in that decision (lowest index on ties), and its selector
observes the round as that drafter's. With no drafter left the verifier checks a placeholder chain or tree
(the last committed token repeated; :mod:`hedgespec.serving.placeholder_tree`) and no draft model runs:
target-only decoding, still lossless; such rounds are in ``hedgespec_rounds`` but in no drafter's histogram bin.
``hedgespec_dropped`` lists the drafters (pool order) the server had dropped by the request's last round.

With ``fused=true`` the launcher serves the pool as one draft model instead, and
:class:`hedgespec.serving.fused_worker.FusedHedgeSpecWorker` (a subclass) runs one draft and one draft-extend per
round for all drafters; selection, feedback and drops are this class's.

Scope: chains and EAGLE trees (``--speculative-eagle-topk`` ≥ 1), no overlap scheduling, no pipeline
parallelism, no draft-extend CUDA graphs (the all-row draft logits exist only on the eager path). The worker is
configured through the ``HEDGESPEC_CONFIG`` environment variable (JSON written by
:func:`hedgespec.serving.argv.build_plan`, validated by :func:`hedgespec.serving.plugin.parse_worker_config`)
because SGLang's ``ServerArgs`` is a sealed struct. Per-request states live in
:class:`hedgespec.serving.states.RequestStates`, freed at finish and at abort; their selector state lives in
:class:`hedgespec.serving.selection.WorkerSelection` (a batched selector's slots where the selector has a batched
form, else one per-request selector each; the same decisions either way).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative import eagle_utils
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec
from sglang.srt.speculative.eagle_worker_common import build_eagle_verify_input
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from hedgespec.serving.draft_rows import DraftRows
from hedgespec.serving.placeholder_tree import placeholder_tree
from hedgespec.serving.plugin import CONFIG_ENV, parse_worker_config
from hedgespec.serving.sampled_gamma import Kernels, SamplingRows, proposals, sampled_gamma, target_law, tree_rows
from hedgespec.serving.selection import Record, RoundChoice, WorkerSelection, round_gamma, substitutes
from hedgespec.serving.states import RequestStates

logger = logging.getLogger(__name__)

META_KEYS = (
    "hedgespec_histogram",
    "hedgespec_weights",
    "hedgespec_selector",
    "hedgespec_rounds",
    "hedgespec_dropped",
    "hedgespec_round_time_s",
)

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
    """Per-request state (keyed by SGLang's request id): the selector state, the next first-token proposals and
    the reported counts are ``rec``'s row of the worker's :class:`WorkerSelection`, each drafter's next draft
    input the same row of its :class:`DraftRows` buffers."""

    rec: Record
    req: Any = None  # SGLang's Req (its finish reason tells an abort apart when the state is freed)


def _snapshot(batch: Any) -> dict[str, Any]:
    return {f: getattr(batch, f) for f in _BATCH_FIELDS if hasattr(batch, f)}


def _restore(batch: Any, snap: dict[str, Any]) -> None:
    for k, v in snap.items():
        setattr(batch, k, v)


def verify_law(batch: Any, out: Any, ndt: int, tree: bool = False) -> torch.Tensor | None:
    """The target law SGLang's verification of ``batch`` sampled from, [B, ndt, V] (for a ``tree``, [B, S, V]
    at its accepted nodes, S = steps + 1: :func:`hedgespec.serving.sampled_gamma.tree_rows`); None when it
    verified greedily (SGLang's own predicate: an all-greedy batch, a CPU or XPU device, ...).

    Built as ``eagle_utils.eagle_sample`` builds it, with its kernels, from the verify logits, which carry the
    penalties, logit bias and grammar mask it applied in place."""
    info = batch.sampling_info
    greedy = eagle_utils._verify_uses_greedy(
        is_all_greedy=bool(info.is_all_greedy),
        is_cpu=eagle_utils._is_cpu,
        is_hip=eagle_utils._is_hip,
        is_xpu=eagle_utils._is_xpu,
        use_rejection_sampling=bool(get_spec().speculative_use_rejection_sampling),
    )
    if greedy:
        return None
    rows = SamplingRows(
        info.temperatures, info.top_ks, info.top_ps, bool(info.need_top_k_sampling), bool(info.need_top_p_sampling)
    )
    kernels = Kernels(eagle_utils.sampling_softmax, eagle_utils.top_k_renorm_prob, eagle_utils.top_p_renorm_prob)
    logits = out.logits_output.next_token_logits
    if tree:  # the accepted path's rows, in path order (SGLang compacts the tokens and hidden states, not these)
        logits, ndt = tree_rows(logits, out.accept_index), int(out.accept_index.shape[1])
    return target_law(logits, rows, ndt, kernels)


def _finite_logits(logits: torch.Tensor) -> torch.Tensor:
    """Every row has a finite maximum: no NaN, no +inf, not all −inf (−inf alone marks masked ids and is fine;
    the reference engine's rule, :meth:`hedgespec.engine.pool.DrafterPool._nonfinite`). A 0-dim bool tensor on
    the logits' device: reading it is left to the caller's one transfer per round."""
    if logits.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=logits.device)
    return torch.isfinite(logits.amax(dim=-1)).all()


def _finite(flag: torch.Tensor, *tensors: torch.Tensor | None) -> torch.Tensor:
    """``flag`` and-ed with "every value of ``tensors`` is finite", on the device (no host sync)."""
    for t in tensors:
        if t is not None:
            flag = flag & torch.isfinite(t).all().to(flag.device)
    return flag


def top_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Every row's proposal: its argmax [R] for a chain (``k`` = 1), its top-k ids [R, k] for a tree (the
    children SGLang's draft step would put under it, best first)."""
    return torch.argmax(logits, dim=-1) if k == 1 else torch.topk(logits, k, dim=-1).indices


def _per_request(ids: list[int], choices: list[int], device: Any) -> Any:
    """``pick(parts)``: from per-drafter tensors ``parts`` (drafters ``ids``, one leading row per request), row b
    of drafter ``choices[b]``'s, for every request b: one stack and one gather."""
    src = torch.tensor([ids.index(j) for j in choices], device=device)
    at = torch.arange(len(choices), device=device)
    return lambda parts: torch.stack(parts)[src, at]


@contextlib.contextmanager
def _capture_logits_argmax(runner: Any, sink: list[tuple[torch.Tensor, torch.Tensor]], k: int = 1) -> Iterator[None]:
    """Record ``(argmax — top-k ids for k > 1 — of every row, whether every row is finite)`` of ``runner``'s next
    forward's logits (before SGLang keeps only the selected row), both left on the device. Scoped to this one
    runner instance and removed on exit."""
    original = runner.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        logits = out.logits_output.next_token_logits
        sink.append((top_ids(logits, k), _finite_logits(logits)))
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
        first, draft_path = get_spec().speculative_draft_model_path, self._draft_model_path(cfg)
        if os.path.realpath(draft_path) != os.path.realpath(str(first)):
            raise RuntimeError(f"{CONFIG_ENV}: {draft_path} must equal --speculative-draft-model-path ({first})")
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self._setup_topk()
        self._paths = paths
        self._drafters = self._draft_workers(server_args, gpu_id, nccl_port, target_worker)
        self._names = [str(n) for n in (cfg.get("names") or [os.path.basename(os.path.normpath(p)) for p in paths])]
        self._alive = [True] * len(paths)  # False once dropped (server-wide, see the module docstring)
        self._selector_name = str(cfg.get("selector", "hedgespec"))
        capacity = 2 * int(getattr(server_args, "max_running_requests", None) or 128)  # + retracted requests
        self._selection = WorkerSelection(
            self._selector_name,
            dict(cfg.get("selector_kwargs") or {}),
            len(paths),
            int(self.speculative_num_steps),
            capacity=capacity,
            topk=int(self.topk),
        )
        self._draft_rows = DraftRows(len(paths))
        # freed at finish, abort or disconnect (hedgespec.serving.states); stale_state_s is only a backstop
        self._states = RequestStates(self._free_state, float(cfg.get("stale_state_s", 3600.0)))
        logger.info(
            "HEDGESPEC worker: %d drafters %s, selector %s (%s)",
            len(paths),
            paths,
            self._selector_name,
            "batched" if self._selection.batch is not None else "per request",
        )

    def _setup_topk(self) -> None:
        """Chains and trees alike: each drafter is SGLang's own draft worker (the fused pool is told its k)."""

    @staticmethod
    def _draft_model_path(cfg: dict[str, Any]) -> str:
        """What ``--speculative-draft-model-path`` must be: drafter 0 (each drafter is its own draft worker)."""
        return str(cfg["drafters"][0])

    def _draft_workers(self, server_args: Any, gpu_id: int, nccl_port: int, target_worker: Any) -> list:
        """One SGLang draft worker per drafter: drafter 0 is EAGLE's own, the others are built the same way."""
        drafters: list[EagleDraftWorker] = [self._draft_worker]
        for path in self._paths[1:]:
            with get_spec().override(speculative_draft_model_path=path):
                drafters.append(EagleDraftWorker(server_args, gpu_id, nccl_port, target_worker))
        return drafters

    # ------------------------------------------------------------------ lifecycle hooks (all drafters)
    @property
    def n_drafters(self) -> int:
        return len(self._paths)

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
        st = self._states.get(req, lambda: self._new_state(req))
        st.req = req
        return st

    def _new_state(self, req: Any) -> _RequestState:
        return _RequestState(rec=self._selection.begin(str(req.rid)), req=req)

    def _free_state(self, st: _RequestState) -> None:
        self._selection.end(st.rec)
        reason = getattr(st.req, "finished_reason", None)
        if isinstance(reason, FINISH_ABORT):  # client abort or disconnect: say so, finishes are silent
            logger.info(
                "HEDGESPEC: request %s was aborted (%s); its selector state is freed (%d request states held)",
                st.req.rid,
                reason.message,
                len(self._states),
            )

    def note_request_finished(self, *, rid: str, natural_stop: bool) -> None:
        self._states.free(rid)

    # ------------------------------------------------------------------ faulty drafters (server-wide)
    @property
    def dropped(self) -> list[str]:
        """Names of the drafters dropped so far, in pool order."""
        return [name for name, alive in zip(self._names, self._alive) if not alive]

    def _live(self) -> list[int]:
        return [j for j, alive in enumerate(self._alive) if alive]

    def _drop(self, j: int, why: str) -> None:
        """Drop drafter ``j`` for the rest of the server's life, with one warning (module docstring)."""
        if not self._alive[j]:
            return
        self._alive[j] = False
        left = len(self._live())
        logger.warning(
            "HEDGESPEC: drafter %r %s; dropped from the pool for the rest of this server's life (%d of %d left)",
            self._names[j],
            why,
            left,
            self.n_drafters,
        )
        if not left:
            logger.warning(
                "HEDGESPEC: every drafter is dropped; requests continue with target-only decoding "
                "(a placeholder chain is verified, the output is still the target's)"
            )

    def _run_drafter(self, j: int, stage: str, fn: Any) -> Any:
        """``fn()`` for drafter ``j``; None, with ``j`` dropped, when it raises."""
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - a failing drafter is dropped; the batch goes on without it
            self._drop(j, f"raised {type(err).__name__}: {err} during {stage}")
            return None

    @staticmethod
    def _target_ids(drafter: EagleDraftWorker, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids → target ids (the drafter's hot-token map), on the ids' own device."""
        hot = getattr(drafter, "hot_token_id", None)
        draft_ids = draft_ids.long()
        return hot.to(draft_ids.device)[draft_ids] if hot is not None else draft_ids

    def _records(self, reqs: list) -> tuple[list[Record], np.ndarray, torch.Tensor]:
        """The requests' selection records and their rows, on the host and on the device (one copy per round)."""
        records = [self._state(r).rec for r in reqs]
        rows = self._selection.rows(records)
        return records, rows, torch.as_tensor(rows, device=self.device)

    def _store_rows(self, j: int, rows: np.ndarray, req_rows: torch.Tensor, ndi: Any) -> None:
        """Keep drafter ``j``'s next-round draft input and its first-token proposal per request (one read)."""
        self._keep_rows(j, req_rows, ndi)
        preds = self._target_ids(self._drafters[j], self._first_ids(ndi)).to("cpu").numpy()
        self._selection.set_first_pred(rows, j, preds)

    def _proposal_shape(self, b: int) -> tuple[int, ...]:
        """Shape of every drafter's proposals at each verify row of ``b`` requests: [B, ndt] (chain), [B, ndt, k]
        (tree: its top-k ids)."""
        ndt = int(self.speculative_num_draft_tokens)
        return (b, ndt) if self.topk == 1 else (b, ndt, int(self.topk))

    def _first_ids(self, ndi: Any) -> torch.Tensor:
        """A drafter's proposal for each request's next first token from its next draft input: the top-1 id [B]
        (chain), its top-k ids [B, k] (tree: SGLang's draft step puts them under the root)."""
        return ndi.topk_index[:, 0] if self.topk == 1 else ndi.topk_index[:, : self.topk]

    def _keep_rows(self, j: int, req_rows: torch.Tensor, ndi: Any) -> None:
        """Copy drafter ``j``'s next-round draft input rows into its buffers, on the device (SGLang reuses
        ``next_draft_input`` and, under CUDA graphs, its buffers for the next drafter)."""
        self._draft_rows.store(j, req_rows, self._selection.n_rows, (ndi.topk_p, ndi.topk_index, ndi.hidden_states))

    def _draft_input_for(self, j: int, base: Any, req_rows: torch.Tensor) -> Any:
        info = copy.copy(base)
        info.topk_p, info.topk_index, info.hidden_states = self._draft_rows.load(j, req_rows)
        return info

    def _stub_draft_input(self, next_token_ids: torch.Tensor) -> Any:
        """A shape-valid draft input after a prefill in which no drafter is left (nothing reads its rows)."""
        bs = int(next_token_ids.shape[0])
        hidden, dtype = get_draft_recurrent_hidden_state_spec(self.draft_worker.draft_runner)
        return EagleDraftInput(
            topk_p=torch.zeros((bs, self.topk), dtype=torch.float32, device=self.device),
            topk_index=torch.zeros((bs, self.topk), dtype=torch.int64, device=self.device),
            hidden_states=None if hidden is None else torch.zeros((bs, hidden), dtype=dtype, device=self.device),
            bonus_tokens=next_token_ids,
            num_tokens_per_req=1,
            num_tokens_for_logprob_per_req=1,
        )

    # ------------------------------------------------------------------ forward
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        if batch.forward_mode.is_idle() or self.speculative_num_steps == 0:
            return super().forward_batch_generation(batch, on_publish, grammar_barrier, pp_proxy_tensors)
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
            return self._prefill(batch, on_publish, pp_proxy_tensors)
        return self._decode(batch, on_publish, grammar_barrier, pp_proxy_tensors)

    def _target_prefill(self, batch, on_publish, pp_proxy_tensors) -> tuple[Any, Any]:
        """The target's prefill with every layer's features captured; returns its output and KV plan."""
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
        return out, kv_loc_plan

    def _prefill(self, batch, on_publish, pp_proxy_tensors):
        out, kv_loc_plan = self._target_prefill(batch, on_publish, pp_proxy_tensors)
        snap = _snapshot(batch)
        first = None
        _, rows, req_rows = self._records(list(batch.reqs))
        for j in self._live():
            _restore(batch, snap)
            ndi = self._extend_prefill(j, batch, out, kv_loc_plan)
            if ndi is None:
                continue
            self._store_rows(j, rows, req_rows, ndi)
            first = ndi if first is None else first
        out.next_draft_input = first if first is not None else self._stub_draft_input(out.next_token_ids)
        return out

    def _extend_prefill(self, j: int, batch: Any, out: Any, kv_loc_plan: Any) -> Any:
        """Drafter ``j``'s draft-extend over the prompt; None (``j`` dropped) when it raises or is not finite."""
        sink: list[tuple[torch.Tensor, torch.Tensor]] = []

        def run() -> Any:
            with self._active(j) as drafter, _capture_logits_argmax(drafter.draft_runner, sink, self.topk):
                return drafter._draft_extend_for_prefill(
                    batch,
                    out.logits_output.hidden_states,
                    out.next_token_ids,
                    out.logits_output.mm_input_embeds,
                    kv_loc_plan=kv_loc_plan,
                )

        ndi = self._run_drafter(j, "draft-extend over the prompt", run)
        ok = [f for _, f in sink]
        if ndi is not None and not (ok and bool(_finite(torch.stack(ok).all(), ndi.topk_p, ndi.hidden_states))):
            self._drop(j, "gave non-finite (NaN/inf) logits or hidden states in draft-extend over the prompt")
            return None
        return ndi

    def _decode(self, batch, on_publish, grammar_barrier, pp_proxy_tensors):
        t0 = time.perf_counter()
        self._states.sweep()  # requests that finished or were aborted since the last round (prefill included)
        reqs = list(batch.reqs)
        records, rows, req_rows = self._records(reqs)
        choice = self._selection.select(records)
        # each drafter's proposal for e_0, made after the previous round (the evaluation below replaces them)
        first_preds = self._selection.first_pred[rows]
        verify_input, drafted = self._draft_round(batch, req_rows, choice)
        batch.spec_info = verify_input
        t1 = time.perf_counter()
        out = self.verify(batch, pp_proxy_tensors=pp_proxy_tensors, grammar_barrier=grammar_barrier)
        if on_publish is not None:
            on_publish(out.new_seq_lens)
        t2 = time.perf_counter()
        # the feedback's cost counts as evaluation: the law γ reads (None: verified greedily), the draft-extends
        law = verify_law(batch, out, self.speculative_num_draft_tokens, tree=self.topk > 1)
        argmaxes = self._evaluate(batch, out, verify_input, rows, req_rows)
        t3 = time.perf_counter()

        timings = {"draft": t1 - t0, "verify": t2 - t1, "evaluate": t3 - t2}
        self._observe(reqs, records, choice, drafted, out, first_preds, argmaxes, timings, law)
        return out

    def _draft_round(self, batch: Any, req_rows: torch.Tensor, choice: RoundChoice) -> tuple[Any, list]:
        """The verify input: each request's chain from the drafter that drafts for it (``substitutes``; a
        drafter that raises is dropped and its requests re-drafted by their substitute), or a placeholder chain
        when no drafter is left. Returns it with, per request, that drafter (None: placeholder)."""
        base, snap = batch.spec_info, _snapshot(batch)
        tree = self.topk > 1
        proposals: dict[int, Any] = {}
        while True:
            drafted = substitutes(choice, self._alive)
            todo = sorted({j for j in drafted if j is not None} - proposals.keys())
            if not todo:
                break
            for j in todo:
                _restore(batch, snap)
                batch.spec_info = self._draft_input_for(j, base, req_rows)
                with self._active(j) as drafter:
                    proposal = self._run_drafter(j, "drafting", lambda: drafter.draft(batch, with_topology=tree))
                if proposal is not None:
                    proposals[j] = proposal
        _restore(batch, snap)
        if drafted[0] is None:  # no drafter left (then no request has one)
            return self._placeholder_draft(batch), drafted
        if tree:
            return self._compose_trees(batch, base, proposals, drafted), drafted
        return self._compose(proposals, drafted), drafted

    def _placeholder_draft(self, batch: Any) -> Any:
        """Verify input of a placeholder chain (or tree), the last committed token repeated, built by SGLang's own
        ``draft`` with the draft model's forward (and its CUDA graphs) replaced: no drafter runs, the target's
        verification is unchanged, so the output is the target's greedy output."""
        drafter, steps = self._drafters[0], int(self.speculative_num_steps)

        def draft_forward(forward_batch: Any) -> tuple:
            bs = int(forward_batch.batch_size)
            if self.topk > 1:
                last = forward_batch.spec_info.bonus_tokens.reshape(-1, 1).to(torch.long)
                parents, selected = placeholder_tree(
                    bs, self.topk, steps, self.speculative_num_draft_tokens, last.device
                )
                return parents, selected, last.repeat(1, selected.shape[1]), None
            tokens = forward_batch.spec_info.bonus_tokens.reshape(-1, 1).to(torch.long).repeat(1, steps)
            return drafter._topk1_parents_prealloc[:bs], drafter._topk1_score_indices_prealloc[:bs], tokens, None

        graphs = drafter.cuda_graph_runner
        drafter.draft_forward, drafter.cuda_graph_runner = draft_forward, None
        try:
            return drafter.draft(batch)
        finally:
            del drafter.draft_forward
            drafter.cuda_graph_runner = graphs

    def _evaluate(
        self, batch: Any, out: Any, verify_input: Any, rows: np.ndarray, req_rows: torch.Tensor
    ) -> list[torch.Tensor]:
        """Draft-extend every live drafter over the verified tokens; per drafter its argmax (target ids) at every
        row, [B, ndt], −1 for a dropped drafter (a drafter that raises or is not finite is dropped here).

        Nothing is read back per drafter: every drafter's argmax rows, its next first-token proposal and its
        finiteness flag stay on the device until one transfer for the whole round (:meth:`_read_back`)."""
        reqs = list(batch.reqs)
        shape = self._proposal_shape(len(reqs))
        argmaxes = [torch.full(shape, -1, dtype=torch.long)] * self.n_drafters
        snap = _snapshot(batch)
        pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for j in self._live():
            _restore(batch, snap)
            sink: list[tuple[torch.Tensor, torch.Tensor]] = []

            def run(j: int = j, sink: list = sink) -> bool:
                with self._active(j) as drafter, _capture_logits_argmax(drafter.draft_runner, sink, self.topk):
                    drafter._draft_extend_for_decode(batch, out, kv_loc_plan=verify_input.kv_loc_plan)
                return True

            if not self._run_drafter(j, "draft-extend over the verified tokens", run):
                continue
            if not sink:
                self._drop(j, "ran no forward in draft-extend")
                continue
            ndi, drafter = out.next_draft_input, self._drafters[j]
            top1, ok = self._target_ids(drafter, sink[-1][0]), _finite(sink[-1][1], ndi.hidden_states)
            pending.append((j, top1, self._target_ids(drafter, self._first_ids(ndi)), ok))
            self._keep_rows(j, req_rows, ndi)  # a drafter found non-finite below is dropped; nothing reads its rows
        for (j, *_), (top1, preds, ok) in zip(pending, self._read_back(pending)):
            if not ok:
                self._drop(j, "gave non-finite (NaN/inf) logits or hidden states in draft-extend")
                continue
            argmaxes[j] = top1.view(shape)
            self._selection.set_first_pred(rows, j, preds.numpy())
        if not any(self._alive):
            self._stub_skipped_draft_extend(batch, out)  # SGLang's shape-valid rows; nothing drafts from them
        return argmaxes

    @staticmethod
    def _read_back(pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]) -> list[tuple]:
        """One device → host transfer for the round: per drafter (argmax rows, first-token proposals, finite)."""
        if not pending:
            return []
        parts = [t for _, rows, preds, ok in pending for t in (rows.view(-1), preds.view(-1), ok.view(1).long())]
        host = torch.cat([t.to(parts[0].device) for t in parts]).to("cpu")
        out, at = [], 0
        for _, rows, preds, _ in pending:
            n, m = rows.numel(), preds.numel()
            out.append((host[at : at + n], host[at + n : at + n + m], bool(host[at + n + m])))
            at += n + m + 1
        return out

    def _compose(self, proposals: dict[int, Any], choices: list[int]) -> Any:
        """Verify input whose request b rows come from drafter ``choices[b]`` (chain trees share structure): one
        gather over the drafters' stacked draft tokens (and draft probabilities), not one copy per request."""
        verify_input = proposals[choices[0]]
        if len(proposals) == 1:
            return verify_input
        ids, b = list(proposals), len(choices)
        pick = _per_request(ids, choices, verify_input.draft_token.device)
        verify_input.draft_token = pick([proposals[j].draft_token.view(b, -1) for j in ids]).reshape(-1)
        probs = [proposals[j].draft_probs for j in ids]
        if all(p is not None for p in probs):  # (SGLang's target-only verification does not read them)
            verify_input.draft_probs = pick(probs)
        return verify_input

    def _compose_trees(self, batch: Any, base: Any, proposals: dict[int, tuple], choices: list[int]) -> Any:
        """Verify input whose request b is drafter ``choices[b]``'s tree: each request's topology (parents,
        selected nodes) and draft tokens gathered from its drafter's proposal (``draft(with_topology=True)``),
        then one ``build_eagle_verify_input`` for the batch (tree mask, positions, retrieval links)."""
        first = proposals[choices[0]][0]
        if len(proposals) == 1:
            return first
        ids, b = list(proposals), len(choices)
        pick = _per_request(ids, choices, first.draft_token.device)
        parents = pick([proposals[j][1] for j in ids])
        selected = pick([proposals[j][2] for j in ids])
        tokens = pick([proposals[j][0].draft_token.view(b, -1)[:, 1:] for j in ids])
        probs = [proposals[j][0].draft_probs for j in ids]
        spec = build_eagle_verify_input(
            batch,
            base,
            parents,
            selected,
            tokens,
            pick(probs) if all(p is not None for p in probs) else None,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self._drafters[0].tree_mask_mode,
            device=self.device,
        )
        plan = getattr(first, "kv_loc_plan", None)
        if plan is not None:  # the window every drafter's draft planned for this batch (as draft() sets it)
            spec.kv_loc_plan = plan
            spec.prepared_out_cache_loc = plan.write_virtual
        return spec

    def _observe(
        self,
        reqs: list,
        records: list[Record],
        choice: RoundChoice,
        drafted: list[int | None],
        out: Any,
        first_preds: np.ndarray,
        argmaxes: list[torch.Tensor],
        timings: dict[str, float],
        law: torch.Tensor | None = None,
    ) -> None:
        """Build γ for the whole batch and feed the selectors (counterfactual γ, chain drafting).

        Request b emitted e_0..e_m (m accepted drafts + the bonus). Drafter i proposed e_0 from its state after
        the previous round (``first_preds[b, i]``); its draft-extend row u−1 of this round (input e_{u−1})
        predicts e_u (``argmaxes[i][b, u−1]``). ``drafted[b]`` drafted request b's chain (None: the placeholder
        chain did); a dropped drafter's γ is 0, as in the reference engine. ``law`` (None: greedy verification)
        is the target law the verification sampled from, [B, ndt, V] (:func:`verify_law`).
        """
        b, ndt = len(reqs), self.speculative_num_draft_tokens
        emitted = np.maximum(out.accept_lens.to("cpu").numpy().astype(np.int64), 1)
        row_preds = torch.stack(argmaxes)
        if law is None:
            committed = out.next_token_ids.to("cpu").view(b, ndt).numpy()
            gamma = round_gamma(first_preds, row_preds.numpy(), committed, self._alive)
        else:
            spec = get_spec()
            gamma = sampled_gamma(
                law,
                proposals(first_preds, row_preds, int(law.shape[1])),
                spec.speculative_accept_threshold_single,
                spec.speculative_accept_threshold_acc,
            )
            gamma[:, :, [j for j, a in enumerate(self._alive) if not a]] = 0.0
        t0 = time.perf_counter()
        self._selection.observe(records, choice, drafted, emitted, gamma, timings)
        self._selection.add_time(records, {**timings, "update": time.perf_counter() - t0})
        selector, dropped = [self._selector_name], self.dropped
        for req, rec in zip(reqs, records):
            req.customized_info = {
                **self._selection.info(rec),
                "hedgespec_selector": selector,
                "hedgespec_dropped": dropped,
            }
