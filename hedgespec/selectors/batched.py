"""Batched selectors: the per-request state of up to B requests in arrays, one vectorized select and observe
per round for the whole batch (what an engine or SGLang worker serving B requests at once needs).

A batched selector has B *slots*; a request occupies one from ``begin(slot, ctx)`` to ``end(slot)`` and a
freed slot takes the next request. Each round::

    dec = sel.select(slots)                    # BatchDecision: drafter, weights and ticket per slot
    ...draft with dec.drafters, verify the batch, evaluate γ for every drafter...
    sel.observe(BatchFeedback(dec.slots, accepted, emitted, gamma))   # gamma [b, U, N], emitted[j] rows each
    sel.end(finished_slots)                    # flushes delayed feedback (tail policy)

In the SGLang worker (hedgespec/serving/worker.py) γ for the whole batch is one comparison of the drafters'
argmax rows with the committed tokens (:func:`hedgespec.serving.rounds_batched.greedy_gamma_batch`), and
``emitted`` = max(accept_lens, 1), ``accepted`` = emitted − 1, as the worker's per-request ``_observe`` has them.

Every slot makes the decisions the per-request selector makes for its request (same seeded stream per request
id, same tie-breaking); tests/test_core_batched.py checks this against B independent per-request selectors.
:class:`BatchedHedgeSpec` is HedgeSpec (full-information feedback, a NormalHedge or Hedge learner per request
behind the queue or BOLD delayed-feedback reduction, ETAP or EAL losses); the bandit baselines are in
:mod:`hedgespec.selectors.batched_bandits`. Hedge and the bandits compute bit for bit what the per-request
selectors compute; NormalHedge's weights agree to rounding (see :mod:`hedgespec.learners_batched`), which can
only matter for drafters whose weights are equal up to the last bits: with greedy γ ∈ {0, 1}, two drafters
with the same number of misses at different positions have equal regrets but for rounding, and either
implementation may or may not see the 1e-15 tie that ``argmax_random_ties`` breaks with the request's stream.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hedgespec.feedback_batched import BatchedLedger, CompletedBatch, check_gamma_batch, prefix_table
from hedgespec.learners_batched import BoldBatch, HedgeBank, NormalHedgeBank, QueuedBatch
from hedgespec.selectors._rng import request_rng
from hedgespec.selectors.base import check_request_args
from hedgespec.selectors.hedgespec import PriorSource, check_options, check_prior_options, request_prior
from hedgespec.types import Decision, RequestContext, RoundFeedback

_TIE = 1e-15  # hedgespec.selectors._rng.argmax_random_ties: entries within this of the maximum tie


@dataclass(frozen=True)
class BatchDecision:
    """One round's decisions for ``slots``: ``drafters[j]`` drafts for slot ``slots[j]``; ``weights`` [b, N] (None
    for rules without a distribution); ``tickets[j]`` routes the slot's delayed feedback."""

    slots: np.ndarray
    drafters: np.ndarray
    weights: np.ndarray | None
    tickets: np.ndarray

    def __len__(self) -> int:
        return int(self.slots.size)

    def decision(self, j: int) -> Decision:
        """The per-request :class:`~hedgespec.types.Decision` of entry ``j``."""
        w = None if self.weights is None else tuple(float(x) for x in self.weights[j])
        return Decision(int(self.drafters[j]), w, int(self.tickets[j]))


