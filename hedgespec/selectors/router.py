"""Router baseline (paper Table 4): an offline text classifier over the prompt picks one drafter per request.

The classifier is TF-IDF features + logistic regression (scikit-learn), trained on the domains' training
prompts. scikit-learn is imported lazily, only when a router is trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from hedgespec.selectors.base import BaseSelector
from hedgespec.types import Decision


class TextClassifier(Protocol):
    def predict(self, texts: Sequence[str]) -> Sequence[str]: ...


def train_router(prompts: Sequence[str], domains: Sequence[str], seed: int = 0) -> TextClassifier:
    """Fit TF-IDF (word 1-2 grams) + logistic regression on (prompt, domain) pairs."""
    if len(prompts) != len(domains):
        raise ValueError(f"prompts and domains must have the same length, got {len(prompts)} and {len(domains)}")
    if len(set(domains)) < 2:
        raise ValueError("a router needs training prompts from at least two domains")
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the router baseline needs scikit-learn: pip install -e '.[data]'") from err
    clf = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1),
        LogisticRegression(max_iter=2000, random_state=seed),
    )
    clf.fit(list(prompts), list(domains))
    return clf


class Router(BaseSelector):
    """Classify the prompt once at ``begin_request``; draft with that domain's drafter for the whole request.

    ``evaluate=False``: it reads no γ, so the runner extends only its drafter (its deployed cost)."""

    name = "router"

    def __init__(
        self,
        classifier: TextClassifier,
        drafter_of_domain: Mapping[str, int],
        fallback: int = 0,
        evaluate: bool = True,
    ) -> None:
        super().__init__(evaluate)
        if not drafter_of_domain:
            raise ValueError("Router: drafter_of_domain must map at least one domain to a drafter index")
        self.classifier, self.drafter_of_domain, self.fallback = classifier, dict(drafter_of_domain), fallback
        self.predicted: str | None = None

    def _reset(self) -> None:
        if self.ctx.prompt is None:
            raise ValueError("Router needs the prompt text: pass RequestContext(prompt=...) to begin_request")
        bad = {d: i for d, i in self.drafter_of_domain.items() if not 0 <= i < self.n}
        if bad or not 0 <= self.fallback < self.n:
            raise ValueError(f"Router: drafter indices {bad or self.fallback} out of range for a pool of {self.n}")
        self.predicted = str(self.classifier.predict([self.ctx.prompt])[0])
        self.index = self.drafter_of_domain.get(self.predicted, self.fallback)

    def select(self) -> Decision:
        return self.decide(self.index)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "predicted_domain": self.predicted}
