"""HEDGESPEC with the pool as one SGLang draft model (``fused=true``) on a real CPU server.

Checked against independent truth: transformers' non-speculative greedy output, and the reference engine
(:class:`hedgespec.engine.generate.SpeculativeEngine`, one drafter object per checkpoint) making the same drafter
choice in every round for the same request id. Concurrent requests with different request ids choose different
drafters in the same round, so the draft step runs several heads and takes each row from its own request's head;
equal counts of accepted drafts per round with the engine show each request drafted with the head its selector
chose (an always-rejected head and an always-accepted one accept 0 and every draft).

Marked ``serve`` (``pytest -m serve tests/test_serving_fused.py``); needs sglang 0.5.23.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
from pathlib import Path

import pytest
import torch
from _engine_helpers import GREEDY, decoding
from _requires import sglang_or_skip
from _serve_helpers import generate_ids, hf_greedy, tiny_checkpoints, tiny_server

pytestmark = [pytest.mark.serve, pytest.mark.timeout(900)]

PROMPTS = [[72, 101, 108, 108, 111], [40, 41, 42, 43, 44, 45, 46, 47], [200, 13, 77], [5] * 20]
NEW_TOKENS = 20


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    sglang_or_skip()
    return tiny_checkpoints(tmp_path_factory.mktemp("fused-ckpt"))


def _engine(ckpt: Path, target: str, drafters: list[str]):
    from transformers import AutoModelForCausalLM

    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.engine.generate import SpeculativeEngine
    from hedgespec.selectors import make_selector

    model = AutoModelForCausalLM.from_pretrained(ckpt / target, dtype=torch.float32).eval()
    heads = [Eagle3Drafter.load(ckpt / d, model) for d in drafters]
    return SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding("chain", 3))


def _engine_run(engine, ids: list[int], n: int, rid: str):

    from hedgespec.types import RequestContext

    out, stats = engine.generate(torch.tensor(ids), n, GREEDY, ctx=RequestContext(request_id=rid))
    return out[len(ids) :].tolist(), stats


def test_fused_pool_is_lossless_and_chooses_as_the_reference_engine(ckpt, tmp_path):
    drafters = ["d0", "d1", "d2"]
    reference = hf_greedy(ckpt / "t_rand", PROMPTS, NEW_TOKENS)
    engine = _engine(ckpt, "t_rand", drafters)
    srv = tiny_server(ckpt, "t_rand", drafters, tmp_path / "fused.log", fused=True, layout="heads")
    try:
        assert "pool_dir" in json.loads(srv.plan.env["HEDGESPEC_CONFIG"])
        for j, ids in enumerate(PROMPTS):
            rid = f"fused-{j}"
            served = generate_ids(srv.plan.base_url, ids, NEW_TOKENS, rid)
            meta = served["meta_info"]
            assert served["output_ids"] == reference[tuple(ids)], f"prompt {ids}"
            assert sum(meta["hedgespec_histogram"]) == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"]
            out, stats = _engine_run(engine, ids, NEW_TOKENS, rid)
            assert out == served["output_ids"]
            assert meta["hedgespec_histogram"] == stats.histogram(3), (meta, stats.chosen)
        assert generate_ids(srv.plan.base_url, PROMPTS[0], 1)["output_ids"] == reference[tuple(PROMPTS[0])][:1]
    finally:
        srv.stop()
    assert "heads layout, one attention call over 3 heads" in (tmp_path / "fused.log").read_text()


def _concurrent(srv, prompts: list[list[int]], rids: list[str], n_new: int) -> dict[str, dict]:
    with cf.ThreadPoolExecutor(len(prompts)) as ex:
        futs = {rid: ex.submit(generate_ids, srv.plan.base_url, p, n_new, rid) for rid, p in zip(rids, prompts)}
        return {rid: f.result() for rid, f in futs.items()}


def _assert_each_as_engine(served: dict, expected: dict, prompts: list, reference: dict) -> None:
    """Each request's output is transformers' greedy output and the reference engine's for its id, with the
    engine's drafter histogram and number of rounds."""
    for (rid, (out, stats)), p in zip(expected.items(), prompts):
        meta = served[rid]["meta_info"]
        assert served[rid]["output_ids"] == out == reference[tuple(p)], rid
        assert meta["hedgespec_histogram"] == stats.histogram(3), (rid, meta["hedgespec_histogram"], stats.chosen)
        assert meta["spec_verify_ct"] == stats.rounds, (rid, meta["spec_verify_ct"], stats.rounds)


