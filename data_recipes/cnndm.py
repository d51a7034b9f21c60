"""News summarisation (CNN/DailyMail-style "summarize this article").

offline (the thinnest domain; all text is real news, the summaries are extractive):
* the Lee corpus (350 ABC News Australia articles, Lee, Pincombe & Welsh 2005) read from the ``gensim==4.4.0``
  wheel (not installed; ``20-data.sh`` extracts the two files);
* 80 Reuters-21578 newswire stories with headlines from the Debian package ``r-cran-tm`` (``acq``, ``crude``,
  ``reuters-21578.xml``).
Each article yields up to three prompts: a 3-sentence summary (lead-3, the standard CNN/DM baseline), key-point
"highlights" (lead-3 as bullets, the CNN/DM ``highlights`` format) and a one-line headline (the Reuters headline,
or the lead sentence). Split by article, so eval articles are never seen in training.
hf: ``abisee/cnn_dailymail`` (config ``3.0.0``; article -> highlights).
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

from . import hf as hfsrc
from .common import Example, RecipeInfo, SourceInfo, Split, rng_for, split_by_group
from .sources import lee_dir, reuters_dir

INFO = RecipeInfo(
    name="cnndm",
    description="summarize-this-article prompts over Lee (ABC) and Reuters-21578 news, lead-3/headline targets",
    offline=(
        SourceInfo(
            "Lee news corpus (350 ABC articles)",
            "PyPI gensim==4.4.0 wheel (test data, extracted, not installed)",
            "research use (Lee, Pincombe & Welsh 2005); gensim LGPL-2.1",
        ),
        SourceInfo(
            "Reuters-21578 sample (80 stories)",
            "Debian r-cran-tm 0.7-11-1",
            "Reuters-21578: free for research use; r-cran-tm GPL-3",
        ),
    ),
    hf=(SourceInfo("abisee/cnn_dailymail 3.0.0", "huggingface.co/datasets/abisee/cnn_dailymail", "Apache-2.0"),),
)
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if len(s.strip()) > 20]


@lru_cache(maxsize=1)
def articles() -> list[dict]:
    out = []
    for fname in ("lee_background.cor", "lee.cor"):
        for i, line in enumerate((lee_dir() / fname).read_text(encoding="latin-1").splitlines()):
            text = re.sub(r"\s+", " ", line).strip()
            if len(sentences(text)) >= 4:
                out.append({"key": f"lee/{fname}/{i}", "title": None, "text": text})
    root = reuters_dir()
    for path in sorted(
        list((root / "acq").glob("*.xml")) + list((root / "crude").glob("*.xml")) + [root / "reuters-21578.xml"]
    ):
        raw = path.read_text(encoding="latin-1")
        for j, m in enumerate(re.finditer(r"<REUTERS[^>]*NEWID=\"(\d+)\"[^>]*>(.*?)</REUTERS>", raw, re.S)):
            title = re.search(r"<TITLE>(.*?)</TITLE>", m.group(2), re.S)
            body = re.search(r"<BODY>(.*?)</BODY>", m.group(2), re.S)
            if not (title and body):
                continue
            text = re.sub(r"\s+", " ", html.unescape(body.group(1))).strip()
            text = re.sub(r"\s*Reuter\s*\W*$", "", text)
            if len(sentences(text)) >= 3:
                out.append(
                    {"key": f"reuters/{m.group(1)}", "title": html.unescape(title.group(1)).strip(), "text": text}
                )
    return out


def _headline(title: str) -> str:
    t = title.title() if title.isupper() else title
    return re.sub(r"<[^>]+>", "", t).strip()


def article_examples(a: dict, rng) -> list[Example]:
    sents = sentences(a["text"])
    lead3 = sents[:3]
    text = a["text"]
    g = a["key"]
    out = [
        Example(
            rng.choice(
                [
                    "Summarize the following news article in three sentences.",
                    "Summarize this article.",
                    "Write a brief summary of the news story below.",
                ]
            )
            + f"\n\nArticle:\n{text}",
            " ".join(lead3),
            g,
            f"{g}:summary",
        ),
        Example(
            f"Read the news article below and write its key points as highlights, one per line.\n\n{text}",
            "\n".join(f"- {s}" for s in lead3),
            g,
            f"{g}:highlights",
        ),
    ]
    head = _headline(a["title"]) if a["title"] else sents[0]
    out.append(Example(f"Write a one-line headline for this news story.\n\n{text}", head, g, f"{g}:headline"))
    return out


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    exs = [e for a in articles() for e in article_examples(a, rng_for("cnndm", seed, a["key"]))]
    return split_by_group("cnndm", exs, n_train, n_eval, seed, eval_per_group=2, eval_fraction=0.15)


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("cnndm", "abisee/cnn_dailymail", "3.0.0", split="train")
    exs = [
        Example(
            f"Summarize the following news article.\n\nArticle:\n{r['article']}",
            r["highlights"],
            group=str(i),
            key=r.get("id", str(i)),
        )
        for i, r in enumerate(ds.select(range(min(len(ds), 20 * (n_train + n_eval) + 1000))))
    ]
    return split_by_group("cnndm", exs, n_train, n_eval, seed)
