"""The ``paraphrase`` prompt variant rewrites each recipe's task wording but keeps the task, and the router-shift
script scores a router's predictions correctly (paper Table 4 measurement)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

from data_recipes import TRAIN_DOMAINS, VARIANTS, apply_variant, prepare, read_jsonl
from data_recipes.python import PROMPT_HEAD
from data_recipes.variants import PARAPHRASES, detect_template, paraphrase

SMALL = {"n_train": 24, "n_eval": 8}
ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("router_shift", ROOT / "scripts" / "router_shift.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for d in TRAIN_DOMAINS:
        prepare(d, data_dir=root, log=None, variant=None, **SMALL)
    return root


def _prompts(root: Path, domain: str) -> list[str]:
    out = []
    for split in ("train", "eval"):
        out += [r["conversations"][0]["content"] for r in read_jsonl(root / "offline" / domain / f"{split}.jsonl")]
    return out


def _all_phrasings(prompt: str, domain: str) -> list[str]:
    return [paraphrase(prompt, phrasing=j) for j in range(len(PARAPHRASES[domain][1]))]


@pytest.mark.parametrize("domain", TRAIN_DOMAINS)
def test_every_recipe_prompt_is_recognised_as_its_domain(data, domain) -> None:
    prompts = _prompts(data, domain)
    assert len(prompts) == SMALL["n_train"] + SMALL["n_eval"]
    assert [detect_template(p)[0] for p in prompts] == [domain] * len(prompts)


@pytest.mark.parametrize("domain", TRAIN_DOMAINS)
def test_every_domain_has_at_least_two_distinct_phrasings_and_each_rewrites(data, domain) -> None:
    assert len(PARAPHRASES[domain][1]) >= 2
    for p in _prompts(data, domain):
        outs = _all_phrasings(p, domain)
        assert len(set(outs)) >= 2, p
        assert p not in outs and all(o.strip() for o in outs)


def _numbers(text: str) -> list[str]:
    return sorted(re.findall(r"\d+(?:\.\d+)?", text))


def test_sql_keeps_question_tables_and_columns_in_prose(data) -> None:
    for p in _prompts(data, "sql"):
        question = p.split("answers the question: ", 1)[1]
        tables = re.findall(r"CREATE TABLE (\w+) \(", p)
        columns = re.findall(r"^  (\w+) [A-Z]+", p, re.M)
        refs = re.findall(r"REFERENCES (\w+)\((\w+)\)", p)
        assert tables and columns
        for out in _all_phrasings(p, "sql"):
            assert "CREATE TABLE" not in out and "Write a SQL query" not in out
            assert question in out
            assert all(re.search(rf"\b{t}\b", out) for t in tables)
            assert all(re.search(rf"\b{c}\b", out) for c in columns)
            assert all(f"{t}.{c}" in out for t, c in refs)
            assert out.count("primary key") == p.count("PRIMARY KEY")


def test_math_keeps_every_sentence_and_number(data) -> None:
    for p in _prompts(data, "math"):
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z$£€0-9])", p.strip())
        for out in _all_phrasings(p, "math"):
            assert all(s in out for s in sentences), (p, out)
            assert _numbers(out) == _numbers(p)


def test_python_keeps_name_arguments_and_docstring(data) -> None:
    for p in _prompts(data, "python"):
        code = p.split("```python\n", 1)[1].rsplit("```", 1)[0]
        fn = ast.parse(code).body[0]
        doc = fn.body[0]  # the docstring's lines as written in the stub, without the quotes
        raw = code.splitlines()[doc.lineno - 1 : doc.end_lineno]
        doc_lines = [ln for ln in (re.sub(r'^r?("""|\'\'\')|("""|\'\'\')$', "", x.strip()).strip() for x in raw) if ln]
        for out in _all_phrasings(p, "python"):
            assert PROMPT_HEAD.strip() not in out
            assert fn.name in out and all(re.search(rf"\b{a.arg}\b", out) for a in fn.args.args)
            assert all(ln in out for ln in doc_lines)
        # at least one phrasing describes the stub in prose instead of quoting the code
        assert any("```" not in out and "def " not in out for out in _all_phrasings(p, "python"))


