"""One drafter trained on several nodes: the topology each node resolves, and node 0's hand-off to the others.

SpecForge trains over several nodes with torchrun (its ``deployment.trainer`` block: ``nnodes``,
``master_addr``, ``master_port``, and each node's rank through ``specforge train --node-rank``). What comes
before training (loading the target, data, features, vocabulary mapping) and after it (export, register) must
run once, so the nodes of one launch split the work:

* node 0 runs every stage; just before SpecForge starts it writes the hand-off file
  ``<run dir>/nodes/<launch id>.json`` (``status: train`` and the ``run.yaml`` to train from), or
  ``status: done`` when the run is already trained, or ``status: failed`` with its error when a stage fails;
* every other node loads nothing: it waits for that file, then runs SpecForge's torchrun with its own rank
  against the same ``run.yaml`` (features, target head and checkpoints are read from and written to the run and
  cache directories, which every node must see on a shared filesystem).

The launch id names one attempt of one launch, the same on every node (under SLURM the job id and its restart
count, so a requeued job never reads the hand-off of its previous attempt).

Where the values come from, first found wins: ``train.rendezvous.*`` in the config; SLURM's job environment
(``SLURM_NODEID``, the first host of ``SLURM_JOB_NODELIST``, ``SLURM_JOB_ID``); torchrun's variables
(``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hedgespec.io import write_json_atomic

DEFAULT_PORT = 29500
DEFAULT_WAIT_S = 86400.0
DEFAULT_STALE_S = 600.0  # node 0's heartbeat unchanged this long: it is gone (killed, out of memory)
BEAT_PERIOD_S = 30.0
HANDOFF_DIR = "nodes"
#: what a hand-off file's ``status`` may say
STATUSES = ("train", "done", "failed")
_LAUNCH_ID = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Topology:
    """Where this process sits in one drafter's launch: ``nodes`` nodes of ``train.gpus`` GPUs each."""

    nodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int = DEFAULT_PORT
    launch_id: str | None = None
    wait_s: float = DEFAULT_WAIT_S
    stale_s: float = DEFAULT_STALE_S

    @property
    def multi(self) -> bool:
        return self.nodes > 1

    @property
    def leader(self) -> bool:
        return self.node_rank == 0

    def specforge_trainer(self) -> dict[str, Any]:
        """The ``deployment.trainer`` settings shared by every node (each node's rank goes on its command line)."""
        if not self.multi:
            return {}
        return {"nnodes": self.nodes, "master_addr": self.master_addr, "master_port": self.master_port}


def _int(value: Any, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
        raise ValueError(f"{what}={value!r} must be an int >= {low}")
    if int(value) < low:
        raise ValueError(f"{what}={value!r} must be an int >= {low}")
    return int(value)


def check_nodes(train: Mapping[str, Any]) -> int:
    """``train.nodes`` (default 1) as an int >= 1."""
    return _int(train.get("nodes", 1), "train.nodes", 1)


def slurm_first_host(nodelist: str) -> str:
    """The first host of a ``SLURM_JOB_NODELIST`` (``gpu[007-008],gpu012`` -> ``gpu007``), by submitit's parser."""
    try:
        from submitit.slurm.slurm import _parse_node_list
    except ImportError as e:  # submitit comes with Hydra's submitit launcher
        raise ValueError(
            f"SLURM_JOB_NODELIST={nodelist!r} needs submitit to be read (bash scripts/install.d/30-train.sh); "
            "or set train.rendezvous.master_addr=<node 0's host>"
        ) from e
    hosts = _parse_node_list(nodelist)
    if not hosts or not hosts[0]:
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r} names no host; set train.rendezvous.master_addr")
    return hosts[0]


