"""Drafter selection for the HEDGESPEC worker's whole batch, one vectorized select and observe per round
(torch-free, sglang-free, so it is unit-tested against the per-request selectors).

The worker serves B requests per round; each has its own selector state (the guarantees are per request).
:class:`WorkerSelection` keeps every request's state in a batched selector
(:mod:`hedgespec.selectors.batched`: [B, N] arrays, one ``select``/``observe`` for the batch) when the
configured selector has a batched form, and in a per-request selector otherwise (or when every slot of the
batched selector is taken). Both make the same decisions for a request (tests/test_core_batched.py checks the
batched selectors against the per-request ones; tests/test_serving_selection.py checks this table against a
per-request loop), so which one holds a request changes its cost, not its outcome. With B per-request
selectors a round costs B Python ``select``/``observe`` calls in the scheduler (about 170 µs each,
``scripts/bench_learners.py``), which at B = 64 is more CPU than a GPU verification round.

Per request the table also keeps what the worker reports and needs next round, as rows of arrays: each
drafter's proposal for the next round's first token (``first_pred``), the drafter histogram, rounds, generated
tokens and the last decision's weights.

Each round::

    choice = table.select(records)             # RoundChoice: drafters [B], weights [B, N] | None
    drafted = substitutes(choice, alive)       # a dropped drafter's requests go to a live substitute
    ...draft, verify, evaluate every live drafter...
    gamma = round_gamma(table.first_pred[rows], row_preds, committed, alive)
    table.observe(records, choice, drafted, emitted, gamma)   # drafted: None = placeholder chain
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hedgespec.selectors import (
    BatchedEXP3Spec,
    BatchedHedgeSpec,
    BatchedUCBSpec,
    BatchFeedback,
    SlotBatch,
    make_selector,
)
from hedgespec.serving.rounds_batched import greedy_gamma_batch
from hedgespec.types import Decision, RequestContext, RoundFeedback

#: the phases of a worker round, in the order of the ``hedgespec_round_time_s`` meta field: select + draft,
#: target verification, evaluation (the sampled law and every drafter's draft-extend), selector update
PHASES = ("draft", "verify", "evaluate", "update")

#: selector name → (batched class, fixed options); the per-request selector of the same name decides the same
BATCHED: dict[str, tuple[type[SlotBatch], dict[str, Any]]] = {
    "hedgespec": (BatchedHedgeSpec, {}),
    "hedgespec_eal": (BatchedHedgeSpec, {"objective": "eal"}),
    "ucbspec": (BatchedUCBSpec, {}),
    "exp3spec": (BatchedEXP3Spec, {}),
}
#: per-request options with no batched counterpart that are harmless at these values: full evaluation every
#: round (the worker evaluates every drafter every round), and ``evaluate`` of a bandit (it reads no γ anyway)
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "epsilon": (1.0,),
    "evaluation": ("random",),
    "late": (False,),
    "evaluate": (True, False),
}


def batched_options(name: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The batched selector's options for ``name`` with the per-request options ``kwargs``; None when the
    selector or one of its options has no batched form (label-efficient evaluation, a router, MetaSD...)."""
    if name not in BATCHED:
        return None
    cls, fixed = BATCHED[name]
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "capacity", "n_drafters", "k"}
    opts = dict(fixed)
    for key, value in kwargs.items():
        if key in params and key not in fixed:
            opts[key] = value
        elif key in _NEUTRAL and any(type(value) is type(v) and value == v for v in _NEUTRAL[key]):
            continue
        else:
            return None
    return opts


@dataclass
class Record:
    """One request's place in the table: ``row`` of the per-request arrays, ``slot`` in the batched selector
    (−1: held by ``selector``, a per-request selector)."""

    rid: str
    row: int
    slot: int = -1
    selector: Any = None


@dataclass(frozen=True)
class RoundChoice:
    """One round's decisions for the records passed to :meth:`WorkerSelection.select`, in their order.

    Attributes:
        drafters: [B] the chosen drafter per request.
        weights: [B, N] the distribution behind each decision (NaN rows for rules without one); None when no
            request's rule has one.
        batched: [B] bool, the request's state is in the batched selector.
        slots: the batched selector's slots in the order of ``batched``'s True entries (its decision's array).
        decisions: per request, the per-request selector's :class:`Decision` (None where batched).
    """

    drafters: np.ndarray
    weights: np.ndarray | None
    batched: np.ndarray
    slots: np.ndarray | None
    decisions: list[Decision | None]

    def decision(self, j: int) -> Decision:
        """Request ``j``'s decision as the per-request :class:`Decision` (for the rare per-request paths)."""
        d = self.decisions[j]
        if d is not None:
            return d
        w = None if self.weights is None or np.isnan(self.weights[j, 0]) else tuple(self.weights[j].tolist())
        return Decision(int(self.drafters[j]), w)


