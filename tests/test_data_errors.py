"""Bad input: unknown domain, source=hf without network, n_train above what is available; the Hydra entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_recipes import DataRecipeError, NotEnoughDataError, SourceUnavailableError, prepare

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_unknown_domain(tmp_path) -> None:
    with pytest.raises(ValueError, match="domain='astrology' is unknown; expected one of python, math"):
        prepare("astrology", data_dir=tmp_path, log=None)
    assert not any(tmp_path.iterdir())


def test_unknown_source_and_variant(tmp_path) -> None:
    with pytest.raises(ValueError, match="source='s3' is unknown"):
        prepare("sql", source="s3", data_dir=tmp_path, log=None)
    with pytest.raises(ValueError, match="variant='nope' is unknown"):
        prepare("sql", variant="nope", data_dir=tmp_path, log=None)


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "1"}, {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}])
def test_hf_without_network_is_clear_and_leaves_nothing(tmp_path, monkeypatch, env) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(
        SourceUnavailableError,
        match=r"domain=sql source=hf: cannot load Hugging Face dataset 'b-mc2/sql-create-context'.*source=offline",
    ):
        prepare("sql", source="hf", data_dir=tmp_path, log=None)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_n_train_larger_than_available_names_the_count(tmp_path) -> None:
    with pytest.raises(
        NotEnoughDataError, match=r"n_train=100000 is larger than the (\d+) train examples available"
    ) as ei:
        prepare("cnndm", n_train=100000, data_dir=tmp_path, log=None)
    assert 500 < ei.value.available < 2000
    with pytest.raises(NotEnoughDataError, match=r"n_eval=500 is larger than the 164 eval examples"):
        prepare("humaneval", n_eval=500, data_dir=tmp_path, log=None)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_failed_rebuild_keeps_previous_output(tmp_path) -> None:
    out = prepare("cnndm", n_train=10, n_eval=5, data_dir=tmp_path, log=None)["cnndm"]
    before = (out / "train.jsonl").read_bytes()
    with pytest.raises(DataRecipeError):
        prepare("cnndm", n_train=10**7, n_eval=5, data_dir=tmp_path, log=None)
    assert (out / "train.jsonl").read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["cnndm"]


def test_hydra_entry_point_composes_and_runs(tmp_path) -> None:
    import importlib.util

    from hydra import compose, initialize_config_dir

    spec = importlib.util.spec_from_file_location("prepare_data_script", CONF.parent / "scripts" / "prepare_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "prepare_data",
            overrides=[
                "domain=sql",
                "n_train=12",
                "n_eval=4",
                f"data_dir={tmp_path}",
                "count_tokens=target",
                "target=tiny",
            ],
        )
    out = mod.run(cfg)
    import json

    man = json.loads((out["sql"] / "manifest.json").read_text())
    assert man["n_train"] == 12 and man["tokens"]["tokenizer"] == "tiny" and man["tokens"]["train"]["total_tokens"] > 0
    assert (CONF / "prepare_data.yaml").read_text().startswith("# ")
