"""One drafter on several nodes: each node's topology (config, SLURM, torchrun variables), node 0's hand-off, the
per-node commands SpecForge's launcher runs, and the node that only joins training.

No test starts a multi-node torchrun (that needs GPUs and nodes); the commands are checked by SpecForge's own
planner (``specforge train --plan``) and by torchrun's own argument parser.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _train_helpers import CONVERSATIONS, compose_train, specforge_or_skip

from hedgespec.training.nodes import (
    Topology,
    announce,
    await_leader,
    handoff_path,
    resolve_topology,
    slurm_first_host,
)

SLURM_NODE1 = {
    "SLURM_JOB_ID": "4242",
    "SLURM_RESTART_COUNT": "1",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_NODELIST": "gpu[007-008]",
}
TWO = {"nodes": 2}


def test_one_node_is_the_default_and_sets_nothing_in_specforge() -> None:
    topo = resolve_topology({}, env={})
    assert topo == Topology() and topo.leader and not topo.multi
    assert topo.specforge_trainer() == {}


def test_a_slurm_job_gives_rank_host_and_an_attempt_scoped_launch_id() -> None:
    topo = resolve_topology(TWO, env=SLURM_NODE1)
    assert (topo.nodes, topo.node_rank, topo.master_addr, topo.master_port) == (2, 1, "gpu007", 29500)
    assert topo.launch_id == "4242.1"  # a requeued job (restart count 1) never reads attempt 0's hand-off
    assert topo.specforge_trainer() == {"nnodes": 2, "master_addr": "gpu007", "master_port": 29500}


@pytest.mark.parametrize(
    ("nodelist", "first"), [("gpu[007-008]", "gpu007"), ("a12,b[3-4]", "a12"), ("node-[09,11]", "node-09")]
)
def test_first_host_of_a_slurm_node_list(nodelist: str, first: str) -> None:
    assert slurm_first_host(nodelist) == first


def test_the_config_wins_over_slurm_and_torchrun_variables() -> None:
    rv = {"node_rank": 0, "master_addr": "head", "master_port": 1234, "launch_id": "try-3"}
    env = {**SLURM_NODE1, "MASTER_ADDR": "other", "NODE_RANK": "1"}
    assert resolve_topology({"nodes": 2, "rendezvous": rv}, env=env) == Topology(2, 0, "head", 1234, "try-3")


def test_torchrun_variables_outside_slurm() -> None:
    env = {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600"}
    topo = resolve_topology({"nodes": 2, "rendezvous": {"launch_id": "x"}}, env=env)
    assert topo == Topology(2, 1, "10.0.0.1", 29600, "x")


@pytest.mark.parametrize(
    ("train", "env", "message"),
    [
        ({"nodes": 0}, {}, r"train\.nodes=0 must be an int >= 1"),
        ({"nodes": "two"}, {}, r"train\.nodes='two' must be an int"),
        ({"nodes": True}, {}, r"train\.nodes=True must be an int"),
        (TWO, {}, r"train\.rendezvous\.node_rank=.*train\.rendezvous\.master_addr=.*train\.rendezvous\.launch_id="),
        ({"nodes": 2, "rendezvous": {"node_rank": 2}}, SLURM_NODE1, r"node_rank=2 must be smaller than train\.nodes=2"),
        ({"nodes": 3}, SLURM_NODE1, r"train\.nodes=3 but this SLURM job has 2 node\(s\)"),
        (TWO, {**SLURM_NODE1, "SLURM_NTASKS": "4"}, r"runs 4 tasks on 2 nodes.*one task per node"),
        ({}, {**SLURM_NODE1, "SLURM_PROCID": "0"}, r"runs 2 tasks of one drafter's run but train\.nodes=1"),
        ({"nodes": 2, "rendezvous": {"bogus": 1}}, SLURM_NODE1, r"unknown keys \['bogus'\]"),
        ({"nodes": 2, "rendezvous": {"launch_id": "a/b"}}, SLURM_NODE1, r"launch_id='a/b'"),
        ({"nodes": 2, "rendezvous": {"master_port": 70000}}, SLURM_NODE1, r"master_port=70000 must be at most"),
        ({"nodes": 2, "rendezvous": {"stale_s": 0}}, SLURM_NODE1, r"stale_s=0 must be a number of seconds > 0"),
        ({"rendezvous": {"wait_s": "1h"}}, {}, r"wait_s='1h' must be a number of seconds"),
    ],
)
def test_bad_topologies_name_the_setting(train: dict, env: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_topology(train, env=env)


# -- node 0's hand-off -------------------------------------------------------------------------------------------


def _node(rank: int, launch: str = "job-1", wait_s: float = 30.0) -> Topology:
    return Topology(2, rank, "127.0.0.1", 29500, launch, wait_s)


def test_one_node_writes_no_hand_off(tmp_path: Path) -> None:
    assert announce(tmp_path, Topology(), "train", run_yaml="r.yaml") is None
    assert not any(tmp_path.iterdir())


def test_a_waiting_node_gets_node_0s_hand_off(tmp_path: Path) -> None:
    def leader() -> None:
        time.sleep(0.3)
        announce(tmp_path, _node(0), "train", run_yaml="run.yaml", key="k")

    t = threading.Thread(target=leader)
    t.start()
    record = await_leader(tmp_path, _node(1), poll_s=0.05)
    t.join()
    assert record == {"status": "train", "nodes": 2, "run_yaml": "run.yaml", "key": "k"}
    assert handoff_path(tmp_path, _node(1)) == tmp_path / "nodes" / "job-1.json"


def test_node_0s_failure_reaches_the_waiting_nodes(tmp_path: Path) -> None:
    announce(tmp_path, _node(0), "failed", error="FileNotFoundError: no answers")
    with pytest.raises(RuntimeError, match="node 0 failed, so node 1 does not train: FileNotFoundError: no answers"):
        await_leader(tmp_path, _node(1), poll_s=0.01)


def test_another_launchs_hand_off_is_not_read_and_the_wait_ends(tmp_path: Path) -> None:
    announce(tmp_path, _node(0, launch="job-1"), "train", run_yaml="old.yaml")
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(RuntimeError, match=r"waited 30 s for node 0's hand-off .*job-2\.json.*wait_s"):
        await_leader(tmp_path, _node(1, launch="job-2"), poll_s=5.0, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 30.0


def test_a_hand_off_for_another_node_count_is_refused(tmp_path: Path) -> None:
    announce(tmp_path, Topology(4, 0, "h", 29500, "job-1"), "train", run_yaml="r.yaml")
    with pytest.raises(RuntimeError, match=r"train\.nodes=4, this node has train\.nodes=2"):
        await_leader(tmp_path, _node(1), poll_s=0.01)


# -- through train/run.py's entry point -----------------------------------------------------------------------------


@pytest.fixture
def no_target_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    import hedgespec.models

    def refuse(*a, **k):
        raise AssertionError("load_target was called")

    monkeypatch.setattr(hedgespec.models, "load_target", refuse)


def _torchrun_args(command: str) -> object:
    """``python -m torch.distributed.run <args>`` parsed by torchrun's own parser."""
    import shlex

    from torch.distributed.run import get_args_parser

    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "torch.distributed.run"]
    return get_args_parser().parse_args(argv[3:])


