"""HEDGESPEC on a real SGLang server (CPU path): lossless greedy, selection, per-request state, bad requests.

Marked ``serve``: ``pytest -m serve tests/test_serving_server.py``. Needs sglang 0.5.23 (scripts/install.d/40-serve.sh)
and the ``sglang.srt.plugins`` entry point of this package. One module-scoped server per pool (each start takes
~20-60 s on 2 cores); servers bind 127.0.0.1, and are always stopped.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import re
import urllib.error
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from _engine_helpers import GREEDY, decoding
from _requires import sglang_or_skip
from _serve_helpers import hf_greedy, tiny_checkpoints, tiny_server

from hedgespec.serving.launch import ServerProcess

pytestmark = [pytest.mark.serve, pytest.mark.timeout(900)]

PROMPTS = [[72, 101, 108, 108, 111], [40, 41, 42, 43, 44, 45, 46, 47], [200, 13, 77], [5] * 20]
NEW_TOKENS = 20


@pytest.fixture(scope="module", autouse=True)
def _needs_sglang():
    sglang_or_skip()
    if not any(ep.value.startswith("hedgespec.serving.plugin") for ep in entry_points(group="sglang.srt.plugins")):
        pytest.fail(
            "the sglang.srt.plugins entry point of hedgespec is not installed: add it to pyproject.toml "
            '([project.entry-points."sglang.srt.plugins"] hedgespec = "hedgespec.serving.plugin:register") '
            "and run `pip install -e .`"
        )


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return tiny_checkpoints(tmp_path_factory.mktemp("serve-ckpt"))


def _server(root: Path, target: str, drafters: list[str], log: Path, selector: str = "hedgespec") -> ServerProcess:
    return tiny_server(root, target, drafters, log, selector)


def _generate(
    srv: ServerProcess, ids: list[int], n: int = NEW_TOKENS, timeout: float = 300, rid: str | None = None
) -> dict:
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True}}
    if rid is not None:
        body["rid"] = rid
    req = urllib.request.Request(
        srv.plan.base_url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def reference(ckpt) -> dict[tuple[int, ...], list[int]]:
    return hf_greedy(ckpt / "t_rand", PROMPTS, NEW_TOKENS)


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"pool{n}")
def random_server(request, ckpt, tmp_path_factory):
    """One server per pool size (module scope: tests are grouped by pool, one server alive at a time)."""
    n = request.param
    srv = _server(ckpt, "t_rand", [f"d{i}" for i in range(n)], tmp_path_factory.mktemp("log") / f"pool{n}.log")
    try:
        yield n, srv
    finally:
        srv.stop()


def test_greedy_equals_non_speculative_greedy(random_server, reference):
    n, srv = random_server
    for ids in PROMPTS:
        out = _generate(srv, ids)
        meta = out["meta_info"]
        assert out["output_ids"] == reference[tuple(ids)], f"pool of {n}: prompt {ids}"
        assert len(meta["hedgespec_histogram"]) == n
        assert sum(meta["hedgespec_histogram"]) == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"]
        assert meta["hedgespec_selector"] == ["hedgespec"] and len(meta["hedgespec_weights"]) == n
        draft, verify, evaluate, update = meta["hedgespec_round_time_s"]  # the request's rounds, per phase
        assert min(draft, verify, evaluate, update) >= 0.0 and verify > 0.0 and evaluate > 0.0


def test_concurrent_requests_keep_their_own_selector_state(random_server):
    n, srv = random_server
    if n != 3:
        pytest.skip("runs once, on the 3-drafter server (servers are shared per pool size)")
    jobs = [([1 + (i * 7) % 250, 2 + i, 3], 4 + i) for i in range(16)]
    with cf.ThreadPoolExecutor(16) as ex:
        outs = list(ex.map(lambda job: _generate(srv, job[0], job[1]), jobs))
    for (ids, n_new), out in zip(jobs, outs):
        meta = out["meta_info"]
        assert meta["completion_tokens"] == n_new
        # a request's histogram counts exactly its own verification rounds (no cross-talk between requests)
        assert sum(meta["hedgespec_histogram"]) == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"]
        assert meta["spec_verify_ct"] <= n_new


# (name, /generate body, what the 400 answer must contain, {vocab} = the target's vocab_size); in docs/reliability.md
BAD_REQUESTS = [
    ("body not JSON", b"{not json", "JSON decode error"),
    ("input_ids not a list", {"input_ids": "x", "sampling_params": {"max_new_tokens": 4}}, "must be list or null"),
    (
        "no prompt",
        {"sampling_params": {"max_new_tokens": 4}},
        "Either text, input_ids or input_embeds should be provided",
    ),
    ("empty input_ids", {"input_ids": [], "sampling_params": {"max_new_tokens": 4}}, "input_ids cannot be empty"),
    (
        "token id past the vocabulary",
        {"input_ids": [5, 10**6], "sampling_params": {"temperature": 0, "max_new_tokens": 4}},
        "input_ids[1] = 1000000 is outside the target's vocabulary; valid token ids are [0, {vocab})",
    ),
    (
        "negative token id",
        {"input_ids": [-3, 5], "sampling_params": {"temperature": 0, "max_new_tokens": 4}},
        "input_ids[0] = -3 is outside the target's vocabulary",
    ),
    (
        "temperature < 0",
        {"input_ids": [5, 6], "sampling_params": {"temperature": -1, "max_new_tokens": 4}},
        "temperature must be a non-negative finite number, got -1",
    ),
    (
        "top_p = 0",
        {"input_ids": [5, 6], "sampling_params": {"top_p": 0, "max_new_tokens": 4}},
        "top_p must be in (0, 1]",
    ),
    (
        "max_new_tokens < 0",
        {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": -1}},
        "max_new_tokens must be at least 0, got -1",
    ),
    (
        "typo'd sampling key",
        {"input_ids": [5, 6], "sampling_params": {"max_new_tokenz": 4}},
        "unknown field `max_new_tokenz`, expected one of `max_new_tokens`",
    ),
]


def test_bad_requests_get_400_naming_the_cause_and_the_server_keeps_serving(random_server, ckpt, reference):
    """Every bad request of BAD_REQUESTS is answered 400 with its cause, and the next request is still served
    losslessly. Token ids outside the vocabulary are refused by the plugin's request check: SGLang itself does
    not check them, and the target's embedding lookup would raise inside the scheduler and stop the server."""
    n, srv = random_server
    if n != 1:
        pytest.skip("runs once, on the 1-drafter server (servers are shared per pool size)")
    vocab = json.loads((ckpt / "t_rand" / "config.json").read_text())["vocab_size"]
    answers = {}
    for name, body, _ in BAD_REQUESTS:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            srv.plan.base_url + "/generate", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                answers[name] = (r.status, r.read().decode())
        except urllib.error.HTTPError as err:
            answers[name] = (err.code, err.read().decode())
        assert _generate(srv, PROMPTS[0], 4)["output_ids"] == reference[tuple(PROMPTS[0])][:4], f"after {name!r}"
    for name, _, message in BAD_REQUESTS:
        code, text = answers[name]
        assert code == 400 and message.format(vocab=vocab) in text, (name, code, text[:300])


