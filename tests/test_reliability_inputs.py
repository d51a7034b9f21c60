"""Bad input at every entry point: each one is run as a user runs it (its Hydra main, in-process) and must end
with a message that names the cause. The table in docs/reliability.md lists these cases and their messages.

Also: the tiny training budget against every offline recipe, and the commands written in the conf/ headers."""

from __future__ import annotations

import itertools
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest
from _train_helpers import REPO, compose_train, specforge_or_skip, tmp_overrides

CONF = REPO / "conf"


def run_entry(script: str, *overrides: str, tmp: Path) -> int:
    """``python <script> <overrides>`` in this process (capture its output with capsys); returns the exit code."""
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    argv = [str(REPO / script), *overrides, f"hydra.run.dir={tmp}/hydra"]
    saved = sys.argv
    sys.argv = argv
    code = 0
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()
    return code


def _train(tmp: Path, *extra: str) -> list[str]:
    return ["target=tiny", "train=tiny", *tmp_overrides(tmp), *extra]


def _serve(tmp: Path, *extra: str) -> list[str]:
    return ["device=cpu", "dry_run=true", f"workdir={tmp}/serve", *extra]


# (entry point, overrides(tmp), the cause the message must name); docs/reliability.md has the same rows
CASES = [
    ("train/run.py", lambda t: _train(t, "domain=gsm8k"), r"domain='gsm8k' is an eval-only set \(no train split\)"),
    ("train/run.py", lambda t: _train(t, "domain=nosuch"), r"domain='nosuch' is unknown; expected one of \["),
    ("train/run.py", lambda t: ["target=nosuch", "train=tiny", *tmp_overrides(t)], r"Could not find 'target/nosuch'"),
    ("train/run.py", lambda t: _train(t, "train=nosuch"), r"Could not find 'train/nosuch'"),
    ("train/run.py", lambda t: _train(t, "domian=sql"), r"Key 'domian' is not in struct"),
    ("train/run.py", lambda t: _train(t, "logger=jsonl"), r"logger='jsonl' is not supported for training; use logger="),
    ("train/run.py", lambda t: _train(t, "data.path=/no/such.jsonl"), r"data.path='/no/such.jsonl' does not exist"),
    ("train/run.py", lambda t: _train(t, "source=nosuch"), r"source='nosuch' is unknown; expected one of offline, hf"),
    ("train/run.py", lambda t: _train(t, "train.dtype=fp8"), r"train.dtype='fp8' is unknown; expected one of auto, "),
    (
        "train/run.py",
        lambda t: _train(t, "+train.features.dtype=float32"),
        r"train.features.dtype is set from train.dtype .*remove it and set train.dtype to one of",
    ),
    (
        "train/run.py",
        lambda t: _train(t, "+train.specforge.training.max_stepz=3"),
        r"specforge.training.max_stepz: Extra inputs are not permitted",
    ),
    (
        "train/run.py",
        lambda t: _train(t, "+train.regenerate.fit_window=maybe"),
        r"train.regenerate.fit_window='maybe': expected true or false",
    ),
    (
        "train/run.py",
        lambda t: _train(t, "train.features.supervise=prompt"),
        r"train.features.supervise='prompt': must be one of \['assistant', 'all'\]",
    ),
    ("train/run.py", lambda t: _train(t, "train.pool=../x"), r"pool='../x' / drafter='general': use letters, digits"),
    ("train/run.py", lambda t: _train(t, "train.pool=.."), r"pool='..' / drafter='general': use letters, digits"),
    (
        "train/run.py",
        lambda t: _train(t, "train.draft.init=sql", "domain=math"),
        r"train.draft.init='sql': drafter 'sql' of pool 'tiny' is not exported",
    ),
    (
        "train/run.py",
        lambda t: _train(t, "domain=cnndm"),
        r"domain=cnndm: budget train=tiny truncates every one of the 12 conversations.*"
        r"Raise it: train.features.max_length=\d+ train.specforge.data.max_length=\d+",
    ),
    (
        "train/run.py",
        lambda t: ["target=llama8b", "train=paper", "domain=sql", "train.gpus=64", *tmp_overrides(t)],
        r"train.gpus=64 but \d+ CUDA device\(s\) are visible",
    ),
    (
        "train/run.py",
        lambda t: _train(t, "domain=sql", "target.thinking=true"),
        r"target 'tiny': thinking=true but its chat template has no 'enable_thinking' switch",
    ),
    ("serve/launch.py", lambda t: _serve(t, "pool=nosuch"), r"Could not find 'pool/nosuch'"),
    ("serve/launch.py", lambda t: _serve(t, "selector=nosuch"), r"Could not find 'selector/nosuch'"),
    ("serve/launch.py", lambda t: _serve(t, "device=tpu"), r"device='tpu': expected one of \('cuda', 'cpu'\)"),
    (
        "serve/launch.py",
        lambda t: _serve(t, "decoding=tree", "decoding.num_draft_tokens=40"),
        r"decoding.num_draft_tokens=40: a tree of num_steps=3, topk=4 makes 36 candidate nodes and SGLang keeps "
        r"num_draft_tokens - 1 of them; set decoding.num_draft_tokens <= 37",
    ),
    ("serve/launch.py", lambda t: _serve(t, "dtype=float8"), r"dtype='float8': expected one of \('float32'"),
    ("serve/launch.py", lambda t: _serve(t, "prot=1"), r"Key 'prot' is not in struct"),
    (
        "serve/launch.py",
        lambda t: _serve(t, "pool=llama8b"),
        r"pool 'llama8b': manifest pools/llama8b.yaml does not exist; train its drafters first, e.g. `python "
        r"train/run.py -m domain=python,.*,general target=llama8b train=paper`",
    ),
    ("serve/launch.py", lambda t: _serve(t, "port=abc"), r"port='abc': must be an int in \[1, 65535\]"),
    ("serve/launch.py", lambda t: _serve(t, "port=70000"), r"port=70000: must be an int in \[1, 65535\]"),
    ("serve/launch.py", lambda t: _serve(t, "max_running_requests=0"), r"max_running_requests=0: must be an int >= 1"),
    ("scripts/bench.py", lambda t: ["pool=tiny", "selector=nosuch"], r"Could not find 'selector/nosuch'"),
    ("scripts/bench.py", lambda t: ["pool=tiny", "workload=nosuch"], r"Could not find 'workload/nosuch'"),
    ("scripts/bench.py", lambda t: ["pool=tiny", "backend=nosuch"], r"Could not find 'backend/nosuch'"),
    (
        "scripts/bench.py",
        lambda t: ["pool=tiny", "selector=fixed", "fixed=nosuch", "workload=prompts"],
        r"bench: error: fixed='nosuch': the pool has no drafter for it; drafters \[",
    ),
    (
        "scripts/bench.py",
        lambda t: ["pool=tiny", "selector=eagle", "pool.generalist=nosuch", "workload=prompts"],
        r"bench: error: pool.generalist \(selector=eagle\)='nosuch': the pool has no drafter for it; drafters \[",
    ),
    (
        "scripts/bench.py",
        lambda t: ["pool=tiny", "workload=domain", "domain=nosuch", f"data.dir={t}/data"],
        r"bench: error: domain='nosuch' is unknown; expected one of",
    ),
    (
        "scripts/bench.py",
        lambda t: ["pool=tiny", "workload=prompts", "decoding.num_steps=0"],
        r"bench: error: decoding.num_steps \(speculation depth K\) must be an int >= 1, got 0",
    ),
    ("scripts/prepare_data.py", lambda t: ["domain=nosuch", f"data_dir={t}"], r"error: domain='nosuch' is unknown"),
    (
        "scripts/prepare_data.py",
        lambda t: ["domain=sql", "source=nosuch", f"data_dir={t}"],
        r"source='nosuch' is unknown",
    ),
    (
        "scripts/prepare_data.py",
        lambda t: ["domain=sql", "n_train=-1", f"data_dir={t}"],
        r"n_train=-1 / n_eval=50 must be",
    ),
    (
        "scripts/prepare_data.py",
        lambda t: ["domain=sql", "variant=nosuch", f"data_dir={t}"],
        r"variant='nosuch' is unknown; expected one of two_answers",
    ),
    (
        "scripts/prepare_data.py",
        lambda t: ["domain=sql", "count_tokens=foo", f"data_dir={t}"],
        r"count_tokens='foo' is unknown; expected null or target",
    ),
    (
        "scripts/prepare_data.py",
        lambda t: ["domain=sql", "source=hf", "hf.paths={b-mc2/sql-create-context: /no/such}", f"data_dir={t}"],
        r"hf.paths\['b-mc2/sql-create-context'\]='/no/such' is not a directory",
    ),
    ("scripts/generate.py", lambda t: ["target=tiny", "pool=nosuch"], r"Could not find 'pool/nosuch'"),
    ("scripts/generate.py", lambda t: ["selector=nosuch"], r"Could not find 'selector/nosuch'"),
    (
        "scripts/generate.py",
        lambda t: ["decoding.num_steps=0"],
        r"decoding.num_steps \(speculation depth K\) must be an int >= 1, got 0",
    ),
    ("scripts/generate.py", lambda t: ["sampling.temperature=-1"], r"temperature must be a number >= 0, got -1"),
    ("scripts/generate.py", lambda t: ["prompts=[]"], r"prompts=\[\]: give a list of prompts"),
    ("scripts/generate.py", lambda t: ["max_new_tokens=0"], r"max_new_tokens=0: must be an int >= 1"),
    ("scripts/simulate.py", lambda t: ["experiment=nosuch"], r"Could not find 'experiment/nosuch'"),
    (
        "scripts/simulate.py",
        lambda t: ["mode=foo", "n_requests=2"],
        r"mode must be one of \('greedy', 'sampling'\), got",
    ),
    ("scripts/simulate.py", lambda t: ["n_requests=0"], r"need n_requests >= 1 and length >= 2, got 0"),
]


