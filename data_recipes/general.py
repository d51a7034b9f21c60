"""General (the generalist drafter's data): an even mix of the seven domain recipes.

Each domain contributes ``n // 7`` examples (the first ``n % 7`` domains one more), built by the domain's own
recipe with the same seed and source; the mix is shuffled with the seed. Ids keep the source domain
(``general-train-00012`` records come from e.g. ``sql``), and the manifest lists the per-domain counts.
Its eval split is the union of the domains' eval splits, so it is disjoint from every domain's train split.
"""

from __future__ import annotations

from .common import ALL_ROWS, TRAIN_DOMAINS, Example, RecipeInfo, SourceInfo, Split, rng_for
from .registry import get_recipe

INFO = RecipeInfo(
    name="general",
    description="even mix of python, math, biology, chemistry, medqa, cnndm, sql",
    offline=(SourceInfo("all offline domain sources", "see the seven domain recipes", "union of the domain licences"),),
    hf=(SourceInfo("all HF domain datasets", "see the seven domain recipes", "union of the domain licences"),),
)


def _shares(n: int) -> list[int]:
    k = len(TRAIN_DOMAINS)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _mix(source: str, n_train: int, n_eval: int, seed: int) -> Split:
    train: list[Example] = []
    evals: list[Example] = []
    shares = [ALL_ROWS] * len(TRAIN_DOMAINS) if n_train == ALL_ROWS else _shares(n_train)  # all: every domain's rows
    for dom, nt, ne in zip(TRAIN_DOMAINS, shares, _shares(n_eval)):
        rec = get_recipe(dom)
        part = (rec.build_offline if source == "offline" else rec.build_hf)(nt, ne, seed)
        train += [
            Example(e.prompt, e.answer, f"{dom}:{e.group}", f"{dom}:{e.key}", {"domain": dom}) for e in part.train
        ]
        evals += [Example(e.prompt, e.answer, f"{dom}:{e.group}", f"{dom}:{e.key}", {"domain": dom}) for e in part.eval]
    rng = rng_for("general", seed, "mix")
    rng.shuffle(train)
    rng.shuffle(evals)
    return Split(train=train, eval=evals)


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    return _mix("offline", n_train, n_eval, seed)


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    return _mix("hf", n_train, n_eval, seed)
