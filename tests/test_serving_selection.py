"""The HEDGESPEC worker's batch selection table (hedgespec/serving/selection.py) against a per-request loop:
one selector per request, γ from ``greedy_gamma`` request by request, the substitute rule and the reported
counts written out one request at a time (the worker's bookkeeping before the table existed)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hedgespec.selectors.batched as batched_mod
import hedgespec.selectors.hedgespec as hedgespec_mod
from hedgespec.selectors import BatchedHedgeSpec, BatchedUCBSpec, make_selector
from hedgespec.serving.rounds import greedy_gamma
from hedgespec.serving.selection import WorkerSelection, batched_options, round_gamma, substitutes
from hedgespec.types import Decision, RequestContext, RoundFeedback

VOCAB = 3  # few token ids, so proposals often equal the committed token (γ = 1)


class _Loop:
    """Per-request reference: the worker's old path, written out."""

    def __init__(self, name, kwargs, n, k):
        self.name, self.kwargs, self.n, self.k = name, kwargs, n, k
        self.st = {}

    def begin(self, rid):
        sel = make_selector(self.name, **self.kwargs)
        sel.begin_request(self.n, self.k, RequestContext(request_id=rid))
        self.st[rid] = {"sel": sel, "pred": [-1] * self.n, "hist": [0] * self.n, "gen": 0, "rounds": 0, "w": None}

    def end(self, rid):
        self.st.pop(rid)["sel"].end_request()

    def select(self, rids):
        return [self.st[r]["sel"].select() for r in rids]

    @staticmethod
    def substitute(d, alive):
        if alive[d.drafter]:
            return d.drafter
        live = [i for i, a in enumerate(alive) if a]
        if not live:
            return None
        return live[0] if d.weights is None else max(live, key=lambda i: (d.weights[i], -i))

    def observe(self, rid, d, drafted, emitted, committed, row_preds, alive):
        st = self.st[rid]
        gamma = greedy_gamma(st["pred"], row_preds, committed[:emitted].tolist())
        gamma[:, [j for j, a in enumerate(alive) if not a]] = 0.0
        if drafted is not None and drafted != d.drafter:
            d = Decision(drafted, d.weights, d.ticket, d.evaluate)
        st["sel"].observe(RoundFeedback(d, emitted - 1, emitted, st["gen"], gamma))
        st["gen"] += emitted
        st["rounds"] += 1
        if drafted is not None:
            st["hist"][drafted] += 1
        st["w"] = list(d.weights) if d.weights is not None else None


def _run(name, kwargs, n, k, capacity, seed, rounds=80, max_live=6, batched=True):
    rng = np.random.default_rng(seed)
    table = WorkerSelection(name, kwargs, n, k, capacity=capacity, batched=batched)
    ref = _Loop(name, kwargs, n, k)
    ids = itertools.count()
    recs = {}
    alive = [True] * n
    ndt = k + 1
    checked = 0
    for _ in range(rounds):
        while len(recs) < max_live and rng.random() < 0.5:
            rid = f"req-{next(ids)}"
            recs[rid] = table.begin(rid)
            ref.begin(rid)
        if not recs:
            continue
        if rng.random() < 0.03 and sum(alive) > 0:  # a drafter is dropped for good (sometimes the last one)
            alive[int(rng.choice(np.flatnonzero(alive)))] = False
        rids = [r for r in rng.permutation(list(recs)) if rng.random() > 0.1]
        if not rids:
            continue
        records = [recs[r] for r in rids]
        choice = table.select(records)
        decisions = ref.select(rids)
        for j, d in enumerate(decisions):
            assert int(choice.drafters[j]) == d.drafter
            if d.weights is None:
                assert choice.weights is None or np.isnan(choice.weights[j]).all()
            else:
                np.testing.assert_allclose(choice.weights[j], d.weights, rtol=1e-9, atol=1e-12)
            assert choice.decision(j).drafter == d.drafter
        drafted = substitutes(choice, alive)
        assert drafted == [ref.substitute(d, alive) for d in decisions]
        b = len(rids)
        first = table.first_pred[table.rows(records)]
        assert first.tolist() == [ref.st[r]["pred"] for r in rids]
        row_preds = rng.integers(0, VOCAB, size=(n, b, ndt))
        row_preds[[j for j, a in enumerate(alive) if not a]] = -1  # a dropped drafter's rows read −1
        committed = rng.integers(0, VOCAB, size=(b, ndt))
        emitted = rng.integers(1, k + 2, size=b)
        gamma = round_gamma(first, row_preds, committed, alive)
        table.observe(records, choice, drafted, emitted, gamma)
        for j, r in enumerate(rids):
            ref.observe(r, decisions[j], drafted[j], int(emitted[j]), committed[j], row_preds[:, j].tolist(), alive)
        for i in np.flatnonzero(alive).tolist():  # each live drafter's next first-token proposal
            preds = rng.integers(0, VOCAB, size=b)
            table.set_first_pred(table.rows(records), i, preds)
            for r, p in zip(rids, preds.tolist()):
                ref.st[r]["pred"][i] = p
        for r in rids:
            info, st = table.info(recs[r]), ref.st[r]
            assert info["hedgespec_histogram"] == st["hist"] and info["hedgespec_rounds"] == [st["rounds"]]
            assert table.generated[recs[r].row] == st["gen"]
            if st["w"] is None:
                assert info["hedgespec_weights"] == []
            else:
                np.testing.assert_allclose(info["hedgespec_weights"], st["w"], rtol=1e-9, atol=1e-12)
        checked += b
        for r in [r for r in list(recs) if rng.random() < 0.1]:
            table.end(recs.pop(r))
            ref.end(r)
    for r in list(recs):
        table.end(recs.pop(r))
        ref.end(r)
    return table, checked


