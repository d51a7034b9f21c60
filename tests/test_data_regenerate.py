"""Regeneration: resumable, progress, OpenAI-compatible server path and plain transformers path."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from data_recipes import DataRecipeError, prepare, read_jsonl, validate_record
from data_recipes.regenerate import _prompt_of, output_stem, prompt_tokens, regenerate


@pytest.fixture()
def sql_dir(tmp_path):
    return prepare("sql", n_train=6, n_eval=3, data_dir=tmp_path, log=None)["sql"]


def test_resumable_with_fake_generator(sql_dir) -> None:
    calls = []

    def gen(messages):
        calls.append(messages[0]["content"])
        return f"answer {len(calls)}"

    out = regenerate(sql_dir, generator=gen, max_examples=2, target_name="fake", progress=False)
    assert len(calls) == 2
    out = regenerate(sql_dir, generator=gen, max_examples=5, target_name="fake", progress=False)
    assert len(calls) == 5, "the first two were not regenerated again"
    recs = read_jsonl(out)
    src = read_jsonl(sql_dir / "train.jsonl")
    assert [r["id"] for r in recs] == [r["id"] for r in src[:5]]
    for r, s in zip(recs, src):
        validate_record(r)
        assert r["conversations"][0] == s["conversations"][0]
        assert r["conversations"][1]["content"].startswith("answer ")
    # a rebuild that reproduces train.jsonl keeps regen/
    prepare("sql", n_train=6, n_eval=3, data_dir=sql_dir.parents[1], log=None)
    assert (sql_dir / "regen" / "train.fake.jsonl").is_file()


@pytest.mark.parametrize("thinking", [None, False, True])
def test_server_path_openai_compatible(sql_dir, thinking) -> None:
    """The chat request a server gets; a target's thinking switch travels as chat_template_kwargs and names
    the answers' file, so answers of the two settings are never resumed into one file."""
    seen = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "SELECT 1;"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        out = regenerate(
            sql_dir,
            url=f"http://127.0.0.1:{srv.server_port}",
            model="m",
            max_examples=2,
            max_new_tokens=7,
            progress=False,
            target={"name": "qwen", "kind": "hf", "hf_id": "Qwen/Qwen3-8B", "thinking": thinking},
        )
    finally:
        srv.shutdown()
    assert [p for p, _ in seen] == ["/v1/chat/completions"] * 2
    stem = {None: "qwen", False: "qwen.nothink", True: "qwen.think"}[thinking]
    assert out.name == f"train.{stem}.jsonl"
    assert json.loads((out.parent / f"train.{stem}.json").read_text())["thinking"] == thinking
    for _p, body in seen:
        if thinking is None:
            assert "chat_template_kwargs" not in body
        else:
            assert body["chat_template_kwargs"] == {"enable_thinking": thinking}
    assert (
        seen[0][1]["max_tokens"] == 7
        and seen[0][1]["temperature"] == 0.0
        and seen[0][1]["messages"][0]["role"] == "user"
    )
    assert [r["conversations"][1]["content"] for r in read_jsonl(out)] == ["SELECT 1;"] * 2


def test_server_unreachable_is_clear(sql_dir) -> None:
    with pytest.raises(DataRecipeError, match="regen.url="):
        regenerate(sql_dir, url="http://127.0.0.1:9", max_examples=1, progress=False)


def test_transformers_path_with_tiny_target(sql_dir) -> None:
    import torch

    torch.set_num_threads(1)
    out = regenerate(sql_dir, target="tiny", max_examples=2, max_new_tokens=6, progress=False)
    assert out.name == "train.tiny.jsonl"
    recs = read_jsonl(out)
    skipped = (sql_dir / "regen" / "train.tiny.skipped").read_text().split()
    assert len(recs) + len(skipped) == 2
    for r in recs:
        validate_record(r)
    # the target cast to bfloat16 answers into its own file, never resumed into the float32 one
    cast = regenerate(
        sql_dir,
        target={"name": "tiny", "kind": "tiny", "compute_dtype": "bfloat16"},
        max_examples=2,
        max_new_tokens=6,
        progress=False,
    )
    assert cast.name == "train.tiny.bfloat16.jsonl" and out.is_file()
    assert json.loads((cast.parent / "train.tiny.bfloat16.json").read_text())["target"] == "tiny.bfloat16"


def test_missing_split_is_clear(tmp_path) -> None:
    with pytest.raises(DataRecipeError, match="does not exist; build the domain first"):
        regenerate(tmp_path, generator=lambda m: "x")