def substitutes(choice: RoundChoice, alive: Sequence[bool]) -> list[int | None]:
    """Who drafts for each request: its chosen drafter while live, else the live drafter with the largest
    weight in its decision (lowest index on ties), None for every request when no drafter is left."""
    chosen = choice.drafters.tolist()
    if all(alive):
        return chosen
    live = [j for j, a in enumerate(alive) if a]
    if not live:
        return [None] * len(chosen)
    out: list[int | None] = []
    for b, j in enumerate(chosen):
        if alive[j]:
            out.append(j)
            continue
        w = choice.decision(b).weights
        out.append(live[0] if w is None else max(live, key=lambda i: (float(w[i]), -i)))
    return out


def round_gamma(
    first_pred: np.ndarray, row_preds: np.ndarray, committed: np.ndarray, alive: Sequence[bool]
) -> np.ndarray:
    """γ [B, ndt, N] of a greedy round for the batch (:func:`greedy_gamma_batch`: chain, or top-k proposals under
    tree drafting), 0 for dropped drafters."""
    gamma = greedy_gamma_batch(first_pred, row_preds, committed)
    dead = [j for j, a in enumerate(alive) if not a]
    if dead:
        gamma[:, :, dead] = 0.0
    return gamma


class WorkerSelection:
    """Selector state of every request the worker serves (see the module docstring).

    Args:
        name, kwargs: the selector and its options (``hedgespec.selectors.make_selector``).
        n_drafters, k: pool size and speculation depth.
        topk: the proposals kept per drafter for the next first token (``--speculative-eagle-topk``): 1 for a
            chain (``first_pred`` [R, N]), k > 1 for a tree (``first_pred`` [R, N, k], its top-k ids).
        capacity: slots of the batched selector (the most requests it holds at once); requests beyond it get a
            per-request selector.
        batched: False keeps every request in a per-request selector (the reference path).
    """

    def __init__(
        self,
        name: str,
        kwargs: dict[str, Any],
        n_drafters: int,
        k: int,
        capacity: int = 256,
        batched: bool = True,
        topk: int = 1,
    ) -> None:
        make_selector(name, **kwargs)  # bad names and options fail at startup, not per request
        self.name, self.kwargs, self.n, self.k = name, dict(kwargs), int(n_drafters), int(k)
        opts = batched_options(name, self.kwargs) if batched else None
        self.batch: SlotBatch | None = None
        if opts is not None:
            cls = BATCHED[name][0]
            self.batch = cls(int(capacity), self.n, self.k, **opts)
        self._free_slots = list(range(int(capacity)))[::-1] if self.batch is not None else []
        self._free_rows: list[int] = []
        self._rows = 0
        self.topk = int(topk)
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk!r}")
        self._pred_shape = (self.n,) if self.topk == 1 else (self.n, self.topk)
        self.first_pred = np.zeros((0, *self._pred_shape), dtype=np.int64)
        self.histogram = np.zeros((0, self.n), dtype=np.int64)
        self.rounds = np.zeros(0, dtype=np.int64)
        self.generated = np.zeros(0, dtype=np.int64)
        self.weights = np.zeros((0, self.n))  # NaN rows: the last decision had no distribution
        self.time_s = np.zeros((0, len(PHASES)))  # seconds of the rounds the request was in, per phase
        self._grow(max(int(capacity), 1))

    def _grow(self, rows: int) -> None:
        extra = rows - self._rows
        self.first_pred = np.concatenate([self.first_pred, np.full((extra, *self._pred_shape), -1, dtype=np.int64)])
        self.histogram = np.concatenate([self.histogram, np.zeros((extra, self.n), dtype=np.int64)])
        self.rounds = np.concatenate([self.rounds, np.zeros(extra, dtype=np.int64)])
        self.generated = np.concatenate([self.generated, np.zeros(extra, dtype=np.int64)])
        self.weights = np.concatenate([self.weights, np.full((extra, self.n), np.nan)])
        self.time_s = np.concatenate([self.time_s, np.zeros((extra, len(PHASES)))])
        self._free_rows = list(range(rows - 1, self._rows - 1, -1)) + self._free_rows
        self._rows = rows

    # ------------------------------------------------------------------ life cycle
    def begin(self, rid: str) -> Record:
        """A request joins (its state starts afresh, seeded by its id as the per-request selector's)."""
        if not self._free_rows:
            self._grow(2 * self._rows)
        row = self._free_rows.pop()
        self.first_pred[row] = -1
        self.histogram[row] = 0
        self.rounds[row] = self.generated[row] = 0
        self.weights[row] = np.nan
        self.time_s[row] = 0.0
        ctx = RequestContext(request_id=str(rid))
        if self._free_slots:
            slot = self._free_slots.pop()
            self.batch.begin(slot, ctx)
            return Record(str(rid), row, slot)
        sel = make_selector(self.name, **self.kwargs)
        sel.begin_request(self.n, self.k, ctx)
        return Record(str(rid), row, -1, sel)

    def end(self, rec: Record) -> None:
        """The request leaves (delayed feedback flushed, a pending decision dropped); its row and slot are free."""
        if rec.slot >= 0:
            self.batch.end(rec.slot)
            self._free_slots.append(rec.slot)
            rec.slot = -1
        elif rec.selector is not None:
            rec.selector.end_request()
            rec.selector = None
        if rec.row >= 0:
            self._free_rows.append(rec.row)
            rec.row = -1

    @property
    def n_rows(self) -> int:
        """Rows of the per-request arrays (the bound on a record's ``row``; grows as requests join)."""
        return self._rows

    def rows(self, records: Sequence[Record]) -> np.ndarray:
        return np.fromiter((r.row for r in records), dtype=np.int64, count=len(records))

    # ------------------------------------------------------------------ one round
    def select(self, records: Sequence[Record]) -> RoundChoice:
        b = len(records)
        slot_of = np.fromiter((r.slot for r in records), dtype=np.int64, count=b)
        batched = slot_of >= 0
        drafters = np.zeros(b, dtype=np.int64)
        weights = None
        slots = None
        if np.count_nonzero(batched):
            dec = self.batch.select(slot_of[batched])
            slots, drafters[batched] = dec.slots, dec.drafters
            if dec.weights is not None:
                weights = np.full((b, self.n), np.nan)
                weights[batched] = dec.weights
        decisions: list[Decision | None] = [None] * b
        for j in np.flatnonzero(~batched).tolist():
            d = records[j].selector.select()
            decisions[j], drafters[j] = d, d.drafter
            if d.weights is not None:
                if weights is None:
                    weights = np.full((b, self.n), np.nan)
                weights[j] = d.weights
        return RoundChoice(drafters, weights, batched, slots, decisions)

    def observe(
        self,
        records: Sequence[Record],
        choice: RoundChoice,
        drafted: Sequence[int | None],
        emitted: np.ndarray,
        gamma: np.ndarray,
        timings: dict[str, float] | None = None,
    ) -> None:
        """Feed back one round: ``drafted[b]`` drafted request b's chain (None or −1: the placeholder chain, no
        drafter left; the decision's drafter is then what the selector observes), ``emitted[b]`` ≥ 1 tokens were
        emitted, γ [B, U ≥ max emitted, N] (rows past ``emitted[b]`` ignored)."""
        rows = self.rows(records)
        drafted = np.array([-1 if j is None else int(j) for j in drafted], dtype=np.int64)
        emitted = np.asarray(emitted, dtype=np.int64)
        observed = np.where(drafted >= 0, drafted, choice.drafters)
        start = self.generated[rows]
        bt = choice.batched
        if np.count_nonzero(bt):
            sub = observed[bt]
            fb = BatchFeedback(
                choice.slots,
                emitted[bt] - 1,
                emitted[bt],
                gamma[bt],
                start[bt],
                None if np.array_equal(sub, choice.drafters[bt]) else sub,
            )
            self.batch.observe(fb)
        for j in np.flatnonzero(~bt).tolist():
            d, e = choice.decisions[j], int(emitted[j])
            if int(observed[j]) != d.drafter:
                d = Decision(int(observed[j]), d.weights, d.ticket, d.evaluate)
            fb = RoundFeedback(d, e - 1, e, int(start[j]), gamma[j, :e], timings=dict(timings or {}))
            records[j].selector.observe(fb)
        self.generated[rows] += emitted
        self.rounds[rows] += 1
        ok = drafted >= 0
        np.add.at(self.histogram, (rows[ok], drafted[ok]), 1)
        self.weights[rows] = np.nan if choice.weights is None else choice.weights

    def set_first_pred(self, rows: np.ndarray, j: int, preds: np.ndarray) -> None:
        """Drafter ``j``'s proposal for the next first token of the requests at ``rows`` (:meth:`rows`): [B] ids,
        or [B, topk] ids under tree drafting."""
        self.first_pred[rows, j] = np.asarray(preds).reshape(len(rows), *self._pred_shape[1:])

    def add_time(self, records: Sequence[Record], timings: dict[str, float]) -> None:
        """Add one round's phase times (seconds; keys of :data:`PHASES`, missing ones 0) to every request in it."""
        self.time_s[self.rows(records)] += [float(timings.get(k, 0.0)) for k in PHASES]

    def info(self, rec: Record) -> dict[str, list]:
        """The request's meta_info fields (``hedgespec_histogram``, ``hedgespec_weights``, ``hedgespec_rounds``,
        ``hedgespec_round_time_s``: seconds of its rounds per phase, in :data:`PHASES` order)."""
        r = rec.row
        return {
            "hedgespec_histogram": self.histogram[r].tolist(),
            "hedgespec_weights": [] if np.isnan(self.weights[r, 0]) else self.weights[r].tolist(),
            "hedgespec_rounds": [int(self.rounds[r])],
            "hedgespec_round_time_s": [round(float(x), 6) for x in self.time_s[r]],
        }