def test_request_longer_than_the_context_gets_400_naming_the_limit(random_server, ckpt, reference):
    """SGLang's own length check answers before any model work; one-token requests (finished in prefill, where
    SGLang never calls the worker's finish hook) and later requests are still served right."""
    n, srv = random_server
    if n != 1:
        pytest.skip("runs once, on the 1-drafter server (servers are shared per pool size)")
    context = json.loads((ckpt / "t_rand" / "config.json").read_text())["max_position_embeddings"]
    body = {"input_ids": [5] * (context + 10), "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
    req = urllib.request.Request(
        srv.plan.base_url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=60)
    assert err.value.code == 400
    message = json.loads(err.value.read())["error"]["message"]
    # SGLang counts the prompt plus the tokens it reserves for speculation
    got = re.fullmatch(
        r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)\.", message
    )
    assert got is not None, message
    assert int(got.group(1)) >= context + 10 and int(got.group(2)) == context
    for ids in PROMPTS[:2]:
        assert _generate(srv, ids, 1)["output_ids"] == reference[tuple(ids)][:1]
    assert _generate(srv, PROMPTS[0])["output_ids"] == reference[tuple(PROMPTS[0])]


def test_selection_moves_to_the_agreeing_drafter(ckpt, tmp_path):
    srv = _server(ckpt, "t_const", ["d_anti", "d_anti", "d_const"], tmp_path / "const.log")
    try:
        meta = _generate(srv, PROMPTS[0], 60, rid="agree-0")["meta_info"]
    finally:
        srv.stop()
    hist, rounds = meta["hedgespec_histogram"], meta["hedgespec_rounds"][0]
    assert hist[2] >= rounds - 3, hist  # at most a few exploratory rounds on the disagreeing drafters
    assert meta["hedgespec_weights"][2] > 0.9
    assert meta["spec_accept_length"] >= 3.5  # maximum is steps + 1 = 4

    # the reference engine, same checkpoints and request id, makes the same choices round by round
    import torch
    from transformers import AutoModelForCausalLM

    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.engine.generate import SpeculativeEngine
    from hedgespec.selectors import make_selector
    from hedgespec.types import RequestContext

    model = AutoModelForCausalLM.from_pretrained(ckpt / "t_const", dtype=torch.float32).eval()
    drafters = [Eagle3Drafter.load(ckpt / d, model) for d in ("d_anti", "d_anti", "d_const")]
    engine = SpeculativeEngine(model, drafters, make_selector("hedgespec"), decoding("chain", 3))
    _, stats = engine.generate(torch.tensor(PROMPTS[0]), 60, GREEDY, ctx=RequestContext(request_id="agree-0"))
    assert stats.histogram(3) == hist, (stats.chosen, hist)