@pytest.mark.parametrize("layout", ["heads", "layers"])
def test_concurrent_requests_draft_with_their_own_heads(ckpt, tmp_path, layout):
    """One agreeing and two never-agreeing heads, 8 concurrent requests with their own request ids: each
    request's output, drafter histogram, rounds and drafts accepted per round equal the reference engine's for
    that id (the first round mixes the heads in one draft step: one stacked pass in either KV layout)."""
    drafters = ["d_anti", "d_const", "d_anti"]
    n_new = 40
    prompts = [[3 + i, 7, 11 + i] for i in range(8)]
    reference = hf_greedy(ckpt / "t_const", prompts, n_new)
    engine = _engine(ckpt, "t_const", drafters)
    expected = {f"mix-{i}": _engine_run(engine, p, n_new, f"mix-{i}") for i, p in enumerate(prompts)}
    first = {stats.chosen[0] for _, stats in expected.values()}
    assert len(first) > 1, "the request ids should start on different drafters (a mixed first draft step)"
    srv = tiny_server(ckpt, "t_const", drafters, tmp_path / "mix.log", fused=True, layout=layout)
    try:
        served = _concurrent(srv, prompts, list(expected), n_new)
    finally:
        srv.stop()
    _assert_each_as_engine(served, expected, prompts, reference)
    for rid, (_, stats) in expected.items():
        meta = served[rid]["meta_info"]
        # drafts accepted per round: SGLang counts rounds by correct drafts; the engine cuts its last round at the
        # token budget, SGLang does not, so that round may count higher on the server
        hist = list(meta["spec_correct_drafts_histogram"])
        *full, last = stats.accepted_per_round
        for a in full:
            hist[a] -= 1
        assert min(hist) == 0 and sum(hist) == 1 and hist.index(1) >= last, (rid, meta, stats.accepted_per_round)


def test_fused_pool_drops_heads_with_non_finite_outputs(tmp_path):
    """A NaN head and an inf head in the fused pool are dropped once each (their own slices of the batched
    evaluation), the remaining head keeps drafting, and the output stays transformers' greedy output."""
    import re

    from hedgespec.serving.tiny import make_drafter, make_target

    sglang_or_skip()
    make_target(tmp_path / "t_rand", seed=0)
    make_drafter(tmp_path / "d0", tmp_path / "t_rand", seed=0)
    for mode in ("nan", "inf"):
        make_drafter(tmp_path / f"d_{mode}", tmp_path / "t_rand", seed=1, mode=mode)
    reference = hf_greedy(tmp_path / "t_rand", PROMPTS, NEW_TOKENS)
    log = tmp_path / "faults.log"
    srv = tiny_server(tmp_path, "t_rand", ["d_nan", "d0", "d_inf"], log, fused=True)
    try:
        for j, ids in enumerate(PROMPTS):
            out = generate_ids(srv.plan.base_url, ids, NEW_TOKENS, f"faults-{j}")
            meta = out["meta_info"]
            assert out["output_ids"] == reference[tuple(ids)], ids
            assert meta["hedgespec_dropped"] == ["d_nan", "d_inf"]
            hist = meta["hedgespec_histogram"]
            assert hist[0] == hist[2] == 0 and hist[1] == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"]
    finally:
        srv.stop()
    text = log.read_text()
    for name in ("d_nan", "d_inf"):
        assert len(re.findall(rf"drafter '{name}' gave non-finite \(NaN/inf\) logits or hidden states", text)) == 1
    assert len(re.findall("HEDGESPEC: drafter", text)) == 2


