"""Router baseline: a TF-IDF + logistic-regression prompt classifier picks one drafter per request."""

from __future__ import annotations

import pytest

from hedgespec.selectors import Router, make_selector, train_router
from hedgespec.types import RequestContext

TRAIN = {
    "sql": [
        "Write a SQL query that lists all albums by {x}.",
        "SELECT the customers from {x} ordered by name.",
        "Count the invoices per country in table {x} using GROUP BY.",
    ],
    "math": [
        "Tom has {x} apples and buys 3 more. How many apples does he have?",
        "A train travels {x} miles in 2 hours. What is its speed?",
        "What is {x} percent of 250?",
    ],
    "python": [
        'def {x}(items):\n    """Return the sorted unique items."""',
        "Write a Python function {x} that parses JSON.",
        'import os\ndef {x}(path):\n    """List files recursively."""',
    ],
}


def _data():
    prompts, labels = [], []
    for dom, temps in TRAIN.items():
        for t in temps:
            for x in ("alpha", "beta", "gamma", "delta"):
                prompts.append(t.format(x=x))
                labels.append(dom)
    return prompts, labels


def test_router_routes_in_distribution_prompts():
    clf = train_router(*_data())
    sel = make_selector("router", classifier=clf, drafter_of_domain={"sql": 0, "math": 1, "python": 2})
    for prompt, want in [
        ("Write a SQL query that counts tracks per genre.", 0),
        ("Anna has 12 pears and gives away 5. How many are left?", 1),
        ('def flatten(xs):\n    """Flatten a nested list."""', 2),
    ]:
        sel.begin_request(3, 4, RequestContext(prompt=prompt))
        assert sel.select().drafter == want
        assert sel.state_dict()["predicted_domain"] == ["sql", "math", "python"][want]


def test_router_bad_inputs():
    clf = train_router(*_data())
    with pytest.raises(ValueError, match="prompt text"):
        Router(clf, {"sql": 0}).begin_request(2, 3)
    with pytest.raises(ValueError, match="out of range"):
        Router(clf, {"sql": 5}).begin_request(2, 3, RequestContext(prompt="x"))
    with pytest.raises(ValueError, match="at least one domain"):
        Router(clf, {})
    with pytest.raises(ValueError, match="two domains"):
        train_router(["a", "b"], ["sql", "sql"])
    with pytest.raises(ValueError, match="same length"):
        train_router(["a"], ["sql", "math"])
