"""HEDGESPEC drafting EAGLE trees on a real SGLang server (CPU path, ``decoding`` mode tree, ``topk`` > 1).

The truths: transformers' non-speculative greedy decoding of the target (every output), the reference engine's
tree mode with the same checkpoints and request id (drafter choices round by round: same γ definition, the
target token among each drafter's top-k), and a pool that agrees with its target (the learner must move to the
agreeing drafter and accept whole trees). Marked ``serve`` like tests/test_serving_server.py.
"""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import pytest
from _engine_helpers import GREEDY, decoding
from _serve_helpers import TEST_DEVICE, assert_target_only, hf_greedy, tiny_checkpoints, tiny_server
from test_serving_server import PROMPTS, _generate, _needs_sglang  # noqa: F401 - fixture

from hedgespec.serving.tiny import make_drafter

pytestmark = [pytest.mark.serve, pytest.mark.timeout(900)]

STEPS, TOPK, NODES = 3, 2, 6
TREE = {"mode": "tree", "num_steps": STEPS, "topk": TOPK, "num_draft_tokens": NODES}
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    root = tiny_checkpoints(tmp_path_factory.mktemp("tree-ckpt"))  # t_rand with d0..d2, t_const with d_const, d_anti
    for mode in ("inf", "raise"):
        make_drafter(root / f"d_{mode}", root / "t_rand", seed=1, mode=mode)
    return root


def _engine_run(ckpt: Path, target: str, heads: list[str], ids: list[int], rid: str, n: int):
    import torch
    from transformers import AutoModelForCausalLM

    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.engine.generate import SpeculativeEngine
    from hedgespec.selectors import make_selector
    from hedgespec.types import RequestContext

    model = AutoModelForCausalLM.from_pretrained(ckpt / target, dtype=torch.float32).eval()
    drafters = [Eagle3Drafter.load(ckpt / d, model) for d in heads]
    engine = SpeculativeEngine(model, drafters, make_selector("hedgespec"), decoding("tree", STEPS, TOPK, NODES))
    out, stats = engine.generate(torch.tensor(ids), n, GREEDY, ctx=RequestContext(request_id=rid))
    return out[len(ids) :].tolist(), stats


@pytest.mark.parametrize(
    "fused,layout", [(False, "layers"), (True, "layers"), (True, "heads")], ids=["per-drafter", "fused", "fused-heads"]
)
def test_tree_drafting_is_lossless_alone_and_concurrent(ckpt, tmp_path, fused, layout):
    """Two random drafters, trees of 6 nodes, each drafter its own draft model or the pool as one (both KV
    layouts): every output equals transformers' greedy, one request at a time and 8 at once (their drafters
    mixed in one round), and the server keeps each request's own selector."""
    reference = hf_greedy(ckpt / "t_rand", PROMPTS, NEW_TOKENS)
    log = tmp_path / "tree.log"
    srv = tiny_server(ckpt, "t_rand", ["d0", "d1"], log, decoding=TREE, fused=fused, layout=layout)
    try:
        alone = [(ids, _generate(srv, ids, NEW_TOKENS, rid=f"alone-{j}")) for j, ids in enumerate(PROMPTS)]
        with cf.ThreadPoolExecutor(8) as ex:
            jobs = [(PROMPTS[j % len(PROMPTS)], f"many-{j}") for j in range(8)]
            many = list(ex.map(lambda job: (job[0], _generate(srv, job[0], NEW_TOKENS, rid=job[1])), jobs))
    finally:
        srv.stop()
    for ids, out in alone + many:
        meta = out["meta_info"]
        assert out["output_ids"] == reference[tuple(ids)], ids
        assert sum(meta["hedgespec_histogram"]) == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"] > 0
    if fused:
        assert f"{layout} layout" in log.read_text()
    # the reference engine's tree mode, same checkpoints and request id: same tokens, same drafter per round
    for j in (0, 1):
        tokens, stats = _engine_run(ckpt, "t_rand", ["d0", "d1"], PROMPTS[j], f"alone-{j}", NEW_TOKENS)
        meta = alone[j][1]["meta_info"]
        assert tokens == alone[j][1]["output_ids"]
        assert meta["hedgespec_histogram"] == stats.histogram(2), (meta, stats.chosen)


def test_tree_selection_moves_to_the_agreeing_drafter(ckpt, tmp_path):
    srv = tiny_server(ckpt, "t_const", ["d_anti", "d_anti", "d_const"], tmp_path / "const.log", decoding=TREE)
    try:
        meta = _generate(srv, PROMPTS[0], 60, rid="agree-tree")["meta_info"]
    finally:
        srv.stop()
    hist, rounds = meta["hedgespec_histogram"], meta["hedgespec_rounds"][0]
    assert hist[2] >= rounds - 3, hist
    assert meta["hedgespec_weights"][2] > 0.9
    # tied draft probabilities: SGLang keeps the 5 best-scored of 2 + 4 + 8 candidates, the 2 + 3 of the first two
    # levels, so a round accepts at most 2 drafts + the bonus token
    assert meta["spec_accept_length"] >= 2.5
    _, stats = _engine_run(ckpt, "t_const", ["d_anti", "d_anti", "d_const"], PROMPTS[0], "agree-tree", 60)
    assert stats.histogram(3) == hist, (stats.chosen, hist)


@pytest.mark.skipif(TEST_DEVICE == "cuda", reason="the 'raise' drafter is CPU-only (a device assert on CUDA)")
def test_tree_with_every_drafter_failing_verifies_a_placeholder_tree(ckpt, tmp_path):
    """No drafter left: the worker builds a placeholder tree (hedgespec.serving.placeholder_tree) and decoding
    stays the target's."""
    reference = hf_greedy(ckpt / "t_rand", PROMPTS, NEW_TOKENS)
    srv = tiny_server(ckpt, "t_rand", ["d_inf", "d_raise"], tmp_path / "none_left.log", decoding=TREE)
    try:
        outs = [(ids, _generate(srv, ids, NEW_TOKENS)) for ids in PROMPTS[:2]]
    finally:
        srv.stop()
    assert_target_only(outs, reference, ["d_inf", "d_raise"])
