"""Chemistry (elements and molecules question answering, with worked molar-mass calculations).

offline:
* ``mendeleev==1.3.0`` ``elements.db`` (sqlite, 118 elements): description, uses, sources, electron
  configuration, group/period/block, atomic weight, electronegativity, discovery -> several Q/A per element.
* Debian ``chemical-structures`` (601 English molecule pages: name, IUPAC name, formula, molecular weight,
  synonyms, compound class) -> "formula and class" questions and step-by-step molar-mass calculations that use
  the mendeleev atomic weights (the computed mass is checked against the page's value).
Split by element / molecule.
hf: ``camel-ai/chemistry`` (20 k GPT-4 Q/A in ``chemistry.zip``).
"""

from __future__ import annotations

import html
import re
import sqlite3
from functools import lru_cache

from .biology import _camel
from .common import Example, RecipeInfo, SourceInfo, Split, split_by_group
from .sources import chemical_structures_dir, mendeleev_db

INFO = RecipeInfo(
    name="chemistry",
    description="element facts (mendeleev) and molecule formula/class/molar-mass questions (chemical-structures)",
    offline=(
        SourceInfo("mendeleev elements.db", "PyPI mendeleev==1.3.0", "MIT"),
        SourceInfo(
            "chemical-structures",
            "Debian chemical-structures 2.2.dfsg.0-20",
            "BSD-style (see /usr/share/doc/chemical-structures/copyright)",
        ),
    ),
    hf=(
        SourceInfo("camel-ai/chemistry", "huggingface.co/datasets/camel-ai/chemistry (chemistry.zip)", "CC-BY-NC-4.0"),
    ),
)
BLOCK = {"s": "s-block", "p": "p-block", "d": "d-block", "f": "f-block"}


@lru_cache(maxsize=1)
def elements() -> list[dict]:
    con = sqlite3.connect(f"file:{mendeleev_db()}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = [
        dict(r)
        for r in con.execute(
            "SELECT atomic_number, symbol, name, atomic_weight, electronic_configuration, group_id, period, block, "
            "en_pauling, description, uses, sources, discoverers, discovery_year, discovery_location, name_origin, "
            "density, is_radioactive "
            "FROM elements ORDER BY atomic_number"
        )
    ]
    con.close()
    return rows


def _clean(s: str | None) -> str:
    return re.sub(r"\s+", " ", s or "").strip()


def element_examples() -> list[Example]:
    out = []
    for e in elements():
        n, sym, z = e["name"], e["symbol"], e["atomic_number"]
        g = f"el:{sym}"
        where = (
            f"period {e['period']}"
            + (f", group {e['group_id']}" if e["group_id"] else "")
            + f" ({BLOCK.get(e['block'], e['block'])})"
        )
        base = f"{n} ({sym}) has atomic number {z} and a standard atomic weight of {e['atomic_weight']:.3f} u."
        if _clean(e["description"]):
            out.append(
                Example(f"Describe the chemical element {n}.", f"{base} {_clean(e['description'])}", g, f"{g}:describe")
            )
        out.append(
            Example(
                f"What is the electron configuration of {n}, and where is it in the periodic table?",
                f"The ground-state electron configuration of {n} ({sym}, Z = {z}) is {e['electronic_configuration']}. "
                f"It sits in {where}"
                + (f" and has a Pauling electronegativity of {e['en_pauling']}." if e["en_pauling"] else "."),
                g,
                f"{g}:config",
            )
        )
        if _clean(e["uses"]):
            out.append(Example(f"What are the main uses of {n}?", f"{_clean(e['uses'])}", g, f"{g}:uses"))
        if _clean(e["sources"]):
            out.append(Example(f"How is {n} obtained or where is it found?", _clean(e["sources"]), g, f"{g}:sources"))
        disc = _clean(e["discoverers"])
        if disc:
            when = f" in {e['discovery_year']}" if e["discovery_year"] else ""
            where_d = f" ({_clean(e['discovery_location'])})" if e["discovery_location"] else ""
            origin = f" Name origin: {_clean(e['name_origin'])}" if e["name_origin"] else ""
            out.append(
                Example(
                    f"Who discovered {n}, and where does its name come from?",
                    f"{n} was discovered by {disc.rstrip('.')}{when}{where_d}.{origin}",
                    g,
                    f"{g}:discovery",
                )
            )
    return out


