"""train=tiny end to end through SpecForge on CPU: train, export, load in the engine, register, reuse, resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _train_helpers import REPO, compose_train, specforge_or_skip, tiny_overrides, tmp_overrides

specforge_or_skip()

from hedgespec.training.pipeline import latest_checkpoint, train_drafter  # noqa: E402

TINY4 = {"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}}  # what train=tiny trains against


def _metric_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_tiny_end_to_end_then_reuse(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = compose_train(tmp_path, *tiny_overrides())
    res = train_drafter(cfg)
    assert res.final_step == 6 and res.stages["features"]["reused"] is False
    assert _metric_steps(res.run_dir) == [1, 2, 3, 4, 5, 6]
    assert {"loss", "acc_0", "ploss_0"} <= set(res.metrics)

    # the export is SGLang's EAGLE-3 directory and loads in the reference engine against the target
    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.models import load_target

    model, tok = load_target(TINY4)
    drafter = Eagle3Drafter.load(res.export_dir, model)
    assert drafter.config.draft_vocab_size == 256 and drafter.config.aux_layer_ids == (0, 1, 2)
    from safetensors import safe_open

    with safe_open(str(res.export_dir / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert {"fc.weight", "norm.weight", "lm_head.weight", "t2d", "d2t"} <= keys and "embed_tokens.weight" not in keys

    # registered in the pool manifest, valid for this target, refused for another
    from hedgespec.pools import PoolMismatchError, TargetInfo, load_pool

    pool = load_pool(res.manifest, TargetInfo.from_model("tiny", model, tok))
    entry = pool.drafter("sql")
    assert entry.domain == "sql" and entry.aux_layer_ids == (0, 1, 2) and entry.metrics["loss"] > 0
    assert pool.drafter_path(entry).resolve() == res.export_dir.resolve()
    assert entry.training["specforge"]["training"]["max_steps"] == 6
    other, other_tok = load_target("tiny")  # the default 2-layer tiny target: another hash
    with pytest.raises(PoolMismatchError, match="target.hash"):
        load_pool(res.manifest, TargetInfo.from_model("tiny", other, other_tok))

    # the same command again: features reused, training/export not redone
    mtime = (res.export_dir / "model.safetensors").stat().st_mtime_ns
    again = train_drafter(compose_train(tmp_path, *tiny_overrides()))
    assert again.stages["features"]["reused"] is True
    assert again.final_step == 6 and _metric_steps(again.run_dir) == [1, 2, 3, 4, 5, 6]
    assert (res.export_dir / "model.safetensors").stat().st_mtime_ns == mtime
    assert again.timings["train"] < 1.0

    # a second drafter (another domain) joins the same pool and reuses nothing it should not
    third = train_drafter(compose_train(tmp_path, *tiny_overrides("domain=general")))
    assert load_pool(third.manifest).names == ["sql", "general"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_training_runs_in_either_dtype(tmp_path: Path, dtype: str) -> None:
    """Features, the cached target head and SpecForge's run share train.dtype (SpecForge itself casts the target
    head to bfloat16; a float32 run must still train), and the export loads in the engine."""
    from specforge.modeling.target.target_head import TargetHead

    torch.set_num_threads(1)
    original = TargetHead.__dict__["from_pretrained"]
    res = train_drafter(compose_train(tmp_path, *tiny_overrides(f"train.dtype={dtype}")))
    assert TargetHead.__dict__["from_pretrained"] is original  # the cast is scoped to the run
    assert res.final_step == 6 and res.specforge_config["model"]["torch_dtype"] == dtype
    assert all(math.isfinite(float(res.metrics[k])) for k in ("loss", "acc_0"))
    feats = json.loads((Path(res.stages["features"]["path"]) / "features.json").read_text())
    assert feats["dtype"] == dtype
    (head,) = (tmp_path / "cache" / "target_head").glob(f"*-{dtype}/model-00001-of-00001.safetensors")
    from safetensors import safe_open

    with safe_open(str(head), framework="pt") as f:
        assert all(f.get_slice(k).get_dtype() == {"float32": "F32", "bfloat16": "BF16"}[dtype] for k in f.keys())
    from hedgespec.engine.eagle3 import Eagle3Drafter
    from hedgespec.models import load_target

    model, _ = load_target(TINY4)
    assert Eagle3Drafter.load(res.export_dir, model).config.draft_vocab_size == 256


def test_foreign_directories_are_not_overwritten(tmp_path: Path) -> None:
    export_dir = tmp_path / "pools" / "tiny" / "sql"
    export_dir.mkdir(parents=True)
    (export_dir / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"export directory .* hedgespec did not write"):
        train_drafter(compose_train(tmp_path, *tiny_overrides()))
    assert (export_dir / "notes.txt").read_text() == "mine" and sorted(os.listdir(export_dir)) == ["notes.txt"]
    run_dir = tmp_path / "outputs" / "tiny" / "math"
    run_dir.mkdir(parents=True)
    (run_dir / "data.bin").write_bytes(b"x")
    with pytest.raises(FileExistsError, match=r"run directory .* hedgespec did not write"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("domain=math")))
    assert sorted(os.listdir(run_dir)) == ["data.bin"]


def _env(**extra: str) -> dict[str, str]:
    """Subprocess env that imports this checkout's hedgespec even if another copy is installed."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def _cli(tmp_path: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(REPO / "train" / "run.py"), *tmp_overrides(tmp_path), *tiny_overrides(*overrides)]


