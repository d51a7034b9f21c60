"""The run key: settings added after runs were first keyed leave the key of a run at their default unchanged, so
existing runs resume; any other value is another run."""

from __future__ import annotations

from hedgespec.training.hashing import json_hash
from hedgespec.training.pipeline import _keyed_train, _without_late_defaults


def _key(train: dict, thinking: object = None) -> str:
    key = {"target": "sha256:t", "data": "d", "aux": [0, 1, 2], "draft_vocab": 64, "train": _keyed_train(train)}
    key["thinking"] = thinking
    return json_hash(_without_late_defaults(key))[:20]


OLD = {"name": "tiny", "draft": {"init": "general", "vocab_size": 64}, "specforge": {"training": {"max_steps": 6}}}
#: how the key of such a run was computed before these settings existed (no thinking, no draft.vocab)
OLD_KEY = json_hash({"target": "sha256:t", "data": "d", "aux": [0, 1, 2], "draft_vocab": 64, "train": OLD})[:20]


def test_settings_at_their_defaults_keep_the_key_of_runs_from_before_them() -> None:
    assert _key(OLD) == OLD_KEY
    assert _key({**OLD, "draft": {**OLD["draft"], "vocab": "own"}}) == OLD_KEY
    assert _key({**OLD, "features": {"max_length": 64, "supervise": "assistant"}}) == _key(
        {**OLD, "features": {"max_length": 64}}
    )
    assert _key({**OLD, "plan_only": True, "overwrite": True, "source": "offline"}) == OLD_KEY


def test_any_other_value_is_another_run() -> None:
    keys = {
        _key({**OLD, "draft": {**OLD["draft"], "vocab": "init"}}),
        _key(OLD, thinking=False),
        _key(OLD, thinking=True),
        _key({**OLD, "features": {"max_length": 64, "supervise": "all"}}),
        _key({**OLD, "features": {"max_length": 64}}),
        OLD_KEY,
    }
    assert len(keys) == 6


def test_the_key_is_computed_on_a_copy() -> None:
    train = {**OLD, "draft": {**OLD["draft"], "vocab": "own"}}
    key = {"train": train, "thinking": None}
    _without_late_defaults(key)
    assert train["draft"]["vocab"] == "own" and "thinking" in key