def test_biology_chemistry_medqa_cnndm_keep_their_content(data) -> None:
    for p in _prompts(data, "biology"):
        term = re.search(r"'([^']+)'|during (.+)\.$|^What is (?:the )?(.+?)(?: in biology)?\?$", p)
        assert term, p
        name = next(g for g in term.groups() if g)
        ids = re.findall(r"GO:\d+", p)
        for out in _all_phrasings(p, "biology"):
            assert name.lower() in out.lower() and all(i in out for i in ids)
    for p in _prompts(data, "chemistry"):
        kind, parts = detect_template(p)
        for out in _all_phrasings(p, "chemistry"):
            assert parts["n"] in out and (parts.get("f") or "") in out and out != p
    for p in _prompts(data, "medqa"):
        options = re.findall(r"^[A-D]\. (.+)$", p, re.M)
        findings = re.search(r" with (.+?)\.(?: Family| There| Which)", p)[1]
        age = re.match(r"An? (.+?) (?:is|presents)", p)[1]
        assert len(options) == 4
        for out in _all_phrasings(p, "medqa"):
            assert "Which of the following is the most likely diagnosis" not in out
            assert all(o in out for o in options) and findings in out and age in out
    for p in _prompts(data, "cnndm"):
        head, article = p.split("\n\n", 1)
        article = article.removeprefix("Article:\n")
        for out in _all_phrasings(p, "cnndm"):
            assert article in out and head not in out


def test_paraphrase_is_deterministic_and_the_seed_draws_the_phrasing(data) -> None:
    for domain in TRAIN_DOMAINS:
        p = _prompts(data, domain)[0]
        assert apply_variant(p, "paraphrase", 3) == apply_variant(p, "paraphrase", 3) == paraphrase(p, 3)
        drawn = {paraphrase(p, s) for s in range(40)}
        assert drawn <= set(_all_phrasings(p, domain))
        assert len(drawn) >= 2  # 40 seeds, >= 2 equally likely phrasings: all equal has probability <= 2**-39


def test_unrecognised_prompt_keeps_its_text_and_bad_variant_names_itself() -> None:
    text = "Tell me a joke about penguins."
    assert detect_template(text)[0] is None
    assert all(text in paraphrase(text, s) for s in range(5))
    assert "paraphrase" in VARIANTS
    with pytest.raises(ValueError, match=r"variant='paraphrse' is unknown; expected one of .*paraphrase"):
        apply_variant(text, "paraphrse")


def test_router_accuracy_on_a_hand_made_case() -> None:
    acc = _load_script().router_accuracy
    truth = ["sql", "sql", "sql", "math", "math", "python"]
    pred = ["sql", "math", "sql", "math", "python", "cnndm"]
    r = acc(pred, truth)
    assert r["accuracy"] == pytest.approx(3 / 6) and r["n"] == 6
    assert r["per_domain"] == pytest.approx({"math": 1 / 2, "python": 0.0, "sql": 2 / 3})
    assert r["confusion"] == {"math": {"math": 1, "python": 1}, "python": {"cnndm": 1}, "sql": {"math": 1, "sql": 2}}
    with pytest.raises(ValueError, match="equally long"):
        acc(pred[:2], truth)


@pytest.mark.slow  # imports torch (hedgespec.build) and trains the router: ~10-20 s on 2 busy cores
def test_router_shift_script_writes_every_row(data, tmp_path) -> None:
    pytest.importorskip("sklearn")
    out = tmp_path / "acc.json"
    _load_script().main(["--data-dir", str(data), "--n-eval", "4", "--out", str(out)])
    res = json.loads(out.read_text())
    assert set(VARIANTS) | {"original", "paraphrase[0]", "paraphrase[1]"} <= set(res["rows"])
    assert all(r["n"] == 4 * len(TRAIN_DOMAINS) for r in res["rows"].values())
    assert res["router"]["n_train"] == SMALL["n_train"] * len(TRAIN_DOMAINS)
    assert set(res["eval_sha256"]) == set(TRAIN_DOMAINS)