def test_a_two_node_plan_gives_each_node_its_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_target_loading: None
) -> None:
    specforge_or_skip()
    from hedgespec.training import train_drafter

    for k, v in SLURM_NODE1.items():
        monkeypatch.setenv(k, v)
    cfg = compose_train(
        tmp_path, "target=llama8b", "train=paper", "domain=sql", "train.gpus=8", "train.nodes=2", "train.plan_only=true"
    )
    res = train_drafter(cfg)
    assert not any(tmp_path.iterdir()), "a plan writes nothing"
    trainer = res.specforge_config["deployment"]["trainer"]
    assert (trainer["nnodes"], trainer["nproc_per_node"], trainer["master_addr"]) == (2, 8, "gpu007")
    run_yaml = str(tmp_path / "outputs" / "llama8b" / "sql" / "run.yaml")
    for rank in (0, 1):
        args = _torchrun_args(res.stages["specforge_launch"][f"node {rank}"])
        assert (args.nnodes, args.node_rank, args.master_addr, args.master_port) == ("2", rank, "gpu007", 29500)
        assert args.nproc_per_node == "8" and args.module and args.training_script == "specforge.cli"
        assert args.training_script_args[:3] == ["train", "--config", run_yaml]
    assert "nodes/4242.1.json" in res.stages["nodes"]["node 1"]


def test_several_nodes_on_cpu_are_refused_before_any_work(tmp_path: Path, no_target_loading: None) -> None:
    specforge_or_skip()
    from hedgespec.training import train_drafter

    cfg = compose_train(tmp_path, "target=tiny", "train=tiny", "domain=sql", "++train.nodes=2")
    with pytest.raises(ValueError, match=r"train\.nodes=2 needs train\.device=cuda"):
        train_drafter(cfg)