def resolve_topology(
    train: Mapping[str, Any], env: Mapping[str, str] | None = None, planning: bool = False
) -> Topology:
    """This process's :class:`Topology` from ``train.nodes`` and ``train.rendezvous`` (then SLURM, then torchrun
    variables in ``env``). ``planning``: values only a running job knows are shown as placeholders instead of
    being refused. Raises ValueError naming the setting to fix."""
    env = os.environ if env is None else env
    nodes = check_nodes(train)
    rv = dict(train.get("rendezvous") or {})
    unknown = sorted(set(rv) - {"node_rank", "master_addr", "master_port", "launch_id", "wait_s", "stale_s"})
    if unknown:
        raise ValueError(
            f"train.rendezvous has unknown keys {unknown}; expected node_rank, master_addr, master_port, "
            "launch_id, wait_s, stale_s"
        )
    wait_s, stale_s = (_seconds(rv, k, d) for k, d in (("wait_s", DEFAULT_WAIT_S), ("stale_s", DEFAULT_STALE_S)))
    tasks = env.get("SLURM_NTASKS")
    if nodes == 1:
        if "SLURM_PROCID" in env and tasks and tasks.isdigit() and int(tasks) > 1:
            raise ValueError(
                f"this SLURM job runs {tasks} tasks of one drafter's run but train.nodes=1: every task would train "
                "the same drafter; set train.nodes=<the job's nodes> (with one task per node) or run one task"
            )
        return Topology(wait_s=wait_s, stale_s=stale_s)
    slurm = "SLURM_JOB_ID" in env
    if slurm and not planning:
        have = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
        if have and have.isdigit() and int(have) != nodes:
            raise ValueError(
                f"train.nodes={nodes} but this SLURM job has {have} node(s); "
                f"ask for {nodes} (hydra.launcher.nodes follows train.nodes) or set train.nodes={have}"
            )
        if tasks and tasks.isdigit() and "SLURM_PROCID" in env and int(tasks) != nodes:
            raise ValueError(
                f"this SLURM job runs {tasks} tasks on {nodes} nodes; train.nodes>1 needs one task per node "
                "(hydra.launcher.tasks_per_node=1): each node's task starts its own torchrun"
            )

    def first(*candidates: Any) -> Any:
        return next((c for c in candidates if c not in (None, "")), None)

    rank = first(rv.get("node_rank"), env.get("SLURM_NODEID") if slurm else None, env.get("NODE_RANK"))
    addr = first(rv.get("master_addr"), env.get("MASTER_ADDR"))
    if addr is None and slurm and env.get("SLURM_JOB_NODELIST"):
        addr = slurm_first_host(env["SLURM_JOB_NODELIST"])
    port = first(rv.get("master_port"), env.get("MASTER_PORT"), DEFAULT_PORT)
    launch = first(rv.get("launch_id"))
    if launch is None and slurm:
        launch = f"{env['SLURM_JOB_ID']}.{env.get('SLURM_RESTART_COUNT') or 0}"
    if planning:
        rank = 0 if rank is None else rank
        addr = addr or "NODE0_HOST"
        launch = launch or "LAUNCH_ID"
    missing = [
        f"train.rendezvous.{name}={hint}"
        for name, value, hint in (
            ("node_rank", rank, "<0..nodes-1>"),
            ("master_addr", addr, "<node 0's host>"),
            ("launch_id", launch, "<one value for every node of this launch, e.g. the job id>"),
        )
        if value is None
    ]
    if missing:
        raise ValueError(
            f"train.nodes={nodes} outside a SLURM job needs, on every node: {', '.join(missing)} "
            "(or torchrun's NODE_RANK / MASTER_ADDR in the environment)"
        )
    rank = _int(rank, "train.rendezvous.node_rank", 0)
    if rank >= nodes:
        raise ValueError(f"train.rendezvous.node_rank={rank} must be smaller than train.nodes={nodes}")
    port = _int(port, "train.rendezvous.master_port", 1)
    if port > 65535:
        raise ValueError(f"train.rendezvous.master_port={port} must be at most 65535")
    if not planning and not _LAUNCH_ID.fullmatch(str(launch)):
        raise ValueError(f"train.rendezvous.launch_id={launch!r}: use letters, digits, '_', '-', '.' only")
    return Topology(nodes, rank, str(addr), port, str(launch), wait_s, stale_s)


def _seconds(rv: Mapping[str, Any], key: str, default: float) -> float:
    value = rv.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"train.rendezvous.{key}={value!r} must be a number of seconds > 0")
    return float(value)


# -- node 0's hand-off ----------------------------------------------------------------------------------------


def handoff_path(run_dir: Path, topology: Topology) -> Path:
    return Path(run_dir) / HANDOFF_DIR / f"{topology.launch_id}.json"


def beat_path(run_dir: Path, topology: Topology) -> Path:
    return Path(run_dir) / HANDOFF_DIR / f"{topology.launch_id}.beat"


class Heartbeat:
    """Node 0, while it prepares: a counter in ``<run dir>/nodes/<launch id>.beat``, raised every ``period_s``.

    A node 0 that is killed (out of memory, preempted) cannot write a ``failed`` hand-off; the waiting nodes see
    its counter stop and give up after ``train.rendezvous.stale_s`` instead of ``wait_s``. A counter, not a
    time stamp, so the nodes' clocks need not agree. A no-op on one node."""

    def __init__(self, run_dir: Path, topology: Topology, period_s: float = BEAT_PERIOD_S):
        self.path, self.period_s, self.on = beat_path(run_dir, topology), period_s, topology.multi
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hedgespec-heartbeat", daemon=True)

    def _run(self) -> None:
        beat = 0
        while True:
            beat += 1
            try:  # the run directory may be replaced under it (train.overwrite=true): make it again
                self.path.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic({"beat": beat}, self.path)
            except OSError:
                pass  # a full or flaky shared disk: the next beat tries again
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> Heartbeat:
        if self.on:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on:
            self._stop.set()
            self._thread.join()


