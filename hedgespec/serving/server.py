"""Process entry point that starts SGLang's HTTP server with hedgespec's additions.

    python -m hedgespec.serving.server <sglang launch_server args>     # what serve/launch.py runs

It does what ``python -m sglang.launch_server`` does (load plugins, parse args, ``run_server``) plus two
explicit, scoped steps:

* **HEDGESPEC registration** in this process (:func:`hedgespec.serving.plugin.register`); the scheduler
  processes SGLang spawns get it through the ``sglang.srt.plugins`` entry point.
* **device=cpu only** (``--device cpu`` in the args): ``SGLANG_USE_CPU_ENGINE=1``, the ``sgl_kernel`` shim
  directory (:mod:`hedgespec.serving.cpu_kernels`) prepended to ``PYTHONPATH`` so that every spawned
  process resolves ``import sgl_kernel`` to the pure-torch ops, and, while the arguments are resolved in
  this process, the platform fact ``has_amx=True`` so SGLang keeps the ``intel_amx`` attention backend
  (the only CPU backend with EAGLE support; it calls the shimmed ops). See docs/serving.md.

Both steps happen only inside :func:`main`; importing this module has no side effects (spawned children
re-import it as ``__mp_main__``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hedgespec.serving._sglang import require_sglang
from hedgespec.serving.plugin import register  # importing the plugin does not import sglang

CPU_SHIM_DIR = Path(__file__).resolve().parent / "_cpu_shim"


def is_cpu_argv(argv: Sequence[str]) -> bool:
    """True when the SGLang argv selects ``--device cpu``."""
    argv = list(argv)
    for i, a in enumerate(argv):
        if a == "--device" and i + 1 < len(argv) and argv[i + 1] == "cpu":
            return True
        if a == "--device=cpu":
            return True
    return False


def cpu_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables a ``device=cpu`` SGLang process tree needs (shim on PYTHONPATH, CPU engine)."""
    env = dict(os.environ if base is None else base)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CPU_SHIM_DIR) not in parts:
        parts.insert(0, str(CPU_SHIM_DIR))
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    return env


def _prepare_cpu_process() -> None:
    os.environ.update(cpu_environment())
    if str(CPU_SHIM_DIR) not in sys.path:
        sys.path.insert(0, str(CPU_SHIM_DIR))
    if "sglang" in sys.modules:  # is_cpu() is read at sglang import time
        raise RuntimeError("hedgespec.serving.server: sglang was imported before the CPU environment was set")


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    cpu = is_cpu_argv(argv)
    if cpu:
        _prepare_cpu_process()

    require_sglang()  # sglang is imported only here, after the CPU environment is set
    from sglang.launch_server import run_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import override_platform
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()
    register()
    server_args = prepare_server_args(argv)
    amx = override_platform(has_amx=True) if cpu else None
    if amx is not None:
        amx.install()
    try:
        run_server(server_args)
    finally:
        if amx is not None:
            amx.restore()
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
