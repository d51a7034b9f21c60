"""Servers side by side under SGLang's own client: plain decoding, stock EAGLE-3 and HEDGESPEC on one pool.

For each entry of ``compare.servers`` (a ``selector`` option plus overrides, e.g. stock EAGLE-3 at SGLang's own
speculative defaults) one server is started, the same ShareGPT-format prompt file is sent at each concurrency by
``python -m sglang.benchmark.serving`` (same ``--seed``, so the same rows in the same order), the server's average
accept length is read from ``/server_info``, and the server is stopped before the next one starts. Greedy
outputs are compared with the plain server's (all three verify losslessly, so they must agree up to the float
differences of batched kernels). Every row carries its output tokens/s and the ratio to plain decoding at the
same concurrency. ``scripts/serve_compare.py`` is the entry point.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from hedgespec.io import portable_paths
from hedgespec.serving.argv import ServePlan, build_plan
from hedgespec.serving.launch import ServerProcess
from hedgespec.serving.loadtest import CLIENT, client_pass, generate, greedy, last_tokens, load_prompts, sharegpt_file

#: conf/selector/, where each compared server's ``selector`` option is read from
SELECTOR_DIR = Path(__file__).resolve().parents[2] / "conf" / "selector"


def selector_option(name: str) -> dict[str, Any]:
    """The ``conf/selector/<name>.yaml`` option as a dict (the same file ``selector=<name>`` composes)."""
    path = SELECTOR_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SELECTOR_DIR.glob("*.yaml"))
        raise ValueError(f"compare.servers: selector {name!r} is not an option of conf/selector/ ({known})")
    return dict(yaml.safe_load(path.read_text()) or {})


def server_cfg(cfg: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """The serve config of one compared server: ``cfg`` with the entry's selector option and overrides."""
    out = copy.deepcopy(dict(cfg))
    out["selector"] = selector_option(str(entry["selector"]))
    for key, value in (entry.get("overrides") or {}).items():
        out[key] = value
    # the option's interpolations (eagle's ``drafter: ${pool.generalist}``) against this server's config, as
    # composing ``selector=<name>`` resolves them
    return OmegaConf.to_container(OmegaConf.create(out), resolve=True)  # type: ignore[return-value]


def accept_length(plan: ServePlan) -> float | None:
    """SGLang's running average accept length of a speculative server (``/server_info``), None for plain."""
    with urllib.request.urlopen(plan.base_url + "/server_info", timeout=60) as fh:
        info = json.loads(fh.read())
    states = info.get("internal_states") or [{}]
    value = states[0].get("avg_spec_accept_length")
    return None if value is None else float(value)


PROBE_PROMPTS = 4  # requests of the round-phase probe per request in flight


def round_phases(plan: ServePlan, prompts: Sequence[str], output_len: int, concurrency: int = 1) -> dict[str, Any]:
    """Where a HEDGESPEC server's rounds spend their time: the first ``PROBE_PROMPTS × concurrency`` prompts (at
    most all of them; greedy, exactly ``output_len`` tokens) with ``concurrency`` requests in flight, their
    ``hedgespec_round_time_s`` meta fields summed; each phase's share of the round (select + draft, verify,
    evaluate, update; :data:`hedgespec.serving.selection.PHASES`).

    Every request of a batched round carries that round's whole time, so at ``concurrency`` > 1 ``ms_per_round``
    is the mean time of a batched round weighted by the requests in it, and the shares are those of the batched
    rounds."""
    from hedgespec.serving.selection import PHASES

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"round_phases: concurrency must be an int >= 1, got {concurrency!r}")
    sent = list(prompts)[: PROBE_PROMPTS * concurrency]

    def one(text: str) -> tuple[list[float], int]:
        meta = generate(plan.base_url, greedy(text, int(output_len)))["meta_info"]
        return [float(b) for b in meta["hedgespec_round_time_s"]], int(meta["hedgespec_rounds"][0])

    with ThreadPoolExecutor(concurrency) as ex:
        metas = list(ex.map(one, sent))
    total = [sum(col) for col in zip(*(m[0] for m in metas))] if metas else [0.0] * len(PHASES)
    rounds = sum(m[1] for m in metas)
    whole = sum(total)
    return {
        "requests": len(sent),
        "concurrency": concurrency,
        "rounds": rounds,
        "ms_per_round": round(1000.0 * whole / rounds, 2) if rounds else None,
        "share": {k: round(v / whole, 4) if whole else None for k, v in zip(PHASES, total)},
    }


def _check_entries(entries: Any) -> list[dict[str, Any]]:
    entries = [dict(e) for e in (entries or [])]
    labels = [str(e.get("label", "")) for e in entries]
    if not entries or any(not lab for lab in labels) or len(set(labels)) != len(labels):
        raise ValueError(f"compare.servers: need a non-empty list of entries with distinct labels, got {labels}")
    for e in entries:
        if not isinstance(e.get("selector"), str):
            raise ValueError(f"compare.servers[{e['label']}]: needs selector: <a conf/selector option>")
    if not any(e["selector"] == "none" for e in entries):
        raise ValueError("compare.servers: include the plain server (selector: none); it is the baseline")
    return entries