@pytest.fixture
def rounding_proof_ties(monkeypatch):
    """Ties at 1e-12 in both implementations: with greedy γ ∈ {0, 1} NormalHedge's per-request and batched
    weights agree only to rounding, so a 1e-15 tie may be seen by one of them (tests/test_core_batched.py)."""

    def argmax_ties(w, rng):
        best = np.flatnonzero(w >= w.max() - 1e-12)
        return int(best[0]) if best.size == 1 else int(rng.choice(best))

    monkeypatch.setattr(hedgespec_mod, "argmax_random_ties", argmax_ties)
    monkeypatch.setattr(batched_mod, "_TIE", 1e-12)


CASES = [
    ("hedgespec", {"objective": "etap", "learner": "normal_hedge", "delay": "queue", "seed": 0}),
    ("hedgespec_eal", {}),
    ("hedgespec", {"delay": "bold", "choice": "sample", "seed": 3}),
    ("ucbspec", {"delta": 0.5, "seed": 0, "evaluate": False}),
    ("exp3spec", {"seed": 1}),
    ("metasd", {}),  # no batched form: per-request selectors
    ("hedgespec", {"epsilon": 0.5}),  # label-efficient: per request only
    ("fixed", {"index": 1}),
]


@pytest.mark.usefixtures("rounding_proof_ties")
@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}{kw}" for n, kw in CASES])
@pytest.mark.parametrize("capacity", [64, 3], ids=["all-batched", "overflow"])
def test_table_decides_and_reports_as_per_request_selectors(name, kwargs, capacity):
    """Same drafters, weights, substitutes, first-token proposals, histograms, rounds and token counts as one
    selector per request, with requests joining and leaving, drafters dropped and, with capacity 3 < 6
    requests, some requests held by per-request selectors next to the batched slots."""
    for seed, (n, k) in enumerate([(4, 3), (8, 4), (2, 1)]):
        table, checked = _run(name, kwargs, n, k, capacity, seed)
        assert checked > 100
        assert (table.batch is not None) == (batched_options(name, kwargs) is not None)


def test_batched_forms_and_fallbacks():
    assert batched_options("hedgespec", {"seed": 2, "epsilon": 1.0, "late": False}) == {"seed": 2}
    assert batched_options("hedgespec_eal", {}) == {"objective": "eal"}
    assert batched_options("ucbspec", {"evaluate": False, "delta": 0.3}) == {"delta": 0.3}
    for name, kw in [("hedgespec", {"epsilon": 0.25}), ("hedgespec", {"evaluation": "adaptive"}), ("router", {})]:
        assert batched_options(name, kw) is None
    assert isinstance(WorkerSelection("hedgespec", {}, 4, 2).batch, BatchedHedgeSpec)
    assert isinstance(WorkerSelection("ucbspec", {}, 4, 2).batch, BatchedUCBSpec)
    assert WorkerSelection("hedgespec", {}, 4, 2, batched=False).batch is None


def test_rows_grow_and_slots_are_reused():
    table = WorkerSelection("hedgespec", {}, 3, 2, capacity=2)
    recs = [table.begin(f"r{i}") for i in range(5)]  # 2 batched slots, 3 per-request selectors, rows grown to 8
    assert [r.slot >= 0 for r in recs] == [True, True, False, False, False]
    assert len({r.row for r in recs}) == 5
    table.end(recs[0])
    again = table.begin("r5")
    assert again.slot >= 0 and again.row >= 0
    assert table.info(again) == {
        "hedgespec_histogram": [0, 0, 0],
        "hedgespec_weights": [],
        "hedgespec_rounds": [0],
        "hedgespec_round_time_s": [0.0, 0.0, 0.0, 0.0],
    }


def test_round_times_add_up_per_request_and_start_afresh():
    table = WorkerSelection("hedgespec", {}, 3, 2)
    a, b = table.begin("a"), table.begin("b")
    table.add_time([a, b], {"draft": 0.5, "verify": 1.0, "evaluate": 0.25})  # no update time: 0
    table.add_time([b], {"draft": 0.125, "verify": 0.5, "evaluate": 0.5, "update": 0.0625})
    assert table.info(a)["hedgespec_round_time_s"] == [0.5, 1.0, 0.25, 0.0]
    assert table.info(b)["hedgespec_round_time_s"] == [0.625, 1.5, 0.75, 0.0625]
    table.end(a)
    assert table.info(table.begin("c"))["hedgespec_round_time_s"] == [0.0, 0.0, 0.0, 0.0]


def test_bad_selector_fails_at_construction_naming_it():
    with pytest.raises(ValueError, match="unknown selector 'hedgespex'"):
        WorkerSelection("hedgespex", {}, 4, 2)
    with pytest.raises(ValueError, match="delta"):
        WorkerSelection("ucbspec", {"delta": 2.0}, 4, 2)