@pytest.mark.slow
def test_resume_after_kill(tmp_path: Path) -> None:
    """Kill `train/run.py` after its step-4 checkpoint; the rerun resumes there and finishes at max_steps."""
    steps = ["train.specforge.training.max_steps=60", "train.specforge.training.save_interval=4"]
    env = _env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    ckpts = tmp_path / "outputs" / "tiny" / "sql" / "checkpoints"
    proc = subprocess.Popen(
        _cli(tmp_path, *steps), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.time() + 240
        while not (ckpts / "tiny-sql-step4" / "training_state.pt").is_file():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "no step-4 checkpoint in time"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    killed_at = latest_checkpoint(ckpts, "tiny-sql")
    assert killed_at is not None and 4 <= killed_at[1] < 60, killed_at
    state = json.loads((tmp_path / "outputs" / "tiny" / "sql" / "state.json").read_text())
    assert "features" in state["stages"] and "train" not in state["stages"]

    out = subprocess.run(_cli(tmp_path, *steps), env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    final = latest_checkpoint(ckpts, "tiny-sql")
    assert final is not None and final[1] == 60
    state = json.loads((tmp_path / "outputs" / "tiny" / "sql" / "state.json").read_text())
    assert state["stages"]["features"]["reused"] is True  # finished stage not redone
    steps_logged = _metric_steps(tmp_path / "outputs" / "tiny" / "sql")
    resumed = steps_logged[steps_logged.index(steps_logged[-1]) - (60 - killed_at[1]) + 1 :]
    assert resumed[0] == killed_at[1] + 1 and resumed[-1] == 60  # continued after the checkpoint, not from 1
    assert json.loads(out.stdout[out.stdout.index("{") :])["final_step"] == 60


@pytest.mark.slow
def test_wandb_offline_logging(tmp_path: Path) -> None:
    env = _env(WANDB_MODE="offline", WANDB_SILENT="true")
    out = subprocess.run(_cli(tmp_path, "logger=wandb"), env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "tiny" / "sql" / "wandb").rglob("offline-run-*"))
    assert runs, "no offline W&B run written"
    assert any(p.suffix == ".wandb" for r in runs for p in r.iterdir())


def test_the_target_is_freed_before_specforge_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No reference to the loaded target survives into training (then the CUDA cache it used can be handed back
    to SpecForge's torchrun workers): a weak reference to it is dead when ``specforge train`` starts."""
    import weakref

    import hedgespec.models
    import hedgespec.training.pipeline as pipeline

    refs: list[weakref.ref] = []
    real_load, real_main = hedgespec.models.load_target, pipeline.specforge_cli_main

    def load(*a, **k):
        model, tok = real_load(*a, **k)
        refs.append(weakref.ref(model))
        return model, tok

    def main(argv):
        assert refs and refs[0]() is None, "the target is still alive when SpecForge starts training"
        return real_main(argv)

    monkeypatch.setattr(hedgespec.models, "load_target", load)
    monkeypatch.setattr(pipeline, "specforge_cli_main", main)
    res = train_drafter(compose_train(tmp_path, *tiny_overrides("train.draft.init=target_head")))
    assert res.final_step == 6
