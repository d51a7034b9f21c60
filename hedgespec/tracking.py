"""Pluggable metric loggers: ``none`` (default), ``jsonl`` (a file in the run dir) and ``wandb`` (offline by default).

A logger is opened when a job starts, so metrics arrive while it runs and a crash still leaves what was logged;
``log_artifact`` attaches files (results, plots, the pool manifest) to the run. Only this module imports wandb,
lazily, so nothing else pays for it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

LOGGERS = ("none", "jsonl", "wandb")
WANDB_MODES = ("offline", "online", "disabled")


class Logger(Protocol):
    def log(self, metrics: dict[str, Any], step: int | None = None) -> None: ...

    def log_image(self, key: str, path: str | Path) -> None: ...

    def log_artifact(self, name: str, kind: str, paths: Sequence[str | Path]) -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        return None

    def log_image(self, key: str, path: str | Path) -> None:
        return None

    def log_artifact(self, name: str, kind: str, paths: Sequence[str | Path]) -> None:
        return None

    def finish(self) -> None:
        return None


class JsonlLogger:
    """Appends one JSON object per ``log`` call to ``<run_dir>/metrics.jsonl``."""

    def __init__(self, run_dir: str | Path, config: dict[str, Any] | None = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")
        if config is not None:
            self._write({"config": config})

    def _write(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, default=str) + "\n")
        self._fh.flush()

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self._write({"step": step, **metrics})

    def log_image(self, key: str, path: str | Path) -> None:
        self._write({"image": key, "path": str(path)})

    def log_artifact(self, name: str, kind: str, paths: Sequence[str | Path]) -> None:
        self._write({"artifact": name, "type": kind, "paths": [str(p) for p in paths]})

    def finish(self) -> None:
        self._fh.close()


class WandbLogger:
    """wandb run in ``mode`` (``offline`` by default: never needs a network; ``wandb sync <run_dir>/wandb`` later).

    ``group`` gathers the runs of one sweep, ``tags`` label them (e.g. ``pool:smollm2``, ``selector:hedgespec``).
    """

    def __init__(
        self,
        run_dir: str | Path,
        config: dict[str, Any] | None = None,
        project: str = "hedgespec",
        mode: str = "offline",
        name: str | None = None,
        group: str | None = None,
        tags: Sequence[str] | None = None,
        job_type: str | None = None,
    ) -> None:
        if mode not in WANDB_MODES:
            raise ValueError(f"logger.mode={mode!r} is unknown; expected one of {WANDB_MODES}")
        try:
            import wandb
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("logger=wandb needs wandb: pip install -e '.[track]'") from err
        os.environ.setdefault("WANDB_SILENT", "true")
        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            mode=mode,
            dir=str(run_dir),
            config=config,
            name=name,
            group=group,
            tags=[str(t)[:64] for t in tags] if tags else None,  # W&B limits a tag to 64 characters
            job_type=job_type,
            reinit="finish_previous",  # one process may run several jobs (Hydra multirun): close the last one
        )

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.run.log(metrics, step=step)

    def log_image(self, key: str, path: str | Path) -> None:
        self.run.log({key: self._wandb.Image(str(path))})

    def log_artifact(self, name: str, kind: str, paths: Sequence[str | Path]) -> None:
        art = self._wandb.Artifact(_artifact_name(name), type=kind)
        for p in paths:
            p = Path(p)
            if p.is_dir():
                art.add_dir(str(p), name=p.name)
            elif p.is_file():
                art.add_file(str(p))
        self.run.log_artifact(art)

    def finish(self) -> None:
        self.run.finish()


def _artifact_name(name: str) -> str:
    """W&B artifact names allow letters, digits, ``-``, ``_`` and ``.``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "artifact"


def make_logger(kind: str, run_dir: str | Path, config: dict[str, Any] | None = None, /, **kwargs: Any) -> Logger:
    """The ``logger=`` option ``kind``; ``kwargs`` go to the wandb run (``name`` is the run's display name)."""
    if kind == "none":
        return NullLogger()
    if kind == "jsonl":
        return JsonlLogger(run_dir, config)
    if kind == "wandb":
        return WandbLogger(run_dir, config, **kwargs)
    raise ValueError(f"unknown logger {kind!r}; expected one of {LOGGERS}")
