"""Training under faults, on the tiny target through SpecForge: a failed or killed export, a kill during feature
capture, a damaged checkpoint. Each recovered run must end with the manifest entry of an uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from _train_helpers import REPO, compose_train, specforge_or_skip, tiny_overrides, tmp_overrides

specforge_or_skip()

import hedgespec.training.export as export_mod  # noqa: E402
from hedgespec.training.pipeline import train_drafter  # noqa: E402


def _entry(tmp: Path) -> str:
    """The pool's one drafter entry, with the run's root directory written as <root> (runs differ only there)."""
    raw = yaml.safe_load((tmp / "pools" / "tiny.yaml").read_text())
    assert [d["name"] for d in raw["drafters"]] == ["sql"]
    return json.dumps(raw["drafters"][0], sort_keys=True).replace(str(tmp), "<root>")


def _leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in (tmp / "pools").rglob("*.tmp"))


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted `python train/run.py domain=sql target=tiny train=tiny` (its root directory)."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("reference")
    train_drafter(compose_train(tmp, *tiny_overrides()))
    return tmp


@pytest.fixture(scope="module")
def reference(reference_run: Path) -> str:
    """The entry that run registered."""
    return _entry(reference_run)


def test_engine_refuses_a_truncated_export_naming_the_file(reference_run: Path, tmp_path: Path) -> None:
    """The reference engine's pool loader (hedgespec.build.build_pool) on a copy of the trained pool."""
    from hedgespec.build import build_pool
    from hedgespec.models import load_target
    from hedgespec.pools import CorruptCheckpointError

    pools = tmp_path / "pools"
    shutil.copytree(reference_run / "pools", pools)
    target = {"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}}  # what train=tiny trained on
    model, tok = load_target(target)
    cfg = {"pool": {"name": "tiny", "manifest": str(pools / "tiny.yaml")}, "target": target}
    assert build_pool(cfg, model, tok).names == ["sql"]  # the intact copy loads
    weights = pools / "tiny" / "sql" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(CorruptCheckpointError, match=rf"drafter 'sql': {weights} is truncated or corrupted"):
        build_pool(cfg, model, tok)


def test_export_failing_half_way_leaves_no_entry_and_no_directory(
    tmp_path: Path, reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Path] = []

    def fail(path: Path) -> None:  # SpecForge has written the export into the temporary directory; then it fails
        seen.append(path)
        assert (path / "model.safetensors").is_file()
        raise OSError("injected: disk full")

    monkeypatch.setattr(export_mod, "check_export", fail)
    with pytest.raises(OSError, match="injected"):
        train_drafter(compose_train(tmp_path, *tiny_overrides()))
    assert seen and not seen[0].exists()
    assert not (tmp_path / "pools" / "tiny" / "sql").exists() and _leftovers(tmp_path) == []
    assert not (tmp_path / "pools" / "tiny.yaml").exists()
    state = json.loads((tmp_path / "outputs" / "tiny" / "sql" / "state.json").read_text())
    assert "train" in state["stages"] and "export" not in state["stages"] and "register" not in state["stages"]

    monkeypatch.undo()
    again = train_drafter(compose_train(tmp_path, *tiny_overrides()))
    assert again.timings["train"] < 1.0  # training was not redone
    assert _entry(tmp_path) == reference


KILLERS = {
    # after SpecForge wrote the export into atomic_dir's temporary directory, before the rename
    "export": """
        import hedgespec.training.export as ex
        real = ex.check_export
        def killed(path):
            real(path)
            os.kill(os.getpid(), signal.SIGKILL)
        ex.check_export = killed
    """,
    # inside SpecForge's training loop, right after it saved the step-4 checkpoint (of 6 steps, saved every 2)
    "train": """
        import specforge.training.checkpoint as ck
        real = ck.CheckpointManager.save
        def killed(self, shared, step, *a, **k):
            out = real(self, shared, step, *a, **k)
            if step == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        ck.CheckpointManager.save = killed
    """,
    # after the third of the twelve feature records is written
    "features": """
        import torch
        real, n = torch.save, [0]
        def killed(obj, f, *a, **k):
            real(obj, f, *a, **k)
            n[0] += "data_" in str(f)
            if n[0] == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        torch.save = killed
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", sorted(KILLERS))
def test_sigkill_mid_stage_then_rerun_registers_the_same_entry(tmp_path: Path, reference: str, stage: str) -> None:
    script = "import os, runpy, signal, sys\n" + textwrap.dedent(KILLERS[stage])
    script += "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    argv = [str(REPO / "train" / "run.py"), *tmp_overrides(tmp_path), *tiny_overrides()]
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    assert not (tmp_path / "pools" / "tiny.yaml").exists()
    ledger = tmp_path / "outputs" / "tiny" / "sql" / "state.json"
    state = json.loads(ledger.read_text()) if ledger.is_file() else {"stages": {}}
    if stage == "export":  # killed inside the export: its temporary directory is left, the destination is not
        assert (
            "train" in state["stages"] and _leftovers(tmp_path) and not (tmp_path / "pools" / "tiny" / "sql").exists()
        )
    elif stage == "train":  # killed mid-training: features done, training not, the step-4 checkpoint written
        assert "features" in state["stages"] and "train" not in state["stages"]
    else:
        assert "features" not in state["stages"]

    torch.set_num_threads(1)
    res = train_drafter(compose_train(tmp_path, *tiny_overrides()))  # the same command again
    assert res.final_step == 6 and _leftovers(tmp_path) == []
    if stage == "train":  # SpecForge resumed from the step-4 checkpoint rather than starting again
        run_cfg = yaml.safe_load((tmp_path / "outputs" / "tiny" / "sql" / "run.yaml").read_text())
        assert str(run_cfg["training"]["resume_from"]).rstrip("/").endswith("step4"), run_cfg["training"]
    assert _entry(tmp_path) == reference


def test_damaged_training_checkpoint_is_named_before_resuming(tmp_path: Path, reference: str) -> None:
    """A run killed after its step-6 checkpoint but before the ledger recorded it, with that checkpoint damaged."""
    torch.set_num_threads(1)
    train_drafter(compose_train(tmp_path, *tiny_overrides()))
    run_dir = tmp_path / "outputs" / "tiny" / "sql"
    state = json.loads((run_dir / "state.json").read_text())
    for stage in ("train", "export", "register"):
        state["stages"].pop(stage)
    (run_dir / "state.json").write_text(json.dumps(state))
    ckpts = run_dir / "checkpoints"
    damaged = ckpts / "tiny-sql-step6" / "training_state.pt"
    blob = bytearray(damaged.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # one flipped byte inside a tensor record: the zip still opens
    damaged.write_bytes(bytes(blob))
    with pytest.raises(RuntimeError, match=rf"checkpoint file {damaged} is truncated or corrupted.*tiny-sql-step4"):
        train_drafter(compose_train(tmp_path, *tiny_overrides()))

    damaged.write_bytes(bytes(blob[: len(blob) // 3]))  # truncated
    with pytest.raises(RuntimeError, match=rf"checkpoint file {damaged} is truncated or corrupted"):
        train_drafter(compose_train(tmp_path, *tiny_overrides()))

    shutil.rmtree(damaged.parent)  # the fix the message gives: drop it (and the link) and resume from step 4
    (ckpts / "tiny-sql-latest").unlink()
    res = train_drafter(compose_train(tmp_path, *tiny_overrides()))
    assert res.final_step == 6
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[-2:] == [5, 6] and steps.count(5) == 2  # steps 5 and 6 were trained again, not 1..4
