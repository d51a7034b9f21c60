"""hedgespec.io: atomic files and directories leave either the old or the new content, never a mix or a temp."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hedgespec.io import atomic_dir, write_bytes_atomic, write_json_atomic, write_text_atomic


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def _fill(d: Path, text: str) -> None:
    (d / "a.txt").write_text(text)
    (d / "sub").mkdir()
    (d / "sub" / "b.txt").write_text(text.upper())


def test_atomic_dir_creates_parents_and_renames_into_place(tmp_path: Path) -> None:
    out = tmp_path / "x" / "y" / "out"
    with atomic_dir(out) as tmp:
        assert tmp.parent == out.parent and tmp.name.startswith(".out.") and tmp.name.endswith(".tmp")
        assert not out.exists()  # nothing at the destination until the block succeeds
        _fill(tmp, "new")
    assert (out / "a.txt").read_text() == "new" and (out / "sub" / "b.txt").read_text() == "NEW"
    assert _names(out.parent) == ["out"]


def test_atomic_dir_replaces_by_default(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with atomic_dir(out) as tmp:
        _fill(tmp, "new")
    assert _names(out) == ["a.txt", "sub"] and _names(tmp_path) == ["out"]


def test_atomic_dir_replaces_a_file_at_the_destination(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_text("a file")
    with atomic_dir(out) as tmp:
        _fill(tmp, "new")
    assert out.is_dir() and (out / "a.txt").read_text() == "new"


def test_atomic_dir_replace_false_keeps_the_first_writer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with atomic_dir(out, replace=False) as tmp:
        _fill(tmp, "second")
        with atomic_dir(out, replace=False) as other:  # a concurrent writer that finishes first
            _fill(other, "first")
    assert (out / "a.txt").read_text() == "first" and _names(tmp_path) == ["out"]


@pytest.mark.parametrize(("complete", "kept"), [(True, "old"), (False, "new")])
def test_atomic_dir_replace_callable_decides_at_commit_time(tmp_path: Path, complete: bool, kept: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old")
    seen: list[Path] = []

    def replace(existing: Path) -> bool:
        seen.append(existing)
        return not complete

    with atomic_dir(out, replace=replace) as tmp:
        assert seen == []  # asked only once the new copy is complete
        _fill(tmp, "new")
    assert seen == [out] and (out / "a.txt").read_text() == kept and _names(tmp_path) == ["out"]


def test_atomic_dir_replace_callable_not_asked_without_existing_path(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with atomic_dir(out, replace=lambda p: pytest.fail("asked although nothing exists")) as tmp:
        _fill(tmp, "new")
    assert (out / "a.txt").read_text() == "new"


def test_atomic_dir_check_replace_can_refuse(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("foreign")

    def refuse(existing: Path) -> None:
        raise FileExistsError(f"{existing} is not ours")

    with pytest.raises(FileExistsError, match="is not ours"), atomic_dir(out, check_replace=refuse) as tmp:
        _fill(tmp, "new")
    assert _names(out) == ["mine.txt"] and _names(tmp_path) == ["out"]


def test_atomic_dir_check_replace_not_called_when_keeping_or_creating(tmp_path: Path) -> None:
    def boom(existing: Path) -> None:
        raise AssertionError("check_replace called")

    out = tmp_path / "out"
    with atomic_dir(out, check_replace=boom) as tmp:  # nothing to replace
        _fill(tmp, "first")
    with atomic_dir(out, replace=False, check_replace=boom) as tmp:  # kept, not replaced
        _fill(tmp, "second")
    assert (out / "a.txt").read_text() == "first" and _names(tmp_path) == ["out"]


def test_atomic_dir_error_keeps_old_content_and_removes_the_temp(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        _fill(tmp, "old")
    with pytest.raises(RuntimeError, match="disk full"), atomic_dir(out) as tmp:
        _fill(tmp, "new")
        raise RuntimeError("disk full")
    assert (out / "a.txt").read_text() == "old" and _names(tmp_path) == ["out"]
    with pytest.raises(KeyboardInterrupt), atomic_dir(tmp_path / "never") as tmp:
        raise KeyboardInterrupt
    assert _names(tmp_path) == ["out"]


def test_write_text_and_bytes_atomic(tmp_path: Path) -> None:
    path = write_text_atomic("héllo\n", tmp_path / "d" / "f.txt")
    assert path.read_bytes() == "héllo\n".encode() and stat.S_IMODE(os.stat(path).st_mode) == 0o644
    write_bytes_atomic(b"\x00\x01", path)
    assert path.read_bytes() == b"\x00\x01" and stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert _names(path.parent) == ["f.txt"]


def test_write_atomic_failure_leaves_old_file(tmp_path: Path) -> None:
    path = write_text_atomic("old", tmp_path / "f.txt")
    with pytest.raises(TypeError):
        write_bytes_atomic("not bytes", path)  # type: ignore[arg-type]
    assert path.read_text() == "old" and _names(tmp_path) == ["f.txt"]


def test_write_json_atomic_sort_keys(tmp_path: Path) -> None:
    obj = {"b": 1, "a": {"d": 2, "c": 3}}
    default = write_json_atomic(obj, tmp_path / "default.json")
    assert default.read_text() == json.dumps(obj, indent=1)  # unchanged default: insertion order
    ordered = write_json_atomic(obj, tmp_path / "sorted.json", indent=2, sort_keys=True)
    assert ordered.read_text() == json.dumps(obj, indent=2, sort_keys=True)