def test_batched_generate_matches_one_by_one(sql_dir) -> None:
    """Left-padded batches give the same greedy answers as one prompt at a time (second implementation)."""
    import torch

    from data_recipes.regenerate import transformers_generator

    torch.set_num_threads(1)
    gen = transformers_generator("tiny", max_new_tokens=8, temperature=0.0, seed=0)
    prompts = [
        [t for t in r["conversations"] if t["role"] == "user"][:1] for r in read_jsonl(sql_dir / "train.jsonl")[:4]
    ]
    assert len({len(p[0]["content"]) for p in prompts}) > 1, "prompts of different lengths exercise the padding"
    assert gen.batch(prompts) == [gen(p) for p in prompts]


def test_batched_regenerate_resumes_in_order(sql_dir) -> None:
    calls: list[int] = []

    def gen(messages):
        return "one " + messages[0]["content"][:5]

    def batch(many):
        calls.append(len(many))
        return ["" if i == 1 else "b " + m[0]["content"][:5] for i, m in enumerate(many)]

    gen.batch = batch
    out = regenerate(sql_dir, generator=gen, max_examples=5, batch_size=3, target_name="fake", progress=False)
    assert calls == [3, 2]
    src = read_jsonl(sql_dir / "train.jsonl")
    assert [r["id"] for r in read_jsonl(out)] == [src[i]["id"] for i in (0, 2, 3)]
    assert (sql_dir / "regen" / "train.fake.skipped").read_text().split() == [src[1]["id"], src[4]["id"]]
    regenerate(sql_dir, generator=gen, max_examples=6, batch_size=3, target_name="fake", progress=False)
    assert calls == [3, 2, 1], "only the one new example is generated on a rerun"
    with pytest.raises(DataRecipeError, match="regen.batch_size=0"):
        regenerate(sql_dir, generator=gen, max_examples=6, batch_size=0, target_name="fake", progress=False)


def test_server_batch_is_concurrent_and_in_prompt_order(sql_dir) -> None:
    """batch_size=N keeps N requests in flight (the server batches them) and writes answers in source order."""
    from http.server import ThreadingHTTPServer

    lock, state = threading.Lock(), {"now": 0, "peak": 0, "n": 0}
    gate = threading.Barrier(3, timeout=10)  # the first three requests only answer once all three arrived

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state["now"] += 1
                state["n"] += 1
                first = state["n"] <= 3
                state["peak"] = max(state["peak"], state["now"])
            if first:
                gate.wait()
            data = json.dumps({"choices": [{"message": {"content": "re: " + body["messages"][0]["content"][:40]}}]})
            with lock:
                state["now"] -= 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(data.encode())))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        out = regenerate(
            sql_dir, url=f"http://127.0.0.1:{srv.server_port}", max_examples=5, batch_size=3, progress=False
        )
    finally:
        srv.shutdown()
    assert state["peak"] == 3, "three requests were in flight at once"
    src = read_jsonl(sql_dir / "train.jsonl")[:5]
    recs = read_jsonl(out)
    assert [r["id"] for r in recs] == [s["id"] for s in src]
    for r, s in zip(recs, src):
        assert r["conversations"][-1]["content"] == "re: " + s["conversations"][0]["content"][:40]


def test_a_partial_last_record_is_regenerated_on_resume(sql_dir, tmp_path) -> None:
    """A run killed while writing leaves a record cut short; the rerun drops it and ends with the same file."""

    def gen(messages):
        return "answer to " + messages[0]["content"][:30]

    ref_dir = prepare("sql", n_train=6, n_eval=3, data_dir=tmp_path / "ref", log=None)["sql"]
    ref = regenerate(ref_dir, generator=gen, max_examples=5, target_name="fake", progress=False)
    out = regenerate(sql_dir, generator=gen, max_examples=3, target_name="fake", progress=False)
    whole = out.read_bytes()
    out.write_bytes(whole + ref.read_bytes()[len(whole) : len(whole) + 25])  # the 4th record, cut after 25 bytes
    with pytest.raises(ValueError):
        read_jsonl(out)  # what the resume would have choked on
    regenerate(sql_dir, generator=gen, max_examples=5, target_name="fake", progress=False)
    assert out.read_bytes() == ref.read_bytes()