def test_heads_the_batched_evaluation_does_not_cover_run_their_own_forward(ckpt, tmp_path):
    """A head that normalises the target features before its fc (``norm_before_fc``, as some published EAGLE-3
    checkpoints do) is outside what the batched evaluation computes: the pool then evaluates each head with its
    own SGLang forward on its own KV layer (the layers layout), and the output is still transformers' greedy
    output."""
    import shutil

    for name in ("d0", "d1"):
        shutil.copytree(ckpt / name, tmp_path / name)
    cfg_path = tmp_path / "d0" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["eagle_config"] = {**cfg["eagle_config"], "norm_before_fc": True}
    cfg_path.write_text(json.dumps(cfg))
    (tmp_path / "t_rand").symlink_to(ckpt / "t_rand")
    reference = hf_greedy(ckpt / "t_rand", PROMPTS[:2], NEW_TOKENS)
    srv = tiny_server(tmp_path, "t_rand", ["d0", "d1"], tmp_path / "per_head.log", fused=True, layout="heads")
    try:
        for j, ids in enumerate(PROMPTS[:2]):
            out = generate_ids(srv.plan.base_url, ids, NEW_TOKENS, f"per-head-{j}")
            meta = out["meta_info"]
            assert out["output_ids"] == reference[tuple(ids)], ids
            assert sum(meta["hedgespec_histogram"]) == meta["spec_verify_ct"] and meta["hedgespec_dropped"] == []
    finally:
        srv.stop()
    assert (
        "layers layout, one KV layer and attention call per head (drafter 'd0' sets norm_before_fc)"
        in (tmp_path / "per_head.log").read_text()
    )  # the heads layout was asked for; the norm needs its own forward


def _low_rank_experts(ckpt: Path, out: Path) -> list[str]:
    """A low-rank pool over a random head ``b`` for the constant target (whose greedy token is always 0), written
    as scripts/lowrank_pool.py writes one: ``b`` itself (the base); ``agree``, b plus rank-1 deltas (and its own
    final norm) that make it propose token 0 at every position; ``lr2``, b plus the rank-2 truncation of half its
    difference to another random head. Only the factors make ``agree`` agree: evaluated as b it would not."""
    from hedgespec.engine.eagle3 import MATRICES, Eagle3Drafter
    from hedgespec.engine.lowrank import LowRankDrafter
    from hedgespec.serving.tiny import make_drafter

    make_drafter(out / "b", ckpt / "t_const", seed=3)
    make_drafter(out / "far", ckpt / "t_const", seed=4)
    base, far = Eagle3Drafter.load(out / "b", name="b"), Eagle3Drafter.load(out / "far")
    assert int(base.d2t[0]) == 0, "draft id 0 should be target token 0"
    w = {k: v.clone() for k, v in base.weights.items()}
    # final residual coordinate 0 = 50 * g^2 sigmoid(g) >= 0 (no fc or attention part; gate row 0 = up row 0),
    # the final norm keeps only it, and lm_head column 0 maps it to draft id 0 alone: draft id 0 wins every row
    w["fc"][0], w["o"][0], w["gate"][0] = 0.0, 0.0, w["up"][0]
    w["down"][0] = 0.0
    w["down"][0, 0] = 50.0
    w["norm"] = torch.zeros_like(w["norm"])
    w["norm"][0] = 1.0
    w["lm_head"][:, 0] = 0.0
    w["lm_head"][0, 0] = 1.0
    agree = Eagle3Drafter(base.config, w, base.d2t, base.t2d, name="agree")
    LowRankDrafter.from_expert(base, agree, 1).save(out / "agree")
    half = {k: (v + far.weights[k]) / 2 if k in MATRICES else v for k, v in base.weights.items()}
    LowRankDrafter.from_expert(base, Eagle3Drafter(base.config, half, base.d2t, base.t2d, name="lr2"), 2).save(
        out / "lr2"
    )
    (out / "t_const").symlink_to(ckpt / "t_const")
    return ["b", "agree", "lr2"]


