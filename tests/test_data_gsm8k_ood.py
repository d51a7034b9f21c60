"""The offline gsm8k eval set holds no GSM8K original whose GSM-Symbolic template the math recipe trains on."""

from __future__ import annotations

import pytest

from data_recipes import gsm8k, prepare, read_jsonl
from data_recipes import math as mathrec
from data_recipes.common import NotEnoughDataError


def _train_template_origins(seed: int, n_train: int) -> set[int]:
    # independent of gsm8k.py: the templates that actually produced math *training* examples (group "t<index>")
    temps = mathrec._templates()
    split = mathrec.build_offline(n_train, 20, seed)
    return {int(temps[int(e.group[1:])].id_orig) for e in split.train}


@pytest.mark.parametrize("seed", [0, 3])
def test_no_ood_item_comes_from_a_math_training_template(seed) -> None:
    trained = _train_template_origins(seed, 1200)
    temps = mathrec._templates()
    declared = {int(temps[i].id_orig) for i in mathrec.split_templates(seed)[0]}
    # some templates yield no valid draw; the training set covers most of the declared training templates
    assert trained <= declared and len(trained) >= 60 and len(declared) == len(temps) - mathrec.N_EVAL_TEMPLATES
    ood = gsm8k.build_offline(0, mathrec.N_EVAL_TEMPLATES, seed).eval
    ids = {int(e.key.rsplit("-", 1)[1]) for e in ood}
    assert len(ids) == mathrec.N_EVAL_TEMPLATES
    assert not ids & declared
    # the items are the originals themselves (question text), not new instances
    by_id = {o["id_orig"]: o["question"] for o in mathrec.originals()}
    assert all(e.prompt == by_id[int(e.key.rsplit("-", 1)[1])] for e in ood)


def test_prepared_default_gsm8k_set_is_decontaminated(tmp_path) -> None:
    prepare("gsm8k", data_dir=tmp_path, log=None)
    recs = read_jsonl(tmp_path / "offline" / "gsm8k" / "eval.jsonl")
    trained = _train_template_origins(0, 1200)
    by_q = {o["question"]: o["id_orig"] for o in mathrec.originals()}
    ids = {by_q[r["conversations"][0]["content"]] for r in recs}
    assert len(ids) == len(recs) == mathrec.N_EVAL_TEMPLATES and not ids & trained


def test_asking_for_more_than_the_heldout_originals_names_the_limit() -> None:
    with pytest.raises(NotEnoughDataError, match=r"n_eval=21 .* 20 eval examples .*source=hf"):
        gsm8k.build_offline(0, 21, 0)
