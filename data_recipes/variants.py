"""Prompt-variant transforms for the router distribution-shift experiment (paper Table 4).

A router trained on the original prompt distribution is evaluated on *rewritten* prompts of the same tasks:
the domain (and hence the best drafter) is unchanged, but the surface form the router keys on moves. Each
variant is a deterministic function of the prompt (and a seed, for variants that choose among phrasings).

Two families:

* wrappers (``two_answers``, ``step_by_step``, ``expert_persona``, ``terse``, ``mixed``) add an instruction around
  the unchanged prompt, so every word of the original task wording is still there;
* ``paraphrase`` rewrites the task wording itself, per domain: it recognises the recipe template a prompt was
  built from (data_recipes/python.py, math.py, biology.py, chemistry.py, medqa.py, cnndm.py, sql.py) and restates
  the request in other words while keeping the task content verbatim (the function stub, the word problem's
  sentences and numbers, the GO term, the compound and formula, the vignette's findings and options, the article,
  the SQL question and every table and column). SQL schemas are described in prose instead of ``CREATE TABLE``
  text; Python stubs are described as a signature plus a docstring where the stub is a single function. Each
  domain has several phrasings; the one used is drawn from (prompt, seed). Prompts that match no recipe template
  (e.g. the Hugging Face sources) fall back to a word-problem framing when they end in a question, else to a
  generic one, so the variant is total.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable

from .biology import QUESTIONS as BIOLOGY_QUESTIONS
from .common import rng_for

Parts = dict[str, str]
Phrasing = Callable[[Parts], str]


# ---------------------------------------------------------------- python (data_recipes/python.py, humaneval.py)
_PY = re.compile(
    r"Complete the following Python function\. Return the whole function in a code block\.\n\n"
    r"```python\n(?P<code>.*)\n?```\s*",
    re.S,
)


def _parse_python(prompt: str) -> Parts | None:
    m = _PY.fullmatch(prompt)
    if not m:
        return None
    code = m["code"].rstrip() + "\n"
    parts = {"code": code}
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return parts
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(tree.body) == 1 and len(funcs) == 1 and ast.get_docstring(funcs[0]):  # one stub: describable in prose
        f = funcs[0]
        head = "\n".join(code.splitlines()[f.lineno - 1 : f.body[0].lineno - 1])  # the signature as written
        m = re.fullmatch(r"\s*(?:async\s+)?def\s+(?P<sig>.*?)\s*:\s*", head, re.S)
        if m:
            parts["sig"] = m["sig"]
            parts["doc"] = textwrap.indent(_docstring_source(code, f.body[0]), "    ")
    return parts


def _docstring_source(code: str, node: ast.stmt) -> str:
    """The docstring as written in the stub (escapes such as ``\\u001a`` kept as typed), cleaned like
    :func:`inspect.cleandoc`."""
    raw = ast.get_source_segment(code, node) or ""
    m = re.fullmatch(r"[rRuU]?(\"\"\"|\'\'\'|\"|\')(?P<s>.*)\1", raw.strip(), re.S)
    return inspect.cleandoc(m["s"] if m else raw)


def _py_prose(p: Parts) -> str:
    if "sig" not in p:
        return _py_stub_first(p)
    return (
        f"Please write `{p['sig']}` in Python. Its documentation reads:\n\n{p['doc']}\n\n"
        "Reply with the finished definition, formatted as a fenced code block."
    )


def _py_stub_first(p: Parts) -> str:
    return (
        f"```python\n{p['code']}```\n\nThe code above is only a stub with no implementation yet. Implement it so "
        "that it does what its docstring says, and show me all of it."
    )


def _py_fill(p: Parts) -> str:
    return (
        "Here are the signature and docstring of a routine. Fill in the body, then send back the entire "
        f"definition as code.\n\n```python\n{p['code']}```"
    )


# ---------------------------------------------------------------- sql (data_recipes/sql.py)
_SQL = re.compile(
    r"Given the following SQL(?:ite)? database schema:\n\n(?P<schema>.*)\n\n"
    r"Write a SQL query that answers the question: (?P<q>.*)",
    re.S,
)
_TABLE = re.compile(r"CREATE TABLE (?P<t>\w+) \(\n(?P<cols>.*?)\n\);", re.S)
_COL = re.compile(r"\s*(?P<c>\w+) (?P<ty>[A-Z]+)(?P<pk> PRIMARY KEY)?(?: REFERENCES (?P<rt>\w+)\((?P<rc>\w+)\))?,?")


def _sql_columns(cols: str) -> str | None:
    out = []
    for line in cols.split("\n"):
        m = _COL.fullmatch(line)
        if not m:
            return None
        notes = [m["ty"].lower()] + (["primary key"] if m["pk"] else [])
        notes += [f"points to {m['rt']}.{m['rc']}"] if m["rt"] else []
        out.append(f"{m['c']} ({', '.join(notes)})")
    return ", ".join(out)


def _parse_sql(prompt: str) -> Parts | None:
    m = _SQL.fullmatch(prompt)
    if not m:
        return None
    parts = {"schema": m["schema"], "q": m["q"].strip()}
    blocks = m["schema"].split("\n\n")
    tables = [(_TABLE.fullmatch(b.strip()), b) for b in blocks]
    if all(t for t, _ in tables):  # every block is a CREATE TABLE the recipe writes: describe it in prose
        cols = [(t["t"], _sql_columns(t["cols"])) for t, _ in tables]
        if all(c is not None for _, c in cols):
            parts["tables"] = "\n".join(f"{t}\t{c}" for t, c in cols)
    return parts


def _sql_tables(p: Parts) -> list[tuple[str, str]]:
    return [tuple(line.split("\t", 1)) for line in p["tables"].split("\n")]  # type: ignore[misc]


def _sql_prose(p: Parts) -> str:
    if "tables" not in p:
        return _sql_question_first(p)
    desc = " ".join(f"There is a table named {t} whose columns are {c}." for t, c in _sql_tables(p))
    return f"{desc}\n\nI need to find out the following: {p['q']} What statement should I run on this SQLite data?"


def _sql_question_first(p: Parts) -> str:
    if "tables" not in p:
        return f"Question: {p['q']}\n\nThe data is organised like this:\n\n{p['schema']}\n\nGive me the query for it."
    desc = "\n".join(f"- {t}: {c}" for t, c in _sql_tables(p))
    return (
        f"Question: {p['q']}\n\nThe SQLite tables available are:\n{desc}\n\nProduce the statement that retrieves this."
    )


def _sql_list(p: Parts) -> str:
    if "tables" not in p:
        return f"Using these tables:\n\n{p['schema']}\n\nretrieve this for me in SQLite: {p['q']}"
    n = len(_sql_tables(p))
    desc = "; ".join(f"{t} holds {c}" for t, c in _sql_tables(p))
    return f"My SQLite file has {n} relevant table{'s' if n > 1 else ''}: {desc}.\n\nHow do I retrieve this? {p['q']}"


# ---------------------------------------------------------------- math (data_recipes/math.py, gsm8k.py)
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z$£€0-9])")
_ASKS = re.compile(r"(how|what|which|who|when|where|find|calculate|compute|determine)\b", re.I)


def _parse_math(prompt: str) -> Parts | None:
    if "\n" in prompt.strip():
        return None
    sents = _SENT.split(prompt.strip())
    asks = [i for i, s in enumerate(sents) if s.endswith("?")] or [i for i, s in enumerate(sents) if _ASKS.search(s)]
    if not asks:
        return None
    i = asks[-1]  # the question; sentences after it (e.g. "Assume a month has 30 days.") join the context
    return {"context": " ".join(sents[:i] + sents[i + 1 :]), "q": sents[i]}


def _math_problem(p: Parts) -> str:
    return "Here is a word problem to work through.\n\n" + _join(p["context"], f"What is asked: {p['q']}", "\n\n")


def _math_facts(p: Parts) -> str:
    return _join(p["context"], f"Using only the facts given, figure out the answer to this: {p['q']}", "\n\n")


def _math_friend(p: Parts) -> str:
    return _join(f"A friend sent me this puzzle. {p['context']}".strip(), f"It asks: {p['q']} Can you solve it?", " ")


def _join(context: str, ask: str, sep: str) -> str:
    return f"{context}{sep}{ask}" if context else ask


# ---------------------------------------------------------------- biology (data_recipes/biology.py)
def _template_regex(t: str) -> re.Pattern[str]:
    out = re.escape(t).replace(re.escape("{t}"), "(?P<t>.+)").replace(re.escape("{id}"), r"(?P<id>GO:\d+)")
    return re.compile(out)


_BIO = [_template_regex(t) for ts in BIOLOGY_QUESTIONS.values() for t in ts]


def _parse_biology(prompt: str) -> Parts | None:
    for rx in _BIO:
        m = rx.fullmatch(prompt)
        if m:
            return {"t": m["t"], "id": f" ({m['id']})" if "id" in rx.groupindex else ""}
    return None


def _bio_seen(p: Parts) -> str:
    return f"I keep running into the term '{p['t']}'{p['id']}. Could you explain what it refers to?"


def _bio_account(p: Parts) -> str:
    return f"Give me a short account of {p['t']}{p['id']}: what it is and what it is involved in."


def _bio_colon(p: Parts) -> str:
    return f"{p['t'][0].upper() + p['t'][1:]}{p['id']}: what does this mean, and how would you define it?"


# ---------------------------------------------------------------- chemistry (data_recipes/chemistry.py)
_CHEM: list[tuple[str, re.Pattern[str], tuple[str, ...]]] = [
    (
        "element",
        re.compile(r"Describe the chemical element (?P<n>.+)\."),
        ("Tell me about the element {n}.", "{n}: give an overview of this element and its properties."),
    ),
    (
        "config",
        re.compile(r"What is the electron configuration of (?P<n>.+), and where is it in the periodic table\?"),
        (
            "How are the electrons of {n} arranged in its ground state, and which period and group does it sit in?",
            "Give the ground-state electron arrangement of {n} and its position among the elements.",
        ),
    ),
    (
        "uses",
        re.compile(r"What are the main uses of (?P<n>.+)\?"),
        ("What is {n} used for?", "Where does {n} find practical application?"),
    ),
    (
        "sources",
        re.compile(r"How is (?P<n>.+) obtained or where is it found\?"),
        ("Where does {n} occur naturally, and how do we produce it?", "How do people get hold of {n}?"),
    ),
    (
        "discovery",
        re.compile(r"Who discovered (?P<n>.+), and where does its name come from\?"),
        (
            "Who first identified {n}, and how did it get its name?",
            "Tell me the history of {n}: who found it first and what its name means.",
        ),
    ),
    (
        "formula",
        re.compile(r"What is the molecular formula of (?P<n>.+), and what class of compounds does it belong to\?"),
        (
            "Give the chemical formula of {n} and say which family of substances it falls into.",
            "{n}: which atoms make it up (written as a formula), and how is it classified?",
            "Which compound family does {n} belong to, and what is its formula?",
        ),
    ),
    (
        "molar_mass",
        re.compile(r"Calculate the molar mass of (?P<n>.+) \((?P<f>[^()]+)\)\. Show your work\."),
        (
            "How much does one mole of {n} ({f}) weigh? Go through the arithmetic.",
            "Work out the weight per mole of {f} ({n}), one element at a time.",
        ),
    ),
]


def _parse_chemistry(prompt: str) -> Parts | None:
    for kind, rx, _ in _CHEM:
        m = rx.fullmatch(prompt)
        if m:
            return {"kind": kind, **m.groupdict()}
    return None


def _chem(j: int) -> Phrasing:
    def render(p: Parts) -> str:
        options = next(ph for kind, _, ph in _CHEM if kind == p["kind"])
        return options[j % len(options)].format(**p)

    return render


# ---------------------------------------------------------------- medqa (data_recipes/medqa.py)
_MED = re.compile(
    r"(?P<who>.+?) (?:is brought to the clinic|presents to the physician|is evaluated|is referred to a specialist)"
    r" with (?P<finds>.+?)\.(?P<fam> Family history is notable for a similarly affected relative\.| There is no "
    r"relevant family history\.)? Which of the following is the most likely diagnosis\?\n\n"
    r"(?P<opts>(?:[A-D]\. .+\n?)+)",
    re.S,
)
_FAMILY = {
    " Family history is notable for a similarly affected relative.": "A relative has the same problem.",
    " There is no relevant family history.": "Nobody else in the family is affected.",
}


def _parse_medqa(prompt: str) -> Parts | None:
    m = _MED.fullmatch(prompt.strip())
    if not m:
        return None
    opts = [o.split(". ", 1) for o in m["opts"].strip().split("\n")]
    return {
        "who": m["who"][0].lower() + m["who"][1:],
        "finds": m["finds"],
        "fam": _FAMILY.get(m["fam"] or "", ""),
        "opts": "\n".join(f"({k}) {name}" for k, name in opts),
    }


def _med_chart(p: Parts) -> str:
    fam = f"\nFamily: {p['fam']}" if p["fam"] else ""
    return (
        f"Patient: {p['who']}.\nFindings: {p['finds']}.{fam}\n\nGiven this presentation, which condition is the "
        f"best explanation? Pick one.\n\n{p['opts']}"
    )


def _med_comes_in(p: Parts) -> str:
    fam = f" {p['fam']}" if p["fam"] else ""
    return (
        f"{p['who'][0].upper() + p['who'][1:]} comes in with {p['finds']}.{fam} What is the diagnosis?\n\n{p['opts']}"
    )


def _med_pick(p: Parts) -> str:
    fam = f" {p['fam']}" if p["fam"] else ""
    return f"Choose the single best diagnosis for {p['who']} seen for {p['finds']}.{fam}\n\n{p['opts']}"


# ---------------------------------------------------------------- cnndm (data_recipes/cnndm.py)
_NEWS: list[tuple[str, re.Pattern[str]]] = [
    ("three", re.compile(r"Summarize the following news article in three sentences\.\n\nArticle:\n(?P<text>.*)", re.S)),
    ("summary", re.compile(r"Summarize (?:this|the following news) article\.\n\nArticle:\n(?P<text>.*)", re.S)),
    ("summary", re.compile(r"Write a brief summary of the news story below\.\n\nArticle:\n(?P<text>.*)", re.S)),
    (
        "highlights",
        re.compile(
            r"Read the news article below and write its key points as highlights, one per line\.\n\n(?P<text>.*)", re.S
        ),
    ),
    ("headline", re.compile(r"Write a one-line headline for this news story\.\n\n(?P<text>.*)", re.S)),
]
_NEWS_ASK = {
    "three": ("Boil this report down to three sentences.", "What is this story about? Answer in three sentences."),
    "summary": ("Condense this report into a short paragraph.", "What is this story about, in brief?"),
    "highlights": ("List the main facts of this report, each on its own line.", "Pull out the key points, one a line."),
    "headline": ("Give this report a title on a single line.", "What would be a good one-line title for this?"),
}


def _parse_cnndm(prompt: str) -> Parts | None:
    for kind, rx in _NEWS:
        m = rx.fullmatch(prompt)
        if m:
            return {"kind": kind, "text": m["text"]}
    return None


def _news_before(p: Parts) -> str:
    return f"{_NEWS_ASK[p['kind']][0]}\n\nText:\n{p['text']}"


def _news_after(p: Parts) -> str:
    return f"{p['text']}\n\n{_NEWS_ASK[p['kind']][1]}"


# ---------------------------------------------------------------- fallback (prompts no recipe template covers)
def _generic_a(p: Parts) -> str:
    return f"I have a request for you.\n\n{p['text']}"


def _generic_b(p: Parts) -> str:
    return f"{p['text']}\n\n(Please respond to the above.)"


#: domain -> (parser of that recipe's template, phrasings); detection tries them in this order (math is last among
#: the recipes because its template is free text ending in a question, which the others' fixed wording is not)
PARAPHRASES: dict[str, tuple[Callable[[str], Parts | None], tuple[Phrasing, ...]]] = {
    "python": (_parse_python, (_py_prose, _py_stub_first, _py_fill)),
    "sql": (_parse_sql, (_sql_prose, _sql_question_first, _sql_list)),
    "cnndm": (_parse_cnndm, (_news_before, _news_after)),
    "medqa": (_parse_medqa, (_med_chart, _med_comes_in, _med_pick)),
    "chemistry": (_parse_chemistry, (_chem(0), _chem(1), _chem(2))),
    "biology": (_parse_biology, (_bio_seen, _bio_account, _bio_colon)),
    "math": (_parse_math, (_math_problem, _math_facts, _math_friend)),
}
_GENERIC: tuple[Phrasing, ...] = (_generic_a, _generic_b)


def detect_template(prompt: str) -> tuple[str | None, Parts]:
    """The recipe domain whose prompt template ``prompt`` was built from (None if none matches) and its parts."""
    for domain, (parse, _) in PARAPHRASES.items():
        parts = parse(prompt)
        if parts is not None:
            return domain, parts
    return None, {"text": prompt}


def paraphrase(prompt: str, seed: int = 0, phrasing: int | None = None) -> str:
    """Restate ``prompt``'s task wording (see the module doc); ``phrasing`` picks one phrasing (modulo their number)
    instead of drawing it from (prompt, seed)."""
    domain, parts = detect_template(prompt)
    options = PARAPHRASES[domain][1] if domain else _GENERIC
    j = rng_for("paraphrase", seed, prompt).randrange(len(options)) if phrasing is None else phrasing % len(options)
    return options[j](parts)


VARIANTS: dict[str, Callable[[str, int], str]] = {
    # "Give two answers and pick the better one": the paper's example of a shifted prompt.
    "two_answers": lambda p, s: (
        f"Give two different answers to the following request, then pick the better one and explain why.\n\n{p}"
    ),
    "step_by_step": lambda p, s: f"{p}\n\nThink step by step before giving your final answer.",
    "expert_persona": lambda p, s: "You are a careful expert. " + p,
    "terse": lambda p, s: f"Answer as concisely as possible.\n\n{p}",
    "mixed": lambda p, s: VARIANTS[
        rng_for("variant", s, p).choice(["two_answers", "step_by_step", "expert_persona", "terse"])
    ](p, s),
    "paraphrase": lambda p, s: paraphrase(p, s),
}


def apply_variant(prompt: str, variant: str, seed: int = 0) -> str:
    """Rewrite one prompt; ``variant`` is a key of :data:`VARIANTS`."""
    try:
        fn = VARIANTS[variant]
    except KeyError:
        raise ValueError(f"variant={variant!r} is unknown; expected one of {', '.join(VARIANTS)}") from None
    return fn(prompt, seed)
