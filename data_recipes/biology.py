"""Biology (Gene Ontology question answering).

offline: ``GO.sqlite`` from the Debian package ``r-bioc-go.db`` (43 559 GO terms with curated definitions and
``is_a``/``part_of`` parents), unpacked by ``scripts/install.d/20-data.sh``. Each term yields one question in
one of several phrasings ("What is X?", "Which biological process ...", "Where in the cell ...") and an answer
built from its definition, its ontology (biological process / molecular function / cellular component),
its parents and synonyms. Split by GO term.
hf: ``camel-ai/biology`` (20 k GPT-4 Q/A in ``biology.zip``; ``message_1`` -> ``message_2``).
"""

from __future__ import annotations

import json
import re
import sqlite3
import zipfile

from . import hf as hfsrc
from .common import Example, RecipeInfo, SourceInfo, Split, rng_for, split_by_group
from .sources import go_sqlite

INFO = RecipeInfo(
    name="biology",
    description="Gene Ontology term questions answered from curated GO definitions and parents",
    offline=(
        SourceInfo(
            "Gene Ontology (GO.db 3.16)",
            "Debian r-bioc-go.db 3.16.0-1 (GO.sqlite)",
            "GO content CC-BY-4.0; package Artistic-2.0",
        ),
    ),
    hf=(SourceInfo("camel-ai/biology", "huggingface.co/datasets/camel-ai/biology (biology.zip)", "CC-BY-NC-4.0"),),
)
ONTO = {"BP": "biological process", "MF": "molecular function", "CC": "cellular component"}
QUESTIONS = {
    "BP": [
        "What is {t} in biology?",
        "Describe the biological process '{t}'.",
        "Explain what happens during {t}.",
        "What does the Gene Ontology term '{t}' ({id}) describe?",
    ],
    "MF": [
        "What is the molecular function '{t}'?",
        "Explain the activity '{t}' at the molecular level.",
        "What does the Gene Ontology term '{t}' ({id}) describe?",
    ],
    "CC": [
        "What is the {t}?",
        "Describe the cellular component '{t}' and where it is found.",
        "What does the Gene Ontology term '{t}' ({id}) describe?",
    ],
}


def load_terms(limit: int | None = None) -> list[dict]:
    con = sqlite3.connect(f"file:{go_sqlite()}?mode=ro", uri=True)
    terms = {
        r[0]: {"id": r[1], "term": r[2], "onto": r[3], "definition": r[4], "parents": [], "syn": []}
        for r in con.execute(
            "SELECT _id, go_id, term, ontology, definition FROM go_term WHERE definition IS NOT NULL "
            "AND length(definition) > 30 AND ontology IN ('BP','MF','CC')"
        )
    }
    for o in ("bp", "mf", "cc"):
        for cid, pid, rel in con.execute(f"SELECT _id, _parent_id, relationship_type FROM go_{o}_parents"):
            if cid in terms and pid in terms and rel in ("isa", "part_of"):
                terms[cid]["parents"].append((rel, terms[pid]["term"]))
    for tid, syn in con.execute("SELECT _id, synonym FROM go_synonym WHERE like_go_id = 0"):
        if tid in terms and len(terms[tid]["syn"]) < 3 and not syn.startswith("GO:"):
            terms[tid]["syn"].append(syn)
    con.close()
    return [terms[k] for k in sorted(terms)]


def _answer(t: dict) -> str:
    kind = ONTO[t["onto"]]
    parts = [
        f"{t['term'][0].upper() + t['term'][1:]} ({t['id']}) is a {kind} in the Gene Ontology. "
        f"{t['definition'].strip()}"
    ]
    isa = [p for r, p in t["parents"] if r == "isa"][:3]
    part = [p for r, p in t["parents"] if r == "part_of"][:2]
    if isa:
        parts.append(f"It is a kind of {', '.join(isa[:-1]) + ' and ' + isa[-1] if len(isa) > 1 else isa[0]}.")
    if part:
        parts.append(f"It is part of {' and '.join(part)}.")
    if t["syn"]:
        parts.append(f"It is also known as {', '.join(t['syn'])}.")
    return " ".join(parts)


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    rng = rng_for("biology", seed, "phrasing")
    exs = []
    for t in load_terms():
        if re.search(r"obsolete", t["term"], re.I):
            continue
        q = rng.choice(QUESTIONS[t["onto"]]).format(t=t["term"], id=t["id"])
        exs.append(Example(q, _answer(t), group=t["id"], key=t["id"]))
    return split_by_group("biology", exs, n_train, n_eval, seed)


def _camel(domain: str, ident: str, filename: str, n_train: int, n_eval: int, seed: int) -> Split:
    path = hfsrc.download_file(domain, ident, filename)
    exs = []
    with zipfile.ZipFile(path) as z:
        for name in sorted(z.namelist()):
            if name.endswith(".json"):
                r = json.loads(z.read(name))
                exs.append(Example(r["message_1"], r["message_2"], group=name, key=name))
    return split_by_group(domain, exs, n_train, n_eval, seed)


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    return _camel("biology", "camel-ai/biology", "biology.zip", n_train, n_eval, seed)