@dataclass(frozen=True)
class BatchFeedback:
    """One round's feedback for ``slots`` (the fields of :class:`~hedgespec.types.RoundFeedback`, batched).

    Attributes:
        slots: the slots observed, [b] (those of the round's :class:`BatchDecision`, in any order).
        accepted: accepted draft tokens per slot, [b] in 0..K.
        emitted: tokens emitted per slot, [b] in 1..K+1.
        gamma: γ [b, U, N] (U ≥ max emitted): slot j's first ``emitted[j]`` rows are its emitted positions, the
            rest are ignored; None when only the chosen drafters were observed (enough for bandits).
        start: optional [b], each round's first generated-token position (checked against the slot's count).
        drafters: optional [b], the drafter that actually drafted for each slot when it is not the one the
            decision chose (a runner's substitute for a dropped drafter: the per-request selectors observe the
            round as that drafter's, ``RoundFeedback.decision.drafter``); None: the decisions' own drafters.
            Only the bandits read it (HedgeSpec's loss does not depend on who drafted).
    """

    slots: Any
    accepted: Any
    emitted: Any
    gamma: Any = None
    start: Any = None
    drafters: Any = None

    @classmethod
    def from_rounds(cls, slots: Sequence[int], rounds: Sequence[RoundFeedback], n_drafters: int) -> BatchFeedback:
        """Stack per-request feedback (gamma rows padded with zeros to the longest round)."""
        if len(slots) != len(rounds):
            raise ValueError(f"slots has {len(slots)} entries, rounds has {len(rounds)}")
        emitted = np.array([int(fb.emitted) for fb in rounds], dtype=np.int64)
        gamma = None
        if rounds and all(fb.gamma is not None for fb in rounds):
            gamma = np.zeros((len(rounds), int(emitted.max()), n_drafters))
            for j, fb in enumerate(rounds):
                g = np.asarray(fb.gamma, dtype=np.float64)
                gamma[j, : g.shape[0]] = g
        accepted = np.array([int(fb.accepted) for fb in rounds], dtype=np.int64)
        start = np.array([int(fb.start) for fb in rounds], dtype=np.int64)
        return cls(np.asarray(slots, dtype=np.int64), accepted, emitted, gamma, start)


