"""Faults inside the HEDGESPEC server (CPU path): faulty drafters are dropped, a disconnected stream frees its state.

Each drafter fault is a real checkpoint (:data:`hedgespec.serving.tiny.FAULT_MODES`) that loads like any other
and fails only when it runs: ``nan`` (NaN weights), ``inf`` (+inf/−inf logits) and ``raise`` (its draft forward
raises ``IndexError``). The truth for every output is transformers' non-speculative greedy decoding of the target,
independent of SGLang. Two servers: ``[d0, d_nan, d_raise]`` (one healthy drafter left; also the disconnect
test) and ``[d_inf, d_raise]`` (every drafter fails). Marked ``serve`` like tests/test_serving_server.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import json
import re
import time
from pathlib import Path

import pytest
from _serve_helpers import assert_target_only, hf_greedy
from test_serving_server import NEW_TOKENS, PROMPTS, _generate, _needs_sglang, _server  # noqa: F401 - fixture

from hedgespec.selectors import make_selector
from hedgespec.serving.tiny import make_drafter, make_target
from hedgespec.types import RequestContext

pytestmark = [pytest.mark.serve, pytest.mark.timeout(900)]

NUM_STEPS = 3  # decoding.num_steps of tests/test_serving_server.py::_server
DROPPED = "dropped from the pool for the rest of this server's life"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fault-ckpt")
    make_target(root / "t_rand", seed=0)
    make_drafter(root / "d0", root / "t_rand", seed=0)
    for mode in ("nan", "inf", "raise"):
        make_drafter(root / f"d_{mode}", root / "t_rand", seed=1, mode=mode)
    return root


@pytest.fixture(scope="module")
def reference(ckpt) -> dict[tuple[int, ...], list[int]]:
    return hf_greedy(ckpt / "t_rand", PROMPTS, NEW_TOKENS)


@pytest.fixture(scope="module")
def one_left(ckpt, tmp_path_factory):
    """A server over ``[d0, d_nan, d_raise]`` and its log."""
    log = tmp_path_factory.mktemp("fault-log") / "one_left.log"
    srv = _server(ckpt, "t_rand", ["d0", "d_nan", "d_raise"], log)
    try:
        yield srv, log
    finally:
        srv.stop()


def _rid_whose_first_choice_is(drafter: int, n: int) -> str:
    """A request id whose HedgeSpec selector (seeded per request id) picks ``drafter`` in its first round."""
    for k in range(200):
        rid = f"fault-{k}"
        sel = make_selector("hedgespec")
        sel.begin_request(n, NUM_STEPS, RequestContext(request_id=rid))
        if int(sel.select().drafter) == drafter:
            return rid
    raise AssertionError(f"no request id among 200 picks drafter {drafter} first")


def _count(log: Path, pattern: str) -> int:
    return len(re.findall(pattern, log.read_text()))


def test_faulty_drafters_are_dropped_once_and_outputs_stay_the_targets(one_left, reference):
    srv, log = one_left
    # d_nan fails in its first draft-extend (the first prefill); d_raise fails the first time it drafts, which
    # this request id makes its first round (the server's own warm-up request may have dropped either already)
    first = _generate(srv, PROMPTS[0], rid=_rid_whose_first_choice_is(2, 3))
    with cf.ThreadPoolExecutor(8) as ex:
        rest = list(ex.map(lambda ids: (ids, _generate(srv, ids)), PROMPTS * 2))
    for ids, out in [(PROMPTS[0], first), *rest]:
        meta = out["meta_info"]
        assert out["output_ids"] == reference[tuple(ids)], ids
        assert meta["hedgespec_dropped"] == ["d_nan", "d_raise"]
        # every round was drafted by the healthy drafter (directly or as the substitute of a dropped choice)
        hist = meta["hedgespec_histogram"]
        assert hist[1] == hist[2] == 0 and hist[0] == meta["hedgespec_rounds"][0] == meta["spec_verify_ct"] > 0
    assert _count(log, rf"drafter 'd_nan' gave non-finite \(NaN/inf\) logits or hidden states [^;\n]*; {DROPPED}") == 1
    assert _count(log, rf"drafter 'd_raise' raised \w+: [^\n]* during drafting; {DROPPED}") == 1
    assert _count(log, "HEDGESPEC: drafter") == 2  # nothing else was dropped, nothing warned twice
    assert _count(log, "every drafter is dropped") == 0


def test_disconnected_stream_frees_its_state(one_left, reference):
    """A streaming client that closes after 2 chunks: SGLang aborts the request (its abort task runs 2 s after
    the disconnect), the worker frees the request's selector state and says so; no other state is left."""
    srv, log = one_left
    rid = "disconnect-0"
    body = {
        "input_ids": PROMPTS[0],
        "sampling_params": {"temperature": 0, "max_new_tokens": 900, "ignore_eos": True},
        "stream": True,
        "rid": rid,
    }
    conn = http.client.HTTPConnection(srv.plan.host, srv.plan.port, timeout=120)
    conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    chunks = 0
    while chunks < 2:
        line = resp.readline()
        assert line, "the stream ended before 2 chunks"
        chunks += line.startswith(b"data: {")
    resp.close()
    conn.close()
    pattern = (
        rf"HEDGESPEC: request {rid} was aborted \([^)]*\); its selector state is freed \((\d+) request states held\)"
    )
    deadline = time.monotonic() + 120
    while not (found := re.findall(pattern, log.read_text())) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert found == ["0"], f"no (or more than one) abort line for {rid} in {log}"
    # the server keeps serving, losslessly
    assert _generate(srv, PROMPTS[1])["output_ids"] == reference[tuple(PROMPTS[1])]


def test_every_drafter_failing_falls_back_to_target_only_decoding(ckpt, reference, tmp_path):
    log = tmp_path / "none_left.log"
    srv = _server(ckpt, "t_rand", ["d_inf", "d_raise"], log)
    try:
        with cf.ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda ids: (ids, _generate(srv, ids)), PROMPTS))
        outs.append((PROMPTS[0], _generate(srv, PROMPTS[0])))  # and after the fact, alone
    finally:
        srv.stop()
    assert_target_only(outs, reference, ["d_inf", "d_raise"])
    assert _count(log, rf"drafter 'd_inf' gave non-finite \(NaN/inf\) logits or hidden states [^;\n]*; {DROPPED}") == 1
    assert _count(log, rf"drafter 'd_raise' raised \w+: [^\n]* during drafting; {DROPPED}") == 1
    assert _count(log, "HEDGESPEC: every drafter is dropped; requests continue with target-only decoding") == 1
