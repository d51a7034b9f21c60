"""SpecForge's metric lines become metrics.jsonl records, also when they come from torchrun's worker processes.

The children here are real processes that inherit file descriptor 1, as SpecForge's torchrun workers do with
``train.gpus > 1``; what they print that is not a metric line must still reach the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hedgespec.training.progress import MetricTee, capture_fd_stdout, summarize

CHILD = (
    "import sys\n"
    "rank = int(sys.argv[1])\n"
    "print(f'rank {rank} starting', flush=True)\n"
    "if rank == 0:\n"
    "    for s in (1, 2, 3):\n"
    "        print(f\"step {s}: {{'loss': {1.0 / s}, 'acc_0': 0.5, 'lr': 0.001}}\", flush=True)\n"
)


def test_child_process_metric_lines_reach_the_tee(tmp_path: Path, capfd) -> None:
    jsonl = tmp_path / "metrics.jsonl"
    tee = MetricTee(sys.stdout, jsonl, total=3, progress=False)
    with capture_fd_stdout(tee):
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(r)]) for r in (0, 1)]
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
        os.write(1, b"parent at descriptor level\n")
    tee.close()
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[-1]["loss"] == 1.0 / 3 and tee.last_step == 3
    assert summarize(tee.last) == {"loss": round(1.0 / 3, 6), "acc_0": 0.5}  # lr is not a manifest metric
    out = capfd.readouterr().out
    assert "rank 0 starting" in out and "rank 1 starting" in out and "parent at descriptor level" in out
    assert "step 1:" not in out  # metric lines go to the bar and the JSONL, not the terminal
    os.write(1, b"")  # descriptor 1 is usable again after the block