def _id(case: tuple) -> str:
    script, make, _ = case
    return f"{Path(script).stem}:{' '.join(o for o in make(Path('T')) if 'T/' not in o and '=T' not in o)}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_bad_input_is_answered_naming_the_cause(case, tmp_path: Path, capsys, monkeypatch) -> None:
    script, make, cause = case
    if script == "train/run.py":
        specforge_or_skip()  # train/run.py checks SpecForge before the inputs that need no work
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = run_entry(script, *make(tmp_path), tmp=tmp_path)
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0, f"{script} accepted the bad input:\n{text[-2000:]}"
    assert re.search(cause, text, re.S), text[-3000:]


# -- the tiny training budget against every offline recipe --------------------------------------------------


@pytest.mark.slow
def test_tiny_budget_fits_every_domain_but_cnndm_which_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Tokenise what train=tiny would train on, per domain (data built offline, no features, no training)."""
    from hedgespec.models import load_tokenizer
    from hedgespec.training.features import read_conversations, tokenize_conversation
    from hedgespec.training.pipeline import DOMAINS, check_budget_fits, resolve_data

    tok = load_tokenizer("tiny")
    refused = {}
    for domain in DOMAINS:
        cfg = _plain(compose_train(tmp_path, *_train(tmp_path, f"domain={domain}")))
        path, _ = resolve_data(cfg, domain)
        budget = cfg["train"]["features"]
        rows = read_conversations(path, budget["max_samples"])
        fits = [
            bool(m[: budget["max_length"]].any())
            for m in (tokenize_conversation(tok, r["conversations"], 1 << 30)[1] for r in rows)
        ]
        try:
            check_budget_fits(cfg, domain, path, tok)
        except ValueError as err:
            refused[domain] = str(err)
        assert (domain in refused) == (not any(fits)), (domain, fits)  # refused exactly when nothing fits
    assert sorted(refused) == ["cnndm"]
    fix = re.search(r"Raise it: (\S+) (\S+),", refused["cnndm"]).groups()
    cfg = _plain(compose_train(tmp_path, *_train(tmp_path, "domain=cnndm", *fix)))
    check_budget_fits(cfg, "cnndm", resolve_data(cfg, "cnndm")[0], tok)  # the fix the message gives is enough


def _plain(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


# -- the commands in the conf/ headers ------------------------------------------------------------------------

_CMD = re.compile(r"python ((?:scripts|train|serve)/\w+\.py)((?: (?:-m|[\w.+~]+=\S+))*)")
_CONFIG = {"train/run.py": "train", "serve/launch.py": "serve"}


def header_commands() -> list[tuple[str, str, list[str]]]:
    """``(conf file, script, overrides)`` for each ``python <script> ...`` in a conf file's leading comments."""
    out = []
    for f in sorted(CONF.rglob("*.yaml")):
        lines = list(itertools.takewhile(lambda s: s.startswith("#"), f.read_text().splitlines()))
        for line in lines:
            for m in _CMD.finditer(line):
                if (REPO / m.group(1)).is_file():
                    out.append((str(f.relative_to(REPO)), m.group(1), shlex.split(m.group(2))))
    return out