_FORMULA_RE = re.compile(r"([A-Z][a-z]?)(\d*)")


def parse_formula(formula: str) -> list[tuple[str, int]] | None:
    """``C15H13NO4`` -> [(C,15),(H,13),(N,1),(O,4)]; None for formulas with charges/brackets/dots."""
    if not formula or not re.fullmatch(r"(?:[A-Z][a-z]?\d*)+", formula):
        return None
    counts: dict[str, int] = {}
    for el, k in _FORMULA_RE.findall(formula):
        counts[el] = counts.get(el, 0) + (int(k) if k else 1)
    return list(counts.items())


def molecules() -> list[dict]:
    root = chemical_structures_dir()
    out = []
    for p in sorted(root.glob("*/*_en.html")):
        text = p.read_text(encoding="utf-8", errors="replace")

        def field(label: str) -> str:
            m = re.search(rf"<li>{label}:\s*(.*?)</li>", text, re.S)
            return html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip() if m else ""

        name = field("Name")
        if not name:
            continue
        syn_block = re.search(r"<li>Synonyms?:\s*<ul>(.*?)</ul>", text, re.S)
        syns = (
            [
                html.unescape(re.sub(r"<[^>]+>", "", s)).strip()
                for s in re.findall(r"<li>(.*?)</li>", syn_block.group(1), re.S)
            ]
            if syn_block
            else []
        )
        mw = re.match(r"[\d.]+", field("Molecular weight"))
        out.append(
            {
                "name": name,
                "iupac": field("IUPAC name"),
                "formula": field("Formula").replace(" ", ""),
                "mw": float(mw.group(0)) if mw else None,
                "syn": [s for s in syns if s][:3],
                "cls": p.parent.name.replace("_", " "),
                "key": f"{p.parent.name}/{p.stem[:-3]}",
            }
        )
    return out


def molecule_examples() -> list[Example]:
    weights = {e["symbol"]: e["atomic_weight"] for e in elements()}
    out = []
    for m in molecules():
        g = f"mol:{m['key']}"
        n = m["name"]
        syn = f" It is also known as {', '.join(m['syn'])}." if m["syn"] else ""
        iupac = f" (IUPAC name: {m['iupac']})" if m["iupac"] and m["iupac"] != n else ""
        mw = f" and a molecular weight of {m['mw']:.2f} g/mol" if m["mw"] else ""
        out.append(
            Example(
                f"What is the molecular formula of {n}, and what class of compounds does it belong to?",
                f"{n}{iupac} has the molecular formula {m['formula']}{mw}. It belongs to the {m['cls']}.{syn}",
                g,
                f"{g}:formula",
            )
        )
        parts = parse_formula(m["formula"])
        if parts and all(el in weights for el, _ in parts) and m["mw"]:
            lines = [f"{el}: {k} x {weights[el]:.3f} = {k * weights[el]:.3f} g/mol" for el, k in parts]
            total = sum(k * weights[el] for el, k in parts)
            if abs(total - m["mw"]) < 0.05 * m["mw"]:
                out.append(
                    Example(
                        f"Calculate the molar mass of {n} ({m['formula']}). Show your work.",
                        "Add the atomic weights of all atoms in the formula "
                        + m["formula"]
                        + ":\n"
                        + "\n".join(lines)
                        + f"\nTotal: {' + '.join(f'{k * weights[el]:.3f}' for el, k in parts)} = {total:.2f} g/mol.\n"
                        f"The molar mass of {n} is about {total:.2f} g/mol.",
                        g,
                        f"{g}:molar-mass",
                    )
                )
    return out


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    exs = element_examples() + molecule_examples()
    return split_by_group("chemistry", exs, n_train, n_eval, seed, eval_per_group=1)


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    return _camel("chemistry", "camel-ai/chemistry", "chemistry.zip", n_train, n_eval, seed)
