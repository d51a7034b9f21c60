"""hedgespec.provenance: the command line and machine a committed result records."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from hedgespec.provenance import command_line, cpu_model, machine_info

CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""


def test_the_command_line_runs_again_and_names_no_machine_path() -> None:
    overrides = [
        "pool=smollm2",
        f"++pool.manifest={Path.home() / 'pools' / 'p.yaml'}",
        "compare.servers=[{label: plain, selector: none}]",
    ]
    line = command_line("scripts/serve_compare.py", overrides)
    assert shlex.split(line) == ["python", "scripts/serve_compare.py", "pool=smollm2",
                                 "++pool.manifest=~/pools/p.yaml", overrides[2]]  # fmt: skip
    assert str(Path.home()) not in line


def test_cpu_model_and_its_matrix_units_from_cpuinfo() -> None:
    assert cpu_model(CPUINFO) == {"model": "Intel(R) Xeon(R) Platinum 8480+", "amx": True, "avx512_bf16": True}
    epyc = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 fma\n"
    assert cpu_model(epyc) == {"model": "AMD EPYC 7B13", "amx": False, "avx512_bf16": False}


def test_machine_info_of_this_machine() -> None:
    info = machine_info()
    assert info["cpus"] == os.cpu_count() and info["python"].count(".") == 2
    assert "torch" in info["versions"] and isinstance(info["cpu"]["model"], str) and info["cpu"]["model"]
