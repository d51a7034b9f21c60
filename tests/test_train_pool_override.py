"""train/run.py refuses a bare ``pool=<name>`` (serve's config group) before Hydra, with the ``train.pool=`` fix.

Run as a user runs it (its ``__main__``, in-process); docs/reliability.md's bad-input table has the row."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "train" / "run.py"


def _run(*args: str) -> int:
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    saved, sys.argv = sys.argv, [str(SCRIPT), *args]
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()
    return 0


@pytest.mark.parametrize(
    ("args", "value"),
    [
        (["pool=mypool"], "mypool"),
        (["domain=sql", "+pool=mypool", "target=tiny"], "mypool"),
        (["-m", "domain=sql,math", "pool=a,b"], "a,b"),
    ],
)
def test_bare_pool_override_names_the_train_pool_fix(args, value, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert _run(*args) == 2
    out = capsys.readouterr()
    lines = [x for x in out.err.splitlines() if x.strip()]
    assert len(lines) == 1, out.err  # one line, before Hydra says anything
    assert f"rerun with train.pool={value}" in lines[0]
    assert lines[0].startswith("error: ") and "pool=" in lines[0]
    assert "Could not override" not in out.out + out.err


def test_other_overrides_pass_the_check():
    check = runpy.run_path(str(SCRIPT), run_name="train_run")["pool_override_error"]
    ok = ["train.pool=mypool", "domain=sql", "paths.pools=pools2", "+train.pool_size=3", "-m", "pool", "poolx=1"]
    assert check(ok) is None
    assert check(ok + ["pool=x"]) is not None
    assert "train.pool=x" in check(["++pool=x"])
