"""Checks on the Hydra launcher a training multirun uses, made in the submitting process before any job starts.

``conf/train.yaml`` registers :class:`LauncherCheck` as a Hydra callback; ``on_multirun_start`` runs before the
sweeper hands the jobs to the launcher, so a SLURM launcher on a machine without SLURM fails here with the cause,
instead of inside submitit after the sweep directory was made.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

from hydra.experimental.callback import Callback

#: the submitit plugin's launcher classes (``hydra/launcher=slurm`` or ``=submitit_slurm``)
SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def check_launcher(launcher: Any, which: Any = shutil.which) -> None:
    """Refuse a SLURM launcher where SLURM's ``sbatch`` is not on PATH; a no-op for every other launcher."""
    target = str((launcher or {}).get("_target_", ""))
    if target != SLURM_LAUNCHER:
        return
    if which("sbatch") is None:
        raise RuntimeError(
            "hydra/launcher=slurm submits each run with SLURM's sbatch, which is not on PATH here (no SLURM on "
            "this machine): run the command on the cluster's login node, or drop hydra/launcher=slurm to train "
            "the runs one after another on this machine"
        )


class LauncherCheck(Callback):
    """Hydra callback: :func:`check_launcher` on the multirun's launcher before any job is launched.

    Hydra turns an exception raised in a callback into a warning and goes on, so a refusal is printed and ends
    the process with exit code 2 (``SystemExit`` passes through Hydra's handlers).
    """

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        try:
            check_launcher(config.hydra.launcher)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from e
