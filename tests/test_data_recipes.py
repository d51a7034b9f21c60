"""Every recipe builds offline at a small size in seconds, with a valid schema, disjoint splits and a manifest."""

from __future__ import annotations

import json
import time

import pytest

from data_recipes import DOMAINS, EVAL_ONLY_DOMAINS, TRAIN_DOMAINS, apply_variant, prepare, read_jsonl, validate_record
from data_recipes.common import normalise_prompt, sha256_file

SMALL = {"n_train": 24, "n_eval": 8}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    times = {}
    for d in DOMAINS:
        t = time.perf_counter()
        prepare(d, data_dir=root, log=None, **SMALL)
        times[d] = time.perf_counter() - t
    return root, times


@pytest.mark.parametrize("domain", DOMAINS)
def test_recipe_builds_fast_with_valid_schema(built, domain) -> None:
    root, times = built
    assert times[domain] < 30, f"{domain} took {times[domain]:.1f}s"
    out = root / "offline" / domain
    man = json.loads((out / "manifest.json").read_text())
    evals = read_jsonl(out / "eval.jsonl")
    assert len(evals) == SMALL["n_eval"] == man["n_eval"]
    if domain in EVAL_ONLY_DOMAINS:
        assert not (out / "train.jsonl").exists() and man["n_train"] == 0
        train = []
    else:
        train = read_jsonl(out / "train.jsonl")
        assert len(train) == SMALL["n_train"] == man["n_train"]
    for rec in train + evals:
        validate_record(rec)
        assert [t["role"] for t in rec["conversations"]] == ["user", "assistant"]
    assert len({r["id"] for r in train + evals}) == len(train) + len(evals)
    # train and eval prompts are disjoint
    assert not {normalise_prompt(r["conversations"][0]["content"]) for r in train} & {
        normalise_prompt(r["conversations"][0]["content"]) for r in evals
    }
    # manifest: counts, sources with licences, sha256 of every file
    assert man["domain"] == domain and man["source"] == "offline" and man["sources"]
    assert all(s["licence"] for s in man["sources"])
    for name, info in man["files"].items():
        assert sha256_file(out / name) == info["sha256"]
    variant = read_jsonl(out / "eval_two_answers.jsonl")
    assert [r["id"] for r in variant] == [r["id"] for r in evals]
    for v, e in zip(variant, evals):
        assert v["conversations"][0]["content"] == apply_variant(e["conversations"][0]["content"], "two_answers")
        assert v["conversations"][0]["content"] != e["conversations"][0]["content"]


def test_general_mixes_all_train_domains(built) -> None:
    root, _ = built
    man = json.loads((root / "offline" / "general" / "manifest.json").read_text())
    assert set(man["mix"]) == set(TRAIN_DOMAINS) and sum(man["mix"].values()) == SMALL["n_train"]
    assert {s["domain"] for s in man["sources"]} == set(TRAIN_DOMAINS)
    ids = [r["id"] for r in read_jsonl(root / "offline" / "general" / "train.jsonl")]
    assert {i.rsplit("-", 1)[1] for i in ids} == set(TRAIN_DOMAINS)


def test_general_eval_disjoint_from_every_domain_train(built) -> None:
    root, _ = built
    gen_eval = {
        normalise_prompt(r["conversations"][0]["content"])
        for r in read_jsonl(root / "offline" / "general" / "eval.jsonl")
    }
    for d in TRAIN_DOMAINS:
        tr = {
            normalise_prompt(r["conversations"][0]["content"]) for r in read_jsonl(root / "offline" / d / "train.jsonl")
        }
        assert not gen_eval & tr, d


@pytest.mark.parametrize("domain", ["sql", "medqa", "python"])
def test_deterministic_for_a_seed(tmp_path, domain) -> None:
    a = prepare(domain, data_dir=tmp_path / "a", log=None, **SMALL)[domain]
    b = prepare(domain, data_dir=tmp_path / "b", log=None, **SMALL)[domain]
    c = prepare(domain, data_dir=tmp_path / "c", seed=1, log=None, **SMALL)[domain]
    assert sha256_file(a / "train.jsonl") == sha256_file(b / "train.jsonl")
    assert sha256_file(a / "eval.jsonl") == sha256_file(b / "eval.jsonl")
    assert sha256_file(a / "train.jsonl") != sha256_file(c / "train.jsonl")


def test_prompts_are_shaped_like_the_domain_task(built) -> None:
    root, _ = built
    first = lambda d, s="train": read_jsonl(root / "offline" / d / f"{s}.jsonl")  # noqa: E731
    assert all(
        "```python\ndef " in r["conversations"][0]["content"]
        or "```python\nasync def " in r["conversations"][0]["content"]
        for r in first("python")
    )
    assert all("####" in r["conversations"][1]["content"] for r in first("math") + first("gsm8k", "eval"))
    assert all("CREATE TABLE" in r["conversations"][0]["content"] for r in first("sql"))
    assert all(
        "\nA. " in r["conversations"][0]["content"] and "\nD. " in r["conversations"][0]["content"]
        for r in first("medqa")
    )
    assert all(r["conversations"][1]["content"].startswith("The answer is ") for r in first("medqa"))
    assert all(
        "news" in r["conversations"][0]["content"].lower() or "article" in r["conversations"][0]["content"].lower()
        for r in first("cnndm")
    )
    assert all("def " in r["conversations"][0]["content"] for r in first("humaneval", "eval"))
