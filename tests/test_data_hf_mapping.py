"""source=hf field mapping, checked offline with fake Hugging Face rows (no network, no datasets download)."""

from __future__ import annotations

import json
import zipfile

import pytest

from data_recipes import DOMAINS, prepare, read_jsonl, validate_record
from data_recipes import hf as hfsrc

FAKE_ROWS = {
    "b-mc2/sql-create-context": lambda i: {
        "question": f"How many heads of departments are older than {i}?",
        "context": "CREATE TABLE head (age INTEGER)",
        "answer": f"SELECT COUNT(*) FROM head WHERE age > {i}",
    },
    "iamtarun/python_code_instructions_18k_alpaca": lambda i: {
        "instruction": f"Write a function returning {i}.",
        "input": "" if i % 2 else "x",
        "output": f"def f():\n    return {i}",
        "prompt": "",
    },
    "openai/gsm8k": lambda i: {
        "question": f"Tom has {i} apples and buys 2 more. How many?",
        "answer": f"{i}+2=<<{i}+2={i + 2}>>{i + 2}\n#### {i + 2}",
    },
    "GBaker/MedQA-USMLE-4-options": lambda i: {
        "question": f"A {20 + i % 50}-year-old man (case {i}) has chest pain. Diagnosis?",
        "options": {"A": "MI", "B": "GERD", "C": "PE", "D": "Costochondritis"},
        "answer_idx": "A",
        "answer": "MI",
    },
    "abisee/cnn_dailymail": lambda i: {
        "article": f"Story number {i}. It rained. People were wet.",
        "highlights": f"Story {i}: rain.",
        "id": f"a{i}",
    },
    "openai/openai_humaneval": lambda i: {
        "task_id": f"HumanEval/{i}",
        "prompt": f'def f{i}(x):\n    """Return x."""\n',
        "canonical_solution": "    return x\n",
        "test": "",
        "entry_point": f"f{i}",
    },
}


class FakeDS(list):
    def select(self, idx):
        return FakeDS(self[i] for i in idx)


@pytest.fixture()
def fake_hub(monkeypatch, tmp_path):
    def load(domain, ident, config=None, split="train"):
        return FakeDS(FAKE_ROWS[ident](i) for i in range(400))

    def download_file(domain, ident, filename):
        path = tmp_path / filename
        with zipfile.ZipFile(path, "w") as z:
            for i in range(400):
                z.writestr(
                    f"{i:04d}.json",
                    json.dumps({"message_1": f"{domain} question {i}?", "message_2": f"{domain} answer {i}."}),
                )
        return str(path)

    monkeypatch.setattr(hfsrc, "load", load)
    monkeypatch.setattr(hfsrc, "download_file", download_file)


@pytest.mark.parametrize("domain", DOMAINS)
def test_hf_recipes_map_fields_to_conversations(fake_hub, tmp_path, domain) -> None:
    out = prepare(domain, source="hf", n_train=21, n_eval=7, data_dir=tmp_path / "d", log=None)[domain]
    man = json.loads((out / "manifest.json").read_text())
    assert man["source"] == "hf" and all(
        "huggingface.co" in s["origin"] or "recipes" in s["origin"] for s in man["sources"]
    )
    recs = read_jsonl(out / "eval.jsonl") + (read_jsonl(out / "train.jsonl") if (out / "train.jsonl").exists() else [])
    for r in recs:
        validate_record(r)
    assert len(recs) == (7 if man["eval_only"] else 28)


# ------------------------------------------------------------------ local copies and pinned revisions
FIXTURES = {
    "sql": ("b-mc2/sql-create-context", "tests/fixtures/hf/sql-create-context"),
    "math": ("openai/gsm8k", "tests/fixtures/hf/gsm8k"),
}


