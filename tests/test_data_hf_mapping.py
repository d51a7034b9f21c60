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