def announce(run_dir: Path, topology: Topology, status: str, **info: Any) -> Path | None:
    """Node 0: tell the other nodes of this launch to ``train`` (with ``run_yaml``), that the run is ``done``, or
    that it ``failed`` (with ``error``). A no-op on one node."""
    if status not in STATUSES:
        raise ValueError(f"hand-off status {status!r}; expected one of {', '.join(STATUSES)}")
    if not topology.multi:
        return None
    path = handoff_path(run_dir, topology)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json_atomic({"status": status, "nodes": topology.nodes, **info}, path, indent=2, sort_keys=True)


def await_leader(
    run_dir: Path,
    topology: Topology,
    poll_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Nodes > 0: wait for node 0's hand-off and return it (``status`` ``train`` or ``done``); raise RuntimeError
    when node 0 failed, when its heartbeat (:class:`Heartbeat`) stood still for ``topology.stale_s`` seconds, when
    the hand-off is for another node count, or after ``topology.wait_s`` seconds."""
    path, beats = handoff_path(run_dir, topology), beat_path(run_dir, topology)
    start = clock()
    deadline = start + topology.wait_s
    last_beat, beat_seen = None, start
    while True:
        if path.is_file():
            record = json.loads(path.read_text())
            break
        now = clock()
        beat = _read_beat(beats)
        if beat != last_beat:
            last_beat, beat_seen = beat, now
        elif beat is not None and now - beat_seen >= topology.stale_s:
            raise RuntimeError(
                f"node 0's heartbeat {beats} stood still for {now - beat_seen:.0f} s before its hand-off: node 0 "
                "stopped (killed, out of memory?); see its log. (train.rendezvous.stale_s sets the wait)"
            )
        if now >= deadline:
            raise RuntimeError(
                f"node {topology.node_rank} waited {topology.wait_s:.0f} s for node 0's hand-off {path}, which did "
                "not appear: is node 0 running with the same train.rendezvous.launch_id, and do all nodes see "
                "paths.outputs on one shared filesystem? (train.rendezvous.wait_s sets the wait)"
            )
        sleep(poll_s)
    if record.get("status") == "failed":
        raise RuntimeError(f"node 0 failed, so node {topology.node_rank} does not train: {record.get('error')}")
    if record.get("nodes") != topology.nodes:
        raise RuntimeError(
            f"node 0's hand-off {path} is for train.nodes={record.get('nodes')}, this node has "
            f"train.nodes={topology.nodes}: give every node the same command"
        )
    if record.get("status") not in ("train", "done"):
        raise RuntimeError(f"node 0's hand-off {path} has status {record.get('status')!r}")
    return record


def _read_beat(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["beat"])
    except (OSError, ValueError, KeyError, TypeError):  # not written yet (or being replaced)
        return None


def check_visible(run_yaml: Path, topology: Topology) -> dict[str, Any]:
    """Nodes > 0: the ``run.yaml`` node 0 wrote, and the files it trains from, exist here; returns the config."""
    import yaml

    if not run_yaml.is_file():
        raise FileNotFoundError(
            f"node {topology.node_rank} does not see {run_yaml}, which node 0 wrote: put paths.outputs and "
            "paths.cache on a filesystem every node mounts at the same path"
        )
    cfg = yaml.safe_load(run_yaml.read_text())
    for key, path in (
        ("data.hidden_states_path", (cfg.get("data") or {}).get("hidden_states_path")),
        ("model.target_model_path", (cfg.get("model") or {}).get("target_model_path")),
    ):
        if path and not Path(path).exists():
            raise FileNotFoundError(
                f"node {topology.node_rank} does not see {key}={path}, which node 0 wrote: put paths.cache and "
                "paths.outputs on a filesystem every node mounts at the same path"
            )
    return cfg


# -- the commands SpecForge will run ----------------------------------------------------------------------------


def specforge_launches(sf_config: Any, config_path: str, topology: Topology) -> dict[str, str]:
    """Per node, the process SpecForge's own launch planner starts for ``specforge train --config config_path``
    (``python`` stands for the interpreter running ``train/run.py``; world size 1 trains in that process)."""
    import sys

    from specforge.launch_plan import build_launch_plan

    def shown(argv: Any) -> str:
        return shlex.join("python" if a == sys.executable else str(a) for a in argv)

    out = {}
    for rank in range(topology.nodes):
        plan = build_launch_plan(sf_config, config_path=config_path, node_rank=rank if topology.multi else None, env={})
        if plan.commands:
            out[f"node {rank}"] = " && ".join(shown(c.argv) for c in plan.commands)
        else:  # SpecForge's plan for one process is the worker itself, which train/run.py runs in-process
            out[f"node {rank}"] = shown(["specforge", "train", "--config", config_path]) + "   # in this process"
    return out
