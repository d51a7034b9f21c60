"""What a committed benchmark result records about how it was made: the command line and the machine.

Imports neither torch nor sglang: library versions come from the installed distributions' metadata.
"""

from __future__ import annotations

import os
import platform
import shlex
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from hedgespec.io import portable_paths

#: the libraries whose versions a result records (absent ones are left out)
LIBRARIES = ("torch", "transformers", "sglang", "specforge")


def command_line(script: str, overrides: Sequence[str]) -> str:
    """``python <script> <overrides>`` as a shell could run it again (quoted), without machine-local paths."""
    return portable_paths(shlex.join(["python", script, *overrides]))


def cpu_model(cpuinfo: str | None = None) -> dict[str, Any]:
    """The CPU's model name and whether it has AMX tiles or AVX-512 BF16 (from ``/proc/cpuinfo`` where it exists)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    flags = set(fields.get("flags", "").split())
    return {
        "model": fields.get("model name") or platform.processor() or platform.machine(),
        "amx": "amx_tile" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
    }


def machine_info() -> dict[str, Any]:
    """CPU model and features, logical CPUs, Python and the installed versions of :data:`LIBRARIES`."""
    versions = {}
    for lib in LIBRARIES:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            continue
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(), "versions": versions}
