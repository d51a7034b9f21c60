"""Python (HumanEval-style code completion).

offline: functions of the CPython standard library already on the machine (PSF licence). Each prompt is a
function signature + docstring (the HumanEval prompt shape), the answer is the complete function. Only
top-level functions and methods with a docstring, a 2-40 line body and no nested functions are used; test
modules, ``idlelib``, ``lib2to3``, ``site-packages`` are skipped. The split is by module file (whole modules are
held out for eval), so no function near-duplicate crosses the split. Files are parsed lazily in a seeded order,
so a small build reads only a few modules.
hf: ``iamtarun/python_code_instructions_18k_alpaca`` (instruction[/input] -> output).
"""

from __future__ import annotations

import ast
import os
import sys
import textwrap
from pathlib import Path

from . import hf as hfsrc
from .common import Example, NotEnoughDataError, RecipeInfo, SourceInfo, Split, rng_for, split_by_group, stable_hash
from .sources import stdlib_dir

INFO = RecipeInfo(
    name="python",
    description="HumanEval-style prompts (signature + docstring -> function) from the CPython stdlib",
    offline=(
        SourceInfo(
            f"CPython {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro} standard library",
            "the interpreter's own stdlib directory (content depends on the Python version)",
            "PSF-2.0",
        ),
    ),
    hf=(
        SourceInfo(
            "iamtarun/python_code_instructions_18k_alpaca",
            "huggingface.co/datasets/iamtarun/python_code_instructions_18k_alpaca",
            "CC-BY-NC-4.0 per card (derived from code_instructions_18k_alpaca)",
        ),
    ),
)

_SKIP_PARTS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "turtledemo",
    "ensurepip",
    "__pycache__",
    "pydoc_data",
    "encodings",
}
PROMPT_HEAD = "Complete the following Python function. Return the whole function in a code block.\n\n"


def stdlib_files() -> list[Path]:
    root = stdlib_dir()
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_PARTS]
        files.extend(Path(dirpath) / f for f in filenames if f.endswith(".py") and not f.startswith("test_"))
    return sorted(files)


def functions_in(path: Path, root: Path) -> list[Example]:
    try:
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    rel = str(path.relative_to(root))
    src_lines = src.splitlines(keepends=True)
    out = []
    nodes: list[ast.AST] = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            nodes.extend(n for n in node.body)
    for node in nodes:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("__"):
            continue
        doc = ast.get_docstring(node, clean=False)
        if not doc or len(doc.strip()) < 20 or not node.body or len(node.body) < 2:
            continue
        if any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            for n in ast.walk(node)
            if n is not node
        ):
            continue
        if node.decorator_list or node.end_lineno is None:
            continue
        # (ast.get_source_segment re-splits the whole file per call: quadratic on big modules)
        seg = "".join(src_lines[node.lineno - 1 : node.end_lineno])
        func = textwrap.dedent(seg).rstrip() + "\n"
        lines = func.splitlines()
        body_start = node.body[1].lineno - node.lineno  # first statement after the docstring
        body_lines = len(lines) - body_start
        if not 2 <= body_lines <= 40 or len(func) > 2500 or "\t" in func:
            continue
        prompt_code = "\n".join(lines[:body_start]).rstrip() + "\n"
        key = f"{rel}:{node.name}:{node.lineno}"
        out.append(Example(PROMPT_HEAD + f"```python\n{prompt_code}```", f"```python\n{func}```", group=rel, key=key))
    return out


def build_offline(n_train: int, n_eval: int, seed: int) -> Split:
    root = stdlib_dir()
    files = stdlib_files()
    rng = rng_for("python", seed, "files")
    rng.shuffle(files)
    # Held-out modules: a seed-dependent ~15 % of files by path hash.
    is_eval = {f: stable_hash(f"{seed}|{f.relative_to(root)}") % 100 < 15 for f in files}
    train: list[Example] = []
    evals: list[Example] = []
    for f in files:
        if len(train) >= n_train and len(evals) >= n_eval:
            break
        fns = functions_in(f, root)
        if is_eval[f]:
            if len(evals) < n_eval:
                evals.extend(fns[:2])  # at most two per held-out module, for diversity
        elif len(train) < n_train:
            train.extend(fns)
    if len(evals) < n_eval:
        raise NotEnoughDataError("python", "eval", n_eval, len(evals))
    if len(train) < n_train:
        raise NotEnoughDataError("python", "train", n_train, len(train))
    rng.shuffle(train)
    return Split(train=train[:n_train], eval=evals[:n_eval])


def build_hf(n_train: int, n_eval: int, seed: int) -> Split:
    ds = hfsrc.load("python", "iamtarun/python_code_instructions_18k_alpaca", split="train")
    exs = []
    for i, r in enumerate(ds):
        prompt = r["instruction"] + (f"\n\nInput: {r['input']}" if r.get("input") else "")
        exs.append(Example(prompt, r["output"], group=str(i), key=str(i)))
    return split_by_group("python", exs, n_train, n_eval, seed)
