"""Plain serving (selector=none) needs no trained pool: the target alone, e.g. to regenerate training answers."""

from __future__ import annotations

import pytest

from data_recipes import DataRecipeError, prepare
from data_recipes.regenerate import regenerate
from hedgespec.serving.argv import build_plan
from hedgespec.serving.launch import plain_server


def _cfg(selector: str, tmp_path) -> dict:
    return {
        "device": "cpu",
        "port": 30123,
        "pool": {"name": "smollm2", "target": "smollm2", "manifest": str(tmp_path / "pools" / "smollm2.yaml")},
        "selector": {"name": selector},
        "decoding": {"mode": "chain", "num_steps": 3, "topk": 1, "num_draft_tokens": 4},
        "dtype": "bfloat16",
    }


def test_plain_server_of_an_untrained_pool(tmp_path) -> None:
    plan = build_plan(_cfg("none", tmp_path))
    assert plan.algorithm == "NONE" and plan.drafter_names == [] and plan.drafter_paths == []
    assert not any(a.startswith("--speculative") for a in plan.argv)
    assert plan.argv[plan.argv.index("--dtype") + 1] == "bfloat16"
    assert "HEDGESPEC_CONFIG" not in plan.env


def test_speculative_server_of_an_untrained_pool_names_the_train_command(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"train/run\.py .*target=smollm2 train=embedded"):
        build_plan(_cfg("hedgespec", tmp_path))


def test_plain_server_for_regeneration_sized_by_concurrency() -> None:
    srv = plain_server("smollm2", port=30124, concurrency=24, max_total_tokens=20000)
    argv = srv.plan.argv
    assert argv[argv.index("--max-running-requests") + 1] == "24"
    assert argv[argv.index("--max-total-tokens") + 1] == "20000"
    assert argv[argv.index("--port") + 1] == "30124" and srv.proc is None, "built, not started"


def test_unknown_regeneration_backend_is_named(tmp_path) -> None:
    sql = prepare("sql", n_train=2, n_eval=1, data_dir=tmp_path, log=None)["sql"]
    with pytest.raises(DataRecipeError, match=r"regen\.backend='vllm'.*transformers.*sglang"):
        regenerate(sql, backend="vllm", max_examples=1, progress=False)
    assert not (sql / "regen" / "train.smollm2.jsonl").exists(), "nothing written"