def test_low_rank_pool_evaluates_base_once_and_chooses_as_the_reference_engine(ckpt, tmp_path):
    """A low-rank pool (a base head and experts as base + rank-r factors) is evaluated with the base's matrices
    read once (the server says so), its output is transformers' greedy output, its drafter choices are the
    reference engine's (which evaluates such a pool the same way, hedgespec.engine.lowrank), and the expert whose
    factors make it agree with the target is found and drafts nearly every round."""
    from transformers import AutoModelForCausalLM

    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.engine.generate import SpeculativeEngine
    from hedgespec.engine.lowrank import LowRankDrafter
    from hedgespec.selectors import make_selector

    drafters = _low_rank_experts(ckpt, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(ckpt / "t_const", dtype=torch.float32).eval()
    base = Eagle3Drafter.load(tmp_path / "b", model)
    heads = [base] + [LowRankDrafter.load_factors(tmp_path / d, base, d) for d in drafters[1:]]
    engine = SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding("chain", 3))
    prompts = [[3 + i, 7, 11 + i] for i in range(3)]
    reference = hf_greedy(ckpt / "t_const", prompts, 40)
    log = tmp_path / "lowrank.log"
    srv = tiny_server(tmp_path, "t_const", drafters, log, fused=True, layout="heads")
    try:
        for j, ids in enumerate(prompts):
            rid = f"lowrank-{j}"
            served = generate_ids(srv.plan.base_url, ids, 40, rid)
            meta = served["meta_info"]
            assert served["output_ids"] == reference[tuple(ids)], ids
            out, stats = _engine_run(engine, ids, 40, rid)
            assert out == served["output_ids"]
            assert meta["hedgespec_histogram"] == stats.histogram(3), (meta, stats.chosen)
            assert meta["hedgespec_histogram"][1] >= meta["spec_verify_ct"] - 2, meta
    finally:
        srv.stop()
    assert "low-rank evaluation over base 'b'" in log.read_text()


def test_concurrent_requests_of_a_low_rank_pool_draft_with_their_own_experts(ckpt, tmp_path):
    """Concurrent requests over a low-rank pool (layers layout) whose ids start on different experts: the draft
    steps that mix experts multiply by the low-rank stack (the base once, each expert's factors on its rows), and
    every request's output is transformers' greedy output, its drafter histogram and rounds the reference
    engine's for that id, and the expert that agrees drafts nearly every round."""
    from transformers import AutoModelForCausalLM

    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.engine.generate import SpeculativeEngine
    from hedgespec.engine.lowrank import LowRankDrafter
    from hedgespec.selectors import make_selector

    drafters = _low_rank_experts(ckpt, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(ckpt / "t_const", dtype=torch.float32).eval()
    base = Eagle3Drafter.load(tmp_path / "b", model)
    heads = [base] + [LowRankDrafter.load_factors(tmp_path / d, base, d) for d in drafters[1:]]
    engine = SpeculativeEngine(model, heads, make_selector("hedgespec"), decoding("chain", 3))
    n_new = 40
    prompts = [[3 + i, 7, 11 + i] for i in range(6)]
    rids = [f"lr-mix-{i}" for i in range(6)]
    reference = hf_greedy(ckpt / "t_const", prompts, n_new)
    expected = {rid: _engine_run(engine, p, n_new, rid) for rid, p in zip(rids, prompts)}
    assert len({stats.chosen[0] for _, stats in expected.values()}) > 1, "a mixed first draft step"
    log = tmp_path / "lowrank-mix.log"
    srv = tiny_server(tmp_path, "t_const", drafters, log, fused=True, layout="layers")
    try:
        served = _concurrent(srv, prompts, rids, n_new)
    finally:
        srv.stop()
    _assert_each_as_engine(served, expected, prompts, reference)
    for rid in rids:
        meta = served[rid]["meta_info"]
        assert meta["hedgespec_histogram"][1] >= meta["spec_verify_ct"] - 2, meta
    assert "low-rank evaluation over base 'b'" in log.read_text()


def test_low_rank_factors_that_do_not_make_the_weights_are_refused(ckpt, tmp_path):
    """An expert whose lowrank.safetensors is another expert's (a swapped file) stops the server at startup with
    the drafter named, instead of serving an evaluation of other weights than the expert drafts with."""
    import shutil

    drafters = _low_rank_experts(ckpt, tmp_path)
    shutil.copy(tmp_path / "lr2" / "lowrank.safetensors", tmp_path / "agree" / "lowrank.safetensors")
    log = tmp_path / "swapped.log"
    with pytest.raises(RuntimeError, match="during startup"):
        tiny_server(tmp_path, "t_const", drafters, log, fused=True).stop()
    text = log.read_text()
    assert "drafter 'agree': its fc weights are not base 'b' + the factors in its lowrank.safetensors" in text