def run_compare(
    cfg: Mapping[str, Any], run_dir: Path, on_row: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Every server of ``compare.servers`` in turn over the same prompts; rows with tok/s and × plain.
    ``on_row`` gets each row as its pass ends (live tracking, :mod:`hedgespec.serving.compare_log`)."""
    cc = cfg["compare"]
    entries = _check_entries(cc["servers"])
    plans = {e["label"]: build_plan(server_cfg(cfg, e), prepare=True) for e in entries}  # refuse bad input first
    first = next(iter(plans.values()))
    prompts = last_tokens(
        [p for group in load_prompts({"load": cc, "workload": cfg["workload"], "data": cfg["data"]}) for p in group],
        AutoTokenizer.from_pretrained(first.target_path),
        int(cc["max_prompt_tokens"]),
    )
    data = sharegpt_file(prompts, run_dir / "prompts.sharegpt.json")
    rows, outputs, phases = [], {}, {}
    for e in entries:
        plan = plans[e["label"]]
        t0 = time.monotonic()
        with ServerProcess(plan, run_dir / f"server_{e['label']}.log", float(cfg.get("startup_timeout_s", 600))):
            startup = time.monotonic() - t0
            for c in cc["concurrency"]:
                res = client_pass(
                    plan, data, len(prompts), int(c), int(cc["output_len"]), int(cc["seed"]),
                    run_dir / f"client_{e['label']}_c{c}.jsonl", float(cc["pass_timeout_s"]),
                )  # fmt: skip
                outputs[(e["label"], c)] = list(res["generated_texts"])
                rows.append(_row(e, plan, c, res, startup))
                if on_row is not None:
                    on_row(rows[-1])
            mat = accept_length(plan)
            if plan.algorithm == "HEDGESPEC":  # after the passes, so SGLang's accept length is the client's
                phases[e["label"]] = probe = round_phases(plan, prompts, int(cc["output_len"]))
                batched = sorted({int(c) for c in cc["concurrency"]} - {1})
                if batched:  # the same probe with as many requests in flight as each batched pass
                    probe["at_concurrency"] = {
                        str(c): round_phases(plan, prompts, int(cc["output_len"]), c) for c in batched
                    }
        for r in rows:
            if r["label"] == e["label"]:
                r["accept_length"] = mat
    _ratios(rows, outputs)
    return {
        "schema": "hedgespec.serve_compare/v1",
        "client": CLIENT,
        "prompts": len(prompts),
        "output_len": int(cc["output_len"]),
        "rows": rows,
        "round_phases": phases,
    }


def _row(e: Mapping[str, Any], plan: ServePlan, c: int, res: Mapping[str, Any], startup: float) -> dict[str, Any]:
    errors = [x for x in res.get("errors") or [] if x]
    return {
        "label": e["label"],
        "algorithm": plan.algorithm,
        "selector": plan.selector,
        "drafters": plan.drafter_names,
        "command": portable_paths(plan.command()),  # no home, temp or checkout paths in committed results
        "concurrency": int(c),
        "startup_s": round(startup, 1),
        "completed": int(res.get("completed", 0)),
        "failed": len(errors),
        "output_tokens_per_s": res.get("output_throughput"),
        "request_throughput": res.get("request_throughput"),
        "mean_ttft_ms": res.get("mean_ttft_ms"),
        "mean_itl_ms": res.get("mean_itl_ms"),
        "p99_itl_ms": res.get("p99_itl_ms"),
        "duration_s": res.get("duration"),
    }


def _ratios(rows: list[dict[str, Any]], outputs: Mapping[tuple[str, int], list[str]]) -> None:
    """``x_plain`` (tok/s over the plain server's at the same concurrency) and ``outputs_equal_plain``; with
    more than one plain server (e.g. two dtypes) the first in ``compare.servers`` is the baseline."""
    plain: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["algorithm"] == "NONE":
            plain.setdefault(r["concurrency"], r)
    for r in rows:
        base = plain[r["concurrency"]]
        tps, ref = r["output_tokens_per_s"], base["output_tokens_per_s"]
        r["x_plain"] = round(tps / ref, 3) if tps and ref else None
        mine, theirs = outputs[(r["label"], r["concurrency"])], outputs[(base["label"], r["concurrency"])]
        r["outputs_equal_plain"] = sum(a == b for a, b in zip(mine, theirs))


def table(res: Mapping[str, Any]) -> str:
    """Markdown: one row per server and concurrency."""
    head = "| server | concurrency | tok/s | × plain | accept length | outputs = plain | failed | mean ITL ms |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        mat = "–" if r["accept_length"] is None else f"{r['accept_length']:.2f}"
        lines.append(
            f"| {r['label']} | {r['concurrency']} | {r['output_tokens_per_s']:.2f} | {r['x_plain']:.2f} | {mat} | "
            f"{r['outputs_equal_plain']}/{res['prompts']} | {r['failed']} | {r['mean_itl_ms']:.0f} |"
        )
    phases = res.get("round_phases") or {}
    if phases:
        lines += [
            "",
            "HEDGESPEC round, share of its time per phase (probe: greedy requests, that many in flight):",
            "",
            "| server | in flight | rounds | ms / round | select + draft | verify | evaluate | update |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, first in phases.items():
            for ph in [first, *(first.get("at_concurrency") or {}).values()]:
                sh = ph["share"]
                cells = " | ".join("–" if sh[k] is None else f"{100 * sh[k]:.1f}%" for k in sh)
                c = ph.get("concurrency", 1)
                lines.append(f"| {label} | {c} | {ph['rounds']} | {ph['ms_per_round']} | {cells} |")
    return "\n".join(lines)