@pytest.mark.parametrize("domain", sorted(FIXTURES))
def test_local_copy_is_loaded_with_datasets_without_the_hub(tmp_path, monkeypatch, domain) -> None:
    """A local copy in the dataset's own format goes through ``datasets`` (real files, no fake), with no hub
    request, and the manifest says where the rows came from."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub request would fail
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds_cache"))
    ident, path = FIXTURES[domain]
    out = prepare(domain, source="hf", n_train=8, n_eval=2, data_dir=tmp_path, log=None, hf={"paths": {ident: path}})
    rows = read_jsonl(out[domain] / "train.jsonl")
    assert len(rows) == 8
    for r in rows:
        validate_record(r)
    src = [json.loads(line) for line in open(f"{path}/train.jsonl")]
    answers = {s["answer"] for s in src}
    got = {r["conversations"][-1]["content"].removeprefix("```sql\n").removesuffix("\n```") for r in rows}
    assert got <= answers  # every training answer is a row of the local copy
    manifest = json.loads((out[domain] / "manifest.json").read_text())
    assert manifest["hf"] == {"revisions": {}, "paths": {ident: path}}


def test_pinned_revision_reaches_datasets(tmp_path, monkeypatch) -> None:
    """The real ``hfsrc.load`` with ``datasets.load_dataset`` replaced: the pinned revision is what it is given."""
    import sys
    import types

    seen = []

    def load_dataset(ident, config=None, split=None, **kw):
        seen.append((ident, config, split, kw.get("revision")))
        return FakeDS(FAKE_ROWS[ident](i) for i in range(400))

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setattr(hfsrc, "check_reachable", lambda domain, ident: None)
    rev = {"revisions": {"b-mc2/sql-create-context": "v1.0"}}
    out = prepare("sql", source="hf", n_train=4, n_eval=2, data_dir=tmp_path, log=None, hf=rev)
    assert seen == [("b-mc2/sql-create-context", None, "train", "v1.0")]
    assert json.loads((out["sql"] / "manifest.json").read_text())["hf"] == {**rev, "paths": {}}
    seen.clear()
    prepare("sql", source="hf", n_train=4, n_eval=2, data_dir=tmp_path, log=None)
    assert seen == [("b-mc2/sql-create-context", None, "train", None)]  # unpinned: the hub's head


@pytest.mark.parametrize(
    ("hf", "match"),
    [
        (
            {"paths": {"b-mc2/sql-create-context": "no/such/dir"}},
            r"hf.paths\['b-mc2/sql-create-context'\]='no/such/dir'",
        ),
        ({"paths": {"x/y": "tests/fixtures/hf/gsm8k"}, "revisions": {"x/y": "main"}}, r"both a revision and a local"),
        ({"path": {}}, r"hf has unknown keys \['path'\]"),
    ],
)
def test_bad_hub_options_are_named_and_nothing_is_written(tmp_path, hf, match) -> None:
    with pytest.raises(ValueError, match=match):
        prepare("sql", source="hf", n_train=4, n_eval=2, data_dir=tmp_path, log=None, hf=hf)
    assert not any(tmp_path.iterdir())
    assert hfsrc.options() == {"revisions": {}, "paths": {}}  # nothing leaks out of a failed build


def test_n_train_all_takes_every_training_row(fake_hub, tmp_path) -> None:
    """``n_train=all``: every row outside the held-out groups (the fake hub has 400 per dataset); the generalist
    then trains on the union of the experts' rows, with the same held-out groups."""
    out = prepare(["sql", "general"], source="hf", n_train="all", n_eval=7, data_dir=tmp_path, log=None)
    sql = read_jsonl(out["sql"] / "train.jsonl")
    sql_eval = read_jsonl(out["sql"] / "eval.jsonl")
    assert 300 < len(sql) < 400 and len(sql_eval) == 7  # ~10% of the groups are held out
    assert json.loads((out["sql"] / "manifest.json").read_text())["n_train"] == len(sql)
    general = read_jsonl(out["general"] / "train.jsonl")
    sql_in_general = {r["conversations"][0]["content"] for r in general if r["id"].endswith("-sql")}
    assert sql_in_general == {r["conversations"][0]["content"] for r in sql}
    with pytest.raises(ValueError, match=r"n_train=all needs source=hf"):
        prepare("sql", source="offline", n_train="all", data_dir=tmp_path / "off", log=None)
    with pytest.raises(ValueError, match=r"n_train='most': expected a count or all"):
        prepare("sql", source="hf", n_train="most", data_dir=tmp_path / "x", log=None)