KILLED_REGEN = """
import os, signal, sys
import data_recipes.regenerate as rg
real = rg.transformers_generator
def killing(*a, **k):
    gen, calls = real(*a, **k), [0]
    batch = gen.batch
    def second_kills(many):
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return batch(many)
    gen.batch = second_kills
    return gen
rg.transformers_generator = killing
rg.regenerate(sys.argv[1], target="tiny", max_examples=6, max_new_tokens=6, batch_size=2, progress=False)
"""


@pytest.mark.slow
def test_sigkill_during_regeneration_then_rerun_gives_the_same_answers(tmp_path) -> None:
    """SIGKILL while the second batch is being generated; the same call again ends with an uninterrupted run's file."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import torch

    torch.set_num_threads(1)
    kw = {"target": "tiny", "max_examples": 6, "max_new_tokens": 6, "batch_size": 2, "progress": False}
    ref = regenerate(prepare("sql", n_train=6, n_eval=3, data_dir=tmp_path / "ref", log=None)["sql"], **kw)
    sql = prepare("sql", n_train=6, n_eval=3, data_dir=tmp_path / "run", log=None)["sql"]
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)}
    env["OMP_NUM_THREADS"] = "1"
    run = subprocess.run([sys.executable, "-c", KILLED_REGEN, str(sql)], env=env, capture_output=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    out = sql / "regen" / "train.tiny.jsonl"
    skipped = sql / "regen" / "train.tiny.skipped"
    written = len(read_jsonl(out)) + len(skipped.read_text().split())
    assert written == 2, "the first batch was written before the kill, nothing after it"
    regenerate(sql, **kw)
    assert out.read_bytes() == ref.read_bytes()
    assert skipped.read_text() == (ref.parent / "train.tiny.skipped").read_text()


def _window_fake(calls: list[tuple[list[int], list[int]]]):
    """A generator whose prompt length is the prompt's word count and whose answer says which cap it got."""

    def gen(messages, max_new=None):
        return gen.batch([messages], None if max_new is None else [max_new])[0]

    def batch(many, max_new=None):
        calls.append(([gen.prompt_tokens(m) for m in many], list(max_new or [])))
        return [f"cap {c}" for c in (max_new or [None] * len(many))]

    gen.batch = batch
    gen.prompt_tokens = lambda messages: len(messages[0]["content"].split())
    return gen


def test_window_generates_only_what_the_window_reads(sql_dir) -> None:
    """fit to a window: shortest prompts first, each capped window - prompt + margin (at most max_new_tokens), prompts
    that fill the window skipped, answers in their own file; a rerun generates nothing again."""
    from data_recipes.regenerate import WINDOW_MARGIN

    src = read_jsonl(sql_dir / "train.jsonl")
    words = {r["id"]: len(r["conversations"][0]["content"].split()) for r in src}
    assert len(set(words.values())) > 2, "prompts of different lengths"
    window = sorted(words.values())[3]  # the two longest prompts (at least) fill the window
    calls: list = []
    gen = _window_fake(calls)
    kw = {"generator": gen, "target_name": "fake", "progress": False, "max_new_tokens": 40}
    out = regenerate(sql_dir, max_examples=6, batch_size=2, window=window, **kw)
    assert out.name == f"train.fake.w{window}.jsonl"
    kept = sorted((i for i in range(6) if words[src[i]["id"]] < window), key=lambda i: words[src[i]["id"]])
    lengths = [words[src[i]["id"]] for i in kept]
    assert [n for c in calls for n in c[0]] == lengths, "shortest first"
    assert [n for c in calls for n in c[1]] == [min(40, window - n + WINDOW_MARGIN) for n in lengths]
    recs = read_jsonl(out)
    assert [r["id"] for r in recs] == [src[i]["id"] for i in kept]
    skipped = (sql_dir / "regen" / f"train.fake.w{window}.skipped").read_text().split()
    assert sorted(skipped) == sorted(r["id"] for r in src if words[r["id"]] >= window) and skipped
    info = json.loads((sql_dir / "regen" / f"train.fake.w{window}.json").read_text())
    assert info["window"] == window and info["records"] == len(kept)
    n_calls = len(calls)
    regenerate(sql_dir, max_examples=6, batch_size=2, window=window, **kw)
    assert len(calls) == n_calls, "nothing generated again"
    regenerate(sql_dir, max_examples=2, batch_size=1, **kw)  # whole answers: another file, the generator's own cap
    assert (sql_dir / "regen" / "train.fake.jsonl").is_file() and calls[-1][1] == []