def _int_array(x: object, name: str, b: int) -> np.ndarray:
    a = x if type(x) is np.ndarray else np.asarray(x)
    if a.shape != (b,) or (b and a.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a 1-D integer array with one entry per slot ({b}), got {a.dtype} {a.shape}")
    return a.astype(np.int64, copy=False)


def sample_rows(rngs: Sequence[np.random.Generator], p: np.ndarray) -> np.ndarray:
    """Row j drawn from p[j] with ``rngs[j]``, the same draw as ``rngs[j].choice(N, p=p[j])`` (numpy's own
    inversion: one uniform per row against the normalised cumulative sum)."""
    u = np.array([g.random() for g in rngs])
    cdf = np.cumsum(p, axis=1)
    cdf /= cdf[:, -1:]
    return np.count_nonzero(cdf <= u[:, None], axis=1)


_FREE, _IDLE, _PENDING, _MARK = 0, 1, 2, 3  # slot states: no request / to decide / awaiting feedback / scratch
_ACTIVE = -1  # _slots: any state but _FREE


class SlotBatch(ABC):
    """Slot life cycle and input checks shared by the batched selectors (see the module docstring)."""

    name: str = "base"
    full_information: bool = False

    def __init__(self, capacity: int, n_drafters: int, k: int, seed: int = 0) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity (B, the most requests served at once) must be an int >= 1, got {capacity!r}")
        check_request_args(n_drafters, k)
        self.capacity, self.n, self.k, self.seed = capacity, n_drafters, k, seed
        self.rounds = np.zeros(capacity, dtype=np.int64)
        self._state = np.zeros(capacity, dtype=np.int8)
        self._begun = np.zeros(capacity, dtype=bool)  # holds a request's state (kept after end, until a begin)
        self._rngs: list[np.random.Generator] = [np.random.default_rng(0)] * capacity  # replaced at begin
        self._decided: np.ndarray | None = None  # slots of the last select
        self._arange = np.arange(capacity)

    # ------------------------------------------------------------------ slots
    @property
    def active(self) -> np.ndarray:
        """Slots holding a request, ascending."""
        return np.flatnonzero(self._state != _FREE)

    def free_slots(self) -> np.ndarray:
        return np.flatnonzero(self._state == _FREE)

    def _slot(self, slot: object) -> int:
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)) or not 0 <= slot < self.capacity:
            raise ValueError(f"slot must be an int in [0, {self.capacity}), got {slot!r}")
        return int(slot)

    def _slots(self, slots: object, name: str, want: int) -> np.ndarray:
        """``slots`` as distinct int64 slot indices, each in state ``want`` (``_ACTIVE``: any but free), else a
        ValueError naming them."""
        s = slots if type(slots) is np.ndarray else np.asarray(slots)
        if s.ndim != 1 or (s.size and s.dtype.kind not in "iu"):
            raise ValueError(f"{name} must be a 1-D array of slot indices, got {s.dtype} {s.shape}")
        s = s.astype(np.int64, copy=False)
        if s.size and (s.min() < 0 or s.max() >= self.capacity):
            raise ValueError(f"{name} must lie in [0, {self.capacity}), got {s.tolist()}")
        st = self._state[s]
        ok = st != _FREE if want == _ACTIVE else st == want
        if np.count_nonzero(ok) != s.size:
            bad = s[~ok].tolist()
            why = {_IDLE: "already hold a decision awaiting observe", _PENDING: "have no decision awaiting feedback"}
            raise ValueError(f"{name}: slot(s) {bad} " + ("not begun (call begin first)" if _FREE in st else why[want]))
        self._state[s] = _MARK
        distinct = np.count_nonzero(self._state == _MARK)
        self._state[s] = st
        if distinct != s.size:
            raise ValueError(f"{name} must be distinct, got {s.tolist()}")
        return s

    def _rng(self, slot: int) -> np.random.Generator:
        """The slot's request stream (``request_rng``: the per-request selector's draws)."""
        return self._rngs[slot]

    def _argmax_ties(self, s: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Row-wise ``argmax_random_ties``: the argmax, or among entries within 1e-15 of the maximum a uniform
        pick with the slot's stream (the same draw the per-request selector makes)."""
        i = w.argmax(axis=1)
        near = w >= (w[self._arange[: s.size], i] - _TIE)[:, None]
        if np.count_nonzero(near) > s.size:  # some row has a tie
            for j in np.flatnonzero(np.count_nonzero(near, axis=1) > 1).tolist():
                i[j] = int(self._rng(int(s[j])).choice(np.flatnonzero(near[j])))
        return i

    # ------------------------------------------------------------------ life cycle
    def begin(self, slot: int, ctx: RequestContext | None = None) -> None:
        """A request joins the batch in ``slot`` (free); its state starts afresh, as ``begin_request``."""
        slot = self._slot(slot)
        if self._state[slot] != _FREE:
            raise ValueError(f"slot {slot} holds a request; end it before beginning another")
        self._rngs[slot] = request_rng(self.seed, (ctx or RequestContext()).request_id)
        self._state[slot] = _IDLE
        self._begun[slot] = True
        self.rounds[slot] = 0
        self._reset(np.array([slot], dtype=np.int64))

    def end(self, slots: int | Sequence[int] | np.ndarray) -> None:
        """The requests in ``slots`` leave the batch (``end_request``: delayed feedback flushed); a decision
        still awaiting feedback is dropped."""
        s = self._slots(np.atleast_1d(np.asarray(slots)), "slots", _ACTIVE)
        self._finish(s, self._state[s] == _PENDING)
        self._state[s] = _FREE

    def select(self, slots: object = None) -> BatchDecision:
        """One decision per slot (default: every active slot without a pending decision)."""
        s = np.flatnonzero(self._state == _IDLE) if slots is None else self._slots(slots, "slots", _IDLE).copy()
        s.flags.writeable = False  # BatchDecision.slots: observe may trust it was checked here
        dec = self._select(s)
        self._state[s] = _PENDING
        self._decided = s
        return dec

    def observe(self, feedback: BatchFeedback) -> None:
        """Feedback of the round decided by the last ``select`` of each slot in ``feedback.slots`` (passing the
        decision's own read-only ``slots`` array skips re-checking them)."""
        s = feedback.slots
        if s is self._decided and np.count_nonzero(self._state[s] == _PENDING) == s.size:
            self._decided = None  # the last select's slots, unchanged (read-only) and all pending: checked there
        else:
            s = self._slots(s, "feedback.slots", _PENDING)
        accepted = _int_array(feedback.accepted, "feedback.accepted", s.size)
        emitted = _int_array(feedback.emitted, "feedback.emitted", s.size)
        if np.count_nonzero(accepted.view(np.uint64) > self.k):  # negatives wrap to huge unsigned values
            raise ValueError(f"feedback.accepted must lie in [0, K={self.k}], got {accepted.tolist()}")
        if np.count_nonzero((emitted - 1).view(np.uint64) > self.k):
            raise ValueError(f"feedback.emitted must lie in [1, K+1={self.k + 1}], got {emitted.tolist()}")
        if feedback.drafters is not None:
            d = _int_array(feedback.drafters, "feedback.drafters", s.size)
            if np.count_nonzero(d.view(np.uint64) >= self.n):
                raise ValueError(f"feedback.drafters must lie in [0, N={self.n}), got {d.tolist()}")
        self._observe(s, feedback, accepted, emitted)  # checks the rest before it changes anything
        self.rounds[s] += 1
        self._state[s] = _IDLE

    def state_dict(self, slot: int) -> dict[str, Any]:
        slot = self._slot(slot)
        if not self._begun[slot]:
            raise ValueError(f"slot {slot} has never held a request")
        return {"name": self.name, "rounds": int(self.rounds[slot])}

    def _check_begun(self, slots: object) -> np.ndarray:
        s = np.asarray(slots)
        if (
            s.ndim != 1
            or (s.size and s.dtype.kind not in "iu")
            or (s.size and (s.min() < 0 or s.max() >= self.capacity))
        ):
            raise ValueError(f"slots must be a 1-D array of slot indices in [0, {self.capacity}), got {s.tolist()}")
        if not self._begun[s].all():
            raise ValueError(f"slot(s) {s[~self._begun[s]].tolist()} have never held a request")
        return s.astype(np.int64, copy=False)

    @abstractmethod
    def _reset(self, slots: np.ndarray) -> None: ...

    @abstractmethod
    def _select(self, slots: np.ndarray) -> BatchDecision: ...

    @abstractmethod
    def _observe(self, slots: np.ndarray, fb: BatchFeedback, accepted: np.ndarray, emitted: np.ndarray) -> None: ...

    def _finish(self, slots: np.ndarray, pending: np.ndarray) -> None:
        return None


class BatchedHedgeSpec(SlotBatch):
    """HedgeSpec for B slots (the options of :class:`~hedgespec.selectors.hedgespec.HedgeSpec`).

    Per slot: a :class:`~hedgespec.feedback_batched.BatchedLedger` row, the learner rows of its reduction (one
    for the queue, 2K+2 for BOLD) and its outstanding decisions (weights, learner row, positions whose loss is
    still due). ETAP completes a round's losses in the round itself, so only the last decision is kept; EAL
    completes a position once the K−1 after it are verified, so at most K+1 decisions are outstanding and a
    ring of 2K+2 holds them. The label-efficient variants (``epsilon < 1``, ``evaluation="adaptive"``) are
    per-request only. ``prior`` / ``prior_alpha`` / ``prior_source`` are HedgeSpec's: a slot's prior is fixed at
    ``begin`` from its context (router) or from the requests ended before it (running, in ``end`` order).
    """

    full_information = True

    def __init__(
        self,
        capacity: int,
        n_drafters: int,
        k: int,
        objective: str = "etap",
        learner: str = "normal_hedge",
        delay: str = "queue",
        choice: str = "argmax",
        tail_policy: str = "drop",
        seed: int = 0,
        prior: str | Sequence[float] = "uniform",
        prior_alpha: float = 0.5,
        prior_source: PriorSource | None = None,
    ) -> None:
        check_options(objective, learner, delay, choice, tail_policy)
        self.prior_source = check_prior_options(prior, prior_alpha, learner, prior_source)
        self.prior = prior if isinstance(prior, str) else [float(x) for x in prior]
        self.prior_alpha = float(prior_alpha)
        self._ctx = RequestContext()
        super().__init__(capacity, n_drafters, k, seed)
        self.objective, self.learner_name, self.delay, self.choice = objective, learner, delay, choice
        self.tail_policy = tail_policy
        self.name = "hedgespec" if objective == "etap" else "hedgespec_eal"
        self.ledger = BatchedLedger(capacity, n_drafters, k, objective, tail_policy)
        per_slot = 1 if delay == "queue" else 2 * k + 2  # BOLD: max_delay = 2K+1, as HedgeSpec
        bank_cls = {"normal_hedge": NormalHedgeBank, "hedge": HedgeBank}[learner]
        self.bank = bank_cls(capacity * per_slot, n_drafters)
        self.reduction = QueuedBatch(self.bank) if delay == "queue" else BoldBatch(self.bank, capacity, 2 * k + 1)
        self._ring = 1 if objective == "etap" else 2 * k + 2
        self._tk_weights = np.zeros((capacity, self._ring, n_drafters))
        self._tk_row = np.zeros((capacity, self._ring), dtype=np.int64)
        self._tk_left = np.zeros((capacity, self._ring), dtype=np.int64)  # positions whose loss is still due
        self._tk_live = np.zeros((capacity, self._ring), dtype=bool)  # observed, losses outstanding
        self._next_ticket = np.zeros(capacity, dtype=np.int64)
        self._prefix = prefix_table(k)

    def begin(self, slot: int, ctx: RequestContext | None = None) -> None:
        self._ctx = ctx or RequestContext()  # read by _reset: the slot's prior
        super().begin(slot, ctx)

    def _reset(self, slots: np.ndarray) -> None:
        self.reduction.reset(slots)
        pi = request_prior(self.prior, self.prior_source, self.n, self.prior_alpha, self._ctx)
        if pi is not None:
            self.reduction.set_prior(slots, pi[None, :])
        self.ledger.reset(slots)
        self._tk_live[slots] = False
        self._next_ticket[slots] = 0

    def _select(self, s: np.ndarray) -> BatchDecision:
        rows, w = self.reduction.predict(s)
        drafters = self._choose(s, w)
        t = self._next_ticket[s]
        self._next_ticket[s] = t + 1
        at = 0 if self._ring == 1 else t % self._ring
        if self._ring > 1 and np.count_nonzero(self._tk_live[s, at]):  # cannot happen: the ring outnumbers them
            raise RuntimeError("HedgeSpec: more outstanding decisions than the ticket ring holds")
        self._tk_weights[s, at] = w
        self._tk_row[s, at] = rows
        return BatchDecision(s, drafters, w, t)

    def _choose(self, s: np.ndarray, w: np.ndarray) -> np.ndarray:
        if self.choice == "sample":
            return sample_rows([self._rng(x) for x in s.tolist()], w)
        return self._argmax_ties(s, w)

    def _observe(self, s: np.ndarray, fb: BatchFeedback, accepted: np.ndarray, emitted: np.ndarray) -> None:
        if fb.gamma is None:
            raise ValueError("HedgeSpec needs full-information feedback: BatchFeedback.gamma is None")
        gamma, valid = check_gamma_batch(fb.gamma, emitted, self.n, self._prefix)
        t = self._next_ticket[s] - 1  # the pending decisions' tickets
        done = self.ledger.add_rounds(s, gamma, valid, emitted, t, fb.start)
        if self._ring == 1:  # ETAP: the round's own losses, all of them, under its decision's weights
            rows = self._tk_row[s, 0]
            self.bank.update(rows, done.loss, self._tk_weights[s, 0][:, None, :], valid, emitted)
            self.reduction.release(s, rows)
            return
        at = t % self._ring
        self._tk_left[s, at] = emitted
        self._tk_live[s, at] = True
        self._apply(s, done)

    def _apply(self, s: np.ndarray, done: CompletedBatch) -> None:
        """Route EAL losses to their decisions' learners; release the decisions whose losses are all in."""
        loss, ticket, valid = done
        if loss.shape[1] == 0:
            return
        at = ticket % self._ring
        rows = self._tk_row[s[:, None], at]
        # Queue: the slot's one row. BOLD: entries past a slot's count go, unchanged, to its own first row.
        rows = s if self.reduction.per_slot == 1 else np.where(valid, rows, (s * self.reduction.per_slot)[:, None])
        self.bank.update(rows, loss, self._tk_weights[s[:, None], at], valid, valid.sum(axis=1))
        np.add.at(self._tk_left, (np.broadcast_to(s[:, None], at.shape)[valid], at[valid]), -1)
        self._release(s, self._tk_live[s] & (self._tk_left[s] == 0))

    def _release(self, s: np.ndarray, done: np.ndarray) -> None:
        j, at = np.nonzero(done)
        if j.size:
            self.reduction.release(s[j], self._tk_row[s[j], at])
            self._tk_live[s[j], at] = False

    def _finish(self, s: np.ndarray, pending: np.ndarray) -> None:
        done = self.ledger.finish(s)  # ETAP leaves nothing incomplete
        if self._ring > 1:
            self._apply(s, done)
            self._release(s, self._tk_live[s].copy())  # dropped tail windows: nothing more comes for these
        p = s[pending]  # a dropped decision frees its BOLD learner too
        if p.size:
            self.reduction.release(p, self._tk_row[p, (self._next_ticket[p] - 1) % self._ring])
        if self.prior_source is not None:  # HedgeSpec.end_request: the final weights, slot by slot in order
            for w in self.reduction.weights(s):
                self.prior_source.record(w.copy())

    def weights(self, slots: object) -> np.ndarray:
        """Current weights [b, N] of the slots' requests (``HedgeSpec.weights``), also after their end."""
        return self.reduction.weights(self._check_begun(slots)).copy()

    def state_dict(self, slot: int) -> dict[str, Any]:
        d = super().state_dict(slot)
        d.update(objective=self.objective, learner=self.learner_name, delay=self.delay, choice=self.choice)
        if self.prior != "uniform":
            d.update(prior=self.prior, prior_alpha=self.prior_alpha)
        d["weights"] = [float(x) for x in self.weights([slot])[0]]
        return d