def _gpu_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int) -> object:
    """A paper-budget run of the tiny target as node ``rank`` of 2 on a machine that reports 2 CUDA devices."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    return compose_train(
        tmp_path,
        "target=tiny",
        "train=paper",
        "domain=sql",
        f"data.path={CONVERSATIONS}",
        "train.gpus=2",
        "train.nodes=2",
        f"train.rendezvous.node_rank={rank}",
        "train.rendezvous.master_addr=127.0.0.1",
        "train.rendezvous.launch_id=job-7",
        "train.rendezvous.wait_s=60",
    )


def test_node_0s_failing_stage_stops_node_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specforge_or_skip()
    import hedgespec.models
    from hedgespec.training import train_drafter

    run_dir = tmp_path / "outputs" / "tiny" / "sql"
    announce(run_dir, _node(0, launch="job-7"), "train", run_yaml="stale.yaml")  # an earlier launch's hand-off

    def no_gpu(*a, **k):
        assert not handoff_path(run_dir, _node(0, launch="job-7")).exists(), "the stale hand-off was kept"
        raise RuntimeError("CUDA out of memory while loading the target")

    monkeypatch.setattr(hedgespec.models, "load_target", no_gpu)
    monkeypatch.setattr(hedgespec.models, "load_target_head", no_gpu)  # train.features.shards follows train.gpus
    with pytest.raises(RuntimeError, match="out of memory"):
        train_drafter(_gpu_node(tmp_path, monkeypatch, 0))
    with pytest.raises(RuntimeError, match="node 0 failed, so node 1 does not train: RuntimeError: CUDA out of mem"):
        await_leader(run_dir, _node(1, launch="job-7"), poll_s=0.01)


def test_node_1_loads_nothing_and_joins_node_0s_training_with_its_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_target_loading: None
) -> None:
    """Node 1 of 2 waits for node 0's hand-off, then runs ``specforge train`` with ``--node-rank 1`` on node 0's
    ``run.yaml``; SpecForge's own planner turns that into torchrun's rank-1 command for the 2 x 2 GPUs."""
    specforge_or_skip()
    import yaml

    import hedgespec.training.pipeline as pipeline
    from hedgespec.training import train_drafter
    from hedgespec.training.config import compose_specforge, validate_specforge

    run_dir = tmp_path / "outputs" / "tiny" / "sql"
    calls: list[list[str]] = []
    monkeypatch.setattr(pipeline, "specforge_cli_main", lambda argv: calls.append(argv) or 0)

    def leader() -> None:  # node 0's files and hand-off, as its stage_train writes them
        time.sleep(0.5)
        (features := tmp_path / "cache" / "features").mkdir(parents=True)
        (head := tmp_path / "cache" / "head").mkdir()
        run_dir.mkdir(parents=True, exist_ok=True)
        raw = compose_specforge(
            {"deployment": {"trainer": {"nproc_per_node": 2}}},
            target_model_path=str(head),
            draft_config_path=str(run_dir / "draft_config.json"),
            vocab_mapping_path=str(features / "vocab.pt"),
            aux_layer_ids=[1, 2, 3],
            hidden_states_path=str(features),
            output_dir=str(run_dir / "checkpoints"),
            run_id="tiny-sql",
            trainer=_node(0, launch="job-7").specforge_trainer(),
        )
        run_yaml = run_dir / "run.yaml"
        run_yaml.write_text(yaml.safe_dump(validate_specforge(raw).model_dump(mode="json"), sort_keys=False))
        announce(run_dir, _node(0, launch="job-7"), "train", run_yaml=str(run_yaml), key="k")

    t = threading.Thread(target=leader)
    t.start()
    res = train_drafter(_gpu_node(tmp_path, monkeypatch, 1))
    t.join()
    (argv,) = calls
    assert argv == ["train", "--config", str(run_dir / "run.yaml"), "--node-rank", "1"]
    assert res.manifest is None and res.stages["node_rank"] == 1 and res.stages["trained"] == argv[2]
    assert (run_dir / "nodes" / "metrics.node1.jsonl").is_file() and not (run_dir / "metrics.jsonl").exists()
    # SpecForge's own CLI, given exactly these arguments, plans torchrun as node 1 of 2 with node 0's rendezvous
    out = subprocess.run(
        [sys.executable, "-m", "specforge.cli", *argv, "--plan"], capture_output=True, text=True, check=True
    )
    (command,) = json.loads(out.stdout)["commands"]
    args = _torchrun_args(" ".join(["python", *command["argv"][1:]]))
    assert (args.nnodes, args.node_rank, args.master_addr, args.nproc_per_node) == ("2", 1, "127.0.0.1", "2")


def test_node_1_refuses_a_hand_off_for_another_gpu_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_target_loading: None
) -> None:
    specforge_or_skip()
    from hedgespec.training import train_drafter

    run_dir = tmp_path / "outputs" / "tiny" / "sql"
    announce(run_dir, _node(0, launch="job-7"), "train", run_yaml=str(run_dir / "run.yaml"), key="k", gpus=8)
    with pytest.raises(RuntimeError, match=r"node 0 trains with train\.gpus=8 per node, node 1 has train\.gpus=2"):
        train_drafter(_gpu_node(tmp_path, monkeypatch, 1))


def test_node_1_is_done_when_node_0_finds_the_run_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_target_loading: None
) -> None:
    specforge_or_skip()
    import hedgespec.training.pipeline as pipeline
    from hedgespec.training import train_drafter

    monkeypatch.setattr(pipeline, "specforge_cli_main", lambda argv: pytest.fail("node 1 trained a finished run"))
    run_dir = tmp_path / "outputs" / "tiny" / "sql"
    run_dir.mkdir(parents=True)
    (run_dir / pipeline.RUN_MARKER).write_text(json.dumps({"key": "k"}))  # node 0 claimed the run directory
    announce(run_dir, _node(0, launch="job-7"), "done")
    res = train_drafter(_gpu_node(tmp_path, monkeypatch, 1))
    assert "trained" not in res.stages and res.manifest is None


def test_node_0s_heartbeat_counts_up_while_it_works(tmp_path: Path) -> None:
    from hedgespec.training.nodes import Heartbeat, beat_path

    with Heartbeat(tmp_path, _node(0), period_s=0.02):
        time.sleep(0.2)
        first = json.loads(beat_path(tmp_path, _node(0)).read_text())["beat"]
        time.sleep(0.2)
        second = json.loads(beat_path(tmp_path, _node(0)).read_text())["beat"]
    assert second > first >= 2
    with Heartbeat(tmp_path / "one", Topology(), period_s=0.02):  # one node: nothing to tell anyone
        time.sleep(0.05)
    assert not (tmp_path / "one").exists()


def test_a_heartbeat_that_stands_still_ends_the_wait(tmp_path: Path) -> None:
    """Node 0 killed before its hand-off (no ``failed`` record possible): its counter stops, and the waiting node
    gives up after ``stale_s`` rather than ``wait_s``; a counter that moves keeps it waiting."""
    from hedgespec.io import write_json_atomic
    from hedgespec.training.nodes import beat_path

    node1 = Topology(2, 1, "h", 29500, "job-1", wait_s=86400.0, stale_s=600.0)
    beat = beat_path(tmp_path, node1)
    beat.parent.mkdir(parents=True)
    write_json_atomic({"beat": 7}, beat)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(RuntimeError, match=r"heartbeat .*stood still for 600 s before its hand-off: node 0 stopped"):
        await_leader(tmp_path, node1, poll_s=30.0, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 600.0

    now[0] = 0.0
    count = iter(range(8, 10_000))

    def beating(s: float) -> None:  # node 0 alive: a new count every poll, its hand-off after an hour
        now[0] += s
        write_json_atomic({"beat": next(count)}, beat)
        if now[0] >= 3600:
            announce(tmp_path, _node(0), "done")

    assert await_leader(tmp_path, node1, poll_s=30.0, clock=lambda: now[0], sleep=beating)["status"] == "done"


def test_a_waiting_node_accepts_a_run_directory_holding_only_the_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_target_loading: None
) -> None:
    """Node 0 beats from its first moment, before it claims the run directory: node 1's check for foreign
    content must not refuse that directory."""
    specforge_or_skip()
    from hedgespec.training import train_drafter
    from hedgespec.training.nodes import beat_path

    run_dir = tmp_path / "outputs" / "tiny" / "sql"
    beat_path(run_dir, _node(0, launch="job-7")).parent.mkdir(parents=True)
    beat_path(run_dir, _node(0, launch="job-7")).write_text('{"beat": 1}')
    announce(run_dir, _node(0, launch="job-7"), "done")
    assert "trained" not in train_drafter(_gpu_node(tmp_path, monkeypatch, 1)).stages