@pytest.mark.parametrize("bad", [0, -3, "256", True, 2.5])
def test_window_must_be_a_positive_token_count(sql_dir, bad) -> None:
    with pytest.raises(DataRecipeError, match="regen.window="):
        regenerate(sql_dir, generator=lambda m: "x", target_name="fake", progress=False, window=bad)
    assert not (sql_dir / "regen").exists() or not list((sql_dir / "regen").glob("*.jsonl")), "nothing written"


def _check_windows(tok, domain_dir, window: int, **kw) -> None:
    """Regenerate whole and cut to ``window``; compare what training's own tokenisation (tokenize_conversation) keeps:
    every cut answer's window has exactly the token ids and loss mask of the whole answer's window, some answers were
    cut, and a skipped prompt had no supervised token in the window."""
    import torch

    from hedgespec.training.features import tokenize_conversation

    whole = {r["id"]: r for r in read_jsonl(regenerate(domain_dir, **kw))}
    cut = {r["id"]: r for r in read_jsonl(regenerate(domain_dir, window=window, **kw))}
    stem = output_stem(kw["target"], None, None, window)
    skipped = (domain_dir / "regen" / f"train.{stem}.skipped").read_text().split()
    assert whole and cut and set(cut) | set(skipped) >= set(whole)
    shorter = 0
    for rid, rec in cut.items():
        if rid not in whole:
            continue
        a = tokenize_conversation(tok, whole[rid]["conversations"], window)
        b = tokenize_conversation(tok, rec["conversations"], window)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), rid
        shorter += len(rec["conversations"][-1]["content"]) < len(whole[rid]["conversations"][-1]["content"])
    assert shorter, "some answers were cut"
    for rid in skipped:
        if rid in whole:
            assert int(tokenize_conversation(tok, whole[rid]["conversations"], window)[1].sum()) == 0, rid


def test_cut_answers_give_training_the_same_window(sql_dir) -> None:
    """A generator that answers with the first ``cap`` tokens of a long text (what greedy decoding to a cap gives),
    counted and decoded with the tiny target's tokenizer."""
    from hedgespec.models import load_tokenizer

    tok = load_tokenizer("tiny")
    text = " ".join(f"SELECT col{i} FROM t{i % 7} WHERE x > {i};" for i in range(200))
    ids = tok(text, add_special_tokens=False)["input_ids"]

    def gen(messages, max_new=None):
        return gen.batch([messages], None if max_new is None else [max_new])[0]

    def batch(many, max_new=None):
        caps = max_new or [300] * len(many)
        return [tok.decode(ids[len(m[0]["content"]) % 5 : c + len(m[0]["content"]) % 5]) for m, c in zip(many, caps)]

    gen.batch, gen.prompt_tokens = batch, lambda m: prompt_tokens(tok, m)
    lengths = sorted(gen.prompt_tokens(_prompt_of(r)) for r in read_jsonl(sql_dir / "train.jsonl"))
    window = lengths[len(lengths) // 2] + 40  # the longer prompts' answers are cut, the longest may fill the window
    kw = {"target": "tiny", "generator": gen, "max_examples": 6, "max_new_tokens": 300, "batch_size": 3}
    _check_windows(tok, sql_dir, window, progress=False, **kw)


@pytest.mark.slow
def test_smollm2_cut_answers_give_training_the_same_window(tmp_path) -> None:
    """The embedded target's own greedy answers (batched generate with per-row caps), on CNN/DM's long prompts."""
    import torch

    from hedgespec.models import load_tokenizer

    torch.set_num_threads(2)
    cnndm = prepare("cnndm", n_train=8, n_eval=3, data_dir=tmp_path, log=None)["cnndm"]
    kw = {"target": "smollm2", "max_examples": 8, "max_new_tokens": 64, "batch_size": 4, "progress": False}
    _check_windows(load_tokenizer("smollm2"), cnndm, 256, **kw)


def test_per_row_caps_equal_each_prompt_alone(sql_dir) -> None:
    """One batched call with a cap per row answers as each prompt decoded alone with its cap (tiny target)."""
    import torch

    from data_recipes.regenerate import transformers_generator

    torch.set_num_threads(1)
    gen = transformers_generator("tiny", max_new_tokens=48, temperature=0.0, seed=0)
    prompts = [_prompt_of(r) for r in read_jsonl(sql_dir / "train.jsonl")[:3]]
    assert gen.batch(prompts, max_new=[5, 48, 17]) == [gen(p, max_new=c) for p, c in zip(prompts, (5, 48, 17))]