def _expand(overrides: list[str]) -> list[list[str]]:
    """A ``-m`` sweep as its runs: each comma list walked in step (every value appears in some run)."""
    sweep, ov = "-m" in overrides, [o for o in overrides if o != "-m"]
    values = [o.split("=", 1)[1] for o in ov]
    lists = [v.split(",") if sweep and "," in v and not v.startswith("[") else [v] for v in values]
    n = max(len(v) for v in lists) if lists else 1
    return [[f"{o.split('=', 1)[0]}={v[i % len(v)]}" for o, v in zip(ov, lists)] for i in range(n)]


HEADERS = header_commands()


def test_headers_are_found() -> None:
    scripts = {s for _, s, _ in HEADERS}
    assert {"train/run.py", "serve/launch.py", "scripts/bench.py", "scripts/generate.py"} <= scripts
    assert len(HEADERS) >= 40


@pytest.mark.parametrize("conf,script,overrides", HEADERS, ids=[f"{c}:{' '.join(o)}" for c, _, o in HEADERS])
def test_header_command_composes_and_plans(conf: str, script: str, overrides: list[str], tmp_path, monkeypatch):
    """Every header command composes its config; train/run.py commands also plan (train.plan_only=true) and
    serve/launch.py commands print their command (dry_run=true) or refuse a pool that is not trained yet."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    monkeypatch.chdir(REPO)
    name = _CONFIG.get(script, Path(script).stem)
    for run in _expand(overrides):
        GlobalHydra.instance().clear()
        with initialize_config_dir(str(CONF), version_base="1.3"):
            cfg = compose(name, overrides=run)
        if script == "train/run.py":
            specforge_or_skip()
            from hedgespec.training.pipeline import train_drafter

            res = train_drafter(compose_train(tmp_path, *run, "train.plan_only=true"))
            assert res.stages["plan_only"] is True and res.specforge_config["training"]
        elif script == "serve/launch.py":
            from hedgespec.serving.launch import serve

            GlobalHydra.instance().clear()
            with initialize_config_dir(str(CONF), version_base="1.3"):
                dry = compose(name, overrides=[*run, "dry_run=true", f"workdir={tmp_path}/serve"])
            try:
                serve(dry)
            except FileNotFoundError as err:  # a trained pool (pools/<pool>.yaml) that this checkout lacks
                assert "does not exist; train its drafters first" in str(err)
        elif "dry_run=true" in run:  # scripts/embedded.py dry_run=true: prints its commands, runs nothing
            assert run_entry(script, *run, tmp=tmp_path) == 0
        else:
            assert cfg is not None
    GlobalHydra.instance().clear()
