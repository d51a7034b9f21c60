"""Training progress bar and metric capture around SpecForge's console logger.

SpecForge prints one ``step N: {metric: value, ...}`` line per ``training.log_interval`` optimizer steps (its
own tqdm bar only appears on an interactive terminal).  :class:`MetricTee` sits on ``sys.stdout`` during the
in-process run: metric lines advance a tqdm bar and are appended to ``metrics.jsonl``; anything else passes
through unchanged. With ``train.gpus > 1`` SpecForge starts ``torchrun`` and the metric lines come from its
worker processes, which write to file descriptor 1 and never see ``sys.stdout``; :func:`capture_fd_stdout` then
routes descriptor 1 through the same tee for the duration of the run.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from tqdm.auto import tqdm

_STEP_LINE = re.compile(r"^step (\d+): (\{.*\})\s*$")


class MetricTee(io.TextIOBase):
    """A ``sys.stdout`` stand-in that turns SpecForge metric lines into a bar + JSONL records."""

    def __init__(self, out: TextIO, jsonl: Path, total: int | None, initial: int = 0, progress: bool = True):
        self._out = out
        self._lock = threading.RLock()
        self._jsonl = open(jsonl, "a")
        self._buf = ""
        self.last: dict[str, Any] = {}
        self.last_step: int | None = None
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc="train",
            unit="step",
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def write(self, s: str) -> int:
        with self._lock:  # the main thread and capture_fd_stdout's reader may both write
            self._buf += s
            while "\n" in self._buf:
                line, self._buf = self._buf.split("\n", 1)
                self._line(line)
        return len(s)

    def _line(self, line: str) -> None:
        m = _STEP_LINE.match(line)
        if not m:
            self._out.write(line + "\n")
            return
        step = int(m.group(1))
        try:
            metrics = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            self._out.write(line + "\n")
            return
        self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self._jsonl.flush()
        self.bar.update(max(0, step - self.bar.n))
        shown = {k: metrics[k] for k in ("loss", "acc_0", "ploss_0") if isinstance(metrics.get(k), float)}
        self.bar.set_postfix({k: f"{v:.3f}" for k, v in shown.items()}, refresh=False)
        self.last, self.last_step = metrics, step

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        if self._buf:
            self._line(self._buf)
            self._buf = ""
        self.bar.close()
        self._jsonl.close()
        super().close()


@contextlib.contextmanager
def capture_fd_stdout(tee: MetricTee) -> Iterator[None]:
    """Route file descriptor 1 (what child processes such as torchrun's workers inherit) through ``tee``.

    The tee must write its pass-through lines elsewhere than descriptor 1 (its ``out`` is re-pointed at a copy
    of the original descriptor here), or they would come back through the pipe.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    read_fd, write_fd = os.pipe()
    original_out = tee._out
    tee._out = os.fdopen(os.dup(saved), "w", buffering=1, errors="replace")
    os.dup2(write_fd, 1)
    os.close(write_fd)

    def pump() -> None:
        with os.fdopen(read_fd, "r", errors="replace") as f:
            for line in f:
                tee.write(line)

    reader = threading.Thread(target=pump, name="specforge-stdout", daemon=True)
    reader.start()
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)  # closes the pipe's last write end held here: the reader sees EOF
        os.close(saved)
        reader.join(timeout=30)
        tee._out.flush()
        tee._out.close()
        tee._out = original_out


def summarize(metrics: dict[str, Any]) -> dict[str, float]:
    """Keep the scalar training metrics worth recording in a pool manifest (loss, acc_i, ploss_i, ...)."""
    keep: dict[str, float] = {}
    for k, v in metrics.items():
        if k.startswith("perf/") or k == "lr":
            continue
        if isinstance(v, (int, float)):
            keep[k] = round(float(v), 6)
        elif isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
            keep[k] = [round(float(x), 6) for x in v]  # type: ignore[assignment]
    return keep