def test_stock_eagle3_greedy_equals_non_speculative(ckpt, reference, tmp_path):
    """selector=eagle: SGLang's own EAGLE3 worker on the same path (CPU kernels included), for comparison."""
    srv = _server(ckpt, "t_rand", ["d0"], tmp_path / "eagle3.log", selector="eagle")
    try:
        assert srv.plan.algorithm == "EAGLE3"
        for ids in PROMPTS[:2]:
            out = _generate(srv, ids)
            assert out["output_ids"] == reference[tuple(ids)]
            assert "hedgespec_histogram" not in out["meta_info"] and out["meta_info"]["spec_verify_ct"] > 0
    finally:
        srv.stop()


def test_reference_engine_agrees_with_the_server(ckpt, reference, random_server):
    """The reference PyTorch engine, loading the same SGLang-format drafter directories, emits the same greedy
    tokens as the server (and as transformers)."""
    n, srv = random_server
    if n != 2:
        pytest.skip("runs once, on the 2-drafter server (servers are shared per pool size)")
    import torch
    from transformers import AutoModelForCausalLM

    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.engine.generate import SpeculativeEngine
    from hedgespec.selectors import make_selector
    from hedgespec.types import RequestContext

    model = AutoModelForCausalLM.from_pretrained(ckpt / "t_rand", dtype=torch.float32).eval()
    drafters = [Eagle3Drafter.load(ckpt / f"d{i}", model) for i in range(n)]
    engine = SpeculativeEngine(model, drafters, make_selector("hedgespec"), decoding("chain", 3))
    for j, ids in enumerate(PROMPTS[:2]):
        rid = f"parity-{j}"  # same request id on both sides: same per-request RNG stream in the selector
        out, stats = engine.generate(torch.tensor(ids), NEW_TOKENS, GREEDY, ctx=RequestContext(request_id=rid))
        served = _generate(srv, ids, rid=rid)
        assert out[len(ids) :].tolist() == served["output_ids"] == reference[tuple(ids)]
        # same γ definition + same selector => same drafter choices, round by round
        assert served["meta_info"]["hedgespec_histogram"] == stats.histogram(n), (served["meta_info"], stats.chosen)


def test_plugin_hook_targets_exist_in_this_sglang():
    """The HookRegistry targets of hedgespec.serving.plugin are real attributes of sglang 0.5.23."""
    import importlib

    from hedgespec.serving import plugin

    for dotted in (plugin._STREAMER_KEY, plugin._AUX_CONFIG, plugin._VALIDATE_REQUEST):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            break
        assert callable(obj), dotted
