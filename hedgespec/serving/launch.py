"""Start, wait for and stop an SGLang server for a pool (the library side of ``serve/launch.py``).

:func:`serve` builds the plan (:func:`hedgespec.serving.argv.build_plan`), prints the command for
``dry_run=true``, or starts ``python -m hedgespec.serving.server`` as a child process, waits for
``/health_generate``, prints the OpenAI-compatible base URL and then waits on the server (Ctrl-C stops it).
:class:`ServerProcess` is the same thing as a context manager for tests and benchmarks.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hedgespec.serving.argv import ServePlan, build_plan


def merged_env(plan: ServePlan, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the plan's variables; PYTHONPATH is prepended."""
    env = dict(os.environ if base is None else base)
    for k, v in plan.env.items():
        if k == "PYTHONPATH" and env.get("PYTHONPATH"):
            env[k] = v + os.pathsep + env["PYTHONPATH"]
        else:
            env[k] = v
    return env


class ServerProcess:
    """A running server: ``with ServerProcess(plan, log_path) as srv: ...`` (always stopped on exit)."""

    def __init__(
        self, plan: ServePlan, log_path: str | os.PathLike[str] | None = None, startup_timeout_s: float = 600.0
    ) -> None:
        self.plan, self.startup_timeout_s = plan, startup_timeout_s
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> ServerProcess:
        if port_in_use(self.plan.host, self.plan.port):
            raise RuntimeError(
                f"{self.plan.host}:{self.plan.port} is already in use (another server?); pick another "
                "port, e.g. port=30001"
            )
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            self.plan.argv,
            env=merged_env(self.plan),
            stdout=self._log or None,
            stderr=subprocess.STDOUT if self._log else None,
            start_new_session=True,
        )
        try:
            self.wait_ready()
        except BaseException:  # startup failure, timeout or Ctrl-C: never leave a half-started server behind
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        url = self.plan.base_url + "/health_generate"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"SGLang server exited with code {self.proc.returncode} during startup"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(
            f"SGLang server not healthy after {self.startup_timeout_s:.0f} s"
            + (f"; see {self.log_path}" if self.log_path else "")
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the server's own process group (start_new_session)
                self.proc.wait(timeout=timeout_s)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host if host not in ("0.0.0.0", "") else "127.0.0.1", port)) == 0


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def serve(cfg: Any) -> ServePlan:
    """Run the server described by a composed ``conf/serve.yaml`` (or print it with ``dry_run=true``)."""
    dry_run = bool(cfg.get("dry_run", False))
    plan = build_plan(cfg, prepare=not dry_run)  # a dry run converts nothing: it prints where the target is read
    for note in plan.notes:
        print(f"note: {note}", flush=True)
    if dry_run:
        print(plan.command())
        return plan
    from hedgespec.serving._sglang import require_sglang

    require_sglang()
    srv = ServerProcess(plan, cfg.get("log_path"), float(cfg.get("startup_timeout_s", 600)))
    print(f"starting: {plan.command()}", flush=True)
    # SIGTERM/SIGINT (also when started in the background, where SIGINT is ignored) stop the server too
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    with srv:
        print(
            f"OpenAI-compatible base URL: {plan.openai_base_url}  (model: {plan.target_path}, "
            f"algorithm {plan.algorithm}, selector {plan.selector}, drafters {plan.drafter_names})",
            flush=True,
        )
        try:
            srv.proc.wait()
        except KeyboardInterrupt:
            pass
    return plan


def plain_server(
    target: str,
    device: str = "cpu",
    port: int = 30000,
    concurrency: int = 16,
    dtype: str | None = "bfloat16",
    max_total_tokens: int | None = None,
    log_path: str | os.PathLike[str] | None = None,
    startup_timeout_s: float = 600.0,
) -> ServerProcess:
    """A not-yet-started plain SGLang server of a registry ``target`` (``selector=none``, no drafters), sized for
    ``concurrency`` requests at once: what regeneration drives (``data_recipes.regenerate`` with its ``url``)."""
    cfg = {
        "device": device,
        "port": port,
        "pool": {"name": target, "target": target},  # the target alone: no manifest needed
        "selector": {"name": "none"},
        "decoding": {"mode": "chain", "num_steps": 1, "topk": 1, "num_draft_tokens": 2},  # unused by plain serving
        "max_running_requests": concurrency,
        "max_total_tokens": max_total_tokens,
        "dtype": dtype,
    }
    return ServerProcess(build_plan(cfg, prepare=True), log_path, startup_timeout_s)
