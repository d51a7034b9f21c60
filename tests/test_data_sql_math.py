"""Domain-specific truths: SQL answers execute and return rows; Math keeps GSM8K test items out of training."""

from __future__ import annotations

import re

from data_recipes import math as mathrec
from data_recipes import sql as sqlrec
from data_recipes.common import normalise_prompt


def test_every_sql_answer_executes_and_returns_rows() -> None:
    split = sqlrec.build_offline(300, 40, seed=0)
    con = sqlrec.build_chinook()
    for ex in split.train + split.eval:
        m = re.fullmatch(r"```sql\n(.*);\n```", ex.answer, re.S)
        assert m, ex.answer
        rows = con.execute(m.group(1)).fetchall()
        assert rows and any(v not in (None, 0) for r in rows for v in r), ex.key
        # the schema in the prompt covers every table the query uses
        for table in re.findall(r"(?:FROM|JOIN)\s+(\w+)", m.group(1)):
            assert f"CREATE TABLE {table} (" in ex.prompt, (table, ex.key)


def test_chinook_row_counts_match_the_fixture() -> None:
    con = sqlrec.build_chinook()
    counts = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in sqlrec.SCHEMA}
    assert counts["tracks"] == 3503 and counts["artists"] == 275 and counts["invoice_items"] == 2240
    assert counts["playlist_track"] == 8715


def test_math_keeps_gsm8k_test_originals_out_of_training() -> None:
    originals = mathrec.originals()
    assert len(originals) == 100 and all("####" in o["answer"] for o in originals)
    banned = {normalise_prompt(o["question"]) for o in originals}
    split = mathrec.build_offline(400, 40, seed=0)
    assert not banned & {normalise_prompt(e.prompt) for e in split.train + split.eval}
    # eval prompts come from held-out templates
    assert not {e.group for e in split.train} & {e.group for e in split.eval}
    for e in split.train:
        final = e.answer.rsplit("####", 1)[1].strip()
        assert re.fullmatch(r"-?[\d,]+(\.\d+)?", final), e.answer


def test_math_calculator_annotations_are_correct() -> None:
    split = mathrec.build_offline(200, 10, seed=0)
    checked = 0
    for e in split.train:
        for expr, res in re.findall(r"<<([^=<>]+)=([^<>]+)>>", e.answer):
            if re.fullmatch(r"[\d.+\-*/() ]+", expr) and re.fullmatch(r"-?[\d.]+", res.strip()):
                assert abs(eval(expr) - float(res)) < 1e-2 * max(1.0, abs(float(res))), (expr, res)  # noqa: S307
                checked += 1
    assert checked > 100
