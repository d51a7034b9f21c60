"""backend=server against a stand-in HTTP server that answers SGLang's /generate like the HedgeSpec plugin."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _bench_helpers import compose_bench

from hedgespec.bench.metrics import validate_result
from hedgespec.bench.runners import run_bench


class _Handler(BaseHTTPRequestHandler):
    selector = "hedgespec"
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        n = body["sampling_params"]["max_new_tokens"]
        out = {
            "text": "x" * n,
            "meta_info": {
                "prompt_tokens": 7,
                "completion_tokens": n,
                "spec_verify_ct": 4,
                "spec_accept_length": n / 4,
                "hedgespec_histogram": [1, 0, 3, 0],
                "hedgespec_weights": [0.1, 0.0, 0.9, 0.0],
                "hedgespec_selector": [self.selector],
                "hedgespec_rounds": [4],
            },
        }
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):  # quiet
        return None


@pytest.fixture()
def server():
    _Handler.seen = []
    _Handler.selector = "hedgespec"
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _cfg(url, *extra):
    return compose_bench(["backend=server", f"backend.url={url}", "workload=prompts", "max_new_tokens=12", *extra])


def test_server_backend_reads_meta_info(server):
    res = run_bench(_cfg(server, "backend.concurrency=2"))
    validate_result(res)
    assert res["backend"] == "server" and res["aggregate"]["n_requests"] == 3
    q = res["requests"][0]
    assert q["mat"] == 3.0 and q["rounds"] == 4 and q["histogram"] == [1, 0, 3, 0] and q["regret"] is None
    assert res["aggregate"]["mat"] == pytest.approx(3.0) and res["aggregate"]["throughput_tokens_per_s"] > 0
    assert res["aggregate"]["concurrency"] == 2
    sent = _Handler.seen[0]
    assert sent["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 12, "ignore_eos": False}
    assert sent["text"].startswith("<|im_start|>user\n")  # the target's chat template was applied


def test_server_selector_mismatch_and_unreachable(server):
    _Handler.selector = "ucbspec"
    with pytest.raises(ValueError, match="serves selector 'ucbspec' but selector=hedgespec was requested"):
        run_bench(_cfg(server))
    with pytest.raises(ValueError, match="cannot reach http://127.0.0.1:9/generate"):
        run_bench(_cfg("http://127.0.0.1:9", "backend.timeout_s=5"))
    with pytest.raises(ValueError, match="need backend=engine"):
        run_bench(_cfg(server, "oracle_probe=true"))
